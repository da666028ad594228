import numpy as np
import pytest

from mjfl.errors import ConfigError
from mjfl.schedulers.base import CostWeights, Decision, RoundOutcome
from mjfl.schedulers.cost import cost_model
from mjfl.schedulers.meta_greedy import MetaGreedyScheduler
from mjfl.schedulers.registry import META_MEMBERS, make_scheduler
from mjfl.schedulers.synthetic import drive, synthetic_fleet, synthetic_jobs


class Fixed:
    """A member that always proposes the same plan and remembers what it observed."""

    def __init__(self, name, plan):
        self.name, self._plan, self.seen = name, plan, []

    def plan(self, ctx):
        return Decision(self._plan)

    def observe(self, ctx, outcome):
        self.seen.append(outcome.round)


def test_meta_greedy_picks_the_least_recost_and_logs_the_winner(context_factory):
    # Device 0 is fast but has been scheduled often; device 3 is slow and fresh.
    ctx = context_factory(
        [1.0, 2.0, 3.0, 8.0], [10.0] * 4, [1, 1, 1, 1], size=1, round_=9,
        frequencies=[[6, 1, 1, 0]], weights=CostWeights(alpha=1.0, beta=0.2, omega="sqrt"),
    )
    members = [Fixed("fast", (0,)), Fixed("middle", (1,)), Fixed("slow", (3,))]
    meta = MetaGreedyScheduler(members)
    recost = cost_model(ctx).recost(np.array([[0], [1], [3]]))
    decision = meta.plan(ctx)
    assert decision.plan == ((0,), (1,), (3,))[int(np.argmin(recost))]
    # The decision itself says who won and what every member's plan cost (Formula 12).
    assert decision.chosen_by == ["fast", "middle", "slow"][int(np.argmin(recost))]
    assert decision.candidates == pytest.approx(dict(zip(["fast", "middle", "slow"], recost)))
    choice = meta.choices[-1]
    assert (choice.winner, choice.recost) == (decision.chosen_by, decision.candidates)
    # With fairness weighted heavily the over-used fast device loses.
    heavy = context_factory(
        [1.0, 2.0, 3.0, 8.0], [10.0] * 4, [1, 1, 1, 1], size=1, round_=9,
        frequencies=[[6, 1, 1, 0]], weights=CostWeights(alpha=1.0, beta=5.0),
    )
    assert meta.plan(heavy).plan != (0,)
    assert meta.wins()[meta.choices[-1].winner] >= 1
    meta.observe(ctx, RoundOutcome(0, 9, (1,), {1: 2.0}, frozenset(), 2.0))
    assert all(m.seen == [9] for m in members)  # every member learns from every round


def test_meta_greedy_ties_go_to_the_first_member(context_factory):
    ctx = context_factory([1.0, 1.0], [1.0, 1.0], [1, 1], size=1)
    meta = MetaGreedyScheduler([Fixed("a", (0,)), Fixed("b", (1,))])
    assert meta.plan(ctx).chosen_by == "a"


def test_meta_greedy_has_the_six_members_and_never_loses_to_them():
    rng = np.random.default_rng(2)
    fleet, jobs = synthetic_fleet(60, rng), synthetic_jobs(3, 60, rng)
    meta = make_scheduler("meta-greedy", seed=0, options={"rlds": {"pretrain_rounds": 5}})
    assert [m.name for m in meta.members] == list(META_MEMBERS)
    others = [make_scheduler("meta-greedy", seed=m + 1, options={"rlds": {"pretrain_rounds": 5}}) for m in range(2)]
    drive([meta, *others], fleet, jobs, 6, rng)
    for choice in meta.choices:
        assert choice.recost[choice.winner] == min(choice.recost.values())
        assert set(choice.plans) == set(META_MEMBERS)
    assert sum(meta.wins().values()) == 6


def test_unknown_methods_are_config_errors():
    from mjfl.errors import ConfigError

    with pytest.raises(ConfigError, match="scheduler.method"):
        make_scheduler("fastest")
    with pytest.raises(ConfigError, match="scheduler.members"):
        make_scheduler("meta-greedy", members=["greedy", "oracle"])


