"""`mjfl bench schedulers`: plan latency and plan cost of every scheduler.

For each fleet size, a synthetic heterogeneous fleet (``mjfl.schedulers.synthetic``) with
``jobs`` jobs is driven for ``rounds`` rounds on the cost model, one scheduler
instance per job, and every ``plan`` call is timed: one call plans one job's
round while the other jobs' plans are in flight. ``mean_cost`` is the mean
TotalCost (Formula 8, expected round time) of the plans a method chose, so
methods can be compared on quality as well as speed. Learning methods pay for
their first call (RLDS pre-trains on it) inside these figures. For
Meta-Greedy, ``wins`` is the share of its decisions each member's plan won;
every member's own row repeats its share.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from mjfl import seeds
from mjfl.bench import output
from mjfl.errors import UserError
from mjfl.schedulers.base import Plan, PlanContext
from mjfl.schedulers.cost import cost_model
from mjfl.schedulers.meta_greedy import MetaGreedyScheduler
from mjfl.schedulers.registry import METHODS, make_scheduler
from mjfl.schedulers.synthetic import drive, synthetic_fleet, synthetic_jobs
from mjfl.seeds import Purpose

Row = dict[str, Any]


def measure(
    method: str, devices: int, jobs: int, rounds: int, fraction: float, seed: int,
    options: dict[str, dict[str, Any]] | None = None, members: Sequence[str] | None = None,
) -> Row:
    """One method on one fleet size: latency percentiles, mean TotalCost (and Meta-Greedy's wins).

    ``options`` as in the config's ``[scheduler.options.<method>]``; ``members``
    as its ``scheduler.members`` (None: the method's own).
    """
    rng = np.random.default_rng(seed)
    fleet = synthetic_fleet(devices, rng)
    # The jobs run `rounds` rounds and have no target: the run's objective is the
    # paper's, TotalCost summed over the rounds, which is what mean_cost measures.
    job_models = synthetic_jobs(jobs, devices, rng, fraction=fraction, budget=rounds)
    schedulers = [make_scheduler(method, seed=seeds.integer(seed, Purpose.SCHEDULER, m), options=options, members=members) for m in range(jobs)]
    latencies: list[float] = []
    costs: list[float] = []

    def record(ctx: PlanContext, plan: Plan, seconds: float) -> None:
        latencies.append(seconds)
        costs.append(float(cost_model(ctx).total(np.asarray(plan))))

    drive(schedulers, fleet, job_models, rounds, rng, timer=time.perf_counter, on_plan=record)
    ms = np.asarray(latencies) * 1e3
    row: Row = {
        "method": method,
        "devices": devices,
        "jobs": jobs,
        "median_ms": round(float(np.median(ms)), 3),
        "p95_ms": round(float(np.percentile(ms, 95)), 3),
        "mean_cost": round(float(np.mean(costs)), 4),
    }
    metas = [s for s in schedulers if isinstance(s, MetaGreedyScheduler)]
    if metas:
        wins = Counter(choice.winner for meta in metas for choice in meta.choices)
        decided = sum(wins.values())
        row["wins"] = {m.name: round(wins[m.name] / decided, 4) for m in metas[0].members}
    return row


def run_schedulers_bench(
    *,
    devices: Sequence[int],
    jobs: int,
    rounds: int,
    fraction: float = 0.1,
    methods: Sequence[str] | None = None,
    seed: int = 0,
    json_path: Path | None = None,
    console: Console | None = None,
) -> dict[str, list[Row]]:
    """Measure every method on every fleet size (module docstring); print a table, write ``json_path``."""
    methods = list(methods or METHODS)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UserError(f"--methods: unknown {unknown}; choose from {list(METHODS)}")
    if jobs < 1 or rounds < 1 or any(d < 2 for d in devices):
        raise UserError("--jobs and --rounds must be >= 1 and every --fleet-sizes >= 2")
    console = console or Console(stderr=True)
    results = []
    with console.status("") as status:
        for size in devices:
            for method in methods:
                status.update(f"{method} on {size} devices ...")
                results.append(measure(method, size, jobs, rounds, fraction, seed))
    for row in results:  # each member's share of Meta-Greedy's decisions on its fleet size
        meta = next((r for r in results if r["method"] == "meta-greedy" and r["devices"] == row["devices"]), None)
        if meta is not None and row["method"] in meta["wins"]:
            row["wins"] = meta["wins"][row["method"]]
    console.print(output.table(
        f"Plans ({jobs} jobs, {rounds} rounds, C={fraction})",
        ("method", "devices", "median ms", "p95 ms", "mean TotalCost", "Meta-Greedy wins"),
        (
            (
                row["method"], str(row["devices"]), f"{row['median_ms']:.2f}", f"{row['p95_ms']:.2f}",
                f"{row['mean_cost']:.3f}", f"{row['wins']:.0%}" if isinstance(row.get("wins"), float) else "",
            )
            for row in results
        ),
    ))
    report = {"results": results}
    output.write(report, json_path, console)
    return report
