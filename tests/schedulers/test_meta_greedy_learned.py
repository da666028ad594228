"""Meta-Greedy's learned selector: fast plans while a job is on course for its target, the least TotalCost when not."""

import numpy as np
import pytest
from scheduler_rounds import Proposes

from mjfl.errors import ConfigError
from mjfl.schedulers.base import CostWeights, Objective, RoundOutcome
from mjfl.schedulers.cost import cost_model
from mjfl.schedulers.meta_greedy import LearnedSelector
from mjfl.schedulers.registry import make_scheduler


def outcome(round_, *, accuracy=None, loss=None):
    return RoundOutcome(0, round_, (0,), {}, frozenset(), 1.0, accuracy=accuracy, loss=loss)


def play(selector, ctx, progress, *, metric="accuracy"):
    """Whether each round took the fast plan, the job's progress after each given in ``metric``."""
    fast = []
    for r, value in enumerate(progress, start=1):
        fast.append(selector.on_course(r, ctx.job_model.objective))
        selector.observe(ctx, outcome(r, **{metric: value}))
    return fast


def test_meta_greedys_learned_selector_plans_fast_and_fair_on_a_plateau(context_factory):
    # Device 0 is the fastest but over-used: the fast plan takes it, the least TotalCost (beta 2) does not.
    def ctx(round_, objective=Objective(accuracy=0.9, rounds=50)):  # noqa: B008 - frozen dataclass
        return context_factory(
            [1.0, 3.0, 8.0], [10.0] * 3, [1] * 3, size=1, round_=round_, frequencies=[[3, 1, 1]],
            weights=CostWeights(alpha=1.0, beta=2.0), objective=objective,
        )

    learned = {"meta-greedy": {"selector": "learned"}}
    meta = make_scheduler("meta-greedy", seed=0, options=learned)
    meta.members = [Proposes("fast", (0,)), Proposes("fair", (1,))]
    plans, model = np.array([[0], [1]]), cost_model(ctx(1))
    decision = meta.plan(ctx(1))
    assert (decision.chosen_by, meta.choices[-1].fairness_weight) == ("fast", 0.0)
    assert decision.candidates == pytest.approx(dict(zip(["fast", "fair"], model.alpha * model.learning_time(plans))))
    # Accuracy rises, then stalls for the selector's patience: the fair plan runs until a new best.
    patience = meta.selector.patience
    accuracies = [0.1, 0.2, *[0.2] * patience, 0.3, 0.25]
    chosen = []
    for r, accuracy in enumerate(accuracies, start=1):
        decision = meta.plan(ctx(r))
        chosen.append(decision.chosen_by)
        meta.observe(ctx(r), RoundOutcome(0, r, decision.plan, {}, frozenset(), 1.0, accuracy=accuracy))
    assert chosen == ["fast"] * (2 + patience) + ["fair", "fast"]
    assert meta.choices[-2].fairness_weight == 2.0  # beta * H, H = 1 for a job with a target
    assert meta.choices[-2].costs == pytest.approx(dict(zip(["fast", "fair"], cost_model(ctx(2 + patience + 1)).marginal(plans))))
    # A job without a target (a budget of 30 rounds) keeps the return over the rounds left.
    fresh = make_scheduler("meta-greedy", seed=0, options=learned)
    fresh.members = meta.members
    fresh.plan(ctx(3, Objective(rounds=30)))
    assert fresh.choices[-1].fairness_weight == 2.0 * 28


def test_the_learned_selector_plans_fast_until_accuracy_stops_setting_new_bests(context_factory):
    ctx = context_factory([1.0], [1.0], [1], objective=Objective(accuracy=0.9))
    selector = LearnedSelector(patience=3)
    fast = play(selector, ctx, [0.1, 0.2, 0.3, 0.25, 0.28, 0.3, 0.29, 0.35, 0.2])
    # 0.3 (round 3) is not beaten in rounds 4-6 (0.3 ties): the fair plan runs from round 7 until 0.35.
    assert fast == [True] * 6 + [False, False, True]
    selector.observe(ctx, outcome(10))  # nothing measured: no change
    assert selector.since_best == 1
    with pytest.raises(ValueError, match="patience"):
        LearnedSelector(patience=0)


