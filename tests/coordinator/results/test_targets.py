"""When a job and a group reached the target: the rule the time, the energy and the dashboard count from."""

from __future__ import annotations

from run_records import CNN, LENET, jobs_of, rounds_of

from mjfl.coordinator.results.targets import group_time, job_rounds


def test_a_jobs_rounds_are_its_own_in_round_order_up_to_the_first_that_reached_the_target() -> None:
    cnn, lenet = jobs_of("r")
    records = rounds_of("r", CNN, [(10, 0.5, 1.0), (20, 0.82, 0.6), (30, 0.7, 0.6), (40, 0.9, 0.5)])
    other_run = rounds_of("other", CNN, [(1, 0.99, 0.01)])
    got = job_rounds(cnn, list(reversed(records)) + other_run)
    assert [r.round for r in got.rounds] == [1, 2, 3, 4]
    assert got.reached_at == 1 and got.first_reached is not None and got.first_reached.ended_s == 20.0
    assert [r.round for r in got.up_to_target] == [1, 2]
    # lenet's target is its loss (0.3): never met, so every round counts and none reached it.
    never = job_rounds(lenet, rounds_of("r", LENET, [(5, 0.99, 0.5), (9, 0.99, 0.4)]))
    assert never.first_reached is None and [r.round for r in never.up_to_target] == [1, 2]


def test_a_group_is_done_when_its_slowest_job_is_and_not_before() -> None:
    assert group_time([5.0, 9.5, 7.0]) == 9.5
    assert group_time([5.0, None, 7.0]) is None  # one job never reached its target
    assert group_time([]) is None  # a group of no jobs reached nothing
