"""What a job is, without torch: the model spec and the Trainer interface.

The coordinator's fleets, the engine and the device side all name a job's
network and train it through a `Trainer`, but none of them needs PyTorch to
do so; the zoo (`models.py`) and the trainers (`trainers.py`) do. Keeping
these declarations here lets those layers load without importing torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from mjfl.errors import ConfigError

__all__ = ["MAX_BATCH", "MODEL_NAMES", "ModelSpec", "TrainResult", "Trainer", "Weights"]

MODEL_NAMES: tuple[str, ...] = ("lenet5", "cnn-a-iid", "cnn-a-noniid", "cnn-b", "vgg6", "resnet13", "alexnet")
"""The zoo's networks (docs/models.md), in the order the docs list them."""

MAX_BATCH = 256
"""The largest batch the engine's training programs take (their batch dimension is 1..MAX_BATCH)."""

Weights = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class ModelSpec:
    """Which network a job trains, for which inputs.

    `dropout` overrides every dropout probability of the architecture
    (None keeps the paper's rates; 0.0 turns dropout off, e.g. to compare
    runtimes step by step).
    """

    name: str
    input_shape: tuple[int, int, int]
    num_classes: int
    dropout: float | None = None

    def __post_init__(self) -> None:
        if self.name not in MODEL_NAMES:
            raise ConfigError("model", f"unknown model {self.name!r}; known: {', '.join(MODEL_NAMES)}")
        if len(self.input_shape) != 3 or any(int(d) <= 0 for d in self.input_shape):
            raise ConfigError("input_shape", f"expected positive (C, H, W), got {self.input_shape!r}")
        if self.num_classes < 2:
            raise ConfigError("num_classes", f"need at least 2 classes, got {self.num_classes}")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", f"must be in [0, 1), got {self.dropout}")
        object.__setattr__(self, "input_shape", tuple(int(d) for d in self.input_shape))


@dataclass(frozen=True)
class TrainResult:
    """What one `Trainer.train` call produced.

    `weights` are keyed and ordered like the eager model's `state_dict()`
    (float32). `samples` is the shard size (FedAvg's weight D_k^m); the
    call processed `samples * epochs` samples in `steps` SGD steps.
    `mean_loss` is the sample-weighted mean training loss over all steps.
    Times are wall-clock seconds: `compute_s` is the whole call, split into
    `setup_s` (writing weights, building the optimizer), `step_s` (forward,
    backward, optimizer) and `readback_s` (copying weights out).
    """

    weights: dict[str, np.ndarray]
    samples: int
    epochs: int
    steps: int
    mean_loss: float
    compute_s: float
    setup_s: float = 0.0
    step_s: float = 0.0
    readback_s: float = 0.0
    step_times_s: tuple[float, ...] = field(default=(), repr=False)


class Trainer(Protocol):
    """Trains a job's model on a device's shard for one round."""

    def train(
        self,
        weights: Weights,
        x: np.ndarray,
        y: np.ndarray,
        *,
        epochs: int,
        batch_size: int,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        seed: int = 0,
    ) -> TrainResult:
        """SGD from `weights` on (x, y); x is (N, C, H, W) float32, y (N,) labels."""
        ...
