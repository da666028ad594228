"""The virtual-time fleet: in-process simulated devices that train for real.

Each simulated device trains its shard for real, with the same trainers as
emulated devices and phones (ExecuTorch by default, PyTorch selectable), in a
pool of worker processes (the ExecuTorch runtime holds the GIL while it trains,
so threads would not run two devices at once). The round time a device
reports is not how long that took on this machine but a draw from its
shifted-exponential profile (Formula 4) for the task's epochs and its shard
size, slept on the virtual clock.

Determinism: every device has its own random stream for round times and
failures, and training is seeded per task, so a seed gives the same schedule,
the same virtual times and the same models whatever the number of workers.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mjfl.coordinator.clock import Clock
from mjfl.coordinator.fleet import (
    DeviceFailure,
    DeviceProfileView,
    JobArtifacts,
    Task,
    TaskResult,
    Timing,
)
from mjfl.ids import DeviceId, JobId
from mjfl.schedulers import round_time


@dataclass(frozen=True)
class SimulatedDevice:
    """A device of the virtual fleet: its Formula 4 parameters and how often it drops out."""

    device: DeviceId
    a: float
    mu: float
    dropout: float = 0.0  # probability that a task never comes back


class SimulatedFleet:
    """A Fleet whose devices train in worker processes and take sampled virtual time."""

    def __init__(
        self,
        devices: Sequence[SimulatedDevice],
        clock: Clock,
        *,
        seed: int = 0,
        runtime: str = "executorch",
        workers: int | None = None,
        executor: Executor | None = None,
    ) -> None:
        if not devices:
            raise ValueError("a fleet needs at least one device")
        self.devices = {d.device: d for d in devices}
        if len(self.devices) != len(devices):
            raise ValueError("device ids must be unique")
        self.clock = clock
        self.runtime = runtime
        # One stream per device, so one device's draws never shift another's.
        streams = np.random.SeedSequence(seed).spawn(len(devices))
        self._rng = {d.device: np.random.default_rng(s) for d, s in zip(devices, streams)}
        self._own_executor = executor is None
        self._executor = executor or ProcessPoolExecutor(
            max_workers=workers or os.cpu_count() or 1, initializer=_init_worker
        )
        self._artifacts: dict[JobId, JobArtifacts] = {}
        self._programs: dict[JobId, tuple[str, str]] = {}
        self._program_dir = tempfile.TemporaryDirectory(prefix="mjfl-programs-")

    def profiles(self) -> list[DeviceProfileView]:
        return [DeviceProfileView(d.device, d.a, d.mu) for d in self.devices.values()]

    async def prepare(self, jobs: Sequence[JobArtifacts]) -> None:
        for job in jobs:
            self._artifacts[job.job] = job
            # Workers load each program once, from a file, instead of receiving
            # its bytes with every task.
            digest = hashlib.sha256(job.program).hexdigest()
            path = Path(self._program_dir.name) / f"{digest}.pte"
            path.write_bytes(job.program)
            self._programs[job.job] = (str(path), digest)

    async def run_task(self, device: DeviceId, task: Task) -> TaskResult:
        spec = self.devices[device]
        artifacts = self._artifacts[task.job]
        x, y = artifacts.shards[device]
        rng = self._rng[device]
        # Draw before training so that the stream does not depend on the outcome.
        shift, rate = round_time.shift_and_rate(spec.a, spec.mu, task.epochs, len(y))
        duration = float(round_time.sample(rng, shift, rate))
        drops = bool(rng.random() < spec.dropout)
        if drops or (task.deadline_s is not None and duration > task.deadline_s):
            # The coordinator learns of a lost device only when its deadline passes.
            wait = task.deadline_s if task.deadline_s is not None else duration
            await self.clock.sleep(wait)
            reason = "dropped out" if drops else f"missed the {task.deadline_s:.1f} s deadline"
            raise DeviceFailure(device, reason, after_s=wait)
        trained = await self.clock.run_blocking(
            self._executor, train_in_worker, self.runtime, artifacts.spec, *self._programs[task.job],
            task.weights, x, y, task.epochs, task.batch_size, task.lr, task.momentum, task.weight_decay, task.seed,
        )
        await self.clock.sleep(duration)
        weights, samples, mean_loss = trained
        return TaskResult(device, weights, samples, mean_loss, duration, Timing(compute_s=duration))

    def close(self) -> None:
        if self._own_executor:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self._program_dir.cleanup()


# -- worker side --------------------------------------------------------------

_TRAINERS: dict[tuple[str, str], object] = {}


def _init_worker() -> None:
    import torch

    # One device per worker process: intra-op threads would only fight the
    # other workers for the same cores.
    torch.set_num_threads(1)


def train_in_worker(
    runtime: str, spec: object, program_path: str, program_sha: str, weights: Mapping[str, np.ndarray],
    x: np.ndarray, y: np.ndarray, epochs: int, batch_size: int, lr: float, momentum: float,
    weight_decay: float, seed: int,
) -> tuple[dict[str, np.ndarray], int, float]:
    """Train one task with a trainer cached per (runtime, program) in this process."""
    from mjfl.jobs.trainers import make_trainer

    key = (runtime, program_sha)
    trainer = _TRAINERS.get(key)
    if trainer is None:
        program = Path(program_path).read_bytes()
        trainer = _TRAINERS[key] = make_trainer(runtime, spec, program)  # type: ignore[arg-type]
    result = trainer.train(  # type: ignore[attr-defined]
        weights, x, y, epochs=epochs, batch_size=batch_size, lr=lr, momentum=momentum,
        weight_decay=weight_decay, seed=seed,
    )
    return result.weights, result.samples, result.mean_loss
