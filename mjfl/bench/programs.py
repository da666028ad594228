"""`mjfl bench programs`: each zoo model's training program at the paper's jobs: size and planned memory.

For each zoo model, the program a run exports for the paper's job that
trains it (input shape, classes and mini-batch size of the paper's Tables 2
and 3, as examples/paper-group-a.toml and paper-group-b.toml set them up):
its .pte size and the memory the runtime plans for it
(`mjfl.jobs.export.planned_memory`, read from the program, nothing run), at
the job's batch size and at `MAX_BATCH` (the bound every program had before
runs exported for the job's batch size). Programs come from the run's cache
(`cached_program`), so a later run of the same jobs exports nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl import logs
from mjfl.bench import output
from mjfl.errors import UserError
from mjfl.jobs.base import MAX_BATCH, MODEL_NAMES, ModelSpec

__all__ = ["PAPER_JOBS", "PaperJob", "ProgramRow", "run_programs_bench"]


@dataclass(frozen=True)
class PaperJob:
    """The paper's job that trains a zoo model: its data's input shape and classes, its mini-batch size."""

    data: str
    input_shape: tuple[int, int, int]
    num_classes: int
    batch_size: int


# Tables 2 and 3 of the paper; the zoo's stand-ins for VGG-16 and ResNet-18
# (vgg6, resnet13) and the CNN-A of its IID set-up (cnn-a-iid) train the
# same data as the paper's.
PAPER_JOBS: dict[str, PaperJob] = {
    "lenet5": PaperJob("EMNIST digits (A)", (1, 28, 28), 10, 64),
    "cnn-a-iid": PaperJob("EMNIST letters (A, IID)", (1, 28, 28), 26, 10),
    "cnn-a-noniid": PaperJob("EMNIST letters (A)", (1, 28, 28), 26, 10),
    "cnn-b": PaperJob("Fashion-MNIST (B)", (1, 28, 28), 10, 10),
    "vgg6": PaperJob("CIFAR-10 (A)", (3, 32, 32), 10, 30),
    "resnet13": PaperJob("CIFAR-10 (B)", (3, 32, 32), 10, 30),
    "alexnet": PaperJob("MNIST (B)", (1, 28, 28), 10, 64),
}


@dataclass(frozen=True)
class ProgramRow:
    """One model's program at one batch bound."""

    model: str
    data: str
    input_shape: tuple[int, int, int]
    num_classes: int
    max_batch: int
    program_bytes: int
    planned_bytes: int


def run_programs_bench(
    *,
    models: Sequence[str] | None = None,
    cache_dir: str | Path = Path(".mjfl-cache") / "programs",
    json_path: Path | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Measure every model's program (module docstring); print a table, write ``json_path``.

    Returns the JSON document: {"results": [...], "settings": {...}}, a row
    per model and bound (the paper's batch size, then ``MAX_BATCH``).
    """
    names = list(models) if models else list(MODEL_NAMES)
    unknown = [m for m in names if m not in MODEL_NAMES]
    if unknown:
        raise UserError(f"--models: unknown {', '.join(unknown)}; known: {', '.join(MODEL_NAMES)}")
    console = console or Console(stderr=True)
    with logs.native_output():  # importing ExecuTorch's exporter prints
        from mjfl.jobs.export import cached_program, planned_memory

    rows: list[ProgramRow] = []
    for name in names:
        job = PAPER_JOBS[name]
        spec = ModelSpec(name, job.input_shape, job.num_classes)
        for bound in (job.batch_size, MAX_BATCH):
            console.print(f"[dim]{name}, batches up to {bound}: exporting (cached after the first run) ...[/]")
            with logs.native_output():
                path, _ = cached_program(spec, cache_dir, max_batch=bound)
            data = path.read_bytes()
            rows.append(ProgramRow(name, job.data, job.input_shape, job.num_classes, bound, len(data), planned_memory(data)))

    def mb(n: int) -> str:
        return f"{n / 1e6:.1f}"

    console.print(output.table(
        f"Training programs at the paper's jobs (MB = 10^6 bytes; planned memory also at batch {MAX_BATCH})",
        ("model", "data", "input", "batch", ".pte MB", "planned MB", f"planned MB at {MAX_BATCH}"),
        (
            (
                job.model, job.data, "x".join(map(str, job.input_shape)), str(job.max_batch),
                mb(job.program_bytes), mb(job.planned_bytes), mb(full.planned_bytes),
            )
            for job, full in zip(rows[::2], rows[1::2])
        ),
        left=("data",),
    ))
    report = {
        "results": [asdict(r) for r in rows],
        "settings": {"max_batch": MAX_BATCH, "versions": _versions()},
    }
    output.write(report, json_path, console)
    return report


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {package: version(package) for package in ("torch", "executorch")}
