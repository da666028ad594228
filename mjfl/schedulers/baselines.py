"""The simple baselines: Random (FedAvg), Greedy and FedCS."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mjfl.schedulers import round_time
from mjfl.schedulers.base import Decision, Plan, PlanContext, RoundOutcome, Stateless, as_plan
from mjfl.schedulers.cost import cost_model

Seed = int | np.random.Generator


def as_generator(seed: Seed) -> np.random.Generator:
    """A numpy Generator from a seed, or the Generator itself."""
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


class Draws:
    """A scheduler whose only state is its generator's: where its random draws stand (``Resumable``)."""

    rng: np.random.Generator

    def state(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state}

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]


class RandomScheduler(Draws):
    """FedAvg's selection (McMahan et al. 2017): a uniform sample of the devices free now.

    When the engine also offers devices other jobs will release
    (``ctx.wait``), FedAvg still samples the available ones; if fewer than the
    plan are free now, it adds those released soonest.
    """

    name = "random"

    def __init__(self, seed: Seed = 0) -> None:
        self.rng = as_generator(seed)

    def plan(self, ctx: PlanContext) -> Decision:
        free = ctx.free_indices
        if ctx.wait is None:
            return Decision(as_plan(self.rng.choice(free, size=ctx.size, replace=False)))
        now = free[ctx.wait[free] == 0]
        if now.size >= ctx.size:
            return Decision(as_plan(self.rng.choice(now, size=ctx.size, replace=False)))
        later = free[ctx.wait[free] > 0]
        soonest = later[np.argsort(ctx.wait[later], kind="stable")[: ctx.size - now.size]]
        return Decision(as_plan(np.concatenate([now, soonest])))

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        pass


def fastest(ctx: PlanContext) -> Plan:
    """The ``ctx.size`` free devices with the shortest expected round time per learning weight (ties: the lower index)."""
    free = ctx.free_indices
    order = np.argsort(cost_model(ctx).learning_device_times[free], kind="stable")
    return as_plan(free[order[: ctx.size]])


class GreedyScheduler(Stateless):
    """The free devices with the shortest expected round time (Shi et al. 2020).

    The time is per learning weight (``CostModel.learning_device_times``): a
    device whose reported loss says it does not learn comes last, however fast.
    Deterministic: ties go to the lower device index.
    """

    name = "greedy"

    def __init__(self, seed: Seed = 0) -> None:
        del seed  # nothing random; the argument keeps every scheduler's signature alike

    def plan(self, ctx: PlanContext) -> Decision:
        return Decision(fastest(ctx))


class FedCSScheduler(Draws):
    """Deadline-based client selection (FedCS, Nishio & Yonetani 2019).

    FedCS asks a random subset of clients for their resources ("resource
    request"), then selects greedily by estimated completion time as many as
    fit a round deadline. Here the request goes to ``pool_factor * size`` random
    free devices; a device fits when the ``confidence`` quantile of its round
    time (Formula 4) is within the deadline. FedCS's objective is the *number* of
    devices under the deadline, not their speed, so with the plan size fixed it
    takes ``size`` of the fitting devices at random; when too few fit it adds
    the next ones in order of estimated completion time.

    The deadline defaults to the median, over the free devices, of that quantile.
    Like every time of the cost model, a device's completion time is per its
    learning weight (``CostModel.learning_weights``), so devices that report
    they do not learn do not fit the deadline.
    """

    name = "fedcs"

    def __init__(
        self,
        seed: Seed = 0,
        *,
        deadline_s: float | None = None,
        pool_factor: float = 2.0,
        confidence: float = 0.9,
    ) -> None:
        if pool_factor < 1:
            raise ValueError("pool_factor must be >= 1")
        self.rng = as_generator(seed)
        self.deadline_s = deadline_s
        self.pool_factor = pool_factor
        self.confidence = confidence

    def plan(self, ctx: PlanContext) -> Decision:
        free = ctx.free_indices
        costs = cost_model(ctx)
        shift, rate = costs.shift_rate(ctx.job)
        if costs.wait is not None:
            shift = shift + costs.wait  # a device released later completes later
        completion = round_time.quantile(self.confidence, shift[free], rate[free])
        if costs.learning_weights is not None:  # a device that does not learn completes nothing: it never fits
            completion = costs.per_learning(completion, costs.learning_weights[free])
        deadline = self.deadline_s if self.deadline_s is not None else float(np.median(completion))
        pool_size = min(free.size, max(ctx.size, int(np.ceil(self.pool_factor * ctx.size))))
        pool = self.rng.choice(free.size, size=pool_size, replace=False)
        fits = pool[completion[pool] <= deadline]
        if fits.size >= ctx.size:
            chosen = self.rng.choice(fits, size=ctx.size, replace=False)
        else:
            late = pool[completion[pool] > deadline]
            late = late[np.argsort(completion[late], kind="stable")]
            chosen = np.concatenate([fits, late[: ctx.size - fits.size]])
        return Decision(as_plan(free[chosen]))

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        pass
