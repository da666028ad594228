"""Sweep: the least-used of the fastest devices, the cut between them swept for the least return.

A plan's return (``CostModel.marginal``: its round time plus the fairness it
adds, over the rounds the job's objective charges) trades two things that
pull apart: the round waits for its slowest device, and a device's share of
the fairness term grows with how often it has already trained the job
(Formula 6; the term is linear in the plan's summed frequencies). For a cut
``k``, the best plan whose devices all lie among the ``k`` fastest free ones
is, to a close approximation, the ``size`` of them used least so far: it
pays the ``k``-th device's time at most and adds the least fairness that
time allows. Sweep prices those plans for ``steps`` cuts from ``size`` (the
fastest devices: Greedy's plan) to every free device
(the least-used ones, whatever their speed) and keeps the cheapest.

A job judged by its summed TotalCost (no target) is charged exactly what
the return prices. For a job with a target the return (H = 1) only stands
in for its time to target, and pricing it harder can slow the learning:
``targets = "fastest"`` plans such a job with the first cut alone, the
fastest devices (Greedy's plan). mjfl's Meta-Greedy sets it, so Sweep
changes its plans only for jobs without a target (docs/cost-model.md,
"Sweep").

Deterministic; ties in use go to the faster device, ties in price to the
smaller cut. Speeds are per learning weight, as Greedy's
(``CostModel.learning_device_times``). Beyond the paper.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from mjfl.schedulers.base import Decision, PlanContext, Stateless, as_plan
from mjfl.schedulers.baselines import Seed, fastest
from mjfl.schedulers.cost import Horizon, check_horizon, cost_model, return_horizon

# What Sweep plans for a job with a target: the least return as for any job, or its first cut.
TARGETS = ("return", "fastest")


class SweepScheduler(Stateless):
    """Of the plans "the ``size`` least-used of the ``k`` fastest free devices", the one with the least return."""

    name = "sweep"

    def __init__(self, seed: Seed = 0, *, steps: int = 32, horizon: Horizon = "auto", targets: str = "return") -> None:
        del seed  # nothing random; the argument keeps every scheduler's signature alike
        if steps < 2:
            raise ValueError("sweep: steps >= 2 (the fastest devices and every free one)")
        if targets not in TARGETS:
            raise ValueError(f"sweep: targets is one of {', '.join(TARGETS)}, not {targets!r}")
        check_horizon(horizon, "sweep")
        self.steps = steps
        self.horizon = horizon
        self.targets = targets

    def candidates(self, ctx: PlanContext) -> NDArray[np.intp]:
        """The swept plans, one row per cut (sorted device indices), the fastest cut first."""
        model = cost_model(ctx)
        free = ctx.free_indices
        by_speed = free[np.argsort(model.learning_device_times[free], kind="stable")]
        used = ctx.frequencies[ctx.job][by_speed]
        cuts = np.unique(np.linspace(ctx.size, by_speed.size, self.steps).round().astype(np.intp))
        plans = np.empty((cuts.size, ctx.size), dtype=np.intp)
        for row, cut in enumerate(cuts):
            by_use = np.argsort(used[:cut], kind="stable")[: ctx.size]  # stable: the faster first on ties
            plans[row] = np.sort(by_speed[by_use])
        return plans

    def plan(self, ctx: PlanContext) -> Decision:
        if self.targets == "fastest" and ctx.job_model.objective.has_target:
            return Decision(fastest(ctx))  # the first cut
        plans = self.candidates(ctx)
        costs = cost_model(ctx).marginal(plans, horizon=return_horizon(ctx, self.horizon))
        return Decision(as_plan(plans[int(np.argmin(costs))]))
