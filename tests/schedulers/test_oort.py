"""Oort (Lai et al. 2021): utility-guided exploitation, speed-guided exploration, the pacer."""

import numpy as np
import pytest

from mjfl.coordinator.config import parse_config
from mjfl.schedulers.base import RoundOutcome
from mjfl.schedulers.oort import OortScheduler
from mjfl.schedulers.registry import make_scheduler
from mjfl.schedulers.synthetic import drive, synthetic_fleet, synthetic_jobs

# Near-deterministic devices (large mu): round time ~ a * 20 samples.
STEADY_MU = 1e6


def seen(scheduler, ctx, devices, *, losses=None, durations=None, failed=(), round_=1):
    """Let ``scheduler`` observe one round of ``devices`` with the given losses and round times."""
    durations = durations or {k: 1.0 for k in devices if k not in failed}
    losses = {} if losses is None else {k: v for k, v in losses.items() if k not in failed}
    outcome = RoundOutcome(
        ctx.job, round_, tuple(devices), durations, frozenset(failed), max(durations.values()), losses=losses
    )
    scheduler.observe(ctx, outcome)


def test_plans_have_the_size_asked_over_free_devices_only(context_factory):
    free = [k % 3 != 0 for k in range(12)]
    ctx = context_factory([0.01] * 12, [STEADY_MU] * 12, [20] * 12, size=4, free=free, round_=3)
    scheduler = OortScheduler(0)
    seen(scheduler, ctx, [1, 2, 4], losses={1: 2.0, 2: 0.1, 4: 1.0})
    for _ in range(20):
        plan = scheduler.plan(ctx).plan
        assert len(plan) == len(set(plan)) == 4
        assert all(free[k] for k in plan), plan


@pytest.mark.parametrize("seed", range(5))
def test_it_exploits_the_devices_of_highest_loss_once_all_are_tried(context_factory, seed):
    ctx = context_factory([0.01] * 10, [STEADY_MU] * 10, [20] * 10, size=3, round_=4)
    scheduler = OortScheduler(seed)
    seen(scheduler, ctx, range(10), losses={k: 5.0 if k in (2, 5, 7) else 0.2 for k in range(10)})
    assert scheduler.plan(ctx).plan == (2, 5, 7)


def test_statistical_utility_weighs_samples_by_loss(context_factory):
    # Device 0 has a tenth of the loss but fifty times the samples: |B_i| x loss ranks it first.
    samples = [1000] + [20] * 9
    ctx = context_factory([0.01] * 10, [STEADY_MU] * 10, samples, size=1, round_=4)
    scheduler = OortScheduler(0)
    seen(scheduler, ctx, range(10), losses={k: 0.5 if k == 0 else 5.0 for k in range(10)})
    assert scheduler.plan(ctx).plan == (0,)


def test_never_tried_devices_get_explored_early_and_late(context_factory):
    ctx = context_factory([0.01] * 20, [STEADY_MU] * 20, [20] * 20, size=5, round_=2)
    scheduler = OortScheduler(0)
    seen(scheduler, ctx, range(10), losses={k: 3.0 for k in range(10)})
    early = set(scheduler.plan(ctx).plan)
    assert len(early - set(range(10))) == round(scheduler.exploration(2) * 5) == 4
    late = context_factory([0.01] * 20, [STEADY_MU] * 20, [20] * 20, size=5, round_=500)
    assert scheduler.exploration(500) == scheduler.min_epsilon
    assert len(set(scheduler.plan(late).plan) - set(range(10))) == 1


def test_exploration_favours_fast_devices(context_factory):
    # Seven fast devices and three 100x slower, none tried: T is a fast device's time.
    a = [0.001] * 7 + [0.1] * 3
    ctx = context_factory(a, [STEADY_MU] * 10, [20] * 10, size=2)
    picks = [k for seed in range(50) for k in OortScheduler(seed).plan(ctx).plan]
    assert sum(k >= 7 for k in picks) <= 2, "slow untried devices drawn as often as fast ones"


def test_among_equally_useful_devices_the_fast_ones_are_exploited(context_factory):
    ctx = context_factory([0.01] * 10, [STEADY_MU] * 10, [20] * 10, size=3, round_=4)
    scheduler = OortScheduler(0)
    durations = {k: 1.0 if k < 5 else 10.0 for k in range(10)}
    seen(scheduler, ctx, range(10), losses={k: 1.0 for k in range(10)}, durations=durations)
    for _ in range(10):
        assert set(scheduler.plan(ctx).plan) <= set(range(5))


