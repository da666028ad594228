"""Fitting the shifted-exponential round-time model (Formula 4) to observed rounds.

Formula 4 of the paper gives the round time ``t`` of device ``k`` for a job with
``tau`` local epochs and ``D`` samples on the device::

    P[t < x] = 1 - exp(-(mu / (tau*D)) * (x - tau*a*D))     for x >= tau*a*D

i.e. ``t = tau*a*D + Exp(rate = mu/(tau*D))``. Dividing by ``tau*D`` gives the
normalised time ``x = t / (tau*D) = a + Exp(rate = mu)``: a shifted exponential
with location ``a`` and scale ``1/mu`` that no longer depends on the job. So
observations made with different ``tau_i`` and ``D_i`` are i.i.d. once
normalised, and the likelihood of the ``t_i`` is, up to the Jacobian
``prod 1/(tau_i D_i)``, the likelihood of the ``x_i``.

With ``m = min(x)``, ``S = sum(x_i - m) = n*(mean(x) - m)`` and ``theta = 1/mu``:

- ``n*(m - a)/theta ~ Exp(1)`` and ``S/theta ~ Gamma(n-1, 1)``, independent.
- MLE: ``a_mle = m``, ``theta_mle = S/n`` (what ``scipy.stats.expon.fit`` gives).
- Unbiased (UMVU): ``theta_hat = S/(n-1)``, ``a_hat = m - theta_hat/n``.
  ``mu_hat = 1/theta_hat`` is *not* unbiased: ``E[mu_hat] = mu*(n-1)/(n-2)``;
  the unbiased rate is ``(n-2)/S`` (``ShiftedExponentialFit.mu_unbiased``).
- Exact intervals from the pivots ``2S/theta ~ chi2(2n-2)`` (scale, hence mu)
  and ``n*(m - a)/theta_hat ~ F(2, 2n-2)`` (location; one-sided because
  ``m >= a`` always).

Everything here is pure: no clock, no I/O; randomness only through an explicit
``numpy.random.Generator``. The formulas are derived in docs/profiles.md.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from mjfl.errors import FitError
from mjfl.ids import DeviceId

__all__ = [
    "COMBINED_UNIT",
    "COMPUTE_UNIT",
    "ComponentFits",
    "ProfileRefiner",
    "ShiftedExponentialFit",
    "fit_components",
    "fit_round_times",
    "fit_shifted_exponential",
    "ks_pvalue_estimated",
    "sample_round_times",
]

#: Unit of ``a`` (and of ``1/mu``) for Formula 4's normalisation t/(tau*D).
COMPUTE_UNIT = "s/(epoch*sample)"
#: The combined (paper) model uses the same normalisation as computation.
COMBINED_UNIT = COMPUTE_UNIT

FloatArray = NDArray[np.float64]

# Rows of simulated samples handled at once by ks_pvalue_estimated, bounded so
# that one chunk holds about a million floats whatever n is.
_CHUNK_FLOATS = 1_000_000


@dataclass(frozen=True)
class ShiftedExponentialFit:
    """A fitted shifted exponential ``x = a + Exp(rate=mu)`` with exact intervals.

    ``a`` and ``scale`` are the unbiased (UMVU) estimates; ``mu = 1/scale``.
    ``a_ci``, ``scale_ci`` and ``mu_ci`` are exact ``confidence`` intervals
    (``a_ci`` is one-sided, ``[m - scale*F_q(2, 2n-2)/n, m]``, see module doc).
    ``ks_statistic`` is the Kolmogorov-Smirnov distance between the sample and
    the fitted distribution; ``ks_pvalue`` treats the parameters as known and is
    therefore conservative (too large): use ``ks_pvalue_estimated`` for a
    p-value that accounts for the estimation.
    """

    n: int
    a: float
    scale: float
    mu: float
    a_ci: tuple[float, float]
    scale_ci: tuple[float, float]
    mu_ci: tuple[float, float]
    minimum: float
    ks_statistic: float
    confidence: float

    @property
    def ks_pvalue(self) -> float:
        """Kolmogorov p-value of ``ks_statistic`` as if ``a``, ``mu`` were known (conservative)."""
        return float(stats.kstwo.sf(self.ks_statistic, self.n))

    @property
    def a_mle(self) -> float:
        """Maximum-likelihood location: ``min(x)`` (scipy's ``expon.fit`` loc)."""
        return self.minimum

    @property
    def scale_mle(self) -> float:
        """Maximum-likelihood scale ``mean(x) - min(x) = scale*(n-1)/n``."""
        return self.scale * (self.n - 1) / self.n

    @property
    def mu_mle(self) -> float:
        """Maximum-likelihood rate ``1/scale_mle``."""
        return 1.0 / self.scale_mle

    @property
    def mu_unbiased(self) -> float | None:
        """Unbiased rate ``(n-2)/S = mu*(n-2)/(n-1)``; ``None`` for n = 2 (no finite mean)."""
        if self.n < 3:
            return None
        return self.mu * (self.n - 2) / (self.n - 1)


@dataclass(frozen=True)
class ComponentFits:
    """Fits of one device's computation, communication and combined round times.

    ``compute`` and ``combined`` use Formula 4's normalisation ``t/(tau*D)``
    (unit ``COMPUTE_UNIT``). Communication does not grow with ``tau*D`` (it
    grows with the model size), so it is fitted per round (``"s/round"``) or
    per megabyte of model transferred (``"s/MB"``), see ``fit_components``.
    """

    compute: ShiftedExponentialFit
    communication: ShiftedExponentialFit | None
    combined: ShiftedExponentialFit
    communication_unit: Literal["s/round", "s/MB"]


def fit_shifted_exponential(
    values: ArrayLike, *, confidence: float = 0.95
) -> ShiftedExponentialFit:
    """Fit ``x = a + Exp(rate=mu)`` to already-normalised values ``x``.

    Estimators (module doc): ``scale = S/(n-1)``, ``a = m - scale/n``,
    ``mu = 1/scale`` with ``m = min(x)``, ``S = sum(x - m)``.
    Intervals at level ``q = confidence``, ``alpha = 1 - q``:

    - ``mu in [chi2_{alpha/2}(2n-2) / (2S), chi2_{1-alpha/2}(2n-2) / (2S)]``
      and the reciprocal interval for the scale;
    - ``a in [m - scale * F_q(2, 2n-2) / n, m]`` where
      ``F_q(2, k) = (k/2) * ((1-q)^(-2/k) - 1)`` (closed form of the F(2, k)
      quantile), i.e. ``a >= m - (S/n) * ((1-q)^(-1/(n-1)) - 1)``.

    Raises ``FitError`` for fewer than two values, non-finite values or values
    that are all equal.
    """
    x = _as_vector("values", values)
    if not 0.0 < confidence < 1.0:
        raise FitError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
    n = x.size
    if n < 2:
        raise FitError(f"need at least 2 observations to fit a shifted exponential, got {n}")
    x = np.sort(x)
    m = float(x[0])
    s = float(np.sum(x - m))
    if not s > 0.0:
        raise FitError("all observations are equal; the scale 1/mu cannot be estimated")
    scale = s / (n - 1)
    a = m - scale / n
    chi_lo, chi_hi, f_q = _quantiles(n, confidence)
    return ShiftedExponentialFit(
        n=n,
        a=a,
        scale=scale,
        mu=1.0 / scale,
        a_ci=(m - scale * f_q / n, m),
        scale_ci=(2.0 * s / chi_hi, 2.0 * s / chi_lo),
        mu_ci=(chi_lo / (2.0 * s), chi_hi / (2.0 * s)),
        minimum=m,
        ks_statistic=float(_ks_statistics(x[np.newaxis, :])[0]),
        confidence=confidence,
    )


def fit_round_times(
    times: ArrayLike,
    epochs: ArrayLike,
    samples: ArrayLike,
    *,
    confidence: float = 0.95,
) -> ShiftedExponentialFit:
    """Fit a device's ``(a, mu)`` of Formula 4 from round times ``t_i``.

    ``epochs`` (tau_i) and ``samples`` (D_i) are scalars or one value per
    observation. The times are normalised to ``x_i = t_i / (tau_i * D_i)``,
    which is ``a + Exp(rate=mu)``, and fitted by ``fit_shifted_exponential``;
    ``a`` comes out in seconds per sample per epoch (``COMPUTE_UNIT``).
    """
    t = _as_vector("times", times)
    _require_nonnegative("times", t)
    return fit_shifted_exponential(t / _work(epochs, samples, t.size), confidence=confidence)


def fit_components(
    compute_times: ArrayLike,
    communication_times: ArrayLike | None,
    epochs: ArrayLike,
    samples: ArrayLike,
    *,
    model_megabytes: ArrayLike | None = None,
    confidence: float = 0.95,
) -> ComponentFits:
    """Fit computation, communication and their sum for one device's rounds.

    The paper folds both into one round time; we keep them apart and also fit
    the sum:

    - compute: ``t_comp_i / (tau_i D_i)``, Formula 4's normalisation;
    - communication: not proportional to ``tau*D``; fitted as a plain shifted
      exponential in seconds per round, or, when ``model_megabytes`` (scalar
      or one per round, the megabytes moved that round) is given, in seconds
      per megabyte ``t_comm_i / MB_i``;
    - combined: ``(t_comp_i + t_comm_i) / (tau_i D_i)``, the paper's model. The
      sum of two shifted exponentials is not exactly one; the combined fit's
      KS statistic says how well Formula 4 holds for this device.

    With ``communication_times=None`` the communication fit is ``None`` and the
    combined fit equals the compute fit.
    """
    comp = _as_vector("compute_times", compute_times)
    _require_nonnegative("compute_times", comp)
    work = _work(epochs, samples, comp.size)
    compute = fit_shifted_exponential(comp / work, confidence=confidence)
    unit: Literal["s/round", "s/MB"] = "s/round" if model_megabytes is None else "s/MB"
    if communication_times is None:
        return ComponentFits(compute, None, compute, unit)
    comm = _as_vector("communication_times", communication_times)
    _require_nonnegative("communication_times", comm)
    if comm.size != comp.size:
        raise FitError(
            f"communication_times has {comm.size} values but compute_times has {comp.size}"
        )
    per_unit = comm
    if model_megabytes is not None:
        per_unit = comm / _positive_broadcast("model_megabytes", model_megabytes, comm.size)
    communication = fit_shifted_exponential(per_unit, confidence=confidence)
    combined = fit_shifted_exponential((comp + comm) / work, confidence=confidence)
    return ComponentFits(compute, communication, combined, unit)


def ks_pvalue_estimated(
    statistic: float, n: int, rng: np.random.Generator, *, simulations: int = 1000
) -> float:
    """Monte Carlo KS p-value that accounts for estimating ``a`` and ``mu``.

    Lilliefors-style: because the shifted exponential is a location-scale
    family and the estimators are equivariant, the KS statistic against the
    fitted distribution has a null distribution that depends on ``n`` only.
    It is simulated from standard ``Exp(1)`` samples, each refitted exactly as
    ``fit_shifted_exponential`` does. Returns ``(1 + #{D* >= D}) / (1 + B)``
    with ``B = simulations``, which is a valid p-value for any ``B``.
    """
    if n < 2:
        raise FitError(f"need n >= 2, got {n}")
    if simulations < 1:
        raise FitError(f"simulations must be positive, got {simulations}")
    rows_per_chunk = max(1, _CHUNK_FLOATS // n)
    exceed = 0
    done = 0
    while done < simulations:
        rows = min(rows_per_chunk, simulations - done)
        z = np.sort(rng.exponential(size=(rows, n)), axis=1)
        exceed += int(np.count_nonzero(_ks_statistics(z) >= statistic))
        done += rows
    return (1 + exceed) / (1 + simulations)


def sample_round_times(
    a: float,
    mu: float,
    epochs: ArrayLike,
    samples: ArrayLike,
    rng: np.random.Generator,
    *,
    size: int | None = None,
) -> FloatArray:
    """Draw round times from Formula 4: ``t = tau*a*D + Exp(rate = mu/(tau*D))``.

    ``epochs`` and ``samples`` broadcast together (and to ``(size,)`` when
    ``size`` is given); numpy's ``exponential`` takes the scale ``tau*D/mu``.
    """
    if not (math.isfinite(a) and math.isfinite(mu) and mu > 0.0):
        raise FitError(f"need finite a and mu > 0, got a={a!r}, mu={mu!r}")
    work = np.asarray(epochs, dtype=np.float64) * np.asarray(samples, dtype=np.float64)
    if size is not None:
        work = np.broadcast_to(work, (size,))
    if np.any(~np.isfinite(work)) or np.any(work <= 0.0):
        raise FitError("epochs and samples must be finite and positive")
    from mjfl.schedulers import round_time

    shift, rate = round_time.shift_and_rate(a, mu, work, 1.0)
    return round_time.sample(rng, shift, rate)


class ProfileRefiner:
    """Sliding-window refits of devices' Formula 4 parameters from observed rounds.

    The engine calls ``observe`` after every round a device finishes and
    ``fit`` when it wants a fresh estimate; only the latest ``window``
    observations of each device count, so a device whose speed drifts (thermal
    throttling, battery saver) is tracked. Each observation is stored
    normalised, ``t / (tau*D)``, so rounds of different jobs mix.
    """

    def __init__(
        self, *, window: int = 50, min_observations: int = 5, confidence: float = 0.95
    ) -> None:
        if window < 2:
            raise FitError(f"window must be at least 2, got {window}")
        if not 2 <= min_observations <= window:
            raise FitError(
                f"min_observations must lie in [2, window={window}], got {min_observations}"
            )
        if not 0.0 < confidence < 1.0:
            raise FitError(f"confidence must lie strictly between 0 and 1, got {confidence!r}")
        self._window = window
        self._min_observations = min_observations
        self._confidence = confidence
        self._observations: dict[DeviceId, deque[float]] = {}
        self._fits: dict[DeviceId, ShiftedExponentialFit | None] = {}

    @property
    def window(self) -> int:
        """How many recent observations per device are kept."""
        return self._window

    def observe(self, device_id: DeviceId, time: float, epochs: float, samples: float) -> None:
        """Record one round of ``device_id`` that took ``time`` seconds (tau, D given)."""
        if not (math.isfinite(time) and time >= 0.0):
            raise FitError(f"round time of {device_id} must be finite and >= 0, got {time!r}")
        work = float(epochs) * float(samples)
        if not (math.isfinite(work) and epochs > 0 and samples > 0):
            raise FitError(
                f"epochs and samples of {device_id} must be positive, got {epochs!r}, {samples!r}"
            )
        queue = self._observations.setdefault(device_id, deque(maxlen=self._window))
        queue.append(time / work)
        self._fits.pop(device_id, None)

    def count(self, device_id: DeviceId) -> int:
        """Number of observations of ``device_id`` in the window."""
        return len(self._observations.get(device_id, ()))

    def devices(self) -> list[DeviceId]:
        """Devices observed so far, in order of first observation."""
        return list(self._observations)

    def fit(self, device_id: DeviceId) -> ShiftedExponentialFit | None:
        """Refit ``device_id`` on its window; ``None`` while it has too few observations.

        ``None`` also when every observation in the window is equal (nothing
        to learn the scale from), so the engine keeps its previous profile.
        """
        if device_id not in self._fits:
            values = self._observations.get(device_id, ())
            result: ShiftedExponentialFit | None = None
            if len(values) >= self._min_observations:
                try:
                    result = fit_shifted_exponential(
                        np.fromiter(values, dtype=np.float64), confidence=self._confidence
                    )
                except FitError:
                    result = None
            self._fits[device_id] = result
        return self._fits[device_id]

    def forget(self, device_id: DeviceId) -> None:
        """Drop everything observed of ``device_id`` (e.g. it was replaced)."""
        self._observations.pop(device_id, None)
        self._fits.pop(device_id, None)

    def observations(self, device_id: DeviceId) -> tuple[float, ...]:
        """The normalised observations ``t/(tau*D)`` in the window, oldest first."""
        return tuple(self._observations.get(device_id, ()))


@lru_cache(maxsize=256)
def _quantiles(n: int, confidence: float) -> tuple[float, float, float]:
    """chi2(2n-2) quantiles at alpha/2 and 1-alpha/2, and F(2, 2n-2) at confidence."""
    alpha = 1.0 - confidence
    dof = 2 * n - 2
    chi_lo = float(stats.chi2.ppf(alpha / 2.0, dof))
    chi_hi = float(stats.chi2.ppf(1.0 - alpha / 2.0, dof))
    # F(2, k) has CDF 1 - (1 + 2x/k)^(-k/2), so its q-quantile is closed form.
    f_q = (dof / 2.0) * math.expm1(-(2.0 / dof) * math.log1p(-confidence))
    return chi_lo, chi_hi, f_q


def _ks_statistics(rows: FloatArray) -> FloatArray:
    """KS distance of each sorted row to its own unbiased shifted-exponential fit."""
    n = rows.shape[1]
    m = rows[:, :1]
    scale = (rows - m).sum(axis=1, keepdims=True) / (n - 1)
    a = m - scale / n
    with np.errstate(divide="ignore", invalid="ignore"):
        cdf = -np.expm1(-(rows - a) / scale)
    i = np.arange(1, n + 1, dtype=np.float64)
    d_plus = (i / n - cdf).max(axis=1)
    d_minus = (cdf - (i - 1) / n).max(axis=1)
    return np.asarray(np.maximum(d_plus, d_minus), dtype=np.float64)


def _as_vector(name: str, values: ArrayLike) -> FloatArray:
    try:
        x = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise FitError(f"{name} must be numbers: {exc}") from exc
    if x.ndim != 1:
        raise FitError(f"{name} must be one-dimensional, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise FitError(f"{name} must be finite")
    return x


def _require_nonnegative(name: str, x: FloatArray) -> None:
    if np.any(x < 0.0):
        raise FitError(f"{name} must be >= 0, got minimum {float(x.min())!r}")


def _positive_broadcast(name: str, values: ArrayLike, n: int) -> FloatArray:
    try:
        v = np.broadcast_to(np.asarray(values, dtype=np.float64), (n,))
    except (TypeError, ValueError) as exc:
        raise FitError(f"{name} must be a number or {n} numbers: {exc}") from exc
    if not np.all(np.isfinite(v)) or np.any(v <= 0.0):
        raise FitError(f"{name} must be finite and positive")
    return v


def _work(epochs: ArrayLike, samples: ArrayLike, n: int) -> FloatArray:
    """``tau_i * D_i`` per observation, the divisor of Formula 4's normalisation."""
    return _positive_broadcast("epochs", epochs, n) * _positive_broadcast("samples", samples, n)
