"""Rounds of one job played on the cost model, each round's outcome fixed by its number alone.

So a scheduler can be stopped after any round, saved and restored, and the
rounds after it played again with exactly the outcomes the uninterrupted run
saw: what the resume tests compare. Device k fails round r when
``(k + r) % 7 == 0``; the others return with a training loss; the job's test
accuracy follows ``ACCURACY`` (rises, a plateau, rises again).
"""

from __future__ import annotations

import numpy as np

from mjfl.schedulers import round_time
from mjfl.schedulers.base import (
    Decision,
    FleetModel,
    JobModel,
    PlanContext,
    RoundOutcome,
    plan_size,
)
from mjfl.schedulers.synthetic import synthetic_fleet

DEVICES = 24
FRACTION = 0.25
ACCURACY = [0.1, 0.2, 0.3, 0.3, 0.3, 0.3, 0.35, 0.36, 0.37, 0.38, 0.5, 0.55, 0.6, 0.6, 0.6, 0.6]


def fleet() -> FleetModel:
    return synthetic_fleet(DEVICES, np.random.default_rng(5))


def samples() -> np.ndarray:
    return np.random.default_rng(6).integers(20, 201, DEVICES)


def context(fleet: FleetModel, job: JobModel, round_: int, frequencies: np.ndarray) -> PlanContext:
    free = np.ones(fleet.size, dtype=bool)
    return PlanContext(
        job=0, round=round_, fleet=fleet, jobs=(job,), free=free, frequencies=frequencies[None, :].copy(),
        current_plans=(None,), size=plan_size(job.fraction, fleet.size, fleet.size),
    )


def outcome(ctx: PlanContext, plan: tuple[int, ...]) -> RoundOutcome:
    """Round ``ctx.round``'s outcome of ``plan``: the same whenever it is played."""
    job, r = ctx.job_model, ctx.round
    shift, rate = round_time.shift_and_rate(ctx.fleet.a, ctx.fleet.mu, job.epochs, job.samples)
    times = round_time.sample(np.random.default_rng(1000 + r), shift[list(plan)], rate[list(plan)])
    failed = frozenset(k for k in plan if (k + r) % 7 == 0)
    durations = {k: float(t) for k, t in zip(plan, times) if k not in failed}
    losses = {k: 1.0 / (r + k % 5 + 1) for k in durations}
    seconds = float(times.max()) * (1.5 if failed else 1.0)
    return RoundOutcome(0, r, plan, durations, failed, seconds, accuracy=ACCURACY[r - 1], losses=losses)


def play(scheduler, fleet: FleetModel, job: JobModel, rounds: range, frequencies: np.ndarray) -> list[dict]:
    """Plan and observe ``rounds`` (``frequencies`` counts the plans so far and grows); each round's decision."""
    decisions = []
    for r in rounds:
        ctx = context(fleet, job, r, frequencies)
        decision = scheduler.plan(ctx)
        scheduler.observe(ctx, outcome(ctx, decision.plan))
        frequencies[list(decision.plan)] += 1
        decisions.append({"plan": list(decision.plan), "chosen_by": decision.chosen_by, "candidates": dict(decision.candidates)})
    return decisions


def as_recorded(decisions: list[dict], recorded: list[dict]) -> bool:
    """Whether ``decisions`` (played here) are those ``recorded`` on another machine: the same plans
    chosen by the same members, each candidate's cost equal to float rounding (machines of this
    kind round differently: AVX2 or AVX-512, Intel or AMD)."""
    if [(d["plan"], d["chosen_by"]) for d in decisions] != [(d["plan"], d["chosen_by"]) for d in recorded]:
        return False
    return all(
        d["candidates"].keys() == r["candidates"].keys()
        and all(np.isclose(d["candidates"][name], r["candidates"][name], rtol=1e-9, atol=0) for name in d["candidates"])
        for d, r in zip(decisions, recorded, strict=True)
    )


class Proposes:
    """A member of Meta-Greedy that always proposes the same plan (its selectors' tests)."""

    def __init__(self, name: str, plan: tuple[int, ...]) -> None:
        self.name, self._plan = name, plan

    def plan(self, ctx: PlanContext) -> Decision:
        return Decision(self._plan)

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        pass
