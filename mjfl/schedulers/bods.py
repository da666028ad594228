"""BODS: Bayesian-optimisation-based device scheduling (Algorithm 1).

A Gaussian process with a Matern kernel (Formulas 10-11) models the cost of a
plan from observations (plan, cost). Each round BODS generates feasible
candidate plans over the free devices itself (scikit-optimize's
``Optimizer.ask`` samples its own box space and cannot score ours), scores them
with Expected Improvement (Formula 16, ``skopt.acquisition.gaussian_ei``) and
returns the best; the observed cost of the executed round is added to the
observations (Algorithm 1 lines 5-7).

Encoding. A plan is encoded by what determines its cost, so the GP generalises
across rounds whose free devices differ: its expected round time under the
profiles, the same under profiles stretched by how much slower than profiled
each device has run so far, its fairness increment, and the share of its
devices that failed recently. What each device revealed is kept by device id,
so devices that leave and join a real fleet keep their own history.

Targets. The GP models the plan-dependent part of TotalCost
(``CostModel.marginal``): the other jobs' terms of Formula 8 and the unfairness
already accumulated are the same for every candidate of a round (they shift,
never reorder, its costs) but drift from round to round, where they would only
be noise for the GP.

Speed. Hyperparameters (ARD length scales, noise) are refitted by marginal
likelihood every ``refit_every`` observations, in ``observe``; in between the
posterior is updated with the kernel held fixed. ``plan`` only predicts.
"""

from __future__ import annotations

import warnings
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.base import clone
from skopt.acquisition import gaussian_ei
from skopt.learning import GaussianProcessRegressor
from skopt.learning.gaussian_process.kernels import ConstantKernel, Matern, WhiteKernel

from mjfl.ids import DeviceId
from mjfl.schedulers import round_time
from mjfl.schedulers.base import Decision, PlanContext, RoundOutcome, as_plan
from mjfl.schedulers.baselines import Seed, as_generator
from mjfl.schedulers.cost import cost_model, fairness_scale, omega
from mjfl.schedulers.genetic import biased_plans, device_scores, random_plans

FEATURES = 4


def encode(ctx: PlanContext, plans: NDArray[np.intp], history: DeviceHistory) -> NDArray[np.float64]:
    """Plan encodings, shape (B, FEATURES), for plans of device indices (B, n)."""
    costs = cost_model(ctx)
    learned, failure_rate = history.learned(ctx)
    freq = ctx.frequencies[ctx.job].astype(np.float64)
    excess = freq[plans] - freq.mean()
    # Both times per learning share (the cost model's time term), so the GP sees what its target charges.
    return np.column_stack(
        [
            costs.learning_time(plans),
            costs.learning_time(plans, learned.expected_max(plans) / costs.reference_time),
            2.0 * excess.sum(axis=1) / freq.size / fairness_scale(plans.shape[1], freq.size),
            failure_rate[plans].mean(axis=1),
        ]
    )


def fitted_kernel(gp: GaussianProcessRegressor | None) -> dict[str, Any] | None:
    """The hyperparameters of ``gp``'s fitted kernel by name (None without a GP): what refits it exactly."""
    if gp is None:
        return None
    fitted = gp.kernel_.get_params()
    return {h.name: fitted[h.name] for h in gp.kernel_.hyperparameters}