def test_members_plan_with_their_own_objective_unless_told_to_share_recost(context_factory):
    ctx = context_factory([1.0, 1.0], [1.0, 1.0], [1, 1], size=1, round_=9)
    for method in ("meta-greedy", "meta-greedy-paper"):  # Algorithm 4: members see ctx as is
        assert make_scheduler(method, seed=0).member_context(ctx) is ctx
    shared = make_scheduler("meta-greedy-paper", seed=0, options={"meta-greedy-paper": {"shared_objective": True}})
    # Omega(9) = sqrt(9) = 3: members see ReCost's beta * Omega(r).
    assert shared.member_context(ctx).weights.beta == pytest.approx(3 * ctx.weights.beta)
    with pytest.raises(ConfigError, match="shared_objective"):
        make_scheduler("meta-greedy", seed=0, options={"meta-greedy": {"shared_objective": True}})


def test_the_paper_selector_keeps_the_least_recost_and_mjfls_the_least_return(context_factory):
    # Device 0 is the fastest but was scheduled once more than every other device.
    ctx = context_factory(
        [1.0, 3.0, 3.0, 8.0, 8.0, 8.0, 8.0, 8.0], [10.0] * 8, [1] * 8, size=1, round_=4,
        frequencies=[[2, 1, 1, 1, 1, 1, 1, 1]], weights=CostWeights(alpha=1.0, beta=0.05),
    )
    plans = np.array([[0], [1], [3]])
    model = cost_model(ctx)

    def pick(method, **options):
        meta = make_scheduler(method, seed=0, options={method: options})
        meta.members = [Fixed("fast", (0,)), Fixed("middle", (1,)), Fixed("slow", (3,))]
        return meta, meta.plan(ctx)

    paper, decision = pick("meta-greedy-paper")
    assert decision.plan == tuple(plans[int(np.argmin(model.recost(plans)))])
    assert decision.candidates == pytest.approx(dict(zip(["fast", "middle", "slow"], model.recost(plans))))
    mjfl, decision = pick("meta-greedy", selector="return", horizon=10)
    returns = model.marginal(plans, horizon=10)
    assert decision.plan == tuple(plans[int(np.argmin(returns))])
    assert decision.candidates == pytest.approx(dict(zip(["fast", "middle", "slow"], returns)))
    # The two differ here: ReCost (beta * Omega(4) = 0.1) still takes the over-used fast
    # device, the return (the increment charged for 10 rounds) the next fastest.
    assert paper.choices[-1].winner == "fast" and mjfl.choices[-1].winner == "middle"


def test_the_adaptive_selector_plans_with_the_horizon_that_buys_accuracy_fastest():
    from mjfl.schedulers.meta_greedy import RateBandit

    def run(gain_per_second: dict[float, float], rounds: int = 24) -> list[float]:
        bandit, accuracy, used = RateBandit((1.0, 10.0), forget=0.7), 0.1, []
        bandit.observe(None, RoundOutcome(0, 0, (0,), {}, frozenset(), 1.0, accuracy=accuracy))
        for r in range(1, rounds + 1):
            horizon = bandit.choose(r)
            used.append(horizon)
            seconds = 1.0 if horizon == 1.0 else 3.0  # fairer plans run longer rounds
            accuracy += gain_per_second[horizon] * seconds
            bandit.observe(horizon, RoundOutcome(0, r, (0,), {}, frozenset(), seconds, accuracy=accuracy))
        return used

    # Each horizon is tried twice, shortest first.
    assert run({1.0: 0.01, 10.0: 0.01})[:4] == [1.0, 1.0, 10.0, 10.0]
    # Fairness that does not buy accuracy clearly faster: the fast rounds plan
    # (every 8th round explores).
    used = run({1.0: 0.01, 10.0: 0.025})
    assert all(h == 1.0 for r, h in enumerate(used, start=1) if r > 8 and r % 8)
    assert used[15] == 10.0  # round 16 explores
    # Fairness that buys it more than 3x faster: the fair rounds plan.
    used = run({1.0: 0.01, 10.0: 0.04})
    assert all(h == 10.0 for r, h in enumerate(used, start=1) if r > 8 and r % 8)


