import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import quad

from mjfl.schedulers import round_time as rt


def test_formula4_hand_computed():
    # a=0.01 s/sample, mu=2, tau=5, D=100: shift 5 s, rate 2/500 per s.
    shift, rate = rt.shift_and_rate(0.01, 2.0, 5, 100)
    assert shift == pytest.approx(5.0) and rate == pytest.approx(0.004)
    assert rt.cdf(4.999, shift, rate) == 0.0
    assert rt.cdf(5.0, shift, rate) == 0.0
    assert rt.cdf(255.0, shift, rate) == pytest.approx(1 - math.exp(-1))
    assert rt.mean(shift, rate) == pytest.approx(255.0)
    assert rt.quantile(0.5, shift, rate) == pytest.approx(5 + math.log(2) / 0.004)
    assert rt.cdf(rt.quantile(0.9, shift, rate), shift, rate) == pytest.approx(0.9)
    with pytest.raises(ValueError):
        rt.quantile(1.0, shift, rate)


def test_sampling_matches_mean_and_shift():
    rng = np.random.default_rng(0)
    shift, rate = rt.shift_and_rate(0.02, 5.0, 2, 50)
    draws = rt.sample(rng, np.full(200_000, shift), np.full(200_000, rate))
    assert draws.min() >= shift
    assert draws.mean() == pytest.approx(float(rt.mean(shift, rate)), rel=0.01)


def test_expected_max_closed_forms():
    # n iid Exp(1): E[max] = H_n (harmonic number).
    for n in (1, 2, 3, 10):
        harmonic = sum(1 / i for i in range(1, n + 1))
        assert rt.expected_max(np.zeros(n), np.ones(n)) == pytest.approx(harmonic, rel=1e-7)
    # Exp(1) against a device that always takes exactly 2 s: 2 + e^-2.
    assert rt.expected_max([0.0, 2.0], [1.0, 1e9]) == pytest.approx(2 + math.exp(-2), rel=1e-6)
    assert rt.expected_max(np.zeros((4, 0)), np.zeros((4, 0))).shape == (4,)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 25), st.integers(0, 10_000))
def test_expected_max_matches_adaptive_quadrature(n, seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(1e-3, 5e-2, n)
    mu = rng.uniform(1, 500, n) * rng.choice([1, 10, 100], n)
    shift, rate = rt.shift_and_rate(a, mu, 5, rng.integers(5, 600, n))
    largest = shift.max()
    exact = largest + quad(lambda x: 1 - np.prod(rt.cdf(x, shift, rate)), largest, np.inf, limit=500, epsabs=1e-12)[0]
    assert rt.expected_max(shift, rate) == pytest.approx(exact, rel=1e-6)


def test_expected_max_agrees_with_large_monte_carlo():
    rng = np.random.default_rng(7)
    for n in (1, 5, 20):
        shift, rate = rt.shift_and_rate(rng.uniform(1e-3, 2e-2, n), rng.uniform(20, 500, n), 5, rng.integers(20, 200, n))
        estimate, stderr = rt.expected_max_monte_carlo(rng, shift, rate, draws=400_000)
        assert abs(float(rt.expected_max(shift, rate)) - estimate) < 4 * stderr


def test_plan_timer_batches_agree_with_single_plans():
    rng = np.random.default_rng(3)
    shift, rate = rt.shift_and_rate(rng.uniform(1e-3, 2e-2, 50), rng.uniform(20, 500, 50), 5, rng.integers(20, 200, 50))
    timer = rt.PlanTimer(shift, rate)
    plans = np.stack([rng.choice(50, 7, replace=False) for _ in range(9)])
    batch = timer.expected_max(plans)
    singles = [float(rt.expected_max(shift[p], rate[p])) for p in plans]
    assert batch == pytest.approx(singles, rel=1e-6)
    # The slowest member bounds the plan from below; adding a device never speeds it up.
    assert np.all(batch >= rt.mean(shift, rate)[plans].max(axis=1) - 1e-9)
    bigger = timer.expected_max(np.column_stack([plans, np.setdiff1d(np.arange(50), plans[0])[:1].repeat(9)]))
    assert np.all(bigger >= batch - 1e-9)
