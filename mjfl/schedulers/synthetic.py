"""Synthetic heterogeneous fleets and a cost-model-only multi-job driver.

Fleet generator (used by the scheduler benchmark, the tests and, when no
profile file is given, by simulations):

* ``a_k`` (seconds per sample and epoch, the speed floor of Formula 4) is
  log-uniform on [1 ms, 20 ms]: a 20x spread between the fastest and the
  slowest device, as between the flagship and budget phones of the paper's
  appendix;
* ``1/mu_k`` (the mean extra time per sample and epoch) is ``a_k`` times a
  log-uniform factor on [0.1, 1.5]: some devices are steady, some fluctuate by
  more than their own floor;
* a job's shard sizes ``D_k^m`` are uniform integers on [20, 200].

The driver plays rounds for M jobs on the cost model alone: each job in turn
plans over the devices the other jobs' in-flight plans leave free, its devices'
round times are sampled from Formula 4, and the scheduler observes the outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mjfl.ids import DeviceId, JobId
from mjfl.schedulers import round_time
from mjfl.schedulers.base import (
    CostWeights,
    FleetModel,
    JobModel,
    Objective,
    Plan,
    PlanContext,
    RoundOutcome,
    Scheduler,
    plan_size,
)
from mjfl.schedulers.cost import update_frequencies


def synthetic_fleet(size: int, rng: np.random.Generator) -> FleetModel:
    """A heterogeneous fleet of ``size`` devices (see the module docstring)."""
    a = np.exp(rng.uniform(np.log(1e-3), np.log(2e-2), size))
    fluctuation = a * np.exp(rng.uniform(np.log(0.1), np.log(1.5), size))
    ids = tuple(DeviceId(f"sim-{k:04d}") for k in range(size))
    return FleetModel(ids=ids, a=a, mu=1.0 / fluctuation)


def synthetic_jobs(
    count: int, fleet_size: int, rng: np.random.Generator, *, fraction: float = 0.1, epochs: int = 5,
    budget: int | None = None,
) -> tuple[JobModel, ...]:
    """``count`` jobs with shard sizes uniform on [20, 200] per device.

    ``budget``: the rounds they run, without a target (``Objective``); None: not known.
    """
    objective = Objective(rounds=budget)
    return tuple(
        JobModel(JobId(f"job-{m}"), epochs, rng.integers(20, 201, fleet_size), fraction, objective)
        for m in range(count)
    )


PlanHook = Callable[[PlanContext, Plan, float], None]


def drive(
    schedulers: Sequence[Scheduler],
    fleet: FleetModel,
    jobs: Sequence[JobModel],
    rounds: int,
    rng: np.random.Generator,
    *,
    weights: CostWeights = CostWeights(),  # noqa: B008 - frozen dataclass
    timer: Callable[[], float] | None = None,
    on_plan: PlanHook | None = None,
    truth: FleetModel | None = None,
) -> list[list[RoundOutcome]]:
    """Play ``rounds`` rounds of every job on the cost model; returns each job's outcomes.

    Job m plans while every other job's latest plan is still in flight, so
    plans must avoid those devices. ``on_plan(ctx, plan, seconds)`` sees every
    plan call, timed with ``timer`` when given.
    """
    M, K = len(jobs), fleet.size
    frequencies = np.zeros((M, K), dtype=np.int64)
    current: list[Plan | None] = [None] * M
    outcomes: list[list[RoundOutcome]] = [[] for _ in range(M)]
    for r in range(1, rounds + 1):
        for m, scheduler in enumerate(schedulers):
            free = np.ones(K, dtype=bool)
            for other, plan in enumerate(current):
                if other != m and plan:
                    free[list(plan)] = False
            size = plan_size(jobs[m].fraction, K, int(free.sum()))
            ctx = PlanContext(
                job=m, round=r, fleet=fleet, jobs=tuple(jobs), free=free,
                frequencies=frequencies.copy(), current_plans=tuple(current), size=size, weights=weights,
            )
            start = timer() if timer else 0.0
            plan = scheduler.plan(ctx).plan
            elapsed = timer() - start if timer else 0.0
            if on_plan:
                on_plan(ctx, plan, elapsed)
            actual = truth or fleet
            shift, rate = round_time.shift_and_rate(actual.a, actual.mu, jobs[m].epochs, jobs[m].samples)
            times = round_time.sample(rng, shift[list(plan)], rate[list(plan)])
            outcome = RoundOutcome(m, r, plan, dict(zip(plan, map(float, times))), frozenset(), float(times.max()))
            scheduler.observe(ctx, outcome)
            outcomes[m].append(outcome)
            frequencies[m] = update_frequencies(frequencies[m], plan)
            current[m] = plan
    return outcomes
