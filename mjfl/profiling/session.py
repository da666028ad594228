"""Profiling sessions: measure devices on calibration tasks and fit Formula 4 per device.

A session sends each device calibration tasks for every job of a config at
several shard sizes D (a tenth, a quarter and half of the device's shard, so a
session takes minutes, not hours) and
epochs tau (1 and 2), cycling through the combinations, one task at a time per
device and all devices at once. Each task's timing is kept apart:

* ``duration_s``: send of the task to receipt of the result, on the
  coordinator's clock: what a round costs the scheduler (the paper's combined
  quantity);
* ``compute_s``: training as the device measured it;
* ``communication_s = duration_s - compute_s``: transfer, decoding and queueing.

Per device, ``fit_components`` (fit.py) fits compute and the combined time to
Formula 4 (normalised by tau*D) and communication per round; the combined fit
is the profile the schedulers use (``a``, ``mu``). Every job's tasks feed one
profile per device, as the paper's a_k and mu_k are per device.
"""

from __future__ import annotations

import asyncio
import csv
import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from mjfl.android_bridge.fleet import Fleet, JobArtifacts, Task
from mjfl.errors import DeviceFailure
from mjfl.ids import DeviceId, JobId
from mjfl.profiling.fit import fit_components
from mjfl.profiling.profiles import DeviceProfile

SHARD_FRACTIONS = (0.1, 0.25, 0.5)
EPOCHS = (1, 2)


@dataclass(frozen=True)
class Observation:
    """One calibration task's timing (seconds)."""

    device: str
    job: str
    epochs: int
    samples: int
    duration_s: float
    download_s: float
    compute_s: float
    upload_s: float | None  # None: not measured (a session's first result)

    @property
    def communication_s(self) -> float:
        return max(self.duration_s - self.compute_s, 0.0)


@dataclass(frozen=True, eq=False)
class CalibrationJob:
    """A job's program with every device's shard cut to one fraction."""

    artifacts: JobArtifacts
    base: JobId
    weights: Mapping[str, np.ndarray]
    batch_size: int
    lr: float


def calibration_jobs(
    jobs: Sequence[tuple[JobArtifacts, Mapping[str, np.ndarray], int, float]],
    fractions: Sequence[float] = SHARD_FRACTIONS,
) -> list[CalibrationJob]:
    """For each (artifacts, initial weights, batch size, lr) and fraction, a job with shards of that size."""
    out = []
    for artifacts, weights, batch_size, lr in jobs:
        for fraction in fractions:
            shards = {
                device: (x[: max(1, math.ceil(fraction * len(y)))], y[: max(1, math.ceil(fraction * len(y)))])
                for device, (x, y) in artifacts.shards.items()
            }
            name = JobId(f"{artifacts.job}@{round(fraction * 100)}%")
            out.append(CalibrationJob(JobArtifacts(name, artifacts.spec, artifacts.program, shards), artifacts.job, weights, batch_size, lr))
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
) -> list[Observation]:
    """``rounds`` calibration tasks per device and base job, cycling through sizes and epochs.

    The first ``warmup`` tasks of each device and job are run but not kept:
    they carry one-off costs (receiving and loading the program and the shard,
    the runtime's first allocation) that are not the device's round time.
    """
    await fleet.prepare([job.artifacts for job in jobs])
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
            task = Task(job.artifacts.job, number, dict(job.weights), tau, job.batch_size, job.lr, seed=number)
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


def fit_profiles(
    observations: Sequence[Observation],
    hardware: Mapping[str, Mapping[str, object]] | None = None,
) -> tuple[list[DeviceProfile], dict[str, str]]:
    """A profile per device with at least 3 observations; and why the others have none."""
    by_device: dict[str, list[Observation]] = {}
    for obs in observations:
        by_device.setdefault(obs.device, []).append(obs)
    profiles, skipped = [], {}
    for device, rows in by_device.items():
        if len(rows) < 3:
            skipped[device] = f"only {len(rows)} observations"
            continue
        try:
            fits = fit_components(
                [r.compute_s for r in rows], [r.communication_s for r in rows],
                [r.epochs for r in rows], [r.samples for r in rows],
            )
        except ValueError as exc:
            skipped[device] = str(exc)
            continue
        profiles.append(
            DeviceProfile.from_fit(device, fits, source="profiled", hardware=dict((hardware or {}).get(device, {})))  # type: ignore[arg-type]
        )
    return profiles, skipped


def write_observations(path: Path, observations: Sequence[Observation]) -> None:
    """observations.csv: one row per calibration task (read back by ``mjfl profile show``); empty = not measured."""
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [f.name for f in fields(Observation)]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for obs in observations:
            writer.writerow({k: "" if v is None else v for k, v in asdict(obs).items()})


def read_observations(path: Path) -> list[Observation]:
    with open(path, newline="") as f:
        return [
            Observation(
                r["device"], r["job"], int(r["epochs"]), int(r["samples"]), float(r["duration_s"]),
                float(r["download_s"]), float(r["compute_s"]), float(r["upload_s"]) if r["upload_s"] else None,
            )
            for r in csv.DictReader(f)
        ]
