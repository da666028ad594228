"""Tests of the Formula 4 fitting: estimators, exact intervals, KS, refiner."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from mjfl.errors import FitError, UserError
from mjfl.ids import DeviceId
from mjfl.profiling.fit import (
    COMPUTE_UNIT,
    ProfileRefiner,
    fit_components,
    fit_round_times,
    fit_shifted_exponential,
    ks_pvalue_estimated,
    sample_round_times,
)

A, MU = 0.002, 500.0  # a phone-like floor (s per sample per epoch) and rate


def _rounds(
    rng: np.random.Generator, n: int, a: float = A, mu: float = MU
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n rounds of Formula 4 with epochs and shard sizes varying per round."""
    epochs = rng.choice([1, 2, 5], size=n)
    samples = rng.integers(50, 600, size=n)
    return sample_round_times(a, mu, epochs, samples, rng), epochs, samples


# --- estimators --------------------------------------------------------------


def test_estimates_converge_as_samples_grow() -> None:
    errors: dict[int, tuple[list[float], list[float]]] = {20: ([], []), 10_000: ([], [])}
    for seed in range(12):
        rng = np.random.default_rng(seed)
        for n, (a_err, mu_err) in errors.items():
            fit = fit_round_times(*_rounds(rng, n))
            a_err.append(abs(fit.a - A) / A)
            mu_err.append(abs(fit.mu - MU) / MU)
    small_a, small_mu = (float(np.median(e)) for e in errors[20])
    large_a, large_mu = (float(np.median(e)) for e in errors[10_000])
    # Location error shrinks like 1/n, rate error like 1/sqrt(n): ratios ~500 and ~22.
    assert large_a < small_a / 50
    assert large_mu < small_mu / 5
    assert large_mu < 0.03 and large_a < 0.001


@pytest.mark.parametrize("n", [5, 30])
def test_intervals_cover_truth_95_percent(n: int) -> None:
    rng = np.random.default_rng(1000 + n)
    reps = 1000
    a_hits = mu_hits = 0
    for _ in range(reps):
        fit = fit_round_times(*_rounds(rng, n))
        a_hits += fit.a_ci[0] <= A <= fit.a_ci[1]
        mu_hits += fit.mu_ci[0] <= MU <= fit.mu_ci[1]
    assert 0.93 <= a_hits / reps <= 0.97
    assert 0.93 <= mu_hits / reps <= 0.97


def test_scale_and_location_unbiased_rate_not() -> None:
    rng = np.random.default_rng(7)
    n, reps = 5, 3000
    fits = [fit_round_times(*_rounds(rng, n)) for _ in range(reps)]
    scale = np.array([f.scale for f in fits])
    a = np.array([f.a for f in fits])
    mu = np.array([f.mu for f in fits])
    mu_unbiased = np.array([f.mu_unbiased for f in fits], dtype=float)
    a_mle = np.array([f.a_mle for f in fits])

    def close(values: np.ndarray, target: float) -> bool:
        return bool(abs(values.mean() - target) < 4 * values.std(ddof=1) / math.sqrt(reps))

    assert close(scale, 1 / MU)
    assert close(a, A)
    assert close(mu_unbiased, MU)
    assert close(mu, MU * (n - 1) / (n - 2))  # E[1/scale_hat] = mu (n-1)/(n-2)
    assert not close(mu, MU)
    assert not close(a_mle, A)  # the MLE min(x) is biased upward by scale/n


def test_matches_scipy_expon_fit_after_conversion() -> None:
    rng = np.random.default_rng(3)
    for n in (2, 7, 100):
        times, epochs, samples = _rounds(rng, n)
        x = times / (epochs * samples)
        loc, scale = stats.expon.fit(x)
        fit = fit_round_times(times, epochs, samples)
        assert fit.a_mle == pytest.approx(loc, rel=1e-12)
        assert fit.scale_mle == pytest.approx(scale, rel=1e-9)
        # documented conversion: unbiased = MLE corrected for small samples
        assert fit.scale == pytest.approx(scale * n / (n - 1), rel=1e-9)
        assert fit.a == pytest.approx(loc - scale / (n - 1), rel=1e-9)
        assert fit.mu == pytest.approx(1 / fit.scale)


