"""The paper's cost model: data fairness, Cost, TotalCost and ReCost.

Scales. Round time is in seconds and fairness in squared counts, so raw
alpha/beta would mean different things on every fleet. Both terms are
therefore made dimensionless:

* time: a plan's expected round time divided by the job's *reference time*,
  the mean expected round time of one device over the whole fleet
  (``mean_k tau_m D_k^m (a_k + 1/mu_k)``). A plan of typical devices scores a
  little above 1 (it waits for its slowest member), one of fast devices below 1.
* fairness: Formula 5 divided by ``p(1 - p)`` with ``p = |V| / |K|``, the
  variance one round adds to the frequency vector. A uniformly random scheduler
  scores about r after r rounds, and choosing a device that has been
  scheduled d times more than average adds about ``2d / (1 - p)``.

With these scales alpha = 1, beta = 0.05 (the defaults) weigh "one plan twice
as slow as typical" against "its devices were picked ~10 rounds more often than
average"; Meta-Greedy's Omega(r) = sqrt(r) then lets fairness grow in weight as
the job goes on (Formula 13), to beta = 0.2 by round 16. See docs/cost-model.md.

Statistical utility (beyond the paper; Oort, Lai et al. 2021). A fast device
whose updates do not learn (a stand-in that reports loss 0 and returns the
model unchanged) would win every plan on time alone, yet FedAvg weighs its
unchanged model by its samples and so shrinks the round's step. Each device's
last reported mean loss (``PlanContext.losses``) gives it a learning weight
``w_k = min(1, loss_k / (UTILITY_SATURATION * median loss))`` (0 for a loss of
0, 1 while no loss is known), and a plan its learning share ``L(V) = sum_V D_k w_k / sum_V D_k``,
the part of the FedAvg average that moves the model. The time term of every
cost becomes the time per unit of learning, ``T(V) / max(L(V), MIN_SHARE)^gamma``
(``gamma = CostWeights.utility``, 1 by default). Devices that learn at all
(a hundredth of the median loss or more) weigh fully, so a fleet of learning
devices plans exactly as without the signal.
"""

from __future__ import annotations

import weakref
from functools import cached_property
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from mjfl.schedulers import round_time
from mjfl.schedulers.base import FleetModel, JobModel, Omega, PlanContext, RoundOutcome

FloatArray = NDArray[np.float64]

# A device reporting at least this share of the median loss counts as learning fully (w_k = 1).
UTILITY_SATURATION = 0.01
# The least learning share a plan is charged for: a plan of stand-ins costs 1/MIN_SHARE^gamma its time.
MIN_SHARE = 0.01


def update_frequencies(frequencies: ArrayLike, plan: ArrayLike) -> NDArray[np.int64]:
    """Formula 6: ``s_k += 1`` for every device k of the plan."""
    out = np.array(frequencies, dtype=np.int64, copy=True)
    out[np.asarray(plan, dtype=np.intp)] += 1
    return out


def fairness(frequencies: ArrayLike, plans: ArrayLike) -> FloatArray:
    """Formula 5 after Formula 6: variance over all devices of ``s + 1_V``.

    ``plans`` has shape (..., n). Expanding the variance gives
    ``Var(s) + (2/K) sum_{k in V} (s_k - mean(s)) + p(1 - p)``, p = n/K, which
    costs O(n) per plan instead of O(K).
    """
    s = np.asarray(frequencies, dtype=np.float64)
    plans = np.asarray(plans, dtype=np.intp)
    K, n = s.size, plans.shape[-1]
    p = n / K
    excess = (s[plans] - s.mean()).sum(axis=-1)
    return s.var() + 2.0 * excess / K + p * (1.0 - p)


def fairness_scale(plan_size: int, fleet_size: int) -> float:
    """``p(1 - p)``: the variance one round of ``plan_size`` devices adds (1 if it adds none)."""
    p = plan_size / fleet_size
    return p * (1.0 - p) if 0 < p < 1 else 1.0


