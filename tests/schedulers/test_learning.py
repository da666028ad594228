"""BODS and RLDS learn: from observed rounds (BODS) and from pre-training (RLDS)."""

from collections import Counter
from itertools import permutations

import numpy as np
import pytest

from mjfl.ids import DeviceId, JobId
from mjfl.schedulers.base import CostWeights, FleetModel, JobModel, PlanContext, RoundOutcome
from mjfl.schedulers.bods import BODSScheduler, encode
from mjfl.schedulers.cost import cost_model, fairness_scale
from mjfl.schedulers.registry import make_scheduler
from mjfl.schedulers.rlds import (
    FEATURES,
    PolicyNetwork,
    RLDSScheduler,
    device_features,
    draw,
    order_log_probability,
)
from mjfl.schedulers.synthetic import drive, synthetic_fleet, synthetic_jobs


def mismatched_run(method, seed, beta, rounds=45):
    """Rounds on a fleet where 8 of the 20 fastest-profiled devices really run 5x slower.

    Returns the number of those devices in each plan and each round's observed
    plan-dependent cost, alpha * T_observed / T_ref + beta * (fairness increment).
    """
    rng = np.random.default_rng(seed)
    fleet = synthetic_fleet(40, rng)
    slow = rng.choice(np.argsort(fleet.a * (1 + 1 / (fleet.a * fleet.mu)))[:20], 8, replace=False)
    a, mu = fleet.a.copy(), fleet.mu.copy()
    a[slow] *= 5
    mu[slow] /= 5
    truth = FleetModel(fleet.ids, a, mu)
    jobs = synthetic_jobs(1, 40, rng, fraction=0.15)
    contexts = []
    scheduler = make_scheduler(method, seed)
    outcomes = drive(
        [scheduler], fleet, jobs, rounds, np.random.default_rng(seed + 7), truth=truth,
        weights=CostWeights(beta=beta), on_plan=lambda ctx, plan, _: contexts.append(ctx),
    )[0]
    slow_picked = np.array([len(set(o.plan) & set(slow)) for o in outcomes])
    costs = []
    for ctx, outcome in zip(contexts, outcomes):
        freq = ctx.frequencies[0].astype(float)
        before = freq.var() / fairness_scale(len(outcome.plan), freq.size)
        increment = cost_model(ctx).fairness(np.asarray(outcome.plan)) - before
        costs.append(outcome.round_time / cost_model(ctx).reference_time + beta * increment)
    return slow_picked, np.asarray(costs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bods_learns_from_observed_rounds_what_profiles_miss(seed):
    # Time only: the cost-model methods keep picking the secretly slow devices,
    # BODS learns from observed rounds to leave them out.
    slow, cost = mismatched_run("bods", seed, beta=0.0)
    assert slow[-15:].mean() < 0.5 * slow[:15].mean() + 0.01
    assert cost[-15:].mean() < cost[:15].mean()
    _random_slow, random_cost = mismatched_run("random", seed, beta=0.0)
    _greedy_slow, greedy_cost = mismatched_run("greedy", seed, beta=0.0)
    assert cost[-15:].mean() < 0.25 * random_cost[-15:].mean()
    assert cost[-15:].mean() < 0.7 * greedy_cost[-15:].mean()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bods_beats_random_on_observed_cost_with_fairness(seed):
    # A fairness weight 4x the default, so that fairness is a real part of the cost.
    _, cost = mismatched_run("bods", seed, beta=0.2)
    _, random_cost = mismatched_run("random", seed, beta=0.2)
    assert cost[15:].mean() < 0.8 * random_cost[15:].mean()


def test_rlds_pretraining_lowers_total_cost_of_sampled_plans():
    rng = np.random.default_rng(3)
    fleet = synthetic_fleet(50, rng)
    jobs = synthetic_jobs(2, 50, rng, fraction=0.1)
    ctx = PlanContext(0, 1, fleet, jobs, np.ones(50, bool), np.zeros((2, 50), np.int64), (None, None), 5)
    # A fixed 10-round return: these jobs have a target, where "auto" would be
    # the myopic H = 1, whose greedy plans pile up unfairness as pre-training goes on.
    rlds = RLDSScheduler(0, pretrain_rounds=0, horizon=10)
    rlds.learner.pretrained = True

    def sampled_cost():
        # Draws from the policy itself: plan() would also learn online and may propose the policy's mode.
        logits = rlds.learner.policy(device_features(ctx, 10.0)).astype(np.float64)
        epsilon = rlds.learner.epsilon
        plans = np.asarray([sorted(draw(logits, ctx.free, ctx.size, epsilon, rlds.rng)) for _ in range(200)])
        return float(cost_model(ctx).total(plans).mean())

    before = sampled_cost()
    history = rlds.pretrain(ctx, rounds=60)
    after = sampled_cost()
    assert after < 0.85 * before, (before, after)
    # The simulated rounds' own costs are not compared: their frequencies differ from round to round.
    assert len(history) == 60 and np.all(np.isfinite(history))


def test_rlds_policy_saves_and_loads():
    rng = np.random.default_rng(4)
    fleet = synthetic_fleet(20, rng)
    jobs = synthetic_jobs(1, 20, rng)
    ctx = PlanContext(0, 1, fleet, jobs, np.ones(20, bool), np.zeros((1, 20), np.int64), (None,), 3)
    trained = RLDSScheduler(0, pretrain_rounds=5)
    trained.pretrain(ctx)
    loaded = RLDSScheduler(99)
    loaded.load_state(trained.state())
    assert loaded.learner.pretrained
    saved, restored = trained.learner.policy, loaded.learner.policy
    for name, value in saved.params.items():
        assert np.array_equal(value, restored.params[name]), name
    with pytest.raises(ValueError, match="hidden"):
        RLDSScheduler(0, hidden=8).load_state(trained.state())


def _context(ids, *, round_=1, frequencies=None, weights=CostWeights()):  # noqa: B008 - frozen dataclass
    """One job over devices ``ids`` that are all profiled alike (a = 1, mu = 10, one sample)."""
    K = len(ids)
    fleet = FleetModel(tuple(DeviceId(d) for d in ids), np.ones(K), np.full(K, 10.0))
    job = JobModel(JobId("j"), 1, np.ones(K, np.int64), 0.5)
    freq = np.zeros((1, K), np.int64) if frequencies is None else np.asarray([frequencies], np.int64)
    return PlanContext(
        job=0, round=round_, fleet=fleet, jobs=(job,), free=np.ones(K, bool),
        frequencies=freq, current_plans=(None,), size=2, weights=weights,
    )


def test_bods_keeps_what_it_learned_of_a_device_by_its_id_as_the_fleet_changes():
    bods = BODSScheduler(0)
    first = _context(["a", "b", "c", "d"])
    expected = cost_model(first).device_times[0]
    # b took three times its profile's expectation, c exactly it.
    bods.observe(first, RoundOutcome(0, 1, (1, 2), {1: 3 * expected, 2: expected}, frozenset(), 3 * expected))
    assert bods.history.slowdown(["b", "c", "a"]) == pytest.approx([2.0, 1.0, 1.0])
    # b leaves, e joins and the order changes: e must not inherit b's slowdown (its old position).
    second = _context(["e", "a", "c", "d"])
    bods.observe(second, RoundOutcome(0, 2, (0, 1), {0: expected, 1: expected}, frozenset(), expected))
    assert bods.history.slowdown(["e", "a", "c", "d"]) == pytest.approx([1.0, 1.0, 1.0, 1.0])
    # b comes back at yet another position with its history intact, and the GP's
    # learned-time feature says a plan with b is slower than one without.
    third = _context(["e", "d", "b", "a"])
    assert bods.history.slowdown(["b"]) == pytest.approx([2.0])
    features = encode(third, np.array([[2, 3], [0, 3]]), bods.history)
    assert features[0, 1] > features[1, 1]
    assert features[0, 0] == pytest.approx(features[1, 0])  # as profiled, the two plans are alike


def test_bods_weighs_fairness_in_its_candidates_by_the_configured_omega():
    # Identical devices; half of them scheduled ten times already. The heavier
    # Omega(r) weighs fairness (Formula 13), the fewer over-used devices the
    # candidate plans hold.
    over_used = [10] * 10 + [0] * 10
    picked = {}
    for kind in ("linear", "sqrt", "log"):
        ctx = _context([f"d{k}" for k in range(20)], round_=9, frequencies=over_used,
                       weights=CostWeights(beta=0.2, omega=kind))
        plans = BODSScheduler(3).candidate_plans(ctx, 256, uniform=False)
        picked[kind] = int((ctx.free_indices[plans] < 10).sum())
    # Omega(9): linear 9 > sqrt 3 > log 2.2
    assert picked["linear"] < picked["sqrt"] < picked["log"]


@pytest.mark.parametrize("epsilon", [0.0, 0.3])
def test_rlds_gradient_matches_finite_differences(epsilon):
    # Formula 14's loss on a small fleet, in float64: the analytic gradient
    # (mixture log-probability -> logits -> head -> BPTT) against central
    # differences, for a few entries of every parameter array.
    rng = np.random.default_rng(5)
    K, H = 6, 4
    scheduler = RLDSScheduler(0, hidden=H, epsilon=epsilon)
    rlds = scheduler.learner
    rlds.use(PolicyNetwork(H, rng, dtype=np.float64))
    features = rng.normal(size=(K, FEATURES))
    free = np.array([True, True, False, True, True, True])
    orders = [draw(rlds.policy(features), free, 3, epsilon, scheduler.rng) for _ in range(4)]
    advantage = rng.normal(size=4)
    _, grad = rlds.loss_and_gradient(features, free, orders, advantage)
    analytic = rlds.policy.named(grad)
    step = 1e-6
    for name, value in rlds.policy.params.items():
        for index in rng.choice(value.size, size=min(4, value.size), replace=False):
            flat = value.reshape(-1)
            original = flat[index]
            flat[index] = original + step
            up, _ = rlds.loss_and_gradient(features, free, orders, advantage)
            flat[index] = original - step
            down, _ = rlds.loss_and_gradient(features, free, orders, advantage)
            flat[index] = original
            numeric = (up - down) / (2 * step)
            exact = analytic[name].reshape(-1)[index]
            if name == "head.bias":
                # Adding a constant to every logit changes no softmax: its gradient is 0.
                assert abs(numeric) < 1e-8 and abs(exact) < 1e-12, (numeric, exact)
                continue
            assert abs(exact) > 1e-7, (name, index, exact)  # a real check, not 0 == 0
            # Relative error < 1e-4; below |g| = 1e-5 the differences' rounding
            # (~1e-16 |loss| / step) would dominate, so the bound stops shrinking there.
            bound = 1e-4 * max(abs(exact), 1e-5)
            assert abs(numeric - exact) < bound, (name, index, numeric, exact)


@pytest.mark.parametrize("epsilon", [0.0, 0.3, 1.0])
def test_rlds_log_probability_sums_to_one_over_all_orders(epsilon):
    rng = np.random.default_rng(6)
    rlds = RLDSScheduler(1, epsilon=epsilon).learner
    features = rng.normal(size=(5, FEATURES)).astype(np.float32)
    free = np.array([True, False, True, True, True])  # 4 free devices
    orders = list(permutations(np.flatnonzero(free).tolist(), 2))
    assert len(orders) == 12
    probabilities = np.exp(rlds.log_probability(features, free, orders))
    assert abs(probabilities.sum() - 1) < 1e-9
    # The policy matters unless every pick is uniform.
    assert np.ptp(probabilities) > 1e-3 if epsilon < 1 else np.allclose(probabilities, 1 / 12)


def test_rlds_draws_orders_with_the_probability_it_credits():
    # draw and order_log_probability describe the same epsilon mixture: empirical
    # frequencies of 20000 draws within 5 standard errors of exp(log P).
    rlds = RLDSScheduler(2, epsilon=0.3)
    logits = np.array([1.5, -0.5, 0.3, 2.0, 0.0])
    free = np.array([True, True, False, True, True])
    draws = 20000
    counts = Counter(draw(logits, free, 2, 0.3, rlds.rng) for _ in range(draws))
    orders = list(permutations(np.flatnonzero(free).tolist(), 2))
    assert set(counts) <= set(orders)
    expected = np.exp(order_log_probability(logits, free, orders, 0.3)[0])
    observed = np.array([counts[o] for o in orders]) / draws
    assert np.all(np.abs(observed - expected) < 5 * np.sqrt(expected * (1 - expected) / draws))


def test_rlds_saved_policy_plans_like_the_original():
    # Pre-train, save, load into a scheduler of another seed; with the same
    # generator from then on, both plan and learn identically round after round
    # (policy, Adam's moments and step, and the baseline all come back).
    rng = np.random.default_rng(7)
    fleet = synthetic_fleet(30, rng)
    jobs = synthetic_jobs(2, 30, rng)
    free, frequencies = np.ones(30, bool), np.zeros((2, 30), np.int64)
    ctx = PlanContext(0, 1, fleet, jobs, free, frequencies, (None, None), 4)
    trained = RLDSScheduler(0, pretrain_rounds=5)
    trained.pretrain(ctx)
    loaded = RLDSScheduler(3)
    loaded.load_state(trained.state())
    assert loaded.learner.baseline == trained.learner.baseline
    runs = []
    for scheduler in (trained, loaded):
        scheduler.rng = np.random.default_rng(11)
        outcomes = drive([scheduler], fleet, jobs[:1], 6, np.random.default_rng(12))[0]
        runs.append([o.plan for o in outcomes])
    assert runs[0] == runs[1]
    assert np.array_equal(trained.learner.policy.parameters, loaded.learner.policy.parameters)
    # 5 pre-training steps, then per round one update on its sampled plans and one on the outcome.
    assert trained.learner.optimizer.step_count == loaded.learner.optimizer.step_count == 5 + 2 * 6
