"""Invariants every scheduler keeps, over many seeds and fleets."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mjfl.schedulers.base import PlanContext
from mjfl.schedulers.cost import cost_model
from mjfl.schedulers.registry import METHODS, make_scheduler
from mjfl.schedulers.synthetic import drive, synthetic_fleet, synthetic_jobs

# Small budgets keep a hypothesis run quick; the invariants do not depend on them.
FAST = {"rlds": {"pretrain_rounds": 2}, "genetic": {"generations": 4}, "sa": {"steps": 20}, "bods": {"candidates": 16}}


def run(method, seed, devices, jobs, fraction, rounds):
    rng = np.random.default_rng(seed)
    fleet = synthetic_fleet(devices, rng)
    job_models = synthetic_jobs(jobs, devices, rng, fraction=fraction)
    schedulers = [make_scheduler(method, seed=seed + m, options=FAST) for m in range(jobs)]
    calls = []

    def check(ctx: PlanContext, plan, _seconds):
        calls.append((ctx, plan))

    drive(schedulers, fleet, job_models, rounds, rng, on_plan=check)
    return calls


@pytest.mark.parametrize("method", METHODS)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    devices=st.integers(6, 40),
    jobs=st.integers(1, 3),
    fraction=st.sampled_from([0.1, 0.2, 0.3]),
)
def test_plans_are_free_exact_and_exclusive(method, seed, devices, jobs, fraction):
    calls = run(method, seed, devices, jobs, fraction, rounds=3)
    assert len(calls) == 3 * jobs
    for ctx, plan in calls:
        assert len(plan) == ctx.size == len(set(plan))
        assert list(plan) == sorted(plan)
        assert all(ctx.free[d] for d in plan), "a plan used a busy device"
        for other, in_flight in enumerate(ctx.current_plans):
            if other != ctx.job and in_flight:
                assert not set(plan) & set(in_flight), "a device served two jobs at once"


@pytest.mark.parametrize("method", METHODS)
def test_same_seed_same_plans(method):
    first = [plan for _, plan in run(method, 11, 30, 3, 0.2, rounds=4)]
    again = [plan for _, plan in run(method, 11, 30, 3, 0.2, rounds=4)]
    assert first == again


@pytest.mark.parametrize("method", ["random", "fedcs", "genetic", "bods", "rlds", "sa"])
def test_randomised_methods_depend_on_the_seed(method):
    first = [plan for _, plan in run(method, 1, 40, 2, 0.2, rounds=4)]
    other = [plan for _, plan in run(method, 2, 40, 2, 0.2, rounds=4)]
    assert first != other


def test_greedy_takes_the_fastest_free_devices(context_factory):
    ctx = context_factory([3, 1, 2, 5, 4], [1] * 5, [1] * 5, size=2, free=[True, False, True, True, True])
    assert make_scheduler("greedy").plan(ctx).plan == (0, 2)


def test_fedcs_prefers_devices_within_its_deadline(context_factory):
    # Devices 0-4 fit a 5 s deadline at 90% confidence, 5-9 never do.
    a = [0.5] * 5 + [50.0] * 5
    ctx = context_factory(a, [100.0] * 10, [1] * 10, size=3)
    scheduler = make_scheduler("fedcs", seed=0, options={"fedcs": {"deadline_s": 5.0, "pool_factor": 10}})
    plans = {scheduler.plan(ctx).plan for _ in range(30)}
    assert all(set(p) <= {0, 1, 2, 3, 4} for p in plans)
    assert len(plans) > 3  # random among those that fit, not always the same


def test_search_methods_beat_random_on_total_cost(context_factory):
    rng = np.random.default_rng(5)
    fleet = synthetic_fleet(60, rng)
    jobs = synthetic_jobs(1, 60, rng, fraction=0.1)
    from mjfl.schedulers.base import PlanContext

    ctx = PlanContext(0, 1, fleet, jobs, np.ones(60, bool), np.zeros((1, 60), np.int64), (None,), 6)
    costs = cost_model(ctx)
    random_costs = [float(costs.total(np.asarray(make_scheduler("random", s).plan(ctx).plan))) for s in range(20)]
    for method in ("genetic", "sa"):
        cost = float(costs.total(np.asarray(make_scheduler(method, 0).plan(ctx).plan)))
        assert cost < np.percentile(random_costs, 5), method
