"""RLDS's return: summed over the rounds its job has left (as Meta-Greedy's), or over a fixed H."""

import numpy as np
import pytest
from plan_contexts import make_context

from mjfl.errors import ConfigError
from mjfl.schedulers.cost import return_horizon
from mjfl.schedulers.registry import make_scheduler
from mjfl.schedulers.rlds import RLDSScheduler
from mjfl.schedulers.synthetic import synthetic_fleet, synthetic_jobs


def context(round_, budget):
    rng = np.random.default_rng(0)
    fleet = synthetic_fleet(30, rng)
    jobs = synthetic_jobs(2, 30, rng, fraction=0.1)
    return make_context(
        fleet.a, fleet.mu, np.stack([j.samples for j in jobs]), size=3, round_=round_, budget=budget,
        frequencies=rng.integers(0, 5, (2, 30)),
    )


@pytest.mark.parametrize(("round_", "budget", "expected"), [(1, 30, 30.0), (28, 30, 3.0), (31, 30, 1.0), (5, None, 1.0)])
def test_auto_is_the_rounds_the_job_has_left_as_for_meta_greedy(round_, budget, expected):
    ctx = context(round_, budget)
    assert return_horizon(ctx) == expected
    assert RLDSScheduler(0).horizon_for(ctx) == expected
    meta = make_scheduler("meta-greedy", seed=0)  # the learned selector: the return while a job is off course
    assert meta.selector.fair.horizon_for(ctx) == expected
    assert RLDSScheduler(0, horizon=10).horizon_for(ctx) == 10.0  # the old fixed return


def learned(horizon, ctx):
    rlds = RLDSScheduler(3, horizon=horizon, pretrain_rounds=3, plans_per_round=6)
    plan = rlds.plan(ctx).plan
    return plan, rlds.learner.policy.parameters.copy()


def test_the_return_rlds_learns_from_uses_that_horizon():
    # "auto" on a job with 8 rounds left learns exactly what a fixed H = 8 learns, and not what H = 10 does.
    ctx = context(23, 30)
    auto_plan, auto_params = learned("auto", ctx)
    fixed_plan, fixed_params = learned(8.0, ctx)
    _, ten_params = learned(10.0, ctx)
    assert auto_plan == fixed_plan
    np.testing.assert_array_equal(auto_params, fixed_params)
    assert not np.array_equal(auto_params, ten_params)


def test_a_bad_horizon_names_rldss_option_table():
    with pytest.raises(ConfigError) as err:
        make_scheduler("rlds", options={"rlds": {"horizon": "forever"}})
    assert err.value.field == "scheduler.options.rlds"


def test_the_papers_meta_greedy_keeps_rldss_fixed_return_unless_told():
    def rlds_of(method, options=None):
        return next(m for m in make_scheduler(method, options=options).members if m.name == "rlds")

    assert rlds_of("meta-greedy").horizon == "auto"
    assert rlds_of("meta-greedy-paper").horizon == 10.0  # under ReCost the fixed H plans cheaper (registry)
    assert rlds_of("meta-greedy-paper", {"rlds": {"horizon": "auto"}}).horizon == "auto"
