"""BODS: Bayesian-optimisation-based device scheduling (Algorithm 1).

A Gaussian process with a Matern kernel (Formulas 10-11) models the cost of a
plan from observations (plan, cost). Each round BODS generates feasible
candidate plans over the free devices itself (scikit-optimize's
``Optimizer.ask`` samples its own box space and cannot score ours), scores them
with Expected Improvement (Formula 16, ``skopt.acquisition.gaussian_ei``) and
returns the best; the observed cost of the executed round is added to the
observations (Algorithm 1 lines 5-7).

Encoding. A plan is encoded by what determines its cost, so the GP generalises
across rounds whose free devices differ: its expected round time, its
fairness increment, the mean speed floor (a) and fluctuation (1/mu) of its
devices relative to the fleet, its slowest device's floor, and the share of its
devices that failed recently.

Targets. The GP models the plan-dependent part of TotalCost: the other jobs'
terms of Formula 8 and the fairness already accumulated are the same for every
candidate of a round (they shift, never reorder, its costs) but drift from round
to round, where they would only be noise for the GP.

Speed. Hyperparameters (ARD length scales, noise) are refitted by marginal
likelihood every ``refit_every`` observations, in ``observe``; in between the
posterior is updated with the kernel held fixed. ``plan`` only predicts.
"""

from __future__ import annotations

import warnings
from collections import deque

import numpy as np
from numpy.typing import NDArray
from skopt.acquisition import gaussian_ei
from skopt.learning import GaussianProcessRegressor
from skopt.learning.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from mjfl.schedulers.base import Plan, PlanContext, RoundOutcome, as_plan
from mjfl.schedulers.baselines import Seed, as_generator
from mjfl.schedulers.cost import fairness_scale
from mjfl.schedulers.genetic import top_members

FEATURES = 6


def encode(ctx: PlanContext, plans: NDArray[np.intp], failure_rate: NDArray[np.float64]) -> NDArray[np.float64]:
    """Plan encodings, shape (B, FEATURES), for plans of device indices (B, n)."""
    costs = ctx.costs
    shift, rate = ctx.shift_rate(ctx.job)
    reference = costs.reference_time
    freq = ctx.frequencies[ctx.job].astype(np.float64)
    excess = freq[plans] - freq.mean()
    return np.column_stack(
        [
            costs.time(plans),
            2.0 * excess.sum(axis=1) / freq.size / fairness_scale(plans.shape[1], freq.size),
            shift[plans].mean(axis=1) / reference,
            (1.0 / rate[plans]).mean(axis=1) / reference,
            shift[plans].max(axis=1) / reference,
            failure_rate[plans].mean(axis=1),
        ]
    )


