"""Meta-Greedy's time-to-target selector: the kind of plan, fast or fair, with the least expected time to the target."""

import math

import pytest
from scheduler_rounds import Proposes

from mjfl.errors import ConfigError
from mjfl.schedulers.base import CostWeights, Objective, RoundOutcome
from mjfl.schedulers.meta_greedy import FAIR, FAST, TimeToTargetSelector
from mjfl.schedulers.registry import make_scheduler
from mjfl.schedulers.target_time import forecast, forecasts


def test_a_forecast_counts_the_rounds_until_the_first_crossing_and_charges_a_miss():
    # Far above the target: the next round reaches it.
    assert forecast([0.9], 0.5, 10, noise=0.01).rounds == pytest.approx(1.0)
    # At the target, flat: each round crosses with probability 1/2; 10 rounds left, a miss charged nothing more.
    at = forecast([0.5], 0.5, 10, noise=0.05, miss_rounds=0.0)
    assert at.rounds == pytest.approx(sum(0.5**j for j in range(10))) and at.miss == pytest.approx(0.5**10)
    # Far below and flat: a sure miss, charged the 10 rounds left and miss_rounds times them again.
    below = forecast([0.1, 0.1, 0.1], 0.9, 10, noise=0.01, miss_rounds=2.0)
    assert below.miss == pytest.approx(1.0) and below.rounds == pytest.approx(10 + 2 * 10)
    # A line rising 0.1 a round from 0.5 meets 0.8 three rounds on (half its rounds there land above) and is past it after.
    rising = forecast([0.2, 0.3, 0.4, 0.5], 0.8, 20, noise=0.01)
    assert rising.rounds == pytest.approx(3.5) and rising.miss == 0.0
    # A falling line counts as flat at its mean (the slope is floored at 0), a rising one heads on up.
    assert forecast([0.5, 0.4, 0.3], 0.9, 5, noise=0.01).miss > 0.99
    assert forecast([0.3, 0.4, 0.5], 0.9, 5, noise=0.01).miss == 0.0
    with pytest.raises(ValueError, match="at least one value"):
        forecast([], 0.5, 10, noise=0.01)


def test_a_noisy_plateau_can_reach_a_target_a_quiet_one_cannot():
    noisy = forecast([0.10, 0.24, 0.12, 0.26, 0.11, 0.25], 0.3, 20, noise=0.01)
    quiet = forecast([0.48, 0.49, 0.48, 0.49, 0.48, 0.49], 0.6, 20, noise=0.01)
    assert noisy.miss < 0.5 < quiet.miss


def test_each_kind_of_plan_gets_its_own_level_on_one_shared_slope():
    # Fair rounds land 0.2 above fast ones on a common rise of 0.05 a round: the levels after the last round.
    history = [(FAST, 0.10), (FAIR, 0.35), (FAST, 0.20), (FAIR, 0.45), (FAST, 0.30), (FAIR, 0.55)]
    expected = forecasts(history, 0.6, 10, noise=0.001, miss_rounds=0.0)
    # Fast sits at 0.35 after round 6 and rises 0.05 a round: 0.6 five rounds on; fair (0.55) one round on.
    assert expected[FAST].rounds == pytest.approx(5.5, abs=0.01) and expected[FAIR].rounds == pytest.approx(1.5, abs=0.01)
    assert forecasts([], 0.6, 10, noise=0.01) == {}


def ctx(context_factory, round_, objective=Objective(accuracy=0.6, rounds=25)):  # noqa: B008 - frozen dataclass
    # Device 0 is the fastest but over-used: the fast plan takes it, the least TotalCost (beta 2) does not.
    return context_factory(
        [1.0, 3.0, 8.0], [10.0] * 3, [1] * 3, size=1, round_=round_, frequencies=[[3, 1, 1]],
        weights=CostWeights(alpha=1.0, beta=2.0), objective=objective,
    )


def meta_greedy(**options):
    meta = make_scheduler("meta-greedy", seed=0, options={"meta-greedy": {"selector": "time-to-target", **options}})
    meta.members = [Proposes("fast", (0,)), Proposes("fair", (1,))]
    return meta


def run(meta, context_factory, accuracies, first=1):
    """Who planned each round from ``first`` on, the job's accuracy after each given."""
    chosen = []
    for r, accuracy in enumerate(accuracies, start=first):
        c = ctx(context_factory, r)
        decision = meta.plan(c)
        chosen.append(decision.chosen_by)
        meta.observe(c, RoundOutcome(0, r, decision.plan, {}, frozenset(), 1.0, accuracy=accuracy))
    return chosen


