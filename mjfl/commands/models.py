"""`mjfl models check CONFIG`: can each job's model become a training program that trains right?

For every job: its parameters, the operators the conversion found and what
each became (`mjfl.jobs.convert`), the program's size and planned memory at
the job's batch, ExecuTorch and eager step times, and parity (`mjfl.jobs.
parity`: N steps of the program against eager PyTorch from the same weights,
batches and dropout noise). Any failure is one error with its reason.

Its quick part (build, trace, convert, no export) is `validate_models`
(``coordinator/run/preparation.py``), which `simulate`, `testbed run`,
`profile` and a lab's submission run before anything else.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl import logs, seeds
from mjfl.coordinator.config import JobConfig, RunConfig, model_spec
from mjfl.coordinator.run.preparation import converted
from mjfl.errors import UserError
from mjfl.seeds import Purpose

__all__ = ["ModelCheck", "check_models"]


@dataclass
class ModelCheck:
    """What `check_models` found for one job's model (its JSON is `asdict`)."""

    job: str
    model: str
    parameters: int
    operators: list[tuple[str, str, int]]
    dropout_sites: int
    batch_norm_layers: int
    program_bytes: int = 0
    planned_memory_bytes: int = 0
    executorch_step_ms: float = 0.0
    eager_step_ms: float = 0.0
    parity: str = ""
    parity_ok: bool = True
    problems: list[str] = field(default_factory=list)


def _data(config: RunConfig, m: int, job: JobConfig) -> Any:
    from mjfl.jobs.datasets import load_dataset

    return load_dataset(job.dataset, job.data_dir, image_size=job.image_size, channels=job.channels,
                        seed=seeds.integer(config.seed, Purpose.DATA_SPLIT))


def _converted(job: JobConfig, spec: Any) -> ModelCheck:
    from mjfl.jobs.convert import batch_norm_layers

    model, sites, report = converted(spec)
    return ModelCheck(
        job=str(job.name), model=job.model, parameters=sum(p.numel() for p in model.parameters()),
        operators=report.counts(), dropout_sites=len(sites), batch_norm_layers=len(batch_norm_layers(model)),
    )


def check_models(
    config: RunConfig, console: Console, *, steps: int = 20, cache_dir: Path = Path(".mjfl-cache") / "programs",
    memory_mb: float | None = None,
) -> list[ModelCheck]:
    """The whole check (module docstring); prints a table per job, raises `UserError` when one fails."""
    from mjfl.jobs.export import cached_program, planned_memory
    from mjfl.jobs.models import initial_weights
    from mjfl.jobs.parity import teacher_forced
    from mjfl.jobs.trainers import ExecuTorchTrainer, TorchTrainer

    results = []
    for m, job in enumerate(config.jobs):
        console.print(f"[bold]{job.name}[/]: {job.model}")
        with logs.native_output():
            data = _data(config, m, job)
            spec = model_spec(job, data.input_shape, data.num_classes)
            check = _converted(job, spec)
        for op, became, n in check.operators:
            console.print(f"  {n:>3} x {op:<22} -> {became}", highlight=False)
        batch = job.training.batch_size
        console.print(f"  exporting for batches up to {batch} (cached after the first time) ...")
        with logs.native_output():
            path, _ = cached_program(spec, cache_dir, max_batch=batch)
        program = path.read_bytes()
        check.program_bytes = len(program)
        check.planned_memory_bytes = planned_memory(program)
        need_mb = (check.program_bytes + check.planned_memory_bytes) / 1e6
        console.print(f"  {check.parameters:,} parameters; program {check.program_bytes / 1e6:.1f} MB, "
                      f"planned memory {check.planned_memory_bytes / 1e6:.1f} MB", highlight=False)
        if memory_mb is not None and need_mb > memory_mb:
            check.problems.append(f"needs {need_mb:.1f} MB, the smallest device has {memory_mb:g} MB")
        x, y = data.train_x, data.train_y
        weights = initial_weights(spec, seeds.integer(config.seed, Purpose.INITIAL_WEIGHTS, m))
        with logs.native_output():
            from mjfl.jobs.base import LocalTraining

            timing = LocalTraining(epochs=1, batch_size=batch, lr=job.training.lr, momentum=job.training.momentum)
            n = min(len(x), batch * 8)
            et = ExecuTorchTrainer(program, spec).train(weights, x[:n], y[:n], timing, seed=0).step_times_s[1:]
            eager = TorchTrainer(spec, device="cpu").train(weights, x[:n], y[:n], timing, seed=0).step_times_s[1:]
            check.executorch_step_ms = round(statistics.median(et) * 1e3, 3) if et else 0.0
            check.eager_step_ms = round(statistics.median(eager) * 1e3, 3) if eager else 0.0
            parity = teacher_forced(spec, program, weights, x, y, steps=steps, batch=min(batch, 16))
        check.parity, check.parity_ok = parity.summary(), parity.ok
        console.print(f"  step at batch {batch}: ExecuTorch {check.executorch_step_ms:.2f} ms, "
                      f"eager {check.eager_step_ms:.2f} ms", highlight=False)
        mark = "[green]ok[/]" if parity.ok else "[red]FAILED[/]"
        console.print(f"  parity {mark}: {parity.summary()}", highlight=False)
        if not parity.ok:
            check.problems.append(f"parity: {parity.summary()}")
        results.append(check)
    bad = [f"{c.job}: {'; '.join(c.problems)}" for c in results if c.problems]
    if bad:
        raise UserError("models check failed: " + " | ".join(bad))
    console.print(f"[green]{len(results)} model(s) ok[/]")
    return results