def test_interval_formulas_match_scipy_quantiles() -> None:
    rng = np.random.default_rng(4)
    x = 1.0 + rng.exponential(2.0, size=12)
    fit = fit_shifted_exponential(x, confidence=0.9)
    n, m, s = 12, x.min(), (x - x.min()).sum()
    f_q = stats.f.ppf(0.9, 2, 2 * n - 2)
    assert fit.a_ci == pytest.approx((m - fit.scale * f_q / n, m))
    chi = stats.chi2.ppf([0.05, 0.95], 2 * n - 2)
    assert fit.mu_ci == pytest.approx((chi[0] / (2 * s), chi[1] / (2 * s)))
    assert fit.scale_ci == pytest.approx((1 / fit.mu_ci[1], 1 / fit.mu_ci[0]))


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(2, 60),
    shift=st.floats(-1e3, 1e3),
    factor=st.floats(1e-3, 1e3),
)
def test_fit_is_affine_equivariant_and_order_free(
    seed: int, n: int, shift: float, factor: float
) -> None:
    rng = np.random.default_rng(seed)
    x = rng.exponential(size=n)
    base = fit_shifted_exponential(x)
    moved = fit_shifted_exponential(rng.permutation(factor * x + shift))
    assert moved.a == pytest.approx(factor * base.a + shift, rel=1e-7, abs=1e-7 * factor)
    assert moved.mu == pytest.approx(base.mu / factor, rel=1e-7)
    assert moved.ks_statistic == pytest.approx(base.ks_statistic, abs=1e-7)
    assert base.a_ci[0] <= base.a <= base.a_ci[1] == base.minimum
    assert base.mu_ci[0] <= base.mu <= base.mu_ci[1]
    assert 0.0 <= base.ks_pvalue <= 1.0


# --- goodness of fit -----------------------------------------------------------


def test_ks_statistic_is_distance_to_fitted_distribution() -> None:
    rng = np.random.default_rng(5)
    x = 3.0 + rng.exponential(0.5, size=40)
    fit = fit_shifted_exponential(x)
    expected = stats.kstest(x, stats.expon(loc=fit.a, scale=fit.scale).cdf)
    assert fit.ks_statistic == pytest.approx(expected.statistic)
    assert fit.ks_pvalue == pytest.approx(expected.pvalue, rel=1e-6)


def test_ks_small_for_right_model_large_for_wrong_one() -> None:
    n = 500
    for seed in range(5):
        rng = np.random.default_rng(seed)
        right = fit_round_times(*_rounds(rng, n))
        wrong = fit_shifted_exponential(rng.uniform(1.0, 2.0, size=n))
        assert right.ks_statistic < 0.06
        assert wrong.ks_statistic > 0.1
        assert ks_pvalue_estimated(wrong.ks_statistic, n, rng, simulations=200) < 0.01
        assert wrong.ks_pvalue < 0.01


def test_estimated_pvalue_is_calibrated_and_known_parameter_one_conservative() -> None:
    rng = np.random.default_rng(6)
    n, reps = 30, 300
    lilliefors = np.empty(reps)
    kolmogorov = np.empty(reps)
    for i in range(reps):
        fit = fit_shifted_exponential(rng.exponential(size=n))
        lilliefors[i] = ks_pvalue_estimated(fit.ks_statistic, n, rng, simulations=400)
        kolmogorov[i] = fit.ks_pvalue
    assert 0.02 <= np.mean(lilliefors < 0.05) <= 0.09
    assert np.mean(kolmogorov < 0.05) < 0.015  # estimated parameters fit the data too well


# --- components ------------------------------------------------------------------


def test_fit_components_normalisations() -> None:
    rng = np.random.default_rng(8)
    compute, epochs, samples = _rounds(rng, 80)
    comm = 1.5 + rng.exponential(0.4, size=80)
    fits = fit_components(compute, comm, epochs, samples)
    assert fits.compute == fit_round_times(compute, epochs, samples)
    assert fits.communication == fit_shifted_exponential(comm)
    assert fits.combined == fit_round_times(compute + comm, epochs, samples)
    assert fits.communication_unit == "s/round"
    assert fits.compute.a == pytest.approx(A, rel=0.05)

    per_mb = fit_components(compute, comm, epochs, samples, model_megabytes=2.0)
    assert per_mb.communication_unit == "s/MB"
    assert per_mb.communication is not None and fits.communication is not None
    assert per_mb.communication.a == pytest.approx(fits.communication.a / 2)
    assert per_mb.communication.mu == pytest.approx(fits.communication.mu * 2)

    alone = fit_components(compute, None, epochs, samples)
    assert alone.communication is None and alone.combined == alone.compute
    assert COMPUTE_UNIT == "s/(epoch*sample)"