# A new best every round, but slowing: before round 6 the best rose 0.03 a round over the last
# 4, so 0.6 from 0.22 needs 12.7 rounds, more than half of the 20 left: the fair plan runs.
# Its rounds gain 0.05 each; from round 14 that pace (0.42 + 4.5 rounds) is within half the 12 left.
SLOWING = [0.1, 0.15, 0.2, 0.21, 0.22, 0.23, 0.24, 0.25, 0.26, 0.27, 0.32, 0.37, 0.42, 0.47, 0.52]
PACED = [True] * 5 + [False] * 8 + [True] * 2


def test_small_new_bests_off_pace_hand_the_rounds_to_the_fair_plan(context_factory):
    objective = Objective(accuracy=0.6, rounds=25)
    ctx = context_factory([1.0], [1.0], [1], objective=objective)
    selector = LearnedSelector(patience=3, pace=0.5, window=4)
    assert play(selector, ctx, SLOWING) == PACED
    assert selector.since_best == 0  # never a plateau
    # Without a target or a round limit, only a plateau switches.
    for other in (Objective(rounds=25), Objective(accuracy=0.6)):
        assert not selector.off_pace(10, other)
    unpaced = LearnedSelector(pace=None)
    play(unpaced, ctx, SLOWING[:10])
    assert unpaced.on_course(11, objective) and LearnedSelector(pace=0.5).on_course(11, objective)  # too early
    with pytest.raises(ValueError, match="pace"):
        LearnedSelector(pace=0)


def test_a_loss_target_paces_the_job_on_its_loss(context_factory):
    # The same course in loss (lower is better): 1 - accuracy against a target of 0.4.
    ctx = context_factory([1.0], [1.0], [1], objective=Objective(loss=0.4, rounds=25))
    selector = LearnedSelector(patience=3, pace=0.5, window=4)
    assert play(selector, ctx, [1 - a for a in SLOWING], metric="loss") == PACED
    # A plateau is one of its loss; its accuracy does not count.
    assert play(LearnedSelector(patience=3), ctx, [0.5] * 5, metric="loss") == [True] * 4 + [False]
    assert play(LearnedSelector(patience=3), ctx, [0.5] * 5, metric="accuracy") == [True] * 5
    # A diverged loss is no new best.
    diverged = LearnedSelector(patience=1)
    assert play(diverged, ctx, [0.9, float("nan")], metric="loss") == [True, True]
    assert not diverged.on_course(3, ctx.job_model.objective)


def test_a_job_without_a_target_gets_the_return_whatever_its_progress(context_factory):
    ctx = context_factory([1.0], [1.0], [1], budget=30)
    assert play(LearnedSelector(), ctx, [0.1, 0.2, 0.3]) == [False] * 3


def test_the_learned_selectors_options_come_from_meta_greedys_table(context_factory):
    options = {"meta-greedy": {"selector": "learned", "patience": 5, "pace": 0.8, "window": 6, "horizon": 2}}
    selector = make_scheduler("meta-greedy", seed=0, options=options).selector
    assert (selector.patience, selector.pace, selector.window, selector.fair.horizon) == (5, 0.8, 6, 2)
    # TOML has no None: pace = 0 turns the pace rule off, and the slowing job keeps the fast plan.
    off = {"meta-greedy": {"selector": "learned", "pace": 0, "window": 4}}
    selector = make_scheduler("meta-greedy", seed=0, options=off).selector
    ctx = context_factory([1.0], [1.0], [1], objective=Objective(accuracy=0.6, rounds=25))
    assert selector.pace is None and play(selector, ctx, SLOWING) == [True] * len(SLOWING)
    with pytest.raises(ConfigError, match=r"scheduler\.options\.meta-greedy.*window"):
        make_scheduler("meta-greedy", seed=0, options={"meta-greedy": {"selector": "learned", "window": 0}})
