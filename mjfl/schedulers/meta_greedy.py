"""Meta-Greedy scheduling (Algorithm 4): every member proposes, ReCost picks."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

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
    """Algorithm 4: ask each member for a plan (line 3), keep the least ReCost (line 4).

    Ties go to the member listed first. Every member observes every executed
    round, whoever proposed it, so learning members (BODS, RLDS) keep learning
    from plans they did not win. The returned Decision names the winner and
    every member's ReCost; ``choices`` keeps each round's decision.
    """

    name = "meta-greedy"

    def __init__(self, members: Sequence[Scheduler], *, shared_objective: bool = True) -> None:
        if not members:
            raise ValueError("meta-greedy needs at least one member")
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError(f"meta-greedy members must differ: {names}")
        self.members = list(members)
        self.shared_objective = shared_objective
        self.choices: list[Choice] = []

    def member_context(self, ctx: PlanContext) -> PlanContext:
        """The context members plan in: by default with ReCost's weights.

        ReCost is Formula 2 with beta * Omega(r) in place of beta, so members
        that minimise cost (Genetic, SA, BODS, RLDS) then search for the plan
        the selector will judge best, instead of proposing plans for a fixed
        beta among which a growing fairness weight can only pick the most
        random one. With ``shared_objective=False`` members see ``ctx`` as is.
        """
        if not self.shared_objective:
            return ctx
        w = ctx.weights
        weights = CostWeights(w.alpha, w.beta * omega(ctx.round, w.omega), w.omega)
        return dataclasses.replace(ctx, weights=weights)

    def plan(self, ctx: PlanContext) -> Decision:
        inner = self.member_context(ctx)
        plans = {member.name: member.plan(inner).plan for member in self.members}
        costs = cost_model(ctx).recost(np.asarray(list(plans.values()), dtype=np.intp))
        winner = list(plans)[int(np.argmin(costs))]
        recost = dict(zip(plans, map(float, costs)))
        self.choices.append(Choice(ctx.round, winner, plans, recost))
        return Decision(plans[winner], chosen_by=winner, candidates=recost)

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
