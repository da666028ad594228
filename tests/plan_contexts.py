"""Planning contexts from plain lists, for the scheduler tests (the ``context_factory`` fixture gives it too)."""

from __future__ import annotations

import numpy as np

from mjfl.ids import DeviceId, JobId
from mjfl.schedulers.base import CostWeights, FleetModel, JobModel, Objective, PlanContext


def make_context(
    a, mu, samples, *, epochs=1, free=None, frequencies=None, size=1, round_=1,
    current=None, weights=CostWeights(), job=0, fraction=0.5, wait=None, budget=None, objective=None,  # noqa: B008 - frozen dataclass
    losses=None,
) -> PlanContext:
    """A planning context: one job unless ``samples`` is 2-d.

    Every job has ``objective``, or with ``budget`` the objective of a job that runs that many rounds without a target.
    """
    a, mu = np.asarray(a, float), np.asarray(mu, float)
    samples = np.atleast_2d(np.asarray(samples, np.int64))
    K, M = a.size, samples.shape[0]
    fleet = FleetModel(tuple(DeviceId(f"d{k}") for k in range(K)), a, mu)
    objective = objective or Objective(rounds=budget)
    jobs = tuple(JobModel(JobId(f"j{m}"), epochs, samples[m], fraction, objective) for m in range(M))
    return PlanContext(
        job=job, round=round_, fleet=fleet, jobs=jobs,
        free=np.ones(K, bool) if free is None else np.asarray(free, bool),
        frequencies=np.zeros((M, K), np.int64) if frequencies is None else np.asarray(frequencies, np.int64),
        current_plans=tuple(current or [None] * M), size=size, weights=weights,
        wait=None if wait is None else np.asarray(wait, float),
        losses=None if losses is None else np.asarray(losses, float),
    )
