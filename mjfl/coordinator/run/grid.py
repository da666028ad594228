"""A study's grid of simulations: one run per (configuration, seed, method), in parallel, each run once.

Each run goes into its own folder, ``OUT/<variant>/seed-<s>/<method>``; one
whose ``summary.json`` is there is done and not run again, so an interrupted
study continues where it stopped, and a study that later asks for another
method on a seed runs that method alone. The methods of one (variant, seed)
run one after another in one process, on one pool of training workers (they
meet the same fleet and data: ``SimulatedDevices``); different (variant,
seed)s run in parallel, ``workers`` processes at once (default: one per
core; each also keeps one training worker of its own busy part of the time).

``outcome`` reads a finished run's group time, or its budget's time when a
job missed (``results.comparison``'s rule).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import multiprocessing
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import (
    FIRST_COMPLETED,
    Executor,
    Future,
    ProcessPoolExecutor,
    ThreadPoolExecutor,
    wait,
)
from pathlib import Path

from rich.console import Console

from mjfl.coordinator.config import RunConfig
from mjfl.coordinator.results.comparison import Outcome
from mjfl.coordinator.results.report import SUMMARY_FILE
from mjfl.coordinator.results.tables import NOT_REACHED
from mjfl.coordinator.run.driver import Driver, Output
from mjfl.coordinator.run.simulated import SimulatedDevices

__all__ = ["Cell", "done", "outcome", "run_cells"]


@dataclasses.dataclass(frozen=True)
class Cell:
    """One (variant, seed) of a study: its configuration (seeded), its folder, the methods it should have run."""

    label: str  # how progress lines name it
    config: RunConfig
    folder: Path
    methods: tuple[str, ...]

    def missing(self) -> tuple[str, ...]:
        return tuple(m for m in self.methods if not done(self.folder / m))


def done(folder: Path) -> bool:
    """Whether a method's run in ``folder`` finished (its summary written)."""
    return (folder / SUMMARY_FILE).is_file()


def outcome(folder: Path, method: str) -> Outcome:
    """A finished run's group time to target; when a job missed, the run's time at its end, the jobs named."""
    summary = json.loads((folder / SUMMARY_FILE).read_text())["methods"][method]
    missed = tuple(job for job, figures in summary["jobs"].items() if figures["time_to_target_s"] is None)
    if not missed:
        return Outcome(float(summary["total_time_s"]))
    with (folder / "rounds.csv").open(newline="") as rows:
        end = max(float(row["ended_s"]) for row in csv.DictReader(rows) if row["method"] == method)
    return Outcome(end, missed)


def run_cells(cells: Sequence[Cell], *, workers: int | None, console: Console) -> None:
    """Run every cell's missing methods, ``workers`` cells at once (1: here, in this process)."""
    todo = [c for c in cells if c.missing()]
    if len(todo) < len(cells):
        console.print(f"{len(cells) - len(todo)} of {len(cells)} (variant, seed)s done before", highlight=False)
    parallel = min(workers or os.cpu_count() or 1, len(todo))
    if parallel <= 1:
        for k, cell in enumerate(todo, start=1):
            with console.status(f"[{k}/{len(todo)}] {cell.label}: {', '.join(cell.missing())} ..."):
                times = simulate(cell.config, cell.folder, cell.missing())
            _progress(console, k, len(todo), cell, times)
        return
    # spawn: a forked child would inherit this process's threads (the console's) mid-state.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=parallel, mp_context=context, initializer=_one_thread) as pool:
        running: dict[Future[dict[str, float | None]], Cell] = {
            pool.submit(simulate, c.config, c.folder, c.missing()): c for c in todo
        }
        finished = 0
        with console.status(f"{len(todo)} (variant, seed)s, {parallel} at a time ..."):
            while running:
                ready, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in ready:
                    finished += 1
                    _progress(console, finished, len(todo), running.pop(future), future.result())


# A parallel simulation's training: a thread of its own process, kept for every cell it runs (a process
# pool of its own per cell would start, and import torch, once a cell; the cores are shared out already).
_TRAINING: list[Executor] = []


def _one_thread() -> None:
    """Each parallel simulation computes on one thread: the cores are shared out between them already.

    Not only torch's: numpy's and scipy's BLAS and OpenMP keep their own pools, whose idle threads spin
    on the other cores after each product (BODS's process, RLDS's policy): measured, a third more CPU
    time for the same results, taken from the next worker. Libraries loaded later read the variables.
    """
    import torch
    from threadpoolctl import threadpool_limits

    torch.set_num_threads(1)
    os.environ.update({name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    threadpool_limits(1)
    _TRAINING.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="training"))


def simulate(config: RunConfig, folder: Path, methods: Sequence[str]) -> dict[str, float | None]:
    """Run each of ``methods`` on ``config`` into ``folder/<method>``; their group times to target (None: missed)."""
    quiet = Console(quiet=True)  # each run's own table: `mjfl report FOLDER` prints it from the folder's files
    times: dict[str, float | None] = {}
    folder.mkdir(parents=True, exist_ok=True)
    executor = _TRAINING[0] if _TRAINING else None
    with SimulatedDevices(config, Output(folder, quiet, live=False), executor=executor) as devices:
        for method in methods:
            own = folder / method
            output = Output(own, quiet, live=False, plots=False)  # many runs: `mjfl report RUN --plots DIR` draws them
            summary = Driver(dataclasses.replace(config, out_dir=own, database=None), output).train([method], devices)
            times[method] = summary["methods"][method]["total_time_s"]
    return times


def _progress(console: Console, k: int, total: int, cell: Cell, times: Mapping[str, float | None]) -> None:
    console.print(
        f"[{k}/{total}] {cell.label}: group time to target "
        + ", ".join(f"{m} {NOT_REACHED if t is None else f'{t:.2f} s'}" for m, t in times.items()),
        highlight=False,
    )