def test_a_failed_device_loses_its_statistical_utility(context_factory):
    ctx = context_factory([0.01] * 4, [STEADY_MU] * 4, [20] * 4, size=1, round_=3)
    scheduler = OortScheduler(0)
    seen(scheduler, ctx, range(4), losses={k: 5.0 if k == 0 else 1.0 for k in range(4)})
    assert scheduler.plan(ctx).plan == (0,)
    seen(scheduler, ctx, range(4), losses={k: 5.0 for k in range(4)}, failed={0}, round_=2)
    assert scheduler.plan(ctx).plan != (0,)


def test_staleness_brings_back_devices_left_out_long(context_factory):
    # Equal losses and speeds: the device last seen in round 1 outranks those seen in round 9.
    ctx = context_factory([0.01] * 4, [STEADY_MU] * 4, [20] * 4, size=1, round_=10)
    scheduler = OortScheduler(0)
    seen(scheduler, ctx, [3], losses={3: 1.0}, round_=1)
    seen(scheduler, ctx, [0, 1, 2], losses={0: 1.0, 1: 1.0, 2: 1.0}, round_=9)
    assert scheduler.plan(ctx).plan == (3,)


@pytest.mark.parametrize(("trend", "relaxed"), [(-1, True), (+1, False)])
def test_the_pacer_relaxes_the_preferred_duration_when_utility_falls(context_factory, trend, relaxed):
    ctx = context_factory([0.01] * 4, [STEADY_MU] * 4, [20] * 4, size=1)
    scheduler = OortScheduler(0, pacer_window=3, preferred_quantile=0.5, pacer_step=0.1)
    for r in range(1, 7):
        loss = 1.0 + trend * 0.1 * r
        seen(scheduler, ctx, range(4), losses={k: loss for k in range(4)}, round_=r)
    assert scheduler.preferred_quantile == pytest.approx(0.6 if relaxed else 0.5)


def test_without_losses_it_still_prefers_fast_devices_and_rotates():
    # The benchmark's driver trains nothing: system utility and staleness alone decide.
    rng = np.random.default_rng(3)
    fleet = synthetic_fleet(100, rng)
    jobs = synthetic_jobs(1, 100, rng, fraction=0.1)

    def mean_round_time(method):
        outcomes = drive([make_scheduler(method, 3)], fleet, jobs, 30, np.random.default_rng(3))[0]
        return np.mean([o.round_time for o in outcomes]), {k for o in outcomes for k in o.plan}

    oort_time, oort_devices = mean_round_time("oort")
    random_time, _ = mean_round_time("random")
    assert oort_time < 0.8 * random_time
    assert len(oort_devices) > 30, "the staleness bonus should spread plans beyond one fast set"


def test_same_seed_same_plans_with_losses(context_factory):
    def plans(seed):
        ctx = context_factory(np.linspace(0.001, 0.02, 30), [100.0] * 30, [50] * 30, size=5, round_=2)
        scheduler = OortScheduler(seed)
        seen(scheduler, ctx, range(0, 30, 2), losses={k: 1.0 + (k % 7) for k in range(0, 30, 2)})
        return [scheduler.plan(ctx).plan for _ in range(5)]

    assert plans(4) == plans(4)
    assert plans(4) != plans(5)


def test_it_can_join_meta_greedy():
    meta = make_scheduler("meta-greedy", seed=0, members=["greedy", "random", "oort"])
    rng = np.random.default_rng(0)
    fleet = synthetic_fleet(30, rng)
    jobs = synthetic_jobs(2, 30, rng, fraction=0.2)
    outcomes = drive([meta, make_scheduler("meta-greedy", 1, members=["oort", "fedcs"])], fleet, jobs, 4, rng)
    assert all(len(o.plan) == 6 for job in outcomes for o in job)
    assert [m.name for m in meta.members] == ["greedy", "random", "oort"]


def test_the_config_names_it_as_method_member_and_options():
    raw = {
        "fleet": {"size": 10}, "jobs": [{"name": "a", "model": "lenet5"}],
        "scheduler": {"method": "oort", "members": ["greedy", "oort"], "options": {"oort": {"alpha": 1.0, "pacer_window": 3}}},
    }
    s = parse_config(raw).scheduler
    oort = make_scheduler(s.method, 0, options=s.options, members=s.members)
    assert isinstance(oort, OortScheduler) and (oort.alpha, oort.pacer_window) == (1.0, 3)
    meta = make_scheduler("meta-greedy", 0, options=s.options, members=s.members)
    assert meta.members[1].alpha == 1.0
