"""A profiling session: calibration tasks on every device, one task at a time per device.

A session sends each device calibration tasks for every job of a config at
several shard sizes D (a tenth, a quarter and half of the device's shard, so a
session takes minutes, not hours) and epochs tau (1 and 2), cycling through the
combinations, all devices at once, and records each task's timing as an
``Observation`` (``mjfl.profiling.observations``, which fits Formula 4 from
them). Like the engine, it knows devices only through a ``Fleet``, so phones,
emulated and simulated devices are profiled alike; the run driver
(``driver.py``) runs it for `mjfl profile`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from mjfl.coordinator.engine.fleet import Fleet, JobArtifacts, Task
from mjfl.errors import DeviceFailure
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining
from mjfl.profiling.observations import Observation

SHARD_FRACTIONS = (0.1, 0.25, 0.5)
EPOCHS = (1, 2)


@dataclass(frozen=True, eq=False)
class CalibrationJob:
    """A job's program with every device's shard cut to one fraction; its tasks train as the job does."""

    artifacts: JobArtifacts
    base: JobId
    weights: Mapping[str, np.ndarray]
    training: LocalTraining  # the job's; a session varies its epochs


def calibration_jobs(
    jobs: Sequence[tuple[JobArtifacts, Mapping[str, np.ndarray], LocalTraining]],
    fractions: Sequence[float] = SHARD_FRACTIONS,
) -> list[CalibrationJob]:
    """For each (artifacts, initial weights, local training) and fraction, a job with shards of that size."""
    out = []
    for artifacts, weights, training in jobs:
        for fraction in fractions:
            shards = {
                device: (x[: max(1, math.ceil(fraction * len(y)))], y[: max(1, math.ceil(fraction * len(y)))])
                for device, (x, y) in artifacts.shards.items()
            }
            name = JobId(f"{artifacts.job}@{round(fraction * 100)}%")
            out.append(CalibrationJob(JobArtifacts(name, artifacts.spec, artifacts.program, shards), artifacts.job, weights, training))
    return out


async def run_session(
    fleet: Fleet,
    jobs: Sequence[CalibrationJob],
    devices: Sequence[DeviceId],
    rounds: int,
    *,
    epochs: Sequence[int] = EPOCHS,
    warmup: int = 1,
    on_observation: Callable[[Observation], None] | None = None,
    on_failure: Callable[[DeviceId, str], None] | None = None,
    on_task: Callable[[DeviceId, JobId, int], None] | None = None,
) -> list[Observation]:
    """``rounds`` calibration tasks per device and base job, cycling through sizes and epochs.

    ``on_task(device, job, number)`` is told as each task is handed to the
    fleet, ``on_observation`` and ``on_failure`` how it ended (warm-up tasks
    included for ``on_task``, not for the other two).

    The first ``warmup`` tasks of each device and job are run but not kept:
    they carry one-off costs (receiving and loading the program and the shard,
    the runtime's first allocation) that are not the device's round time.
    """
    fleet.prepare([job.artifacts for job in jobs])
    by_base: dict[JobId, list[CalibrationJob]] = {}
    for job in jobs:
        by_base.setdefault(job.base, []).append(job)
    observations: list[Observation] = []

    async def measure(device: DeviceId) -> None:
        plan = []
        for variants in by_base.values():
            # The program is loaded on the first task; later shard sizes only
            # add a few kilobytes of shard to their first task.
            plan += [(variants[0], min(epochs), False)] * warmup
            combos = itertools.cycle(itertools.product(variants, epochs))
            plan += [(*next(combos), True) for _ in range(rounds)]
        for number, (job, tau, keep) in enumerate(plan, start=1):
            task = Task(job.artifacts.job, number, dict(job.weights), dataclasses.replace(job.training, epochs=tau), seed=number)
            if on_task is not None:
                on_task(device, task.job, number)
            try:
                result = await fleet.run_task(device, task)
            except DeviceFailure as failure:
                if on_failure is not None and keep:
                    on_failure(device, failure.reason)
                continue
            if not keep:
                continue
            obs = Observation(
                str(device), str(job.artifacts.job), tau, result.samples, result.duration_s,
                result.timing.download_s, result.timing.compute_s, result.timing.upload_s,
            )
            observations.append(obs)
            if on_observation is not None:
                on_observation(obs)

    async with asyncio.TaskGroup() as group:
        for device in devices:
            group.create_task(measure(device))
    return observations


