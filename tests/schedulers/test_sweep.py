"""Sweep: the least-used of the k fastest free devices, k swept for the least return."""

import itertools

import numpy as np
import pytest

from mjfl.schedulers.base import META_MEMBERS, CostWeights, Objective
from mjfl.schedulers.cost import cost_model
from mjfl.schedulers.registry import make_scheduler
from mjfl.schedulers.sweep import SweepScheduler

# Eight devices, device k slower than device k-1; the fast half has trained the job often.
A = [0.1 * (k + 1) for k in range(8)]
USED = [[9, 9, 8, 7, 1, 0, 0, 0]]


def ctx_with(context_factory, beta, *, free=None, used=USED, budget=20, objective=None):
    return context_factory(
        A, [10.0] * 8, [10] * 8, size=3, frequencies=used, free=free, budget=budget, objective=objective,
        weights=CostWeights(alpha=1.0, beta=beta),
    )


def test_the_cuts_run_from_the_fastest_devices_to_the_least_used_ones(context_factory):
    plans = SweepScheduler(steps=6).candidates(ctx_with(context_factory, 1.0))
    assert tuple(plans[0]) == (0, 1, 2)  # the cut at the plan's size: the fastest three
    assert tuple(plans[-1]) == (5, 6, 7)  # every device: the three used least (ties: the faster)
    # Each cut keeps the least used of its fastest devices: of the fastest four, 3 and 2 (7 and 8
    # times), then 0 before 1 (9 times each: the faster first); of the fastest five, 4 (once), 3, 2.
    assert [tuple(p) for p in plans] == [(0, 1, 2), (0, 2, 3), (2, 3, 4), (3, 4, 5), (4, 5, 6), (5, 6, 7)]
    # Busy devices are not offered: with 4 and 5 held, the widest cut takes 3, 6, 7.
    held = SweepScheduler(steps=6).candidates(ctx_with(context_factory, 1.0, free=[1, 1, 1, 1, 0, 0, 1, 1]))
    assert tuple(held[-1]) == (3, 6, 7)


def test_it_keeps_the_cut_with_the_least_return_which_moves_with_the_fairness_weight(context_factory):
    chosen = {}
    for beta in (0.0, 0.005, 50.0):
        ctx = ctx_with(context_factory, beta)
        sweep = SweepScheduler(steps=6)
        plan = sweep.plan(ctx).plan
        model = cost_model(ctx)
        returns = model.marginal(sweep.candidates(ctx), horizon=20)  # a 20-round budget: H = the rounds left
        assert model.marginal(np.array([plan]), horizon=20)[0] == pytest.approx(returns.min())
        # No plan of three devices with a smaller return exists: brute force over all 56.
        every = np.array(list(itertools.combinations(range(8), 3)))
        assert returns.min() <= model.marginal(every, horizon=20).min() + 1e-12
        chosen[beta] = plan
    # No weight on fairness: the fastest devices; a heavy one: the least used; in between, a mix.
    assert chosen[0.0] == (0, 1, 2) and chosen[50.0] == (5, 6, 7)
    assert chosen[0.005] == (4, 5, 6)


def test_a_job_with_a_target_gets_the_least_return_or_with_fastest_the_first_cut(context_factory):
    def ctx(objective):
        return context_factory(
            A, [10.0] * 8, [10] * 8, size=3, frequencies=USED, objective=objective,
            weights=CostWeights(alpha=1.0, beta=50.0),
        )

    target = Objective(accuracy=0.8, rounds=20)
    assert SweepScheduler().plan(ctx(target)).plan == (5, 6, 7)  # H = 1, fairness weighs most: the least used
    assert SweepScheduler(targets="fastest").plan(ctx(target)).plan == (0, 1, 2)  # the fastest devices
    assert SweepScheduler(targets="fastest").plan(ctx(Objective(rounds=20))).plan == (5, 6, 7)  # no target: as ever
    with pytest.raises(ValueError, match="targets"):
        SweepScheduler(targets="fair")


def test_sweeps_options_and_its_place_in_meta_greedy(context_factory):
    sweep = make_scheduler("sweep", options={"sweep": {"steps": 4, "horizon": 2}})
    assert (sweep.steps, sweep.horizon, sweep.targets) == (4, 2, "return")
    with pytest.raises(ValueError, match="steps"):
        SweepScheduler(steps=1)
    with pytest.raises(ValueError, match="horizon"):
        SweepScheduler(horizon=0)
    # mjfl's Meta-Greedy has it as a seventh member that plans a job with a target with the fastest
    # devices; the paper's keeps its six.
    meta = make_scheduler("meta-greedy")
    assert [m.name for m in meta.members] == [*META_MEMBERS, "sweep"] and meta.members[-1].targets == "fastest"
    assert [m.name for m in make_scheduler("meta-greedy-paper").members] == list(META_MEMBERS)
    decision = meta.plan(ctx_with(context_factory, 50.0, objective=Objective(accuracy=0.8, rounds=20)))
    assert decision.candidates["sweep"] == decision.candidates["greedy"] and decision.chosen_by != "sweep"
    chosen = make_scheduler("meta-greedy", members=["greedy", "sweep"]).plan(ctx_with(context_factory, 0.005))
    assert chosen.chosen_by == "sweep" and chosen.plan == (4, 5, 6)  # no target: its least return wins
