"""Three models a researcher might bring, as plain PyTorch (the acceptance of docs/models.md, "Your own model")."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU6(inplace=True),
    )


class MobileNetStyle(nn.Module):
    """Depthwise-separable convolutions, batch norm, ReLU6, a strided stage, global average pooling."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, width: int = 8) -> None:
        super().__init__()
        c = input_shape[0]
        self.stem = _conv_bn(c, width, 3)
        self.blocks = nn.Sequential(
            _conv_bn(width, width, 3, groups=width), _conv_bn(width, 2 * width, 1),
            _conv_bn(2 * width, 2 * width, 3, stride=2, groups=2 * width), _conv_bn(2 * width, 4 * width, 1),
        )
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.1), nn.Linear(4 * width, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.blocks(self.stem(x)))


class Residual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Conv2d(cin, cout, 1, stride=stride, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class SmallResNet(nn.Module):
    """A stem, two residual stages, `AdaptiveAvgPool2d` to 1x1, a classifier."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, width: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(input_shape[0], width, 3, padding=1)
        self.stage1 = Residual(width, width, 1)
        self.stage2 = Residual(width, 2 * width, 2)
        self.pool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.stage2(self.stage1(F.relu(self.stem(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


class SensorMLP(nn.Module):
    """An MLP over the flattened features, with `LayerNorm` and `GELU`."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, hidden: int = 48) -> None:
        super().__init__()
        features = input_shape[0] * input_shape[1] * input_shape[2]
        self.net = nn.Sequential(
            nn.Flatten(), nn.Linear(features, hidden), nn.LayerNorm(hidden), nn.GELU(),
            nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, num_classes),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class EveryLayer(nn.Module):
    """Every supported layer once (not in the acceptance's three: the conversion's coverage in the runtime)."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        c = input_shape[0]
        self.a = nn.Conv2d(c, 6, 3, padding="same", dilation=1)
        self.b = nn.Conv2d(c, 6, 5, stride=1, padding=2)
        self.bn = nn.BatchNorm2d(12)
        self.leaky = nn.LeakyReLU(0.1)
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.avg = nn.AvgPool2d(2)
        self.group = nn.Conv2d(12, 12, 3, padding=1, groups=3)
        self.fc1 = nn.Linear(12, 24)
        self.bn1d = nn.BatchNorm1d(24)
        self.fc2 = nn.Linear(24, 24)
        self.norm = nn.LayerNorm(24)
        self.fc3 = nn.Linear(24, num_classes)
        self.drop = nn.Dropout(0.2)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.cat([torch.sigmoid(self.a(x)), torch.tanh(self.b(x))], dim=1)
        x = self.leaky(self.bn(x))
        x = self.avg(self.pool(x))
        x = F.silu(self.group(x)) * 0.5 + F.hardswish(x)
        x = x.mean(dim=(2, 3))
        x = self.drop(F.relu6(self.bn1d(self.fc1(x))))
        x = F.gelu(self.norm(self.fc2(x))) - x / 2
        return self.fc3(x)


def mobilenet(input_shape: tuple[int, int, int], num_classes: int, **kwargs: int) -> nn.Module:
    """A plain factory function works as well as a class."""
    return MobileNetStyle(input_shape, num_classes, **kwargs)
