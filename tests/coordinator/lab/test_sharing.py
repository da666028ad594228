"""The lab's policy between runs: shares in devices a job can use, never below a run's floor."""

from hypothesis import given
from hypothesis import strategies as st

from mjfl.coordinator.engine.occupancy import Occupancy
from mjfl.coordinator.lab.sharing import FairShare, run_needs, shares
from mjfl.ids import JobId


@given(st.integers(0, 60), st.lists(st.tuples(st.integers(1, 8), st.integers(1, 40)), max_size=6))
def test_shares_keep_the_floors_give_no_run_more_than_it_wants_and_leave_no_wanted_device_idle(devices, runs):
    floors = [f for f, _ in runs]
    wants = [max(f, w) for f, w in runs]
    given_ = shares(devices, floors, wants)
    assert sum(given_) <= devices
    if sum(floors) <= devices:
        assert all(g >= f for g, f in zip(given_, floors))  # the floors fit: every run has its own
    assert all(g <= w for g, w in zip(given_, wants))
    if sum(given_) < devices:
        assert given_ == wants  # a device left over only when every run has what it wants
    # max-min fair above the floors: no run wanting more holds two or more fewer than another above its floor
    for i, (g, w) in enumerate(zip(given_, wants)):
        if g < w:
            assert all(h <= max(g + 1, floors[j]) for j, h in enumerate(given_)), (given_, floors, wants)


def test_admission_holds_a_run_whose_floor_the_fleet_cannot_hold_beside_the_others():
    policy = FairShare(devices=lambda: 8)
    needs = run_needs(3, [0.5, 0.5, 0.5], 8)  # examples/lab.toml: three jobs, 3 devices a round at least
    assert needs.floor == 3 and needs.wants == 12
    assert policy.room(needs) is None
    policy.admit("r1", needs)
    assert policy.room(needs) is None
    policy.admit("r2", needs)
    why = policy.room(needs)
    assert why is not None and "needs 3 devices a job" in why and "8 devices hold 2 such runs" in why
    policy.end("r1", Occupancy())
    assert policy.room(needs) is None


def test_a_preparing_run_holds_the_others_to_their_shares_and_a_ready_one_only_while_it_is_short():
    policy = FairShare(devices=lambda: 8)
    occupancy = Occupancy(policy)
    needs = run_needs(3, [0.5, 0.5, 0.5], 8)
    policy.admit("r1", needs)
    policy.ready("r1", occupancy)
    assert occupancy.allowance("r1") is None  # alone: every free device
    policy.admit("r2", needs)
    assert policy.of(occupancy) == {"r1": 4, "r2": 4}
    assert occupancy.allowance("r1") == 4  # r2 prepares: r1 is held to its share from its first round
    policy.ready("r2", occupancy)
    assert occupancy.allowance("r1") is None  # r2 plans and is not short
    occupancy.planned(("r2", JobId("lenet")), 4, 0)
    assert occupancy.allowance("r1") == 4
    # r2's jobs want only 3 of the fleet now: the rest of its share goes to r1
    occupancy.planned(("r2", JobId("lenet")), 3, 0)
    assert policy.of(occupancy) == {"r1": 5, "r2": 3}
