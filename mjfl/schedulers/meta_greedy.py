"""Meta-Greedy scheduling (Algorithm 4): every member proposes, the selector's cost picks.

Selectors (docs/cost-model.md compares them):

* ``recost``, the paper's (Formulas 12-13): ``alpha*T + beta*Omega(r)*F``, a
  fairness weight that grows with the round. ``meta-greedy-paper`` is
  Algorithm 4 exactly: this selector, members planning with their own objectives.
* ``return`` (``meta-greedy``'s): the plan's share of TotalCost summed over
  the next ``horizon`` rounds, ``alpha*T + beta*H*(F(V) - F(no plan))``. The
  variance a plan adds stays in every later round's TotalCost while its round
  time is paid once, so with H = the rounds to come this is what a run's
  summed TotalCost charges the plan (RLDS learns it with the same H). With
  ``horizon = "auto"`` (the default) H follows the job's objective: a job that
  runs a fixed budget of rounds without a target is judged by its summed
  TotalCost (the paper's objective), so H = the rounds left in its budget; a
  job with a target is judged by its time to target, where buying more
  fairness than each round's TotalCost does was measured to cost more time
  than it saves rounds, so H = 1 (the least TotalCost).
* ``learned`` (an option): for a job with a target, the fast plan
  (``time``: the least expected round time per learning share, fairness
  weight 0, usually Greedy's) while the job's accuracy keeps setting new
  bests, the least TotalCost (``cost``: the return above with H = 1,
  usually Genetic's) after ``patience`` = 3 rounds without a new best,
  until one comes, or while the job is off ``pace``: at the rise of its
  best accuracy over the last 4 rounds the target would take more than
  ``pace`` (0.6) times the rounds left in its limit (:class:`PlateauSwitch`;
  the options ``patience``, ``pace`` and ``window`` set the three numbers).
  Fairness is bought where fast rounds stop buying accuracy fast enough to
  reach the target in time. A job without a target (a fixed budget, judged
  by its summed TotalCost) keeps the return.
* ``adaptive``: the return, with H chosen each round from
  ``horizons`` by what each has bought on this run: the job's accuracy gained
  per second of the rounds planned with it (a two-armed bandit with
  forgetting, :class:`RateBandit`). Until accuracy comes back it is the
  return with ``horizon``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mjfl.schedulers.base import Decision, JobModel, Plan, PlanContext, RoundOutcome, Scheduler
from mjfl.schedulers.cost import cost_model, omega, return_horizon


@dataclass(frozen=True)
class Choice:
    """One Meta-Greedy decision: every member's plan and selector cost (``recost``), the winner, the horizon used."""

    round: int
    winner: str
    plans: dict[str, Plan]
    recost: dict[str, float]
    horizon: float | None = None
    arm: str | None = None


