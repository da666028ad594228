"""What a job is, without torch: the model spec and the Trainer interface.

The coordinator's fleets, the engine and the device side all name a job's
network and train it through a `Trainer`, but none of them needs PyTorch to
do so; the zoo (`models.py`) and the trainers (`trainers.py`) do. Keeping
these declarations here lets those layers load without importing torch.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from mjfl.errors import ConfigError

__all__ = [
    "FACTORY", "MAX_BATCH", "MODEL_NAMES", "LocalTraining", "ModelSpec", "TrainResult", "Trainer", "Weights",
    "is_factory_file", "model_args_json",
]

MODEL_NAMES: tuple[str, ...] = ("lenet5", "cnn-a-iid", "cnn-a-noniid", "cnn-b", "vgg6", "resnet13", "alexnet")
"""The zoo's networks (docs/models.md), in the order the docs list them."""

MAX_BATCH = 256
"""The largest batch_size a job may ask for: a sanity limit of the config.

Each job's program is exported for the job's own batch_size (its batch
dimension is 1..batch_size), and the memory the runtime plans for it grows
with that bound (docs/models.md), so a phone loads no more than the job needs.
"""

Weights = Mapping[str, np.ndarray]


FACTORY = re.compile(r"^(?P<where>[^:]+):(?P<attr>[A-Za-z_][A-Za-z0-9_]*)$")
"""A custom model: ``file.py:Factory`` (a file) or ``package.module:factory`` (importable)."""


def is_factory_file(name: str) -> bool:
    """Whether a factory string names a file (``models.py:Net``) rather than a module."""
    m = FACTORY.match(name)
    return bool(m) and (m.group("where").endswith(".py") or "/" in m.group("where"))


@dataclass(frozen=True)
class ModelSpec:
    """Which network a job trains, for which inputs.

    `name` is a zoo model (`MODEL_NAMES`) or a factory string,
    `"path/to/file.py:Factory"` or `"package.module:factory"`, called as
    `factory(input_shape, num_classes, **model_args)` (docs/models.md, "Your
    own model"); `args` holds the model_args as canonical JSON and `sha256`
    the factory file's hash, so a changed file is a different model.
    `dropout` overrides every dropout probability of the architecture
    (None keeps the model's rates; 0.0 turns dropout off, e.g. to compare
    runtimes step by step).
    """

    name: str
    input_shape: tuple[int, int, int]
    num_classes: int
    dropout: float | None = None
    args: str = ""
    sha256: str = ""

    def __post_init__(self) -> None:
        if self.name not in MODEL_NAMES and not FACTORY.match(self.name):
            raise ConfigError(
                "model",
                f"unknown model {self.name!r}; give a zoo model ({', '.join(MODEL_NAMES)}) "
                "or a factory, 'file.py:Factory' or 'package.module:factory'",
            )
        if self.args:
            try:
                table = json.loads(self.args)
            except ValueError:
                table = None
            if not isinstance(table, dict):
                raise ConfigError("model_args", f"must be a table, got {self.args!r}")
        if len(self.input_shape) != 3 or any(int(d) <= 0 for d in self.input_shape):
            raise ConfigError("input_shape", f"expected positive (C, H, W), got {self.input_shape!r}")
        if self.num_classes < 2:
            raise ConfigError("num_classes", f"need at least 2 classes, got {self.num_classes}")
        if self.dropout is not None and not 0.0 <= self.dropout < 1.0:
            raise ConfigError("dropout", f"must be in [0, 1), got {self.dropout}")
        object.__setattr__(self, "input_shape", tuple(int(d) for d in self.input_shape))

    @property
    def custom(self) -> bool:
        """Whether this is a model of the user's own (a factory), not the zoo's."""
        return self.name not in MODEL_NAMES

    @property
    def label(self) -> str:
        """A short name for files and the wire: the zoo name, or the factory's name."""
        m = FACTORY.match(self.name)
        return m.group("attr") if m and self.custom else self.name

    @property
    def kwargs(self) -> dict[str, Any]:
        """The model_args, as the factory's keyword arguments."""
        return dict(json.loads(self.args)) if self.args else {}


def model_args_json(args: Mapping[str, Any] | None) -> str:
    """model_args as `ModelSpec.args` keeps them: canonical JSON ("" for none)."""
    return json.dumps(dict(args), sort_keys=True, separators=(",", ":")) if args else ""


@dataclass(frozen=True)
class LocalTraining:
    """How a device trains a job in one round: ``epochs`` (the paper's tau_m) of mini-batch SGD.

    One value, carried whole from the job's configuration (``[[jobs]]``'s
    ``epochs``, ``batch_size``, ``lr``, ``momentum``, ``weight_decay``;
    docs/config.md) through the engine's task and the wire's task message to
    the trainer on the device.
    """

    epochs: int = 1
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ConfigError("epochs", f"must be >= 1, got {self.epochs}")
        if self.batch_size < 1:
            raise ConfigError("batch_size", f"must be >= 1, got {self.batch_size}")
        if not self.lr >= 0:
            raise ConfigError("lr", f"must be >= 0, got {self.lr}")
        if not 0 <= self.momentum < 1:
            raise ConfigError("momentum", f"must be in [0, 1), got {self.momentum}")
        if not self.weight_decay >= 0:
            raise ConfigError("weight_decay", f"must be >= 0, got {self.weight_decay}")


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
        self, weights: Weights, x: np.ndarray, y: np.ndarray, training: LocalTraining, *, seed: int = 0
    ) -> TrainResult:
        """SGD from `weights` on (x, y) as `training` says; x is (N, C, H, W) float32, y (N,) labels.

        `seed` fixes the batch order and any dropout noise (docs/models.md).
        """
        ...


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes: how a model's source file is named in a run's provenance."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