def test_without_accuracy_the_adaptive_selector_is_the_return_with_its_horizon(context_factory):
    ctx = context_factory([1.0, 3.0, 8.0], [10.0] * 3, [1] * 3, size=1, round_=3, frequencies=[[2, 1, 1]])
    meta = make_scheduler("meta-greedy", seed=0, options={"meta-greedy": {"selector": "adaptive", "horizon": 7.0}})
    meta.members = [Fixed("fast", (0,)), Fixed("slow", (2,))]
    decision = meta.plan(ctx)
    assert meta.choices[-1].horizon == 7.0
    assert decision.candidates == pytest.approx(
        dict(zip(["fast", "slow"], cost_model(ctx).marginal(np.array([[0], [2]]), horizon=7.0)))
    )
    meta.observe(ctx, RoundOutcome(0, 3, decision.plan, {}, frozenset(), 1.0))  # no accuracy: still uninformed
    assert meta.horizon_for(ctx) == 7.0


def test_meta_greedys_horizon_is_what_the_jobs_objective_still_charges(context_factory):
    # Device 0 is the fastest but was scheduled twice more than the others.
    def ctx(round_, budget):
        return context_factory(
            [1.0, 3.0, 8.0], [10.0] * 3, [1] * 3, size=1, round_=round_, frequencies=[[3, 1, 1]], budget=budget,
        )

    meta = make_scheduler("meta-greedy", seed=0, options={"meta-greedy": {"selector": "return"}})
    meta.members = [Fixed("fast", (0,)), Fixed("fair", (1,))]
    plans = np.array([[0], [1]])
    # A job with a target (no budget): time to target, H = 1, the least TotalCost.
    decision = meta.plan(ctx(3, None))
    assert meta.choices[-1].horizon == 1.0 and decision.chosen_by == "fast"
    assert decision.candidates == pytest.approx(dict(zip(["fast", "fair"], cost_model(ctx(3, None)).marginal(plans))))
    # A job of 30 rounds without a target: its summed TotalCost charges round 3's
    # unfairness in the 28 rounds left, and the fairer plan wins ...
    decision = meta.plan(ctx(3, 30))
    assert meta.choices[-1].horizon == 28.0 and decision.chosen_by == "fair"
    # ... until the budget runs out: the last round charges it once.
    assert (meta.plan(ctx(30, 30)).chosen_by, meta.choices[-1].horizon) == ("fast", 1.0)
    assert meta.horizon_for(ctx(31, 30)) == 1.0  # never below one round (a resumed job past its budget)
    # A fixed horizon ignores the budget.
    fixed = make_scheduler("meta-greedy", seed=0, options={"meta-greedy": {"selector": "return", "horizon": 10}})
    assert fixed.horizon_for(ctx(3, 30)) == fixed.horizon_for(ctx(3, None)) == 10.0


@pytest.mark.parametrize(
    ("options", "field", "says"),
    [
        ({"meta-greedy": {"horizon": 0}}, "scheduler.options.meta-greedy", "'auto' or a number of rounds >= 1"),
        ({"meta-greedy": {"horizon": "long"}}, "scheduler.options.meta-greedy", "not 'long'"),
        ({"meta-greedy": {"horizn": 3}}, "scheduler.options.meta-greedy", "unknown option(s) ['horizn']"),
        ({"rlds": {"horizon": 0.5}}, "scheduler.options.rlds", "number of rounds >= 1"),
        ({"genetic": {"seed": 3}}, "scheduler.options.genetic", "unknown option(s) ['seed']"),
    ],
)
def test_a_bad_scheduler_option_names_its_table(options, field, says):
    method = next(iter(options))
    with pytest.raises(ConfigError) as err:
        make_scheduler("meta-greedy" if method in META_MEMBERS else method, seed=0, options=options)
    assert err.value.field == field and says in err.value.problem
