import numpy as np
import pytest

from mjfl.errors import ConfigError
from mjfl.schedulers.base import CostWeights, Decision, Objective, RoundOutcome
from mjfl.schedulers.cost import cost_model
from mjfl.schedulers.meta_greedy import (
    LearnedSelector,
    MetaGreedyScheduler,
    Prices,
    ReCostSelector,
    ReturnSelector,
)
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
    assert (choice.winner, choice.costs) == (decision.chosen_by, decision.candidates)
    assert choice.fairness_weight == pytest.approx(0.2 * 3)  # beta * Omega(9) = beta * sqrt(9)
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


class LastBit:
    """A selector pricing the second plan one unit in the last place below the first, as rows of one
    plan can come out of a vectorised cost."""

    def price(self, ctx, plans):
        return Prices(np.array([1.0, np.nextafter(1.0, 0.0), 2.0]), 0.0)

    def observe(self, ctx, outcome):
        pass


def test_a_plan_several_members_propose_is_credited_to_the_first_of_them(context_factory):
    ctx = context_factory([1.0, 1.0], [1.0, 1.0], [1, 1], size=1)
    meta = MetaGreedyScheduler([Fixed("a", (0,)), Fixed("b", (0,)), Fixed("c", (1,))], LastBit())
    decision = meta.plan(ctx)
    assert (decision.chosen_by, decision.plan, meta.choices[-1].winner) == ("a", (0,), "a")


def test_meta_greedy_has_the_six_members_and_sweep_and_never_loses_to_them():
    rng = np.random.default_rng(2)
    fleet, jobs = synthetic_fleet(60, rng), synthetic_jobs(3, 60, rng)
    meta = make_scheduler("meta-greedy", seed=0, options={"rlds": {"pretrain_rounds": 5}})
    assert [m.name for m in meta.members] == [*META_MEMBERS, "sweep"]
    others = [make_scheduler("meta-greedy", seed=m + 1, options={"rlds": {"pretrain_rounds": 5}}) for m in range(2)]
    drive([meta, *others], fleet, jobs, 6, rng)
    for choice in meta.choices:
        assert choice.costs[choice.winner] == pytest.approx(min(choice.costs.values()), rel=1e-12)
        assert set(choice.plans) == {*META_MEMBERS, "sweep"}
    assert sum(meta.wins().values()) == 6


def test_unknown_methods_are_config_errors():
    from mjfl.errors import ConfigError

    with pytest.raises(ConfigError, match="scheduler.method"):
        make_scheduler("fastest")
    with pytest.raises(ConfigError, match="scheduler.members"):
        make_scheduler("meta-greedy", members=["greedy", "oracle"])


def test_members_plan_in_the_rounds_context_as_it_is(context_factory):
    # Algorithm 4 line 3: each member plans with its own method's objective; only the selector differs.
    seen = []

    class Sees(Fixed):
        def plan(self, ctx):
            seen.append(ctx)
            return super().plan(ctx)

    ctx = context_factory([1.0, 1.0], [1.0, 1.0], [1, 1], size=1, round_=9)
    for method in ("meta-greedy", "meta-greedy-paper"):
        meta = make_scheduler(method, seed=0)
        meta.members = [Sees("a", (0,)), Sees("b", (1,))]
        meta.plan(ctx)
    assert len(seen) == 4 and all(c is ctx for c in seen)


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


def test_meta_greedys_horizon_is_what_the_jobs_objective_still_charges(context_factory):
    # Device 0 is the fastest but was scheduled twice more than the others.
    def ctx(round_, budget=None, target=None):
        objective = Objective(accuracy=target, rounds=budget) if target else None
        return context_factory(
            [1.0, 3.0, 8.0], [10.0] * 3, [1] * 3, size=1, round_=round_, frequencies=[[3, 1, 1]], budget=budget,
            objective=objective,
        )

    meta = make_scheduler("meta-greedy", seed=0, options={"meta-greedy": {"selector": "return"}})
    meta.members = [Fixed("fast", (0,)), Fixed("fair", (1,))]
    plans, beta = np.array([[0], [1]]), CostWeights().beta
    # A job with a target: time to target, H = 1, the least TotalCost (its round limit does not matter).
    target = ctx(3, budget=30, target=0.9)
    decision = meta.plan(target)
    assert meta.choices[-1].fairness_weight == pytest.approx(beta) and decision.chosen_by == "fast"
    assert decision.candidates == pytest.approx(dict(zip(["fast", "fair"], cost_model(target).marginal(plans))))
    # A job of 30 rounds without a target: its summed TotalCost charges round 3's
    # unfairness in the 28 rounds left, and the fairer plan wins ...
    decision = meta.plan(ctx(3, 30))
    assert meta.choices[-1].fairness_weight == pytest.approx(28 * beta) and decision.chosen_by == "fair"
    # ... until the budget runs out: the last round charges it once.
    assert (meta.plan(ctx(30, 30)).chosen_by, meta.choices[-1].fairness_weight) == ("fast", pytest.approx(beta))
    assert meta.selector.horizon_for(ctx(31, 30)) == 1.0  # never below one round (a resumed job past its budget)
    assert meta.selector.horizon_for(ctx(3)) == 1.0  # rounds unknown: each round on its own
    # A fixed horizon ignores the budget.
    fixed = make_scheduler("meta-greedy", seed=0, options={"meta-greedy": {"selector": "return", "horizon": 10}})
    assert fixed.selector.horizon_for(ctx(3, 30)) == fixed.selector.horizon_for(ctx(3)) == 10.0


def test_the_selector_is_named_by_the_config_and_keeps_its_own_options():
    assert isinstance(make_scheduler("meta-greedy", seed=0).selector, LearnedSelector)
    assert isinstance(make_scheduler("meta-greedy-paper", seed=0).selector, ReCostSelector)
    paper_return = make_scheduler("meta-greedy-paper", seed=0, options={"meta-greedy-paper": {"selector": "return"}})
    assert isinstance(paper_return.selector, ReturnSelector)
    with pytest.raises(ConfigError, match="horizon"):  # ReCost has no horizon
        make_scheduler("meta-greedy-paper", seed=0, options={"meta-greedy-paper": {"horizon": 3}})


@pytest.mark.parametrize(
    ("options", "field", "says"),
    [
        ({"meta-greedy": {"horizon": 0}}, "scheduler.options.meta-greedy", "'auto' or a number of rounds >= 1"),
        ({"meta-greedy": {"horizon": "long"}}, "scheduler.options.meta-greedy", "not 'long'"),
        ({"meta-greedy": {"horizn": 3}}, "scheduler.options.meta-greedy", "unknown option(s) ['horizn']"),
        ({"meta-greedy": {"selector": "adaptive"}}, "scheduler.options.meta-greedy", "not 'adaptive'"),
        ({"meta-greedy": {"forget": 0.7}}, "scheduler.options.meta-greedy", "unknown option(s) ['forget']"),
        ({"rlds": {"horizon": 0.5}}, "scheduler.options.rlds", "number of rounds >= 1"),
        ({"genetic": {"seed": 3}}, "scheduler.options.genetic", "unknown option(s) ['seed']"),
    ],
)
def test_a_bad_scheduler_option_names_its_table(options, field, says):
    method = next(iter(options))
    with pytest.raises(ConfigError) as err:
        make_scheduler("meta-greedy" if method in META_MEMBERS else method, seed=0, options=options)
    assert err.value.field == field and says in err.value.problem
