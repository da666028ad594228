"""From a RunConfig to what a run trains: the fleet's profiles, data, partitions, programs.

Used by the run driver for every command (`mjfl simulate`, `mjfl testbed
run`, `mjfl profile`), so all of them train identical jobs on identical
shards for a given seed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mjfl import logs, seeds
from mjfl.coordinator.config import JobConfig, RunConfig, model_spec
from mjfl.coordinator.engine.fleet import JobArtifacts
from mjfl.coordinator.storage.records import JobInfo
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import ModelSpec
from mjfl.profiling.profiles import DeviceProfile, draw_fleet, load_profiles
from mjfl.schedulers.synthetic import synthetic_fleet
from mjfl.seeds import Purpose

log = logging.getLogger(__name__)

PROGRAM_CACHE = Path(".mjfl-cache") / "programs"


class Assignment:
    """Which shard each device holds: a job's data is cut into ``slots`` shards, one per device.

    The devices present when a run starts take the first shards; a device that
    joins later (a phone plugged in late, back after a cable pull) takes the
    next free one, for every job at once. A device keeps its shard for the
    whole run, and past ``slots`` devices nobody gets one.
    """

    def __init__(self, slots: int, devices: Sequence[DeviceId] = (), *, held: Mapping[str, int] | None = None) -> None:
        if slots < 1:
            raise ValueError("a run needs at least one shard")
        self.slots = slots
        self.slot_of: dict[DeviceId, int] = {DeviceId(d): int(k) for d, k in (held or {}).items()}
        for device in devices:
            self.assign(device)

    def assign(self, device: DeviceId) -> int | None:
        """``device``'s shard, given now if it has none and one is free; None when none is."""
        if device not in self.slot_of:
            taken = set(self.slot_of.values())
            free = next((k for k in range(self.slots) if k not in taken), None)
            if free is None:
                return None
            self.slot_of[device] = free
        return self.slot_of[device]


@dataclass(frozen=True, eq=False)
class PreparedJob:
    """A job with its data cut into shards and its training program exported.

    The program takes batches up to the job's batch_size; ``planned_memory``
    is what the runtime allocates for it when it loads it
    (``mjfl.jobs.export.planned_memory``), beside the program's own bytes.
    """

    config: JobConfig
    spec: ModelSpec
    program: bytes
    planned_memory: int
    parts: Sequence[tuple[NDArray[np.float32], NDArray[np.int64]]]  # one shard per slot
    batch_norm_pixels: tuple[int, ...]
    dropout_shapes: tuple[tuple[int, ...], ...]
    test_x: NDArray[np.float32]
    test_y: NDArray[np.int64]
    initial: dict[str, NDArray[np.float32]]
    program_file: Path | None = None  # where ``program`` was read (the program cache)

    def artifacts(self, assignment: Assignment, devices: Iterable[DeviceId] | None = None) -> JobArtifacts:
        """What ``devices`` (default: every device holding a shard) need to train the job."""
        held = assignment.slot_of
        shards = {d: self.parts[held[d]] for d in (held if devices is None else devices)}
        return JobArtifacts(
            JobId(self.config.name), self.spec, self.program, shards, self.batch_norm_pixels, self.dropout_shapes
        )

    def coverage(self, assignment: Assignment) -> tuple[list[int], float]:
        """The classes no shard held by a device has, and the share of the training data held."""
        held = sorted(set(assignment.slot_of.values()))
        labels = [self.parts[k][1] for k in held]
        present = set(np.unique(np.concatenate(labels)).tolist()) if labels else set()
        every = set(np.unique(np.concatenate([y for _, y in self.parts])).tolist())
        total = sum(len(y) for _, y in self.parts)
        return sorted(every - present), sum(len(y) for y in labels) / max(total, 1)

    def classes_a_round(self, assignment: Assignment, plan: int) -> tuple[int, int]:
        """At most how many classes ``plan`` held shards cover together, and how many classes there are."""
        counts = sorted((len(np.unique(self.parts[k][1])) for k in set(assignment.slot_of.values())), reverse=True)
        every = len(np.unique(np.concatenate([y for _, y in self.parts])))
        return min(every, sum(counts[:plan])), every

    def samples(self, assignment: Assignment, devices: Iterable[DeviceId] | None = None) -> dict[DeviceId, int]:
        """D_k^m of ``devices`` (default: every device holding a shard)."""
        held = assignment.slot_of
        return {d: len(self.parts[held[d]][1]) for d in (held if devices is None else devices)}

    def info(self, run_id: str) -> JobInfo:
        c = self.config
        return JobInfo(
            run_id, c.name, c.model, c.dataset, c.target_accuracy, c.target_loss, c.max_rounds, job_key(c),
            c.target_window,
        )