# The learned selector's arms, the default first: the least expected time (fairness weight 0)
# and the return (the least TotalCost for a job with a target).
ARMS = ("time", "cost")


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
        selector: Literal["recost", "return", "adaptive", "learned"] = "recost",
        horizon: float | Literal["auto"] = "auto",
        horizons: Sequence[float] = (1.0, 10.0),
        forget: float = 0.7,
        shared_objective: bool = False,
        pace: float | None = 0.6,
        patience: int = 3,
        window: int = 4,
        name: str = "meta-greedy",
    ) -> None:
        if not members:
            raise ValueError("meta-greedy needs at least one member")
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError(f"meta-greedy members must differ: {names}")
        if selector not in ("recost", "return", "adaptive", "learned"):
            raise ValueError(f"meta-greedy: selector is 'recost', 'return', 'adaptive' or 'learned', not {selector!r}")
        if horizon != "auto" and not (isinstance(horizon, int | float) and not isinstance(horizon, bool) and horizon >= 1):
            raise ValueError(f"meta-greedy: horizon is 'auto' or a number of rounds >= 1, not {horizon!r}")
        if not horizons or min(horizons) < 1:
            raise ValueError("meta-greedy: horizons are numbers of rounds >= 1")
        if not 0 < forget <= 1:
            raise ValueError("meta-greedy: forget in (0, 1]")
        if shared_objective and selector != "recost":
            raise ValueError("meta-greedy: shared_objective shares ReCost's weights, so it needs selector 'recost'")
        self.members = list(members)
        self.selector = selector
        self.horizon = horizon
        self.shared_objective = shared_objective
        self.name = name
        self.choices: list[Choice] = []
        self.bandit: RateBandit | PlateauSwitch | None = None
        if selector == "adaptive":
            self.bandit = RateBandit(tuple(sorted(horizons)), forget)
        elif selector == "learned":
            self.bandit = PlateauSwitch(patience, pace=pace, window=window)

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
        weights = dataclasses.replace(w, beta=w.beta * omega(ctx.round, w.omega))
        return dataclasses.replace(ctx, weights=weights)

    def plan(self, ctx: PlanContext) -> Decision:
        inner = self.member_context(ctx)
        plans = {member.name: member.plan(inner).plan for member in self.members}
        arm = self.arm_for(ctx)
        horizon = None if arm == "time" else self.horizon_for(ctx)
        costs = self.costs(ctx, np.asarray(list(plans.values()), dtype=np.intp), horizon, fast=arm == "time")
        winner = list(plans)[int(np.argmin(costs))]
        recost = dict(zip(plans, map(float, costs)))
        self.choices.append(Choice(ctx.round, winner, plans, recost, horizon, arm))
        return Decision(plans[winner], chosen_by=winner, candidates=recost)

    def arm_for(self, ctx: PlanContext) -> str | None:
        """The learned selector's arm this round (None for the other selectors).

        A job without a target (a round budget) is judged by its summed
        TotalCost, so it keeps the return (``cost``); a job with a target by
        its time to target: fast plans, fair ones on a plateau (:class:`PlateauSwitch`).
        """
        if not isinstance(self.bandit, PlateauSwitch):
            return None
        if ctx.job_model.budget is not None:
            return "cost"
        return self.bandit.choose(ctx.round, ctx.job_model)

    def horizon_for(self, ctx: PlanContext) -> float | None:
        """The return's horizon this round (None for ReCost)."""
        if self.selector == "recost":
            return None
        if self.selector == "adaptive" and self.bandit is not None and self.bandit.informed:
            return float(self.bandit.choose(ctx.round))
        if self.horizon != "auto":
            return float(self.horizon)
        return return_horizon(ctx)

    def costs(self, ctx: PlanContext, plans: np.ndarray, horizon: float | None = None, *, fast: bool = False) -> np.ndarray:
        """The selector's cost of each plan (rows of device indices).

        ``fast``: ``alpha*T``, the expected round time per learning share
        (fairness weight 0, the learned selector's ``time`` arm); else the
        return over ``horizon``, or ReCost without one.
        """
        model = cost_model(ctx)
        if fast:
            return model.alpha * model.learning_time(plans)
        if horizon is None:
            return model.recost(plans)
        return model.marginal(plans, horizon=horizon)

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        if self.bandit is not None:
            choice = next((c for c in reversed(self.choices) if c.round == outcome.round), None)
            used = None if choice is None else (choice.arm if self.selector == "learned" else choice.horizon)
            self.bandit.observe(used, outcome)
        inner = self.member_context(ctx)
        for member in self.members:
            member.observe(inner, outcome)

    def wins(self) -> dict[str, int]:
        """How often each member won so far."""
        counts = {member.name: 0 for member in self.members}
        for choice in self.choices:
            counts[choice.winner] += 1
        return counts


