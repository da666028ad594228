"""Meta-Greedy scheduling (Algorithm 4): every member proposes a plan, the selector's cost picks one.

Each round every member plans in the round's context as it is (line 3), so
each plans with its own method's objective; the selector prices the
proposals and the least cost wins (line 4), ties going to the member listed
first. Every member observes every executed round, whoever proposed it, so
learning members (BODS, RLDS) keep learning.

The selectors, one class each (docs/cost-model.md, "Meta-Greedy"):

* :class:`ReCostSelector`, the paper's (``meta-greedy-paper``): ReCost,
  Formulas 12-13, ``alpha*T + beta*Omega(r)*F``, a fairness weight that
  grows with the round.
* :class:`ReturnSelector` (``selector = "return"``): the plan's
  share of TotalCost summed over the next H rounds,
  ``alpha*T + beta*H*(F(V) - F(no plan))``. The variance a plan adds stays
  in every later round's TotalCost (Formula 8) while its round time is paid
  once, so with H = the rounds the job's objective still charges this is
  what the objective charges the plan: the rounds left in its budget for a
  job without a target (judged by its summed TotalCost), 1 for a job with a
  target (judged by its time to target, which each round's least TotalCost
  shortens most: docs/cost-model.md, "A plan's return").
* :class:`LearnedSelector`, mjfl's default (``meta-greedy``, chosen on the
  held-out set's pilot seeds: docs/results.md): for a job with a target, the fast plan (the
  least expected round time per learning share, fairness weight 0) while
  the job is on course for its target, the return while it is not. Fairness
  is bought where fast rounds stop buying progress fast enough to reach the
  target in time. A job without a target keeps the return.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from mjfl.schedulers.base import (
    Decision,
    Objective,
    Plan,
    PlanContext,
    Resumable,
    RoundOutcome,
    Scheduler,
    Stateless,
    resumable,
)
from mjfl.schedulers.cost import Horizon, check_horizon, cost_model, omega, return_horizon
from mjfl.schedulers.target_time import Forecast, forecast, forecasts


@dataclass(frozen=True)
class Prices:
    """A selector's cost of each proposed plan (the least wins) and the weight it put on fairness.

    ``fairness_weight`` multiplies a plan's data fairness (Formula 5,
    normalised) in its cost: beta*Omega(r) under ReCost, beta*H under the
    return, 0 for the fast plan; it says what a selector weighed, whichever
    selector it is.
    """

    costs: NDArray[np.float64]
    fairness_weight: float


class Selector(Resumable, Protocol):
    """How Meta-Greedy prices its members' plans (Algorithm 4 line 4) and learns from each round."""

    def price(self, ctx: PlanContext, plans: NDArray[np.intp]) -> Prices:
        """The cost of each plan (rows of device indices) in ``ctx``'s round."""
        ...

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        """The outcome of the round planned from ``ctx``."""
        ...


@dataclass(frozen=True)
class Choice:
    """One Meta-Greedy decision: each member's plan, its cost under the selector, the winner, the fairness weight."""

    round: int
    winner: str
    plans: dict[str, Plan]
    costs: dict[str, float]
    fairness_weight: float


