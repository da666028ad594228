"""The virtual-time fleet: in-process simulated devices that train for real.

Each simulated device trains its shard for real, with the same trainers as
emulated devices and phones (ExecuTorch by default, PyTorch selectable), in a
pool of worker processes (the ExecuTorch runtime holds the GIL while it trains,
so threads would not run two devices at once). How long a round takes, whether
the device drops out and what a deadline does is the device model's
(``mjfl.device.emulated.device_model``, shared with emulated devices): the round time
a device reports is not how long training took on this machine but a draw from
its shifted-exponential profile (Formula 4) for the task's epochs and its
shard size, slept on the virtual clock. Its energy is modelled the same way
(``device_model.modelled_energy``: its profile's power over that round time)
and reported in the result's ``device_state``, as a phone reports its own.

With the ``batched`` runtime (``mjfl.jobs.batched``), the tasks handed to the
fleet in one turn of the event loop (a round's devices, of every job that
plans then) are gathered by the micro-batcher (``devices/microbatch.py``, on
the virtual clock's ``run_blocking``) and each job's trained together, in one
worker, as one batched computation; each device still gets its own result,
round time and failures.

A stand-in device (``SimulatedDevice.stand_in``, the config's
``fleet.stand_ins``: that share of the fleet, its fastest devices) takes its
sampled round time but does not train: it returns the model it was sent,
unchanged, and reports mean loss 0.0, like a client that only pretends to
take part. It measures how schedulers treat devices whose updates do not
move the model.

Determinism: every device has its own random stream for round times and
failures, and training is seeded per task, so a seed gives the same schedule,
the same virtual times and the same models whatever the number of workers.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, TypeVar

import numpy as np

from mjfl import logs, seeds
from mjfl.coordinator.config import RunConfig
from mjfl.coordinator.engine.clock import Clock, VirtualClock, run_virtual
from mjfl.coordinator.engine.fleet import DeviceProfileView, JobArtifacts, Task, TaskResult, Timing
from mjfl.coordinator.run.driver import Output, ReadyFleet
from mjfl.coordinator.run.preparation import fleet_profiles
from mjfl.coordinator.storage.records import RunMode
from mjfl.device.emulated.device_model import DeviceModel, TrainerCache, modelled_energy
from mjfl.device.emulated.microbatch import MicroBatcher
from mjfl.device.emulated.ray_cluster import RayOptions, TrainingPool, cluster_gpus, connect
from mjfl.errors import DeviceFailure
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining, ModelSpec
from mjfl.jobs.batched import BatchedTask
from mjfl.seeds import Purpose

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimulatedDevice:
    """A device of the virtual fleet: its Formula 4 parameters, how often it drops out, its power."""

    device: DeviceId
    a: float
    mu: float
    dropout: float = 0.0  # probability that a task never comes back
    power_w: float | None = None  # while training, for the modelled energy; None: the device model's default
    stand_in: bool = False  # returns the model unchanged with mean loss 0.0 instead of training


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
        keep_program: Callable[[bytes], Callable[[], bytes]] | None = None,
    ) -> None:
        if not devices:
            raise ValueError("a fleet needs at least one device")
        self.devices = {d.device: d for d in devices}
        if len(self.devices) != len(devices):
            raise ValueError("device ids must be unique")
        self.clock = clock
        self.runtime = runtime
        # One stream per device, so one device's draws never shift another's.
        streams = [seeds.stream(seed, Purpose.ROUND_TIMES, d.device) for d in devices]
        self._models = {
            d.device: DeviceModel(d.a, d.mu, dropout=d.dropout, rng=np.random.default_rng(stream))
            for d, stream in zip(devices, streams)
        }
        self._own_executor = executor is None
        self._executor = executor or worker_pool(workers)
        self._specs: dict[JobId, ModelSpec] = {}
        self._shards: dict[JobId, dict[DeviceId, tuple[np.ndarray, np.ndarray]]] = {}
        self._keep_program = keep_program
        self._programs: dict[JobId, tuple[Callable[[], bytes], str]] = {}
        self._program_dir = tempfile.TemporaryDirectory(prefix="mjfl-programs-")
        self._batcher: MicroBatcher[ModelSpec, BatchedTask, Trained] | None = None
        if runtime == "batched":
            self._batcher = MicroBatcher(
                train_batch_in_worker, functools.partial(clock.run_blocking, self._executor), name="batched runtime"
            )

    def profiles(self) -> list[DeviceProfileView]:
        return [DeviceProfileView(d.device, d.a, d.mu) for d in self.devices.values()]

    def prepare(self, jobs: Sequence[JobArtifacts]) -> None:
        for job in jobs:
            digest = hashlib.sha256(job.program).hexdigest()
            known = self._programs.get(job.job)
            if known is not None and known[1] == digest:
                for device, data in job.shards.items():
                    self._shards[job.job].setdefault(device, data)
                continue
            self._specs[job.job] = job.spec
            self._shards[job.job] = dict(job.shards)
            # Workers load each program once, from a file (or the executor's
            # own store, e.g. Ray's objects on a cluster), instead of receiving
            # its bytes with every task.
            if self._keep_program is not None:
                self._programs[job.job] = (self._keep_program(job.program), digest)
                continue
            path = Path(self._program_dir.name) / f"{digest}.pte"
            path.write_bytes(job.program)
            self._programs[job.job] = (ProgramFile(str(path)), digest)

    async def run_task(self, device: DeviceId, task: Task) -> TaskResult:
        x, y = self._shards[task.job][device]
        # The round's fate is drawn before training, so the stream does not depend on the outcome.
        fate = self._models[device].draw(task.training.epochs, len(y))
        failure = fate.failure(task.deadline_s)
        if failure is not None:
            after, reason = failure
            await self.clock.sleep(after)
            raise DeviceFailure(device, reason, after_s=after)
        assert fate.duration_s is not None  # simulated devices always have a profile
        if self.devices[device].stand_in:
            await self.clock.sleep(fate.duration_s)
            return TaskResult(
                device, dict(task.weights), len(y), 0.0, fate.duration_s, Timing(compute_s=fate.duration_s),
                device_state=modelled_energy(self.devices[device].power_w, fate.duration_s),
            )
        if self._batcher is not None:
            trained = await self._batcher.submit(
                self._specs[task.job], BatchedTask(task.weights, x, y, task.training, task.seed)
            )
        else:
            trained = await self.clock.run_blocking(
                self._executor, train_in_worker, self.runtime, self._specs[task.job], *self._programs[task.job],
                task.weights, x, y, task.training, task.seed,
            )
        await self.clock.sleep(fate.duration_s)
        weights, samples, mean_loss = trained
        return TaskResult(
            device, weights, samples, mean_loss, fate.duration_s, Timing(compute_s=fate.duration_s),
            device_state=modelled_energy(self.devices[device].power_w, fate.duration_s),
        )

    def close(self) -> None:
        if self._own_executor:
            self._executor.shutdown(wait=True, cancel_futures=True)
        self._program_dir.cleanup()


class SimulatedDevices:
    """`mjfl simulate`'s devices: the config's fleet, simulated, on the virtual clock.

    Use as a context manager: it holds the worker processes that train for
    every run of the command (with ``ray``, the Ray cluster's workers). Each run gets a fresh fleet with the same seed,
    so every method meets identical devices and round times.
    """

    mode: RunMode = "virtual"
    kind = "simulate"

    def __init__(
        self, config: RunConfig, output: Output, *, ray: RayOptions | None = None, executor: Executor | None = None,
    ) -> None:
        """``executor``: where training runs, kept open (a study's simulations share one); default: worker processes."""
        self.config = config
        self.profiles = fleet_profiles(config)
        self._stack = contextlib.ExitStack()
        # The one choice of where training runs: the caller's executor, local processes, or Ray.
        self._pool: Executor
        if executor is not None:
            self._pool, self._keep_program = executor, None
            return
        if ray is None:
            self._pool = worker_pool(config.fleet.workers, log_file=output.log_file, verbose=output.verbose)
            self._keep_program = None
        else:
            self._stack.enter_context(connect(ray))
            # The batched runtime's batches each hold a GPU where the cluster has one (ray_cluster's docstring).
            gpus = 1 if config.fleet.runtime == "batched" and cluster_gpus() else 0
            self._pool = pool = TrainingPool(log_file=output.log_file, verbose=output.verbose, num_gpus=gpus)
            self._keep_program = pool.keep
            if gpus:
                log.info("batched runtime on Ray: each batch trains on one of the cluster's %d GPUs", cluster_gpus())
        self._stack.callback(self._pool.shutdown, wait=True, cancel_futures=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and isinstance(self._pool, ProcessPoolExecutor):
            # Interrupted (Ctrl-C, SIGTERM) or failed: what the workers still train is no one's any more,
            # and a batched round of a paper-sized job takes minutes; end them rather than wait.
            for process in list(self._pool._processes.values()):
                process.terminate()
        self._stack.close()

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        return run_virtual(main)

    @contextlib.asynccontextmanager
    async def fleet(self) -> AsyncIterator[ReadyFleet]:
        clock = VirtualClock()
        stand_ins = stand_in_devices([(p.a, p.mu) for p in self.profiles], self.config.fleet.stand_ins)
        devices = [
            SimulatedDevice(DeviceId(p.device_id), p.a, p.mu, self.config.fleet.dropout, p.power_w, k in stand_ins)
            for k, p in enumerate(self.profiles)
        ]
        fleet = SimulatedFleet(
            devices, clock, seed=self.config.seed, runtime=self.config.fleet.runtime, executor=self._pool,
            keep_program=self._keep_program,
        )
        try:
            yield ReadyFleet(fleet, clock, [d.device for d in devices])
        finally:
            fleet.close()


def stand_in_devices(profiles: Sequence[tuple[float, float]], share: float) -> set[int]:
    """Which devices of a fleet of (a, mu) profiles are stand-ins: the ``round(share * K)`` fastest (least a + 1/mu).

    The fastest, because a device that does not learn is a problem for
    schedulers precisely when it is fast: it wins plans on time alone.
    """
    count = round(share * len(profiles))
    order = sorted(range(len(profiles)), key=lambda k: (profiles[k][0] + 1.0 / profiles[k][1], k))
    return set(order[:count])


@dataclass(frozen=True)
class ProgramFile:
    """A program's bytes in a file every worker can read (the local pool's workers share the disk)."""

    path: str

    def __call__(self) -> bytes:
        return Path(self.path).read_bytes()


def worker_pool(workers: int | None = None, *, log_file: Path | None = None, verbose: bool = False) -> ProcessPoolExecutor:
    """The processes simulated devices train in (one per core by default), logging to ``log_file``."""
    return ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1, initializer=_init_worker, initargs=(log_file, verbose))


# -- worker side --------------------------------------------------------------


def _init_worker(log_file: Path | None, verbose: bool) -> None:
    logs.setup_worker(log_file, verbose=verbose)


# One device per worker process at a time: intra-op threads would only fight
# the other workers for the same cores.
_TRAINERS = TrainerCache(torch_threads=1)


Trained = tuple[dict[str, np.ndarray], int, float]  # a device's new weights, its samples and mean loss

_BATCHED: dict[ModelSpec, Any] = {}  # this process's batched trainers, by model


def train_batch_in_worker(spec: ModelSpec, tasks: Sequence[BatchedTask]) -> list[Trained]:
    """Train ``tasks`` (devices of one job) together with this process's batched trainer for ``spec``."""
    trainer = _BATCHED.get(spec)
    if trainer is None:
        import torch

        from mjfl.jobs.batched import BatchedTrainer

        torch.set_num_threads(1)  # one worker per core, as for the per-device trainers
        trainer = _BATCHED[spec] = BatchedTrainer(spec)
    return [(r.weights, r.samples, r.mean_loss) for r in trainer.train_many(tasks)]


def train_in_worker(
    runtime: str, spec: ModelSpec, program: Callable[[], bytes], program_sha: str, weights: Mapping[str, np.ndarray],
    x: np.ndarray, y: np.ndarray, training: LocalTraining, seed: int,
) -> tuple[dict[str, np.ndarray], int, float]:
    """Train one task with this process's trainer cache (the device model's, as emulated devices do).

    ``program()`` gives the program's bytes; it is called only when the cache lacks ``program_sha``.
    """
    result, _ = _TRAINERS.train(runtime, spec, program_sha, program, weights, x, y, training, seed=seed)
    return result.weights, result.samples, result.mean_loss