class RateBandit:
    """Which arm buys accuracy fastest on this run: accuracy gained per second, per arm.

    The arms are the adaptive selector's horizons (shortest first; a
    bandit over the learned selector's ``time`` and ``cost`` was measured and
    not kept, docs/cost-model.md); the first is the default. Each
    round planned with an arm adds its accuracy gain (accuracy minus the
    previous round's) and its round time to the arm's totals; the arm's rate
    is gain over time, a ratio of sums, so that the noise of a short round's
    accuracy is not magnified by dividing it by that short time. Every new
    round multiplies all earlier totals by ``forget``, so the comparison
    follows the run (an arm not played keeps its rate). Each arm is tried
    twice first (in order); then the default arm (the fastest rounds) plans
    unless another has bought accuracy ``margin`` times faster, since a
    round's accuracy is noisy and the default's rounds are the cheap ones; a
    default that buys nothing any more (rate <= 0: a plateau) loses to any
    arm that still buys. Every ``explore``-th round tries another arm in turn,
    so that one that lost early can win back.
    """

    def __init__(self, arms: tuple[Hashable, ...], forget: float, margin: float = 3.0, explore: int = 8) -> None:
        if not arms:
            raise ValueError("meta-greedy: give at least one arm")
        if len(set(arms)) != len(arms):
            raise ValueError(f"meta-greedy: the bandit's arms must differ: {arms}")
        self.arms = tuple(arms)
        self.forget = forget
        self.margin = margin
        self.explore = explore
        self.gain = dict.fromkeys(self.arms, 0.0)
        self.seconds = dict.fromkeys(self.arms, 0.0)
        self.tried = dict.fromkeys(self.arms, 0)
        self.informed = False  # has any accuracy come back?
        self._accuracy: float | None = None

    def choose(self, round_: int) -> Hashable:
        for arm in self.arms:
            if self.tried[arm] < 2:
                return arm
        default = self.arms[0]
        best = max(self.arms, key=self.rate)
        if best != default and self.rate(best) <= self.margin * max(self.rate(default), 0.0):
            best = default
        if round_ % self.explore == 0 and len(self.arms) > 1:
            others = [a for a in self.arms if a != best]
            return others[(round_ // self.explore) % len(others)]
        return best

    def rate(self, arm: Hashable) -> float:
        """Accuracy gained per second of the rounds planned with ``arm`` (forgetting old ones)."""
        return self.gain[arm] / max(self.seconds[arm], 1e-12)

    def observe(self, arm: Hashable | None, outcome: RoundOutcome) -> None:
        if outcome.accuracy is None:
            return
        self.informed = True
        previous, self._accuracy = self._accuracy, outcome.accuracy
        if previous is None or arm is None or arm not in self.gain:
            return
        for a in self.arms:
            self.gain[a] *= self.forget
            self.seconds[a] *= self.forget
        self.gain[arm] += outcome.accuracy - previous
        self.seconds[arm] += outcome.round_time
        self.tried[arm] += 1


class PlateauSwitch:
    """Fast rounds while the job's accuracy is on course for its target; the least TotalCost when not.

    ``choose`` gives ``time`` (the fast plan) unless one of two signs says the
    fast rounds have stopped buying accuracy fast enough, then ``cost`` (the
    fair plan):

    * a plateau: ``patience`` rounds in a row without a new best accuracy;
    * off pace (with ``pace`` set and the job's target and round limit
      known): at the rate the best accuracy rose over the last ``window``
      rounds, the target would take more than ``pace`` times the rounds left
      in the job's limit. Small new bests then no longer hold the fast plan,
      the way they did on Dirichlet 0.1 (docs/cost-model.md).

    Either sign lifts as soon as it no longer holds, so a fair round that
    restores the pace hands the next one back to the fast plan. Rounds
    without accuracy change nothing.
    """

    def __init__(self, patience: int = 3, *, pace: float | None = 0.6, window: int = 4) -> None:
        if patience < 1:
            raise ValueError("meta-greedy: patience >= 1")
        if pace is not None and pace <= 0:
            raise ValueError("meta-greedy: pace > 0 (None turns it off)")
        if window < 1:
            raise ValueError("meta-greedy: window >= 1")
        self.patience = patience
        self.pace = pace
        self.window = window
        self.informed = False
        self.best: float | None = None
        self.since_best = 0  # rounds since the last new best accuracy
        self.bests: list[float] = []  # the best accuracy after each round with one

    def choose(self, round_: int, job: JobModel | None = None) -> str:
        if self.since_best >= self.patience:
            return "cost"
        return "cost" if job is not None and self.off_pace(round_, job) else "time"

    def off_pace(self, round_: int, job: JobModel) -> bool:
        """Whether the target would take more than ``pace`` of the rounds left at the recent rise of the best."""
        if self.pace is None or job.target_accuracy is None or job.max_rounds is None or self.best is None:
            return False
        if len(self.bests) <= self.window:
            return False  # too early to tell a pace
        gap = job.target_accuracy - self.best
        rise = (self.bests[-1] - self.bests[-1 - self.window]) / self.window  # per round, recently
        rounds_needed = math.inf if rise <= 0 else gap / rise
        return gap > 0 and rounds_needed > self.pace * (job.max_rounds - round_ + 1)

    def observe(self, arm: Hashable | None, outcome: RoundOutcome) -> None:
        if outcome.accuracy is None:
            return
        self.informed = True
        if self.best is None or outcome.accuracy > self.best:
            self.best, self.since_best = outcome.accuracy, 0
        else:
            self.since_best += 1
        self.bests.append(self.best)