class BODSScheduler:
    """Algorithm 1: GP (Matern) + Expected Improvement over generated feasible plans."""

    name = "bods"

    def __init__(
        self,
        seed: Seed = 0,
        *,
        candidates: int = 64,
        initial_points: int = 8,
        window: int = 150,
        refit_every: int = 5,
        xi: float = 0.01,
        nu: float = 2.5,
    ) -> None:
        if candidates < 2 or initial_points < 2 or window < initial_points or refit_every < 1:
            raise ValueError("bods: candidates >= 2, initial_points >= 2, window >= initial_points")
        self.rng = as_generator(seed)
        self.candidates = candidates
        self.initial_points = initial_points
        self.xi = xi
        self.refit_every = refit_every
        self.X: deque[NDArray[np.float64]] = deque(maxlen=window)
        self.y: deque[float] = deque(maxlen=window)
        self.gp: GaussianProcessRegressor | None = None
        self._kernel = ConstantKernel(1.0, (1e-3, 1e3)) * Matern(
            length_scale=np.ones(FEATURES), length_scale_bounds=(1e-2, 1e3), nu=nu
        ) + WhiteKernel(1e-2, (1e-6, 1e1))
        self._since_refit = 0
        self._failures: NDArray[np.float64] | None = None

    def plan(self, ctx: PlanContext) -> Plan:
        failure_rate = self._failure_rate(ctx)
        if self.gp is None:
            # Algorithm 1 line 1: random observation points scored by the cost model.
            plans = ctx.free_indices[self._sample(ctx, self.initial_points, uniform=True)]
            self._add(encode(ctx, plans, failure_rate), self._target(ctx, plans, ctx.costs.time(plans)))
            self._fit(optimise=True)
        # Line 3: candidate plans over the free devices; line 4: the largest EI.
        plans = ctx.free_indices[self._sample(ctx, self.candidates, uniform=False)]
        X = encode(ctx, plans, failure_rate)
        assert self.gp is not None
        ei = gaussian_ei(X, self.gp, y_opt=float(np.min(self.y)), xi=self.xi)
        return as_plan(plans[int(np.argmax(ei))])

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        """Lines 6-7: the observed cost of the executed round joins the observations."""
        failure_rate = self._failure_rate(ctx)
        self._record_failures(outcome)
        plan = np.asarray([outcome.plan], dtype=np.intp)
        observed_time = np.array([outcome.round_time / ctx.costs.reference_time])
        self._add(encode(ctx, plan, failure_rate), self._target(ctx, plan, observed_time))
        self._since_refit += 1
        self._fit(optimise=self._since_refit >= self.refit_every)

    def _target(self, ctx: PlanContext, plans: NDArray[np.intp], time: NDArray[np.float64]) -> NDArray[np.float64]:
        """The plan-dependent part of TotalCost: alpha*T + beta*(F(V) - F before the round)."""
        freq = ctx.frequencies[ctx.job].astype(np.float64)
        before = freq.var() / fairness_scale(plans.shape[1], freq.size)
        return ctx.weights.alpha * time + ctx.weights.beta * (ctx.costs.fairness(plans) - before)

    def _sample(self, ctx: PlanContext, count: int, *, uniform: bool) -> NDArray[np.intp]:
        """Feasible plans (positions in the free set) from uniform to strongly cost-biased.

        Plan i takes the ``size`` largest of ``u - temperature_i * score`` with
        Gumbel noise u: a Plackett-Luce sample whose bias toward cheap devices
        (short expected time, rarely scheduled) ranges from none to strong.
        """
        free = ctx.free_indices
        gumbel = -np.log(-np.log(self.rng.random((count, free.size))))
        if uniform:
            return top_members(gumbel, ctx.size)
        freq = ctx.frequencies[ctx.job][free].astype(np.float64)
        times = ctx.device_times[free]
        score = (
            ctx.weights.alpha * (times - times.mean()) / (times.std() + 1e-12)
            + ctx.weights.beta * np.sqrt(ctx.round) * (freq - freq.mean()) / (freq.std() + 1.0)
        )
        bias = np.geomspace(0.05, 20.0, count)
        bias[: max(1, count // 8)] = 0.0
        return top_members(gumbel - bias[:, None] * score, ctx.size)

    def _add(self, X: NDArray[np.float64], y: NDArray[np.float64]) -> None:
        for row, value in zip(X, y):
            self.X.append(row)
            self.y.append(float(value))

    def _fit(self, *, optimise: bool) -> None:
        X, y = np.asarray(self.X), np.asarray(self.y)
        if optimise or self.gp is None:
            gp = GaussianProcessRegressor(kernel=self._kernel, normalize_y=True, random_state=0)
            self._since_refit = 0
        else:
            gp = GaussianProcessRegressor(kernel=self.gp.kernel_, normalize_y=True, optimizer=None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence chatter on tiny data sets
            gp.fit(X, y)
        self.gp = gp

    def _failure_rate(self, ctx: PlanContext) -> NDArray[np.float64]:
        if self._failures is None or self._failures.shape[0] != ctx.fleet.size:
            self._failures = np.zeros((ctx.fleet.size, 2))  # per device: (failed, scheduled)
        failed, scheduled = self._failures.T
        return (failed + 0.0) / (scheduled + 1.0)

    def _record_failures(self, outcome: RoundOutcome) -> None:
        assert self._failures is not None
        # Decay so that a device that recovers is trusted again.
        self._failures *= 0.9
        self._failures[list(outcome.plan), 1] += 1
        self._failures[list(outcome.failed), 0] += 1