class MetaGreedyScheduler:
    """Algorithm 4: ask each member for a plan (line 3), keep the cheapest under the selector (line 4).

    The returned Decision names the winner and every member's cost under the
    selector (ReCost, the paper's, by default); ``choices`` keeps each
    round's decision.
    """

    def __init__(self, members: Sequence[Scheduler], selector: Selector | None = None, *, name: str = "meta-greedy") -> None:
        if not members:
            raise ValueError("meta-greedy needs at least one member")
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError(f"meta-greedy members must differ: {names}")
        self.members = list(members)
        self.selector: Selector = ReCostSelector() if selector is None else selector
        self.name = name
        self.choices: list[Choice] = []

    def plan(self, ctx: PlanContext) -> Decision:
        plans = {member.name: member.plan(ctx).plan for member in self.members}
        prices = self.selector.price(ctx, np.asarray(list(plans.values()), dtype=np.intp))
        cheapest = plans[list(plans)[int(np.argmin(prices.costs))]]
        # The first member that proposed it: the same plan's cost can differ in its last bits by its row.
        winner = next(name for name, plan in plans.items() if plan == cheapest)
        costs = dict(zip(plans, map(float, prices.costs)))
        self.choices.append(Choice(ctx.round, winner, plans, costs, prices.fairness_weight))
        return Decision(plans[winner], chosen_by=winner, candidates=costs)

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        self.selector.observe(ctx, outcome)
        for member in self.members:
            member.observe(ctx, outcome)

    def wins(self) -> dict[str, int]:
        """How often each member won so far."""
        counts = {member.name: 0 for member in self.members}
        for choice in self.choices:
            counts[choice.winner] += 1
        return counts

    def state(self) -> dict[str, Any]:
        """Each member's state and the selector's (``choices`` are the run database's to keep)."""
        members = {m.name: resumable(m).state() for m in self.members}
        return {"members": members, "selector": self.selector.state()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        saved, members = state["members"], [m.name for m in self.members]
        if list(saved) != members:
            raise ValueError(f"the saved members {list(saved)} are not this Meta-Greedy's {members}")
        for member in self.members:
            resumable(member).load_state(saved[member.name])
        self.selector.load_state(state["selector"])


class ReCostSelector(Stateless):
    """The paper's selector: ReCost, ``alpha*T + beta*Omega(r)*F`` (Formulas 12-13)."""

    def price(self, ctx: PlanContext, plans: NDArray[np.intp]) -> Prices:
        model = cost_model(ctx)
        return Prices(model.recost(plans), model.beta * omega(ctx.round, ctx.weights.omega))


class ReturnSelector(Stateless):
    """The plan's share of TotalCost over the next ``horizon`` rounds (``"auto"``: those the job's objective charges)."""

    def __init__(self, horizon: Horizon = "auto") -> None:
        check_horizon(horizon, "meta-greedy")
        self.horizon = horizon

    def horizon_for(self, ctx: PlanContext) -> float:
        """H in ``ctx``'s round (``cost.return_horizon``)."""
        return return_horizon(ctx, self.horizon)

    def price(self, ctx: PlanContext, plans: NDArray[np.intp]) -> Prices:
        model, horizon = cost_model(ctx), self.horizon_for(ctx)
        return Prices(model.marginal(plans, horizon=horizon), model.beta * horizon)


class LearnedSelector:
    """Fast plans while a job is on course for its target; the return while it is not.

    The job's progress is its test accuracy, or, for a job whose only target
    is a loss, its test loss (lower is better). The fast plan (``alpha*T``,
    fairness weight 0) runs unless one of two signs says fast rounds have
    stopped buying progress fast enough, then the return (:class:`ReturnSelector`
    over ``horizon``):

    * a plateau: ``patience`` rounds in a row without a new best;
    * off pace (with ``pace`` set and the job's round limit known): at the
      rate the best rose over the last ``window`` rounds, the target would
      take more than ``pace`` times the rounds left in the job's limit, so
      small new bests do not hold the fast plan when they are too small.

    Either sign lifts as soon as it no longer holds, so a fair round that
    restores the pace hands the next one back to the fast plan. Rounds
    without a measured progress change nothing; a diverged (NaN) one is no
    new best. A job without a target is judged by its summed TotalCost and
    always gets the return.
    """

    def __init__(self, horizon: Horizon = "auto", *, patience: int = 3, pace: float | None = 0.6, window: int = 4) -> None:
        if patience < 1:
            raise ValueError("meta-greedy: patience >= 1")
        if pace is not None and pace <= 0:
            raise ValueError("meta-greedy: pace > 0 (0 in the config turns it off)")
        if window < 1:
            raise ValueError("meta-greedy: window >= 1")
        self.fair = ReturnSelector(horizon)
        self.patience = patience
        self.pace = pace
        self.window = window
        self.best: float | None = None
        self.since_best = 0  # rounds since the last new best
        self.bests: list[float] = []  # the best after each round with a measured progress

    def price(self, ctx: PlanContext, plans: NDArray[np.intp]) -> Prices:
        if not self.on_course(ctx.round, ctx.job_model.objective):
            return self.fair.price(ctx, plans)
        model = cost_model(ctx)
        return Prices(model.alpha * model.learning_time(plans), 0.0)

    def on_course(self, round_: int, objective: Objective) -> bool:
        """Whether ``round_`` takes the fast plan: the job has a target, no plateau, and is not off pace."""
        return objective.has_target and self.since_best < self.patience and not self.off_pace(round_, objective)

    def off_pace(self, round_: int, objective: Objective) -> bool:
        """Whether the target would take more than ``pace`` of the rounds left at the recent rise of the best."""
        target = _progress(objective, objective.accuracy, objective.loss)
        if self.pace is None or target is None or objective.rounds is None or self.best is None:
            return False
        if len(self.bests) <= self.window:
            return False  # too early to tell a pace
        gap = target - self.best
        rise = (self.bests[-1] - self.bests[-1 - self.window]) / self.window  # per round, recently
        rounds_needed = math.inf if rise <= 0 else gap / rise
        return gap > 0 and rounds_needed > self.pace * (objective.rounds - round_ + 1)

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        value = _progress(ctx.job_model.objective, outcome.accuracy, outcome.loss)
        if value is None:
            return
        if not math.isnan(value) and (self.best is None or value > self.best):
            self.best, self.since_best = value, 0
        else:
            self.since_best += 1
        if self.best is not None:
            self.bests.append(self.best)

    def state(self) -> dict[str, Any]:
        return {"best": self.best, "since_best": self.since_best, "bests": list(self.bests)}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.best, self.since_best, self.bests = state["best"], int(state["since_best"]), list(state["bests"])


def _progress(objective: Objective, accuracy: float | None, loss: float | None) -> float | None:
    """Progress toward the job's target on one scale, higher is better: the accuracy, or minus the loss
    for a job whose only target is a loss."""
    if objective.accuracy is None and objective.loss is not None:
        return None if loss is None else -loss
    return accuracy


FAST, FAIR = "fast", "fair"


class TimeToTargetSelector:
    """Each round the kind of plan, fast or fair, with the least expected time to the job's target.

    Two kinds of plan compete: the fast plan (the least expected round time
    per learning share, fairness weight 0: usually Greedy's) and the fair one
    (the return, :class:`ReturnSelector` over ``horizon``: usually
    Genetic's). After each round the selector keeps the job's progress (its
    accuracy, or minus its loss for a job whose only target is a loss) with
    the kind that planned it. Over the last ``window`` rounds a line with
    one level per kind and one slope, and the scatter around it, forecast
    each kind's expected rounds to the target (``target_time.forecasts``: a
    miss within the rounds left is charged ``miss_rounds`` times them more);
    times its plan's expected round time this round, that is its expected
    time to target. The rules, in order:

    * the first ``warmup`` rounds are fast (every plan starts from the same
      untrained model, whose accuracy says nothing yet);
    * fair while the fast plan would miss the target with probability over
      ``max_miss``: a miss costs more than any round, and only fairness
      changes which data the model learns from;
    * fair where both kinds would more likely miss than not;
    * otherwise the kind with the least expected time to target;
    * a probe: while the chosen kind's forecast exceeds ``pace`` times the
      rounds left, the other kind plans one round if it has not in the last
      ``refresh`` rounds (or ever), so that neither is judged on old rounds
      alone.

    A kind absent from the window is forecast from its own last values. A
    job with no round limit counts ``rounds`` rounds left. A job without a
    target is judged by its summed TotalCost and always gets the return.
    """

    def __init__(
        self, horizon: Horizon = "auto", *, window: int = 8, warmup: int = 3, max_miss: float = 0.3,
        pace: float = 0.6, refresh: int = 6, noise: float = 0.05, miss_rounds: float = 1.0, rounds: int = 50,
    ) -> None:
        if window < 1 or warmup < 0 or refresh < 1 or rounds < 1:
            raise ValueError("meta-greedy: window, refresh and rounds >= 1, warmup >= 0")
        if not 0 <= max_miss <= 1 or pace <= 0 or noise <= 0 or miss_rounds < 0:
            raise ValueError("meta-greedy: max_miss in [0, 1], pace and noise > 0, miss_rounds >= 0")
        self.fair = ReturnSelector(horizon)
        self.window, self.warmup, self.max_miss, self.pace, self.refresh = window, warmup, max_miss, pace, refresh
        self.noise, self.miss_rounds, self.rounds = noise, miss_rounds, rounds
        self.history: list[tuple[str, float]] = []  # (kind, progress) of every round observed, oldest first
        self.last: dict[str, int] = {}  # the last round each kind planned
        self.planned: dict[int, str] = {}  # the kind that planned each round not yet observed

    def price(self, ctx: PlanContext, plans: NDArray[np.intp]) -> Prices:
        objective = ctx.job_model.objective
        fair = self.fair.price(ctx, plans)
        if not objective.has_target:
            return fair
        model = cost_model(ctx)
        times = model.learning_time(plans)
        kind = self.choose(ctx.round, objective, {FAST: float(times.min()), FAIR: float(times[np.argmin(fair.costs)])})
        self.planned[ctx.round], self.last[kind] = kind, ctx.round
        return Prices(model.alpha * times, 0.0) if kind == FAST else fair

    def choose(self, round_: int, objective: Objective, times: Mapping[str, float]) -> str:
        """The kind of plan for ``round_``, given each kind's expected round time (``times``)."""
        target = _progress(objective, objective.accuracy, objective.loss)
        if round_ <= self.warmup or target is None or not self.history:
            return FAST
        left = objective.rounds_left(round_) or self.rounds
        expected = self.expected_rounds(target, left)
        if FAST not in expected:
            return FAST
        if expected[FAST].miss > self.max_miss or all(f.miss > 0.5 for f in expected.values()):
            kind = FAIR
        else:
            kind = min(expected, key=lambda k: expected[k].rounds * times[k])
        other = FAIR if kind == FAST else FAST
        stale = round_ - self.last.get(other, -self.refresh) >= self.refresh
        if kind in expected and expected[kind].rounds > self.pace * left and stale:
            return other
        return kind

    def expected_rounds(self, target: float, left: int) -> dict[str, Forecast]:
        """Each kind's forecast: from the last ``window`` rounds, or its own last values where absent from them."""
        options = {"noise": self.noise, "miss_rounds": self.miss_rounds}
        expected = forecasts(self.history[-self.window:], target, left, **options)
        for kind in (FAST, FAIR):
            own = [value for k, value in self.history if k == kind][-self.window:]
            if own and kind not in expected:
                expected[kind] = forecast(own, target, left, **options)
        return expected

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        kind = self.planned.pop(outcome.round, None)
        value = _progress(ctx.job_model.objective, outcome.accuracy, outcome.loss)
        if kind is not None and value is not None and not math.isnan(value):
            self.history.append((kind, value))

    def state(self) -> dict[str, Any]:
        return {
            "history": [[kind, value] for kind, value in self.history],
            "last": dict(self.last),
            "planned": {str(r): kind for r, kind in self.planned.items()},
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.history = [(str(kind), float(value)) for kind, value in state["history"]]
        self.last = {kind: int(r) for kind, r in state["last"].items()}
        self.planned = {int(r): kind for r, kind in state["planned"].items()}
