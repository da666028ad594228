import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjfl.schedulers import round_time as rt
from mjfl.schedulers.base import CostWeights, RoundOutcome, plan_size
from mjfl.schedulers.cost import cost_model, fairness, fairness_scale, omega, update_frequencies
from mjfl.schedulers.registry import make_scheduler


def test_fairness_hand_computed():
    # s = [0, 1, 2, 3]; scheduling device 0 gives s' = [1, 1, 2, 3], mean 1.75.
    expected = ((1 - 1.75) ** 2 * 2 + (2 - 1.75) ** 2 + (3 - 1.75) ** 2) / 4
    assert fairness([0, 1, 2, 3], [0]) == pytest.approx(expected) == pytest.approx(0.6875)
    assert fairness([0, 0, 0, 0], [[0, 1], [2, 3]]) == pytest.approx([0.25, 0.25])
    assert list(update_frequencies([0, 1, 2, 3], [0, 2])) == [1, 1, 3, 3]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 30), min_size=2, max_size=40), st.data())
def test_fairness_expansion_equals_formula5_directly(freq, data):
    plan = data.draw(st.lists(st.integers(0, len(freq) - 1), min_size=1, max_size=len(freq), unique=True))
    direct = np.var(update_frequencies(freq, plan).astype(float))
    assert fairness(freq, plan) == pytest.approx(direct, abs=1e-9)


def test_omega_and_plan_size():
    assert omega(9, "sqrt") == 3.0 and omega(9, "linear") == 9.0 and omega(1, "log") == 0.0
    assert omega(8, "log") == pytest.approx(math.log(8))
    with pytest.raises(ValueError):
        omega(0, "sqrt")
    assert plan_size(0.1, 100, free=100) == 10
    assert plan_size(0.1, 95, free=100) == 10  # ceil(9.5)
    assert plan_size(0.1, 100, free=4) == 4  # capped by the free devices
    assert plan_size(0.1, 100, free=4, minimum=5) == 0  # too few: no plan
    assert plan_size(0.01, 20, free=20, minimum=3) == 3
    assert fairness_scale(10, 100) == pytest.approx(0.09) and fairness_scale(5, 5) == 1.0


def test_cost_total_and_recost_hand_computed(context_factory):
    # Two jobs on four devices, one epoch; job 0 samples 1 per device.
    a = [1.0, 1.0, 2.0, 4.0]
    mu = [1.0, 1.0, 1.0, 1.0]
    ctx = context_factory(
        a, mu, [[1, 1, 1, 1], [2, 2, 2, 2]], size=2, round_=4,
        frequencies=[[0, 1, 2, 3], [1, 1, 0, 0]], current=[None, (0, 1)],
        free=[False, False, True, True], weights=CostWeights(alpha=2.0, beta=0.5, omega="sqrt"),
    )
    costs = cost_model(ctx)
    # Device times for job 0: a + 1/mu = [2, 2, 3, 5]; reference = 3.
    assert costs.reference_time == pytest.approx(3.0)
    plan = np.array([2, 3])
    t = float(rt.expected_max([2.0, 4.0], [1.0, 1.0])) / 3.0
    f = np.var([0, 1, 3, 4]) / fairness_scale(2, 4)  # s + 1_V = [0, 1, 3, 4]
    assert costs.time(plan) == pytest.approx(t)
    assert costs.fairness(plan) == pytest.approx(f)
    assert costs.cost(plan) == pytest.approx(2.0 * t + 0.5 * f)
    # Job 1 holds devices 0 and 1 (shift 2 each, rate 1/2); its reference is mean(2*(a+1)) = 6.
    other_time = float(rt.expected_max([2.0, 2.0], [0.5, 0.5])) / 6.0
    other_fair = np.var([1, 1, 0, 0]) / fairness_scale(2, 4)
    assert costs.others == pytest.approx(2.0 * other_time + 0.5 * other_fair)
    assert costs.total(plan) == pytest.approx(2.0 * t + 0.5 * f + costs.others)
    assert costs.recost(plan) == pytest.approx(2.0 * t + 0.5 * math.sqrt(4) * f)
    # Observed: the round took 9 s instead of its expectation.
    outcome = RoundOutcome(0, 4, (2, 3), {2: 3.0, 3: 9.0}, frozenset(), 9.0)
    assert costs.observed_cost(outcome) == pytest.approx(2.0 * 3.0 + 0.5 * f + costs.others)


