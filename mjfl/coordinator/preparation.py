"""From a RunConfig to what a run trains: the fleet's profiles, data, partitions, programs.

Used by the run driver for every command (`mjfl simulate`, `mjfl testbed
run`, `mjfl profile`), so all of them train identical jobs on identical
shards for a given seed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from mjfl.android_bridge.fleet import JobArtifacts
from mjfl.coordinator.config import JobConfig, RunConfig
from mjfl.coordinator.records import JobInfo
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import ModelSpec
from mjfl.profiling.profiles import DeviceProfile, draw_fleet, load_profiles
from mjfl.schedulers.synthetic import synthetic_fleet

log = logging.getLogger(__name__)

PROGRAM_CACHE = Path(".mjfl-cache") / "programs"


@dataclass(frozen=True, eq=False)
class PreparedJob:
    """A job with its data split over the fleet and its training program exported."""

    config: JobConfig
    spec: ModelSpec
    artifacts: JobArtifacts
    test_x: NDArray[np.float32]
    test_y: NDArray[np.int64]
    initial: dict[str, NDArray[np.float32]]

    @property
    def samples(self) -> dict[DeviceId, int]:
        return {d: len(y) for d, (_, y) in self.artifacts.shards.items()}

    def info(self, run_id: str) -> JobInfo:
        c = self.config
        return JobInfo(run_id, c.name, c.model, c.dataset, c.target_accuracy, c.target_loss, c.max_rounds, job_key(c))


def job_key(config: JobConfig) -> str:
    """What makes two jobs "the same job" for Formula 10's history: model, data and training setup."""
    return "/".join(
        str(v) for v in (config.name, config.model, config.dataset, config.image_size, config.partition,
                         config.epochs, config.batch_size, config.lr, config.momentum, config.fraction)
    )


def fleet_profiles(config: RunConfig) -> list[DeviceProfile]:
    """The fleet's devices: drawn from a profile file, or from the synthetic generator."""
    rng = np.random.default_rng([config.seed, 1])
    if config.fleet.profiles is not None:
        real = load_profiles(config.fleet.profiles)
        size = config.fleet.size or len(real)
        return real if size == len(real) else draw_fleet(real, size, rng)
    assert config.fleet.size is not None
    fleet = synthetic_fleet(config.fleet.size, rng)
    return [
        DeviceProfile(device_id=str(d), a=float(a), mu=float(mu), source="synthetic")
        for d, a, mu in zip(fleet.ids, fleet.a, fleet.mu)
    ]


def prepare_jobs(config: RunConfig, devices: Sequence[DeviceId], *, cache_dir: Path = PROGRAM_CACHE) -> list[PreparedJob]:
    """Load each job's data, partition it over ``devices`` and export its program (cached)."""
    from mjfl.jobs.datasets import load_dataset
    from mjfl.jobs.export import cached_program
    from mjfl.jobs.models import batch_norm_pixels, build_model, initial_weights
    from mjfl.jobs.partition import partition

    prepared = []
    for m, job in enumerate(config.jobs):
        data = load_dataset(job.dataset, job.data_dir, image_size=job.image_size, channels=job.channels, seed=config.seed)
        rng = np.random.default_rng([config.seed, 2, m])
        parts = partition(
            data.train_y, len(devices), job.partition, rng,
            classes_per_device=job.classes_per_device, alpha=job.dirichlet_alpha,
        )
        spec = ModelSpec(job.model, data.input_shape, data.num_classes)
        path, _ = cached_program(spec, cache_dir)
        shards = {d: (np.ascontiguousarray(data.train_x[idx]), np.ascontiguousarray(data.train_y[idx])) for d, idx in zip(devices, parts)}
        pixels = tuple(batch_norm_pixels(build_model(spec), spec.input_shape).values())
        artifacts = JobArtifacts(JobId(job.name), spec, path.read_bytes(), shards, pixels)
        prepared.append(PreparedJob(job, spec, artifacts, data.test_x, data.test_y, initial_weights(spec, config.seed + m)))
    return prepared


def evaluate_job(spec: ModelSpec, weights: dict[str, NDArray[np.float32]], x: NDArray[np.float32], y: NDArray[np.int64]) -> tuple[float, float]:
    """The engine's evaluator: (accuracy, mean loss) of a global model on the job's test set."""
    from mjfl.jobs.trainers import evaluate

    return evaluate(spec, None, None, weights, x, y)
