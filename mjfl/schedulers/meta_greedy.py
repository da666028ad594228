"""Meta-Greedy scheduling (Algorithm 4): every member proposes, ReCost picks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mjfl.schedulers.base import Plan, PlanContext, RoundOutcome, Scheduler


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
    from plans they did not win. ``choices`` records each round's decision.
    """

    name = "meta-greedy"

    def __init__(self, members: Sequence[Scheduler]) -> None:
        if not members:
            raise ValueError("meta-greedy needs at least one member")
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError(f"meta-greedy members must differ: {names}")
        self.members = list(members)
        self.choices: list[Choice] = []

    def plan(self, ctx: PlanContext) -> Plan:
        plans = {member.name: member.plan(ctx) for member in self.members}
        costs = ctx.costs.recost(np.asarray(list(plans.values()), dtype=np.intp))
        winner = list(plans)[int(np.argmin(costs))]
        self.choices.append(Choice(ctx.round, winner, plans, dict(zip(plans, map(float, costs)))))
        return plans[winner]

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        for member in self.members:
            member.observe(ctx, outcome)

    def wins(self) -> dict[str, int]:
        """How often each member won so far."""
        counts = {member.name: 0 for member in self.members}
        for choice in self.choices:
            counts[choice.winner] += 1
        return counts