def job_key(config: JobConfig) -> str:
    """What makes two jobs "the same job" for Formula 10's history: model, data and training setup."""
    return "/".join(
        str(v) for v in (config.name, config.model, *((config.model_args, config.model_sha256) if config.model_sha256 or config.model_args else ()),
                         config.dataset, config.image_size, config.partition,
                         config.training.epochs, config.training.batch_size, config.training.lr,
                         config.training.momentum, config.fraction)
    )


def shard_count(config: RunConfig, present: int, *, real_time: bool) -> int:
    """How many shards to cut each job's data into when ``present`` devices start a run.

    One per device. In real time devices may join later, so by default the data
    is cut for the fleet the config describes (``fleet.size``, else its profile
    file, or ``testbed.min_devices``) when more than are present, and latecomers
    take the spare shards; ``fleet.shards = "present"`` cuts it for the devices
    present only. In virtual time the devices present are the fleet.
    """
    fleet = config.fleet
    if not real_time or fleet.shards == "present":
        return present
    size = fleet.size or (len(load_profiles(fleet.profiles)) if fleet.profiles is not None else 0)
    return max(present, size, config.testbed.min_devices or 0)


def fleet_profiles(config: RunConfig) -> list[DeviceProfile]:
    """The fleet's devices: drawn from a profile file, or from the synthetic generator; then its slow tail.

    The draws follow the run's seed and ``fleet.salt`` (``mjfl.seeds``).
    """
    rng = seeds.stream(config.seed, Purpose.FLEET, config.fleet.salt)
    if config.fleet.profiles is not None:
        real = load_profiles(config.fleet.profiles)
        size = config.fleet.size or len(real)
        profiles = real if size == len(real) else draw_fleet(real, size, rng)
    else:
        assert config.fleet.size is not None
        fleet = synthetic_fleet(config.fleet.size, rng)
        profiles = [
            DeviceProfile(device_id=str(d), a=float(a), mu=float(mu), source="synthetic")
            for d, a, mu in zip(fleet.ids, fleet.a, fleet.mu)
        ]
    # A stream of its own: a fleet with a slow tail is the same fleet, some devices slowed.
    return slow_tail(profiles, config.fleet.slow_fraction, config.fleet.slow_factor, seeds.stream(config.seed, Purpose.SLOW_TAIL, config.fleet.salt))


def slow_tail(
    profiles: Sequence[DeviceProfile], fraction: float, factor: tuple[float, float], rng: np.random.Generator,
) -> list[DeviceProfile]:
    """The profiles with ``round(fraction x size)`` devices, drawn by ``rng``, slower by a factor uniform on ``factor``.

    A slower device's round time scales as a whole (Formula 4): its floor ``a``
    is multiplied by the factor and its rate ``mu`` divided by it. The fit's
    confidence intervals describe the device as measured, so a slowed one has none.
    """
    slow = rng.choice(len(profiles), size=round(fraction * len(profiles)), replace=False)
    factors = rng.uniform(factor[0], factor[1], size=len(slow))
    out = list(profiles)
    for k, f in zip(slow, factors):
        p = out[k]
        out[k] = replace(p, a=p.a * float(f), mu=p.mu / float(f), a_ci=None, mu_ci=None)
    return out


def warm() -> None:
    """Import what preparing a job takes (torch, the export and the data), once, in a process that will."""
    import mjfl.jobs.datasets
    import mjfl.jobs.export  # noqa: F401


