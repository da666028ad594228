"""Statistical utility in the cost model: devices that report they do not learn are not preferred for speed."""

import numpy as np
import pytest
from plan_contexts import make_context

from mjfl.schedulers.base import CostWeights
from mjfl.schedulers.cost import MIN_SHARE, cost_model
from mjfl.schedulers.registry import make_scheduler
from mjfl.schedulers.synthetic import synthetic_fleet, synthetic_jobs

COST_AWARE = ("greedy", "fedcs", "genetic", "bods", "rlds", "meta-greedy", "meta-greedy-paper")
OPTIONS = {"rlds": {"pretrain_rounds": 5, "plans_per_round": 4}}


def test_a_stand_in_is_ranked_below_a_learning_device_of_equal_speed():
    # Device 0 reported loss 0 (a stand-in), device 1 a positive loss; both as fast, same shard.
    ctx = make_context([0.1, 0.1, 1.0], [5.0, 5.0, 1.0], [50, 50, 50], losses=[0.0, 0.8, 0.9])
    costs = cost_model(ctx)
    assert costs.learning_weights.tolist() == [0.0, 1.0, 1.0]
    assert costs.cost([[0]])[0] > costs.cost([[1]])[0]
    assert costs.learning_device_times[0] > costs.learning_device_times[1]
    for method in ("greedy", "genetic", "meta-greedy"):
        assert make_scheduler(method, seed=0, options=OPTIONS).plan(ctx).plan == (1,), method


def test_a_stand_in_loses_to_a_learning_device_even_much_slower():
    # The stand-in is 5x faster; its plan still costs more: its time counts per learning share.
    ctx = make_context([0.02, 0.1], [25.0, 5.0], [50, 50], losses=[0.0, 0.8])
    costs = cost_model(ctx)
    assert costs.time([[0]])[0] < costs.time([[1]])[0]
    assert costs.cost([[0]])[0] > costs.cost([[1]])[0]
    assert costs.learning_time([[0]])[0] == pytest.approx(costs.time([[0]])[0] / MIN_SHARE)


def test_the_learning_share_is_the_share_of_the_plans_samples_that_learn():
    # FedAvg weighs updates by samples: a stand-in holding 30 of a plan's 100 samples leaves 70% that learn.
    ctx = make_context([0.1] * 4, [5.0] * 4, [30, 70, 50, 50], losses=[0.0, 1.0, np.nan, 0.5], size=2)
    costs = cost_model(ctx)
    assert costs.learning_share([[0, 1], [1, 2], [0, 2]]).tolist() == pytest.approx([0.7, 1.0, 50 / 80])
    # A device never heard from counts as learning (planning it finds out).
    assert costs.learning_weights[2] == 1.0


def test_learning_weights_saturate_from_a_hundredth_of_the_median_loss():
    ctx = make_context([0.1] * 5, [5.0] * 5, [50] * 5, losses=[1.0, 1.0, 1.0, 0.005, 0.02])
    assert cost_model(ctx).learning_weights.tolist() == pytest.approx([1.0, 1.0, 1.0, 0.5, 1.0])


@pytest.mark.parametrize("losses", [None, [0.0, 0.0, 0.0]])
def test_no_signal_without_losses_or_when_nothing_tells_devices_apart(losses):
    ctx = make_context([0.1, 0.2, 0.3], [5.0] * 3, [50] * 3, losses=losses)
    costs = cost_model(ctx)
    assert costs.learning_weights is None
    assert costs.cost([[0], [1]]).tolist() == pytest.approx(
        (costs.time([[0], [1]]) + 0.05 * costs.fairness([[0], [1]])).tolist()
    )


def test_utility_zero_is_the_papers_cost():
    weights = CostWeights(utility=0.0)
    ctx = make_context([0.1, 0.1, 1.0], [5.0, 5.0, 1.0], [50, 50, 50], losses=[0.0, 0.8, 0.9], weights=weights)
    assert cost_model(ctx).learning_weights is None
    assert make_scheduler("greedy").plan(ctx).plan == (0,)


def test_a_negative_utility_weight_is_refused():
    with pytest.raises(ValueError, match="utility"):
        CostWeights(utility=-1.0)


def fleet_context(losses, seed=0):
    rng = np.random.default_rng(seed)
    fleet = synthetic_fleet(40, rng)
    jobs = synthetic_jobs(2, 40, rng, fraction=0.1)
    return make_context(fleet.a, fleet.mu, np.stack([j.samples for j in jobs]), size=4, round_=3, losses=losses)


@pytest.mark.parametrize("method", COST_AWARE)
def test_with_every_device_learning_plans_are_unchanged(method):
    # Ordinary non-IID losses: from a fiftieth to four times the median (simulated digits, non-IID:
    # devices down to 2% of the median). None is below a hundredth of it, so every learning weight is 1 and each method plans exactly as without losses.
    losses = np.random.default_rng(1).uniform(0.02, 4.0, 40)
    losses[::3] = np.nan  # some never heard from
    plain = make_scheduler(method, seed=7, options=OPTIONS).plan(fleet_context(None)).plan
    informed = make_scheduler(method, seed=7, options=OPTIONS).plan(fleet_context(losses)).plan
    assert plain == informed


@pytest.mark.parametrize("method", COST_AWARE)
def test_every_cost_aware_method_leaves_out_stand_ins(method):
    # The 10 fastest of 40 devices reported loss 0: a plan of 4 never needs one of them.
    plain = fleet_context(None)
    fastest = np.argsort(cost_model(plain).device_times)[:10]
    losses = np.full(40, 0.9)
    losses[fastest] = 0.0
    picks = set()
    for seed in range(3):
        picks |= set(make_scheduler(method, seed=seed, options=OPTIONS).plan(fleet_context(losses)).plan)
    assert not picks & set(fastest.tolist()), method
    # Without the losses, the fastest devices are what these methods want.
    if method in ("greedy", "genetic"):
        assert set(make_scheduler(method, seed=0, options=OPTIONS).plan(plain).plan) <= set(fastest.tolist())
