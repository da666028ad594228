"""Meta-Greedy's learned selector (fast plans, the least TotalCost on a plateau) and its bandit."""

import dataclasses

import numpy as np
import pytest

from mjfl.ids import JobId
from mjfl.schedulers.base import CostWeights, Decision, JobModel, RoundOutcome
from mjfl.schedulers.cost import cost_model
from mjfl.schedulers.meta_greedy import ARMS, RateBandit
from mjfl.schedulers.registry import make_scheduler


class Proposes:
    """A member that always proposes the same plan."""

    def __init__(self, name, plan):
        self.name, self._plan = name, plan

    def plan(self, ctx):
        return Decision(self._plan)

    def observe(self, ctx, outcome):
        pass


def arms_played(gain_per_second, rounds=24, seconds=None):
    """The arms a bandit plays when each arm buys accuracy at a fixed rate (fair rounds last longer)."""
    seconds = seconds or {"time": 1.0, "cost": 2.0}
    bandit, accuracy, used = RateBandit(ARMS, forget=0.7), 0.1, []
    bandit.observe(None, RoundOutcome(0, 0, (0,), {}, frozenset(), 1.0, accuracy=accuracy))
    for r in range(1, rounds + 1):
        arm = bandit.choose(r)
        used.append(arm)
        accuracy += gain_per_second[arm] * seconds[arm]
        bandit.observe(arm, RoundOutcome(0, r, (0,), {}, frozenset(), seconds[arm], accuracy=accuracy))
    return used


def test_the_fast_arm_plans_unless_the_fair_one_buys_accuracy_clearly_faster():
    assert arms_played({"time": 0.01, "cost": 0.01})[:4] == ["time", "time", "cost", "cost"]
    used = arms_played({"time": 0.01, "cost": 0.02})  # 2x: not clearly faster
    assert all(a == "time" for r, a in enumerate(used, start=1) if r > 4 and r % 8)
    used = arms_played({"time": 0.01, "cost": 0.05})  # 5x
    assert all(a == "cost" for r, a in enumerate(used, start=1) if r > 4 and r % 8)


def test_a_plateau_of_the_fast_arm_hands_the_rounds_to_the_fair_one():
    # Fast rounds buy nothing (data the fastest devices do not cover), fair ones a little.
    used = arms_played({"time": 0.0, "cost": 0.002})
    assert all(a == "cost" for r, a in enumerate(used, start=1) if r > 4 and r % 8)
    assert used[7] == "time"  # round 8 tries the fast arm again


def test_the_bandit_ignores_rounds_without_accuracy_and_needs_distinct_arms():
    bandit = RateBandit(ARMS, forget=0.7)
    bandit.observe("time", RoundOutcome(0, 1, (0,), {}, frozenset(), 1.0))
    assert not bandit.informed and bandit.tried["time"] == 0
    with pytest.raises(ValueError, match="differ"):
        RateBandit(("time", "time"), forget=0.7)


def test_meta_greedys_learned_selector_plans_fast_and_fair_on_a_plateau(context_factory):
    # Device 0 is the fastest but over-used: the fast plan takes it, the least TotalCost (beta 2) does not.
    def ctx(round_, budget=None):
        return context_factory(
            [1.0, 3.0, 8.0], [10.0] * 3, [1] * 3, size=1, round_=round_, frequencies=[[3, 1, 1]],
            weights=CostWeights(alpha=1.0, beta=2.0), budget=budget,
        )

    learned = {"meta-greedy": {"selector": "learned"}}
    meta = make_scheduler("meta-greedy", seed=0, options=learned)
    meta.members = [Proposes("fast", (0,)), Proposes("fair", (1,))]
    plans, model = np.array([[0], [1]]), cost_model(ctx(1))
    decision = meta.plan(ctx(1))
    assert (meta.choices[-1].arm, decision.chosen_by, meta.choices[-1].horizon) == ("time", "fast", None)
    assert decision.candidates == pytest.approx(dict(zip(["fast", "fair"], model.alpha * model.learning_time(plans))))
    # Accuracy rises, then stalls for the switch's patience: the fair plan runs until a new best.
    patience = meta.bandit.patience
    accuracies = [0.1, 0.2, *[0.2] * patience, 0.3, 0.25]
    arms = []
    for r, accuracy in enumerate(accuracies, start=1):
        decision = meta.plan(ctx(r))
        arms.append((meta.choices[-1].arm, decision.chosen_by))
        meta.observe(ctx(r), RoundOutcome(0, r, decision.plan, {}, frozenset(), 1.0, accuracy=accuracy))
    assert arms == [("time", "fast")] * (2 + patience) + [("cost", "fair"), ("time", "fast")]
    assert meta.choices[-2].recost == pytest.approx(dict(zip(["fast", "fair"], cost_model(ctx(2 + patience + 1)).marginal(plans))))
    # A job without a target (a budget of 30 rounds) keeps the return over the rounds left.
    fresh = make_scheduler("meta-greedy", seed=0, options=learned)
    fresh.members = meta.members
    fresh.plan(ctx(3, budget=30))
    assert (fresh.choices[-1].arm, fresh.choices[-1].horizon) == ("cost", 28.0)