def omega(round_: int, kind: Omega) -> float:
    """Omega(r) of Formula 13: sqrt(r) (the paper's choice), r, or log r."""
    if round_ < 1:
        raise ValueError("rounds count from 1")
    if kind == "sqrt":
        return float(np.sqrt(round_))
    if kind == "linear":
        return float(round_)
    return float(np.log(round_))


# The rounds a return is summed over: a number of rounds >= 1, or "auto" (``return_horizon``).
Horizon = float | Literal["auto"]


def check_horizon(horizon: object, owner: str) -> None:
    """ValueError unless ``horizon`` is ``"auto"`` or a number of rounds >= 1."""
    if horizon != "auto" and not (isinstance(horizon, int | float) and not isinstance(horizon, bool) and horizon >= 1):
        raise ValueError(f"{owner}: horizon is 'auto' or a number of rounds >= 1, not {horizon!r}")


def return_horizon(ctx: PlanContext, horizon: Horizon = "auto") -> float:
    """H, the rounds a plan's return is summed over: ``horizon`` if a number, else those the job's objective charges.

    A job that runs a fixed budget of rounds without a target is judged by its
    summed TotalCost (the paper's objective): the rounds left in its budget,
    this one included. A job with a target is judged by its time to target,
    and a job whose rounds are unknown round by round: 1 (docs/cost-model.md,
    "A plan's return"). Meta-Greedy's return and RLDS share it.
    """
    if horizon != "auto":
        return float(horizon)
    objective = ctx.job_model.objective
    left = None if objective.has_target else objective.rounds_left(ctx.round)
    return 1.0 if left is None else float(left)


def cost_model(ctx: PlanContext) -> CostModel:
    """The cost model of ``ctx``, built once per context.

    Every scheduler asked to plan the same context (Meta-Greedy's members, the
    engine scoring the plan) shares it, and so its plan timers.
    """
    model = _MODELS.get(ctx)
    if model is None:
        model = _MODELS[ctx] = CostModel(ctx)
    return model