def test_sample_round_times_follow_formula_4() -> None:
    rng = np.random.default_rng(9)
    tau, d = 5, 200
    t = sample_round_times(A, MU, tau, d, rng, size=4000)
    assert t.min() >= tau * A * d

    def cdf(x: np.ndarray) -> np.ndarray:  # Formula 4 written out
        return np.where(x >= tau * A * d, -np.expm1(-(MU / (tau * d)) * (x - tau * A * d)), 0.0)

    assert stats.kstest(t, cdf).pvalue > 0.001
    assert t.mean() == pytest.approx(tau * d * (A + 1 / MU), rel=0.05)


# --- errors ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("times", "epochs", "samples", "message"),
    [
        ([1.0], 1, 1, "at least 2"),
        ([], 1, 1, "at least 2"),
        ([2.0, 2.0, 2.0], 1, 1, "all observations are equal"),
        ([1.0, -1.0], 1, 1, "times must be >= 0"),
        ([1.0, float("nan")], 1, 1, "times must be finite"),
        ([1.0, 2.0], 0, 1, "epochs"),
        ([1.0, 2.0], 1, [1, 2, 3], "samples"),
        ([[1.0, 2.0]], 1, 1, "one-dimensional"),
    ],
)
def test_bad_observations_raise_fit_error(
    times: list[float], epochs: object, samples: object, message: str
) -> None:
    with pytest.raises(FitError, match=message) as info:
        fit_round_times(times, epochs, samples)  # type: ignore[arg-type]
    assert isinstance(info.value, UserError) and isinstance(info.value, ValueError)


def test_bad_confidence_and_component_lengths() -> None:
    with pytest.raises(FitError, match="confidence"):
        fit_shifted_exponential([1.0, 2.0], confidence=1.0)
    with pytest.raises(FitError, match="communication_times has 1"):
        fit_components([1.0, 2.0], [1.0], 1, 1)


# --- refiner ---------------------------------------------------------------------


def test_refiner_fits_the_sliding_window() -> None:
    rng = np.random.default_rng(10)
    refiner = ProfileRefiner(window=30, min_observations=5)
    phone = DeviceId("pixel-1")
    times, epochs, samples = _rounds(rng, 100)
    for i in range(4):
        refiner.observe(phone, times[i], epochs[i], samples[i])
    assert refiner.fit(phone) is None and refiner.count(phone) == 4
    for i in range(4, 100):
        refiner.observe(phone, times[i], epochs[i], samples[i])
    assert refiner.count(phone) == 30
    expected = fit_round_times(times[-30:], epochs[-30:], samples[-30:])
    fit = refiner.fit(phone)
    assert fit is not None
    assert fit.a == pytest.approx(expected.a) and fit.mu == pytest.approx(expected.mu)
    assert refiner.fit(DeviceId("unknown")) is None
    assert refiner.devices() == [phone]
    refiner.forget(phone)
    assert refiner.count(phone) == 0 and refiner.fit(phone) is None


def test_refiner_tracks_a_slowdown() -> None:
    rng = np.random.default_rng(11)
    refiner = ProfileRefiner(window=40)
    phone = DeviceId("throttled")
    for a in (A, 3 * A):
        times, epochs, samples = _rounds(rng, 120, a=a)
        for t, e, d in zip(times, epochs, samples, strict=True):
            refiner.observe(phone, t, e, d)
        fit = refiner.fit(phone)
        assert fit is not None and fit.a_ci[0] <= a <= fit.a_ci[1] * 1.001


def test_refiner_rejects_bad_input_and_handles_constant_window() -> None:
    with pytest.raises(FitError, match="window"):
        ProfileRefiner(window=1)
    with pytest.raises(FitError, match="min_observations"):
        ProfileRefiner(window=5, min_observations=6)
    refiner = ProfileRefiner(window=5, min_observations=2)
    with pytest.raises(FitError, match="round time"):
        refiner.observe(DeviceId("p"), -1.0, 1, 1)
    with pytest.raises(FitError, match="positive"):
        refiner.observe(DeviceId("p"), 1.0, 0, 1)
    for _ in range(3):
        refiner.observe(DeviceId("p"), 1.0, 1, 1)
    assert refiner.fit(DeviceId("p")) is None  # all equal: nothing to learn the scale from
    refiner.observe(DeviceId("p"), 2.0, 1, 1)
    assert refiner.fit(DeviceId("p")) is not None  # the cached None was invalidated
