"""The engine's view of devices: one small interface, two kinds of fleet, and the engine's task types.

A Fleet runs one training task on one device and answers with its result or
raises ``DeviceFailure``. The virtual-time fleet (``coordinator/run/simulated.py``)
trains in worker processes and reports round times sampled from each device's
profile; the real-time fleet (``coordinator/remote/fleet.py``) drives phones and
emulated devices over WebSockets. Its clients, the engine (``engine.py``) and
profiling sessions (``coordinator/run/calibration.py``), cannot tell them apart.

``Task``, ``TaskResult`` and ``Timing`` are the engine's words for a device's
round; the wire protocol has messages of similar names
(``mjfl.device.protocol``: ``Task``, ``Result``, ``Timing``), which the
remote fleet translates to and from, always naming them ``protocol.X``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining, ModelSpec

Weights = dict[str, NDArray[np.float32]]


@dataclass(frozen=True)
class DeviceProfileView:
    """What the engine knows of a device: its Formula 4 parameters."""

    device: DeviceId
    a: float
    mu: float


@dataclass(frozen=True, eq=False)
class JobArtifacts:
    """Everything a device needs, once, to train a job: program, model spec, its shard."""

    job: JobId
    spec: ModelSpec
    program: bytes
    shards: Mapping[DeviceId, tuple[NDArray[np.float32], NDArray[np.int64]]]
    batch_norm_pixels: tuple[int, ...] = ()  # per batch-norm layer of the program (docs/models.md)
    dropout_shapes: tuple[tuple[int, ...], ...] = ()  # per dropout noise input of the program


@dataclass(frozen=True, eq=False)
class Task:
    """One device's local training for one round of one job: from ``weights``, as ``training`` says.

    ``seed`` fixes the device's batch order and dropout noise (docs/models.md);
    ``deadline_s`` bounds how long the coordinator waits for the answer.
    """

    job: JobId
    round: int
    weights: Weights
    training: LocalTraining
    deadline_s: float | None = None
    seed: int = 0


@dataclass(frozen=True)
class Timing:
    """Where a device's round went, as far as it can tell (seconds).

    ``upload_s`` is the device's previous result's upload (protocol.md 5.5):
    None when not measured (a session's first result, a simulated device).
    """

    download_s: float = 0.0
    compute_s: float = 0.0
    upload_s: float | None = None


@dataclass(frozen=True, eq=False)
class TaskResult:
    """A device's answer: new weights, how many samples, its mean loss, its timing.

    ``duration_s`` is the round time as the coordinator's clock saw it (Formula
    4's t_k^m): sampled in virtual time, measured in real time.
    """

    device: DeviceId
    weights: Weights
    samples: int
    mean_loss: float
    duration_s: float
    timing: Timing = field(default_factory=Timing)
    device_state: Mapping[str, Any] | None = None  # battery, charging, thermal status, as the device told


class Fleet(Protocol):
    """Devices the engine can train on."""

    def profiles(self) -> Sequence[DeviceProfileView]:
        """Every device of the fleet, in a fixed order, with its current profile."""
        ...

    def prepare(self, jobs: Sequence[JobArtifacts]) -> None:
        """Make each job's program and shards available to its devices.

        Preparing a job again with the same program adds the shards of devices
        it had none for (devices that joined the run); their tasks are then
        accepted like the others'.
        """
        ...

    async def run_task(self, device: DeviceId, task: Task) -> TaskResult:
        """Train ``task`` on ``device``; raises ``mjfl.errors.DeviceFailure`` if no valid update comes back."""
        ...