class CostModel:
    """Formulas 2-8 and 12-13 evaluated for plans of ``ctx``'s job."""

    def __init__(self, ctx: PlanContext) -> None:
        # The context's fields, not the context: cost_model() caches models by
        # context in a weak mapping, which a reference back would keep alive.
        self.job, self.round, self.size = ctx.job, ctx.round, ctx.size
        self.fleet, self.jobs = ctx.fleet, ctx.jobs
        self.frequencies, self.current_plans = ctx.frequencies, ctx.current_plans
        self.weights = ctx.weights
        self.alpha = ctx.weights.alpha
        self.beta = ctx.weights.beta
        self.wait = ctx.wait  # seconds before each device can start (None: all free now)
        self.losses = ctx.losses  # each device's last reported mean loss for this job (NaN: none yet)

    def shift_rate(self, job: int) -> tuple[FloatArray, FloatArray]:
        """Formula 4's shift and rate of every device for job ``job`` of the context."""
        spec = self.jobs[job]
        return round_time.shift_and_rate(self.fleet.a, self.fleet.mu, spec.epochs, spec.samples)

    def timer(self, job: int) -> round_time.PlanTimer:
        """The plan timer of job ``job`` over the whole fleet (shared by contexts of one fleet and job)."""
        return _timer(self.fleet, self.jobs[job])

    @cached_property
    def round_times(self) -> FloatArray:
        """Expected round time of each device for this job once it starts: tau*D*(a + 1/mu)."""
        return round_time.mean(*self.shift_rate(self.job))

    @cached_property
    def device_times(self) -> FloatArray:
        """Expected time from now until each device's update is back: its wait plus its round time."""
        return self.round_times if self.wait is None else self.round_times + self.wait

    @cached_property
    def reference_time(self) -> float:
        """Mean expected round time of one device of the fleet for this job (waits not counted)."""
        return float(self.round_times.mean())

    def time(self, plans: ArrayLike) -> FloatArray:
        """Expected round time (Formula 3 under Formula 4, late starts counted) over the reference time."""
        return self.timer(self.job).expected_max(plans, self.wait) / self.reference_time

    @cached_property
    def learning_weights(self) -> FloatArray | None:
        """Each device's learning weight w_k in [0, 1] from its last reported loss; None when all are 1.

        A device that reported a loss of 0 (or less) did not learn: w = 0. One
        that reported a positive loss: ``min(1, loss_k / (UTILITY_SATURATION *
        median))``, over the median of the positive losses reported. One that
        has reported none: 1 (it may learn; planning it finds out). None (the
        signal says nothing) with ``utility`` 0, without losses, or when every
        device reported and none a positive loss (nothing tells them apart).
        """
        if self.losses is None or self.weights.utility == 0:
            return None
        known = np.isfinite(self.losses)
        positive = self.losses[known & (self.losses > 0)]
        if positive.size == 0 and bool(known.all()):
            return None
        scale = UTILITY_SATURATION * float(np.median(positive)) if positive.size else 1.0
        weights = np.ones(self.losses.shape)
        weights[known] = np.clip(self.losses[known] / scale, 0.0, 1.0)
        return None if bool(np.all(weights == 1.0)) else weights

    def learning_share(self, plans: ArrayLike) -> FloatArray:
        """L(V): the share of the plan's samples (FedAvg's weights) held by devices that learn, ``sum D w / sum D``."""
        plans = np.asarray(plans, dtype=np.intp)
        w = self.learning_weights
        if w is None:
            return np.ones(plans.shape[:-1])
        samples = self.jobs[self.job].samples.astype(np.float64)
        return (samples[plans] * w[plans]).sum(axis=-1) / samples[plans].sum(axis=-1)

    def per_learning(self, times: ArrayLike, share: ArrayLike) -> FloatArray:
        """``times / max(share, MIN_SHARE)^gamma``: time per unit of learning."""
        times = np.asarray(times, dtype=np.float64)
        if self.learning_weights is None:
            return times
        return times / np.maximum(np.asarray(share, dtype=np.float64), MIN_SHARE) ** self.weights.utility

    def learning_time(self, plans: ArrayLike, time: ArrayLike | None = None) -> FloatArray:
        """The time term of every cost: normalised round time (expected, or ``time``) over ``L(V)^gamma``.

        Equal to ``time(plans)`` when every device learns (or ``utility`` is 0).
        """
        t = self.time(plans) if time is None else time
        if self.learning_weights is None:
            return np.asarray(t, dtype=np.float64)
        return self.per_learning(t, self.learning_share(plans))

    @cached_property
    def learning_device_times(self) -> FloatArray:
        """``device_times`` over each device's own ``w_k^gamma``: the per-device ranking of Greedy, FedCS, Genetic."""
        w = self.learning_weights
        return self.device_times if w is None else self.per_learning(self.device_times, w)

    @cached_property
    def _frequencies(self) -> tuple[FloatArray, float, float]:
        """The job's frequency vector, its mean and its variance before the plan."""
        freq = self.frequencies[self.job].astype(np.float64)
        return freq, float(freq.mean()), float(freq.var())

    def fairness(self, plans: ArrayLike) -> FloatArray:
        """Formula 5 (with the plan counted, Formula 6) over ``p(1 - p)``.

        Same expansion as :func:`fairness`, with the frequency statistics
        computed once per context.
        """
        plans = np.asarray(plans, dtype=np.intp)
        freq, freq_mean, freq_var = self._frequencies
        K, n = freq.size, plans.shape[-1]
        p = n / K
        spread = freq_var + 2.0 * (freq[plans].sum(axis=-1) - n * freq_mean) / K + p * (1.0 - p)
        return spread / fairness_scale(n, K)

    def cost(self, plans: ArrayLike) -> FloatArray:
        """Formula 2: ``alpha * T + beta * F`` for this job (T per learning share, ``learning_time``)."""
        return self.alpha * self.learning_time(plans) + self.beta * self.fairness(plans)

    @cached_property
    def others(self) -> float:
        """Formula 8's other terms: every other job's Cost under its plan in flight."""
        total = 0.0
        for m, plan in enumerate(self.current_plans):
            if m == self.job or not plan:
                continue
            shift, rate = self.shift_rate(m)
            times = round_time.expected_max(shift[list(plan)], rate[list(plan)])
            reference = float(round_time.mean(shift, rate).mean())
            freq = self.frequencies[m].astype(np.float64)  # already counts the plan in flight
            spread = freq.var() / fairness_scale(len(plan), freq.size)
            total += self.alpha * float(times) / reference + self.beta * spread
        return total

    def total(self, plans: ArrayLike) -> FloatArray:
        """Formula 8: this job's Cost plus the other jobs', their plans held fixed."""
        return self.cost(plans) + self.others

    def recost(self, plans: ArrayLike) -> FloatArray:
        """Formulas 12-13: ``alpha * T + beta * Omega(r) * F`` (Meta-Greedy's selector)."""
        weight = self.beta * omega(self.round, self.weights.omega)
        return self.alpha * self.learning_time(plans) + weight * self.fairness(plans)

    @cached_property
    def fairness_before(self) -> float:
        """The job's normalised fairness before the plan (Formula 5 without V)."""
        freq, _, freq_var = self._frequencies
        return freq_var / fairness_scale(self.size, freq.size)

    def marginal(self, plans: ArrayLike, time: ArrayLike | None = None, *, horizon: float = 1.0) -> FloatArray:
        """The part of TotalCost that depends on the plan: ``alpha*T + beta*(F(V) - F(no plan))``.

        TotalCost minus it is the same for every plan of a round (the other
        jobs' terms and the unfairness already accumulated), so both have the
        same argmin; but that remainder drifts from round to round, so learners
        (BODS's GP, RLDS's rewards) fit this part. ``time`` replaces the
        expected normalised round time by an observed one.

        ``horizon``: how many rounds' TotalCost the fairness increment is
        charged for. The variance a plan adds stays in every later round's
        TotalCost while the round time is paid once, so the plan's share of
        the TotalCost summed over the next H rounds is ``alpha*T + beta*H*(F(V) - F(no plan))``
        (RLDS's return, docs/cost-model.md).
        """
        plans = np.asarray(plans, dtype=np.intp)
        t = self.learning_time(plans, None if time is None else np.asarray(time, dtype=np.float64))
        return self.alpha * t + self.beta * horizon * (self.fairness(plans) - self.fairness_before)

    def observed_cost(self, outcome: RoundOutcome) -> float:
        """Formula 8 with the round time that was observed instead of the expected one.

        Failed devices are charged through ``outcome.round_time``: the round
        waited for them until its deadline. The time counts per learning share
        (``learning_time``), as in every cost.
        """
        plan = np.asarray(outcome.plan, dtype=np.intp)
        time = self.learning_time(plan, outcome.round_time / self.reference_time)
        return float(self.alpha * time + self.beta * self.fairness(plan) + self.others)



# Contexts and the timers of (fleet, job) pairs, kept only as long as their
# keys live: the engine builds fresh ones every plan call.
_MODELS: weakref.WeakKeyDictionary[PlanContext, CostModel] = weakref.WeakKeyDictionary()
_TIMERS: weakref.WeakKeyDictionary[JobModel, tuple[weakref.ref[FleetModel], round_time.PlanTimer]] = (
    weakref.WeakKeyDictionary()
)


def _timer(fleet: FleetModel, job: JobModel) -> round_time.PlanTimer:
    cached = _TIMERS.get(job)
    if cached is not None and cached[0]() is fleet:
        return cached[1]
    shift, rate = round_time.shift_and_rate(fleet.a, fleet.mu, job.epochs, job.samples)
    timer = round_time.PlanTimer(shift, rate, max_plan_size=fleet.size)
    _TIMERS[job] = (weakref.ref(fleet), timer)
    return timer