def test_the_plateau_switch_plans_fast_until_accuracy_stops_setting_new_bests():
    from mjfl.schedulers.meta_greedy import PlateauSwitch

    switch, used = PlateauSwitch(patience=3), []
    accuracies = [0.1, 0.2, 0.3, 0.25, 0.28, 0.3, 0.29, 0.35, 0.2]
    for r, accuracy in enumerate(accuracies, start=1):
        used.append(switch.choose(r))
        switch.observe(used[-1], RoundOutcome(0, r, (0,), {}, frozenset(), 1.0, accuracy=accuracy))
    # 0.3 (round 3) is not beaten in rounds 4-6 (0.3 ties): the fair arm plans from round 7 until 0.35.
    assert used == ["time"] * 6 + ["cost", "cost", "time"]
    switch.observe("time", RoundOutcome(0, 10, (0,), {}, frozenset(), 1.0))  # no accuracy: no change
    assert switch.since_best == 1
    with pytest.raises(ValueError, match="patience"):
        PlateauSwitch(patience=0)


def test_the_switch_hands_the_rounds_to_the_fair_plan_when_small_new_bests_are_off_pace():
    from mjfl.schedulers.meta_greedy import PlateauSwitch

    job = JobModel(JobId("j"), 1, np.ones(3, dtype=np.int64), 0.5, target_accuracy=0.6, max_rounds=25)
    switch, used = PlateauSwitch(patience=3, pace=0.5, window=4), []
    # A new best every round, but slowing: before round 6 the best rose 0.03 a round over the last
    # 4, so 0.6 from 0.22 needs 12.7 rounds, more than half of the 20 left: the fair plan runs.
    # Its rounds gain 0.05 each; from round 14 that pace (0.42 + 4.5 rounds) is within half the 12 left.
    accuracies = [0.1, 0.15, 0.2, 0.21, 0.22, 0.23, 0.24, 0.25, 0.26, 0.27, 0.32, 0.37, 0.42, 0.47, 0.52]
    for r, accuracy in enumerate(accuracies, start=1):
        used.append(switch.choose(r, job))
        switch.observe(used[-1], RoundOutcome(0, r, (0,), {}, frozenset(), 1.0, accuracy=accuracy))
    assert switch.since_best == 0  # never a plateau
    assert used == ["time"] * 5 + ["cost"] * 8 + ["time"] * 2
    # Without a target or a round limit, or with the pace off, only a plateau switches.
    for other in (dataclasses.replace(job, target_accuracy=None), dataclasses.replace(job, max_rounds=None)):
        assert not switch.off_pace(10, other)
    unpaced = PlateauSwitch(pace=None)
    for r, accuracy in enumerate(accuracies[:10], start=1):
        unpaced.observe("time", RoundOutcome(0, r, (0,), {}, frozenset(), 1.0, accuracy=accuracy))
    assert unpaced.choose(11, job) == "time" and PlateauSwitch(pace=0.5).choose(11, job) == "time"  # too early
    with pytest.raises(ValueError, match="pace"):
        PlateauSwitch(pace=0)


def test_the_learned_selectors_patience_pace_and_window_are_options_of_meta_greedy():
    from mjfl.errors import ConfigError

    options = {"meta-greedy": {"selector": "learned", "patience": 5, "pace": 0.8, "window": 6}}
    switch = make_scheduler("meta-greedy", seed=0, options=options).bandit
    assert (switch.patience, switch.pace, switch.window) == (5, 0.8, 6)
    with pytest.raises(ConfigError, match=r"scheduler\.options\.meta-greedy.*window"):
        make_scheduler("meta-greedy", seed=0, options={"meta-greedy": {"selector": "learned", "window": 0}})