def test_scales_make_alpha_and_beta_fleet_independent(context_factory):
    # Multiplying every device's time by 100 leaves the normalised costs unchanged.
    rng = np.random.default_rng(0)
    a, mu, samples = rng.uniform(0.01, 0.1, 30), rng.uniform(1, 10, 30), rng.integers(5, 50, 30)
    freq = rng.integers(0, 5, (1, 30))
    plans = np.stack([rng.choice(30, 5, replace=False) for _ in range(10)])
    slow = context_factory(a * 100, mu / 100, samples, size=5, frequencies=freq)
    fast = context_factory(a, mu, samples, size=5, frequencies=freq)
    assert cost_model(slow).cost(plans) == pytest.approx(cost_model(fast).cost(plans), rel=1e-6)


def test_a_device_released_later_starts_later(context_factory):
    # Four equal devices; device 3 is another job's for 10 more seconds.
    free_now = context_factory([1.0] * 4, [1.0] * 4, [1, 1, 1, 1], size=2)
    waiting = context_factory([1.0] * 4, [1.0] * 4, [1, 1, 1, 1], size=2, wait=[0, 0, 0, 10.0])
    now, later = cost_model(free_now), cost_model(waiting)
    assert later.reference_time == now.reference_time  # the scale is the devices', not the waits'
    assert later.time(np.array([0, 1])) == pytest.approx(now.time(np.array([0, 1])))
    # Its whole Formula 4 distribution shifts by the wait: E[max(1 + X0, 11 + X3)].
    expected = float(rt.expected_max([1.0, 11.0], [1.0, 1.0])) / now.reference_time
    assert later.time(np.array([0, 3])) == pytest.approx(expected)
    assert list(later.device_times) == pytest.approx([2.0, 2.0, 2.0, 12.0])
    assert list(later.round_times) == pytest.approx([2.0] * 4)


@pytest.mark.parametrize("method", ["greedy", "fedcs", "genetic", "bods", "rlds"])
def test_cost_aware_methods_weigh_the_wait(context_factory, method):
    # Devices 0-2 are the fastest but busy for a long time; 3-7 are free and a little slower.
    a = [0.5, 0.5, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    wait = [50.0, 50.0, 50.0, 0, 0, 0, 0, 0]
    ctx = context_factory(a, [2.0] * 8, [1] * 8, size=3, wait=wait, round_=1)
    plan = make_scheduler(method, seed=0, options={"rlds": {"pretrain_rounds": 5}}).plan(ctx).plan
    assert not set(plan) & {0, 1, 2}, f"{method} waited 50 s for devices barely faster: {plan}"
    # With no wait, the fastest ones are the better plan (Greedy, the cost-minimisers' seed).
    fast = context_factory(a, [2.0] * 8, [1] * 8, size=3)
    assert make_scheduler("greedy").plan(fast).plan == (0, 1, 2)


def test_random_samples_the_devices_free_now_and_waits_only_when_it_must(context_factory):
    wait = [0, 0, 0, 5.0, 1.0, 9.0]
    ctx = context_factory([1.0] * 6, [1.0] * 6, [1] * 6, size=3, wait=wait)
    scheduler = make_scheduler("random", seed=0)
    assert all(set(scheduler.plan(ctx).plan) == {0, 1, 2} for _ in range(20))
    short = context_factory([1.0] * 6, [1.0] * 6, [1] * 6, size=4, wait=wait)
    assert set(scheduler.plan(short).plan) == {0, 1, 2, 4}  # plus the one released soonest