def prepare_jobs(config: RunConfig, slots: int, cache_dir: Path = PROGRAM_CACHE) -> list[PreparedJob]:
    """Load each job's data, cut it into ``slots`` shards and export its program (cached).

    A job's program is exported for batches up to the job's batch_size, the
    most a task needs (an epoch's last batch is shorter, never longer): the
    runtime allocates the program's planned memory for that bound.
    """
    from mjfl.jobs.datasets import load_dataset
    from mjfl.jobs.export import cached_program, planned_memory
    from mjfl.jobs.models import batch_norm_pixels, build_model, dropout_shapes, initial_weights
    from mjfl.jobs.partition import partition

    prepared = []
    for m, job in enumerate(config.jobs):
        data = load_dataset(job.dataset, job.data_dir, image_size=job.image_size, channels=job.channels, seed=seeds.integer(config.seed, Purpose.DATA_SPLIT))
        rng = seeds.stream(config.seed, Purpose.PARTITION, m)
        indices = partition(
            data.train_y, slots, job.partition, rng,
            classes_per_device=job.classes_per_device, alpha=job.dirichlet_alpha,
        )
        spec = model_spec(job, data.input_shape, data.num_classes)
        path, _ = cached_program(spec, cache_dir, max_batch=job.training.batch_size)
        program = path.read_bytes()
        parts = [(np.ascontiguousarray(data.train_x[idx]), np.ascontiguousarray(data.train_y[idx])) for idx in indices]
        model = build_model(spec)
        pixels = tuple(batch_norm_pixels(model, spec.input_shape).values())
        noise = tuple(tuple(s) for s in dropout_shapes(model, spec.input_shape))
        prepared.append(PreparedJob(
            job, spec, program, planned_memory(program), parts, pixels, noise, data.test_x, data.test_y,
            initial_weights(spec, seeds.integer(config.seed, Purpose.INITIAL_WEIGHTS, m)), path,
        ))
    return prepared


def converted(spec: ModelSpec) -> tuple[Any, Any, Any]:
    """Job ``spec``'s model built (in training mode), its dropout sites and its conversion's report (`jobs.convert`):
    `ModelError` naming the operator and module where the export form has no rule."""
    from mjfl.jobs.convert import ExportForm
    from mjfl.jobs.models import build_model, dropout_shapes

    model = build_model(spec)
    model.train()
    sites = dropout_shapes(model, spec.input_shape)
    return model, sites, ExportForm(model).check(spec.input_shape, sites)


def validate_models(config: RunConfig) -> None:
    """Build and convert every job's model (no export); `ModelError`/`ConfigError` on the first that fails.

    The quick part of `mjfl models check`, run before anything else by
    `simulate`, `testbed run` and `profile`, and by the lab (in the bounded
    child of a submitted model, ``coordinator/lab/sandbox.py``) when a run is
    submitted: an operator without a rule stops the run before a device is
    contacted or anything is recorded.
    """
    from mjfl.errors import ConfigError, ModelError
    from mjfl.jobs.datasets import load_dataset

    with logs.native_output():
        for m, job in enumerate(config.jobs):
            data = load_dataset(job.dataset, job.data_dir, image_size=job.image_size, channels=job.channels,
                                seed=seeds.integer(config.seed, Purpose.DATA_SPLIT))
            try:
                converted(model_spec(job, data.input_shape, data.num_classes))
            except ModelError as exc:
                raise ModelError(exc.operator, exc.module, f"{exc.problem} (job {job.name!r})", exc.instead) from None
            except ConfigError as exc:
                if exc.field != "model":
                    raise
                raise ConfigError(f"jobs[{m}].model", exc.problem) from None  # which job's model


def evaluate_job(spec: ModelSpec, weights: dict[str, NDArray[np.float32]], x: NDArray[np.float32], y: NDArray[np.int64]) -> tuple[float, float]:
    """The engine's evaluator: (accuracy, mean loss) of a global model on the job's test set."""
    from mjfl.jobs.trainers import evaluate

    return evaluate(spec, None, None, weights, x, y)
