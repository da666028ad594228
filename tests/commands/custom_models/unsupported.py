"""Models the conversion refuses: each stops a run at validation with one error."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class WithUpsample(nn.Module):
    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        self.features = nn.Sequential(nn.Conv2d(c, 4, 3, padding=1), nn.ReLU(), nn.Upsample(scale_factor=2))
        self.fc = nn.Linear(4 * 2 * h * 2 * w, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(torch.flatten(self.features(x), 1))
