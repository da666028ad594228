"""The schedulers against each other, on the benchmark's fleets and cost (docs/cost-model.md, "Benchmark").

Each figure is the mean TotalCost (Formula 8) of the plans a method chose over
30 rounds of 3 concurrent jobs on a synthetic fleet, as `mjfl bench schedulers`
measures it, with the same seeds. The margins measured here are wide (RLDS
4.6 against FedCS 7.8 and Random 13.3 at 100 devices, seed 0); the assertions
keep only the ordering.
"""

import pytest

from mjfl.bench.schedulers import measure
from mjfl.schedulers.registry import META_MEMBERS


def mean_cost(method: str, devices: int, seed: int = 0) -> float:
    return float(measure(method, devices, jobs=3, rounds=30, fraction=0.1, seed=seed)["mean_cost"])


@pytest.mark.parametrize("seed", [0, 1])
def test_rlds_plans_cheaper_than_random_and_fedcs(seed):
    rlds = mean_cost("rlds", 100, seed)
    assert rlds < mean_cost("random", 100, seed)
    assert rlds <= mean_cost("fedcs", 100, seed)


def test_genetic_keeps_its_edge_over_random_on_a_thousand_devices():
    assert mean_cost("genetic", 1000) < mean_cost("random", 1000)


def test_meta_greedy_plans_cheaper_than_every_member_and_over_the_papers_six_keeps_close_to_the_best():
    # The benchmark's jobs run 30 rounds without a target, so the default Meta-Greedy
    # prices each plan by what their summed TotalCost charges it (H = the rounds left).
    # Over seeds 0-5 (measured 2026-12-02): with Sweep it was 0.81-0.86 of the cheapest
    # member on every seed; over the paper's six alone 0.91-0.97 of RLDS, the cheapest of
    # them, which wins most of its rounds, and 0.54-0.59 of the cheapest other. Near a tie
    # the members' numerics differ within floating-point noise (AVX2 and AVX-512 machines),
    # so only the margins that hold on every seed are asserted.
    members = {m: mean_cost(m, 100) for m in META_MEMBERS}
    best = min(members.values())
    papers = measure("meta-greedy", 100, jobs=3, rounds=30, fraction=0.1, seed=0, members=META_MEMBERS)
    assert papers["mean_cost"] <= 1.10 * best, (papers, members)
    assert papers["mean_cost"] < 0.75 * min(c for m, c in members.items() if m != "rlds"), (papers, members)
    assert max(papers["wins"], key=papers["wins"].get) == "rlds", papers["wins"]
    # mjfl's members add Sweep, whose cut plans win most rounds and lower the cost below every member's.
    row = measure("meta-greedy", 100, jobs=3, rounds=30, fraction=0.1, seed=0)
    assert row["mean_cost"] < 0.92 * best, (row, members)
    assert max(row["wins"], key=row["wins"].get) == "sweep", row["wins"]
