"""The messages of protocol v1, as frozen dataclasses (docs/protocol.md, "Messages").

Text messages (JSON): Hello, Welcome, Cancel, Heartbeat, HeartbeatAck, Error, Bye.
Binary messages (JSON header + tensor section): Provision, Task, Result.
Field names are the JSON keys. These are also the events a session hands out.

Each message's wire name, the value of its JSON field ``type``, is written
once, on its class (``Hello.type == "hello"``): the codec's encoder and
decoder and the sessions read it from there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, NewType

import numpy as np

from mjfl.device.protocol.tensors import Buffer
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining

TaskId = NewType("TaskId", str)

Runtime = Literal["executorch", "torch"]
RUNTIMES: tuple[Runtime, ...] = ("executorch", "torch")


@dataclass(frozen=True)
class ModelSpec:
    """A job's network as a device needs to know it (docs/protocol.md 5.3).

    ``name``/``input_shape``/``num_classes`` build the eager model (torch
    runtime); ``batch_norm_pixels`` gives, per batch-norm layer of the
    program in output order, the pixels per channel it normalises, which a
    device needs for the running-variance update; ``dropout_shapes`` the
    per-sample shape of each dropout noise input, in input order
    (docs/models.md, "Training a task on a device").
    """

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    batch_norm_pixels: tuple[int, ...] = ()
    dropout_shapes: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, eq=False)
class Program:
    """An exported ExecuTorch training program (.pte bytes), addressed by its sha256."""

    data: Buffer
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sha256", hashlib.sha256(self.data).hexdigest())


@dataclass(frozen=True, eq=False)
class Shard:
    """A device's training data for one job, addressed by its sha256.

    ``x`` is float32 of shape (n, *input_shape), ``y`` int64 of shape (n,). The
    address is sha256(x bytes || y bytes), both little-endian and C-order.
    """

    x: np.ndarray
    y: np.ndarray
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        x = np.require(self.x, dtype="<f4", requirements="C")
        y = np.require(self.y, dtype="<i8", requirements="C")
        if x.ndim < 1 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise ValueError(
                f"shard x {x.shape} and y {y.shape} must have shapes (n, ...) and (n,)"
            )
        digest = hashlib.sha256(x.reshape(-1).view(np.uint8).data)
        digest.update(y.view(np.uint8).data)
        object.__setattr__(self, "x", x)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "sha256", digest.hexdigest())

    @property
    def samples(self) -> int:
        return int(self.y.shape[0])


@dataclass(frozen=True)
class Settings:
    """Session settings the coordinator announces in its welcome; None means off."""

    heartbeat_interval_s: float | None
    heartbeat_timeout_s: float | None
    max_message_bytes: int | None
    max_control_bytes: int | None


@dataclass(frozen=True)
class Timing:
    """What the device measured for one task, in seconds of its own monotonic clock.

    download_s: from the task message's arrival to its weights being ready to
    train on (with a library that delivers whole messages, that is decoding).
    compute_s: local training, first batch to final weights.
    upload_s: how long sending the device's *previous* result took (None if
    none), since a result cannot carry its own upload time.
    """

    download_s: float
    compute_s: float
    upload_s: float | None


@dataclass(frozen=True)
class Hello:
    """The device's first message: who it is, what it speaks and what it holds (docs/protocol.md 5.1)."""

    type: ClassVar[str] = "hello"

    device_id: DeviceId
    token: str
    runtime: Runtime
    versions: tuple[int, ...]
    hardware: Mapping[str, Any]
    cached: tuple[str, ...]
    max_message_bytes: int | None
    proof: str | None = None  # HMAC of the coordinator's nonce (docs/protocol.md 5.1.1)


@dataclass(frozen=True)
class Welcome:
    """The coordinator accepts the device: the version chosen and the session's settings (5.2)."""

    type: ClassVar[str] = "welcome"

    version: int
    coordinator_id: str
    settings: Settings


@dataclass(frozen=True, eq=False)
class Provision:
    """Binds a job to its program, shard and model for this session (5.3).

    ``program`` / ``shard`` are None when the device already holds them (it
    listed their sha256 in its hello or got them earlier in the session).
    """

    type: ClassVar[str] = "provision"

    job_id: JobId
    model: ModelSpec
    program_sha256: str
    shard_sha256: str
    program: Program | None
    shard: Shard | None


@dataclass(frozen=True, eq=False)
class Task:
    """Train the job's program on the device's shard from ``weights`` (5.4)."""

    type: ClassVar[str] = "task"

    task_id: TaskId
    job_id: JobId
    round: int
    weights: Mapping[str, np.ndarray]
    epochs: int
    batch_size: int
    lr: float
    momentum: float
    weight_decay: float
    deadline_s: float | None
    program_sha256: str
    shard_sha256: str
    # The task generator's seed (docs/models.md): batch order and dropout noise.
    # None from a coordinator that sends none; the device then draws its own.
    seed: int | None = None

    @property
    def training(self) -> LocalTraining:
        """The task's local training as one value (its wire fields ``epochs`` ... ``weight_decay``)."""
        return LocalTraining(self.epochs, self.batch_size, self.lr, self.momentum, self.weight_decay)


@dataclass(frozen=True, eq=False)
class Result:
    """A device's answer to a task: the trained weights, their sample count, its timing (5.5)."""

    type: ClassVar[str] = "result"

    task_id: TaskId
    job_id: JobId
    round: int
    weights: Mapping[str, np.ndarray]
    samples: int
    mean_loss: float
    timing: Timing
    device_state: Mapping[str, Any] | None = None  # battery, charging, thermal status (5.5); None: not told


@dataclass(frozen=True)
class Cancel:
    """Stop a pending task; the device still answers it, with a result or an error (5.6)."""

    type: ClassVar[str] = "cancel"

    task_id: TaskId
    reason: str


@dataclass(frozen=True)
class Heartbeat:
    """A liveness probe stamped on the sender's clock; the peer echoes the stamp (5.7)."""

    type: ClassVar[str] = "heartbeat"

    seq: int
    sent_at: float


@dataclass(frozen=True)
class HeartbeatAck:
    """The answer to heartbeat ``seq``, echoing its ``sent_at`` (5.7)."""

    type: ClassVar[str] = "heartbeat_ack"

    seq: int
    echo: float


@dataclass(frozen=True)
class Error:
    """A failure that does not end the session, e.g. a task that could not train (5.8)."""

    type: ClassVar[str] = "error"

    code: str
    reason: str
    task_id: TaskId | None


@dataclass(frozen=True)
class Bye:
    """The sender ends the session; ``code`` is "normal" or an error code (5.9)."""

    type: ClassVar[str] = "bye"

    code: str
    reason: str


Message = (
    Hello | Welcome | Provision | Task | Result | Cancel | Heartbeat | HeartbeatAck | Error | Bye
)