class DeviceHistory:
    """What rounds revealed about each device, by device id, decayed so that old news fades.

    ``slowdown`` is the mean ratio of observed to expected round time over a
    device's rounds, shrunk toward 1 (as profiled) by one pseudo-observation;
    ``failure_rate`` the share of its rounds it did not return. Both forget
    with ``decay`` per observed round of the device. A device that leaves the
    fleet keeps its history for when it comes back; a device never seen
    starts as profiled.
    """

    def __init__(self, decay: float = 0.9) -> None:
        self.decay = decay
        self._row: dict[DeviceId, int] = {}
        # Per known device: sum of time ratios, rounds returned, failed, scheduled.
        self._counts = np.zeros((4, 0))
        self._learned: tuple[PlanContext, round_time.PlanTimer, NDArray[np.float64]] | None = None

    def learned(self, ctx: PlanContext) -> tuple[round_time.PlanTimer, NDArray[np.float64]]:
        """Formula 4 with every device of ``ctx`` stretched by its slowdown, and its failure rates.

        Built once per context and history (a round's plan and its observation share it).
        """
        if self._learned is None or self._learned[0] is not ctx:
            costs = cost_model(ctx)
            shift, rate = costs.shift_rate(ctx.job)
            slowdown = self.slowdown(ctx.fleet.ids)
            # A device's wait for release is another job's time, not stretched by its slowdown.
            wait = 0.0 if costs.wait is None else costs.wait
            timer = round_time.PlanTimer(shift * slowdown + wait, rate / slowdown, ctx.fleet.size)
            self._learned = (ctx, timer, self.failure_rate(ctx.fleet.ids))
        return self._learned[1], self._learned[2]

    def slowdown(self, devices: Sequence[DeviceId]) -> NDArray[np.float64]:
        ratio_sum, returned, _, _ = self._columns(devices)
        return (1.0 + ratio_sum) / (1.0 + returned)

    def failure_rate(self, devices: Sequence[DeviceId]) -> NDArray[np.float64]:
        _, _, failed, scheduled = self._columns(devices)
        return failed / (scheduled + 1.0)

    def record(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        self._learned = None
        ids, times = ctx.fleet.ids, cost_model(ctx).round_times  # durations count from the task's start
        rows = self._rows([ids[k] for k in outcome.plan])
        self._counts[:, rows] *= self.decay
        for device, seconds in outcome.durations.items():
            row = self._row[ids[device]]
            self._counts[0, row] += seconds / times[device]
            self._counts[1, row] += 1
        self._counts[3, rows] += 1
        self._counts[2, self._rows([ids[k] for k in outcome.failed])] += 1

    def state(self) -> dict[str, Any]:
        """The devices in the order of their columns, and their four counts (4, devices)."""
        return {"devices": list(self._row), "counts": self._counts.copy()}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self._row = {DeviceId(d): i for i, d in enumerate(state["devices"])}
        self._counts = np.array(state["counts"], dtype=np.float64).reshape(4, len(self._row))
        self._learned = None

    def _rows(self, devices: Sequence[DeviceId]) -> NDArray[np.intp]:
        new = [d for d in dict.fromkeys(devices) if d not in self._row]
        if new:
            self._row.update({d: len(self._row) + i for i, d in enumerate(new)})
            self._counts = np.concatenate([self._counts, np.zeros((4, len(new)))], axis=1)
        return np.fromiter((self._row[d] for d in devices), dtype=np.intp, count=len(devices))

    def _columns(self, devices: Sequence[DeviceId]) -> NDArray[np.float64]:
        """The four counts of each device, shape (4, len(devices)); zeros for devices never seen."""
        known = np.fromiter((self._row.get(d, -1) for d in devices), dtype=np.intp, count=len(devices))
        out = np.zeros((4, len(devices)))
        seen = known >= 0
        out[:, seen] = self._counts[:, known[seen]]
        return out


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
        ) + WhiteKernel(0.1, (1e-2, 1e1))
        self._since_refit = 0
        self.history = DeviceHistory()
        self._incumbent = 0.0

    def plan(self, ctx: PlanContext) -> Decision:
        history = self.history
        if self.gp is None:
            # Algorithm 1 line 1: random observation points scored by the cost model.
            plans = ctx.free_indices[self.candidate_plans(ctx, self.initial_points, uniform=True)]
            self._add(encode(ctx, plans, history), cost_model(ctx).marginal(plans))
            self._fit(optimise=True)
        # Line 3: candidate plans over the free devices; line 4: the largest EI.
        plans = ctx.free_indices[self.candidate_plans(ctx, self.candidates, uniform=False)]
        X = encode(ctx, plans, history)
        assert self.gp is not None
        ei = gaussian_ei(X, self.gp, y_opt=self._incumbent, xi=self.xi)
        return Decision(as_plan(plans[int(np.argmax(ei))]))

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        """Lines 6-7: the observed cost of the executed round joins the observations."""
        costs = cost_model(ctx)
        plan = np.asarray([outcome.plan], dtype=np.intp)
        observed_time = np.array([outcome.round_time / costs.reference_time])
        # Encode with what was known when the plan was made, then learn from it.
        self._add(encode(ctx, plan, self.history), costs.marginal(plan, time=observed_time))
        self.history.record(ctx, outcome)
        self._since_refit += 1
        self._fit(optimise=self._since_refit >= self.refit_every)

    def state(self) -> dict[str, Any]:
        """Its observations, the GP's fitted kernel (the GP is refitted on them, unchanged), the device history, its generator.

        The GP is always fitted on the current observations, so its kernel's
        hyperparameters and the observations give it back exactly.
        """
        return {
            "rng": self.rng.bit_generator.state,
            "X": np.array(self.X, dtype=np.float64).reshape(len(self.X), FEATURES),
            "y": list(self.y),
            "kernel": fitted_kernel(self.gp),
            "since_refit": self._since_refit,
            "incumbent": self._incumbent,
            "history": self.history.state(),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.X.clear()
        self.X.extend(np.array(row, dtype=np.float64) for row in state["X"])
        self.y.clear()
        self.y.extend(float(v) for v in state["y"])
        self.history.load_state(state["history"])
        self.gp = None
        if state["kernel"] is not None:
            kernel = clone(self._kernel).set_params(**state["kernel"])
            self._fit_gp(GaussianProcessRegressor(kernel=kernel, normalize_y=True, optimizer=None))
        self._since_refit = int(state["since_refit"])
        self._incumbent = float(state["incumbent"])

    def candidate_plans(self, ctx: PlanContext, count: int, *, uniform: bool) -> NDArray[np.intp]:
        """Algorithm 1 line 3: feasible plans (positions in the free set), uniform to strongly cost-biased.

        The bias is toward devices that are fast as learned so far (their
        profiles stretched by their slowdown) and rarely scheduled, fairness
        weighed as in ReCost (Formula 13): beta * Omega(r), Omega as configured.
        """
        if uniform:
            return random_plans(self.rng, count, ctx.free_indices.size, ctx.size)
        costs = cost_model(ctx)
        times = costs.round_times * self.history.slowdown(ctx.fleet.ids)
        if costs.wait is not None:
            times = times + costs.wait
        fairness_weight = ctx.weights.beta * omega(ctx.round, ctx.weights.omega)
        scores = device_scores(ctx, times, fairness_weight, costs.learning_weights)
        return biased_plans(self.rng, scores, count, ctx.size)

    def _add(self, X: NDArray[np.float64], y: NDArray[np.float64]) -> None:
        for row, value in zip(X, y):
            self.X.append(row)
            self.y.append(float(value))

    def _fit(self, *, optimise: bool) -> None:
        if optimise or self.gp is None:
            gp = GaussianProcessRegressor(kernel=self._kernel, normalize_y=True, random_state=0)
            self._since_refit = 0
        else:
            gp = GaussianProcessRegressor(kernel=self.gp.kernel_, normalize_y=True, optimizer=None)
        self._fit_gp(gp)
        # Round times are noisy, so the incumbent C+ of Formula 15 is the best
        # *predicted* cost of an observed plan, not the luckiest observation.
        self._incumbent = float(gp.predict(np.asarray(self.X)).min())

    def _fit_gp(self, gp: GaussianProcessRegressor) -> None:
        """``gp`` fitted on the observations becomes the model."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence chatter on tiny data sets
            gp.fit(np.asarray(self.X), np.asarray(self.y))
        self.gp = gp
