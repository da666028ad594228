"""Meta-Greedy scheduling (Algorithm 4): every member proposes, the selector's cost picks.

Two selectors (docs/cost-model.md compares them):

* ``recost``, the paper's (Formulas 12-13): ``alpha*T + beta*Omega(r)*F``, a
  fairness weight that grows with the round. ``meta-greedy-paper`` is
  Algorithm 4 exactly: this selector, members planning with their own objectives.
* ``return`` (``meta-greedy``'s): the plan's share of TotalCost summed over
  the next ``horizon`` rounds, ``alpha*T + beta*H*(F(V) - F(no plan))``. The
  variance a plan adds stays in every later round's TotalCost while its round
  time is paid once, so this is what a run's summed TotalCost charges the
  plan; it is also what RLDS learns to minimise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mjfl.schedulers.base import CostWeights, Decision, Plan, PlanContext, RoundOutcome, Scheduler
from mjfl.schedulers.cost import cost_model, omega


@dataclass(frozen=True)
class Choice:
    """One Meta-Greedy decision: every member's plan and ReCost, and the winner."""

    round: int
    winner: str
    plans: dict[str, Plan]
    recost: dict[str, float]


class MetaGreedyScheduler:
    """Algorithm 4: ask each member for a plan (line 3), keep the cheapest under the selector (line 4).

    Ties go to the member listed first. Every member observes every executed
    round, whoever proposed it, so learning members (BODS, RLDS) keep learning
    (RLDS from its own plan of the round, BODS from the plan that ran). The
    returned Decision names the winner and every member's selector cost;
    ``choices`` keeps each round's decision.
    """

    def __init__(
        self,
        members: Sequence[Scheduler],
        *,
        selector: Literal["recost", "return"] = "recost",
        horizon: float = 10.0,
        shared_objective: bool = False,
        name: str = "meta-greedy",
    ) -> None:
        if not members:
            raise ValueError("meta-greedy needs at least one member")
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError(f"meta-greedy members must differ: {names}")
        if selector not in ("recost", "return") or horizon < 1:
            raise ValueError("meta-greedy: selector is 'recost' or 'return', horizon >= 1")
        if shared_objective and selector != "recost":
            raise ValueError("meta-greedy: shared_objective shares ReCost's weights, so it needs selector 'recost'")
        self.members = list(members)
        self.selector = selector
        self.horizon = horizon
        self.shared_objective = shared_objective
        self.name = name
        self.choices: list[Choice] = []

    def member_context(self, ctx: PlanContext) -> PlanContext:
        """The context members plan in.

        Algorithm 4 (the default): ``ctx`` as is, so each member plans with its
        own method's objective (TotalCost, fixed beta) and only the selector
        weighs fairness by Omega(r). With ``shared_objective=True`` members plan
        with ReCost's weights (beta * Omega(r) in place of beta): the
        cost-minimising members (Genetic, SA, BODS, RLDS) then search for the
        plan the selector will judge best, and Meta-Greedy becomes mostly the
        best of them minimising ReCost (docs/cost-model.md compares the two).
        """
        if not self.shared_objective:
            return ctx
        w = ctx.weights
        weights = CostWeights(w.alpha, w.beta * omega(ctx.round, w.omega), w.omega)
        return dataclasses.replace(ctx, weights=weights)

    def plan(self, ctx: PlanContext) -> Decision:
        inner = self.member_context(ctx)
        plans = {member.name: member.plan(inner).plan for member in self.members}
        costs = self.costs(ctx, np.asarray(list(plans.values()), dtype=np.intp))
        winner = list(plans)[int(np.argmin(costs))]
        recost = dict(zip(plans, map(float, costs)))
        self.choices.append(Choice(ctx.round, winner, plans, recost))
        return Decision(plans[winner], chosen_by=winner, candidates=recost)

    def costs(self, ctx: PlanContext, plans: np.ndarray) -> np.ndarray:
        """The selector's cost of each plan (rows of device indices)."""
        model = cost_model(ctx)
        if self.selector == "recost":
            return model.recost(plans)
        return model.marginal(plans, horizon=self.horizon)

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        inner = self.member_context(ctx)
        for member in self.members:
            member.observe(inner, outcome)

    def wins(self) -> dict[str, int]:
        """How often each member won so far."""
        counts = {member.name: 0 for member in self.members}
        for choice in self.choices:
            counts[choice.winner] += 1
        return counts