def test_fast_plans_while_they_head_for_the_target_in_time(context_factory):
    meta = meta_greedy(warmup=3)
    assert run(meta, context_factory, [0.1, 0.2, 0.3, 0.4, 0.5]) == ["fast"] * 5
    assert meta.choices[-1].fairness_weight == 0.0
    assert meta.selector.history == [(FAST, a) for a in (0.1, 0.2, 0.3, 0.4, 0.5)]


def test_a_quiet_plateau_below_the_target_hands_the_rounds_to_the_fair_plan(context_factory):
    meta = meta_greedy(warmup=3, refresh=4)
    # The fast plan stalls at 0.3 against a target of 0.6: it would miss, so the fair plan (the return) plans.
    assert run(meta, context_factory, [0.3, 0.3, 0.3, 0.3]) == ["fast"] * 3 + ["fair"]
    assert meta.choices[-1].fairness_weight == 2.0  # beta * H, H = 1 for a job with a target
    # Fair rounds climb toward the target while fast ones stay at 0.3: the fair plan plans most rounds;
    # the fast plan gets one now and then (the shared slope credits it with the fair rounds' rise, or a
    # probe once its last round is `refresh` rounds old) and falls back each time.
    fair = iter([0.4, 0.45, 0.5, 0.55, 0.6])
    chosen = []
    for r in range(5, 11):
        c = ctx(context_factory, r)
        decision = meta.plan(c)
        chosen.append(decision.chosen_by)
        accuracy = 0.3 if decision.chosen_by == "fast" else next(fair)
        meta.observe(c, RoundOutcome(0, r, decision.plan, {}, frozenset(), 1.0, accuracy=accuracy))
    assert chosen == ["fair", "fast", "fair", "fair", "fast", "fair"]


def test_a_probe_of_the_fair_plan_that_does_not_pay_hands_the_rounds_back(context_factory):
    # On a strict pace the fast plan's forecast is too slow, so the fair plan is probed; it lands no
    # higher and its rounds are slower, so the fast plan plans again until the next probe is due.
    meta = meta_greedy(warmup=3, max_miss=1.0, pace=0.05, refresh=3)
    chosen = run(meta, context_factory, [0.3, 0.4, 0.5, 0.45, 0.5, 0.45, 0.5])
    assert chosen == ["fast"] * 3 + ["fair", "fast", "fast", "fair"]


def test_a_job_without_a_target_keeps_the_return_and_the_state_round_trips(context_factory):
    meta = meta_greedy()
    meta.plan(ctx(context_factory, 3, Objective(rounds=30)))
    assert meta.choices[-1].fairness_weight == 2.0 * 28  # the rounds left in its budget
    meta = meta_greedy(warmup=1)
    run(meta, context_factory, [0.3, 0.3, 0.3, 0.3])
    copy = meta_greedy(warmup=1)
    copy.selector.load_state(meta.selector.state())
    assert copy.selector.state() == meta.selector.state()
    c = ctx(context_factory, 5)
    assert copy.plan(c).chosen_by == meta.plan(c).chosen_by


def test_a_loss_target_is_followed_on_the_loss_and_a_diverged_round_is_no_value(context_factory):
    selector = TimeToTargetSelector(warmup=0)
    objective = Objective(loss=0.5, rounds=20)
    times = {FAST: 1.0, FAIR: 2.0}
    selector.history = [(FAST, -0.4)]  # a loss of 0.4, past the target of 0.5: the fast plan reaches at once
    assert selector.choose(2, objective, times) == FAST
    selector.history = [(FAST, -2.0)] * 3  # far from it, flat: a miss, so the fair plan
    assert selector.choose(5, objective, times) == FAIR
    selector.planned[6] = FAST
    loss_only = ctx(context_factory, 6, objective)
    selector.observe(loss_only, RoundOutcome(0, 6, (0,), {}, frozenset(), 1.0, loss=math.nan))
    assert len(selector.history) == 3 and 6 not in selector.planned
    with pytest.raises(ConfigError, match="max_miss"):
        make_scheduler("meta-greedy", options={"meta-greedy": {"selector": "time-to-target", "max_miss": 2}})
