"""When a job and a group reached the target: the rule the time, the energy and the dashboard count from."""

from __future__ import annotations

import dataclasses
import math

import pytest
from run_records import CNN, LENET, jobs_of, rounds_of

from mjfl.coordinator.results.targets import group_time, job_rounds
from mjfl.coordinator.storage.records import Target


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


def test_a_window_of_3_reaches_the_target_on_the_mean_of_the_last_3_rounds_not_on_one_lucky_round() -> None:
    cnn, lenet = jobs_of("r")  # cnn: accuracy >= 0.8; lenet: loss <= 0.3 only
    accuracies = [0.5, 0.82, 0.7, 0.85, 0.88, 0.9]
    records = rounds_of("r", CNN, [(10 * (i + 1), a, 1.0) for i, a in enumerate(accuracies)])
    # One round: round 2 (0.82). Three: round 3 averages 2.02/3 = 0.673, round 4 2.37/3 = 0.79,
    # round 5 (0.7 + 0.85 + 0.88)/3 = 0.81, the first mean >= 0.8: reached at t = 50.
    assert job_rounds(cnn, records).first_reached.ended_s == 20.0  # type: ignore[union-attr]
    smoothed = job_rounds(dataclasses.replace(cnn, target_window=3), records)
    assert smoothed.reached_at == 4 and smoothed.first_reached is not None and smoothed.first_reached.ended_s == 50.0
    assert [r.round for r in smoothed.up_to_target] == [1, 2, 3, 4, 5]
    # A loss target averages the losses: 0.25 alone meets 0.3 in round 2; in pairs, (0.5+0.25)/2 = 0.375,
    # 0.325, 0.35, then (0.3 + 0.28)/2 = 0.29 in round 5.
    losses = rounds_of("r", LENET, [(i + 1, 0.99, x) for i, x in enumerate([0.5, 0.25, 0.4, 0.3, 0.28])])
    assert job_rounds(lenet, losses).reached_at == 1
    assert job_rounds(dataclasses.replace(lenet, target_window=2), losses).reached_at == 4


def test_a_window_holding_a_nan_meets_nothing() -> None:
    target = Target(accuracy=0.8, window=3)
    scores = [(0.9, 0.1), (math.nan, math.nan), (0.9, 0.1), (0.9, 0.1), (0.9, 0.1)]
    assert target.first_reached(scores) == 4  # rounds 3 and 4 average the NaN of round 2
    assert not target.reached(scores[:4]) and target.reached(scores)
    assert not target.reached(scores[:2])  # fewer rounds than the window: nothing yet
    assert Target(accuracy=0.8).first_reached(scores) == 0
    assert str(target) == "acc >= 0.8, mean of 3 rounds" and str(Target(accuracy=0.8)) == "acc >= 0.8"  # the tables' heading


@pytest.mark.parametrize(
    "scores",
    [
        [(0.5, 1.0), (0.82, 0.6), (0.7, 0.6), (0.9, 0.5)],
        [(math.nan, math.nan), (0.79, 0.31), (0.1, 0.3)],  # the loss alone meets it in round 3
        [(0.8, 2.0)],  # exactly at the target
        [(0.2, 1.0), (0.3, math.nan)],  # never
        [],
    ],
)
def test_a_window_of_1_is_the_single_round_rule(scores: list[tuple[float, float]]) -> None:
    """The default keeps every earlier run's time to target: the first round whose own accuracy or loss meets it."""
    single = next((i for i, (a, x) in enumerate(scores) if a >= 0.8 or x <= 0.3), None)
    assert Target(accuracy=0.8, loss=0.3).first_reached(scores) == single
    assert Target(accuracy=0.8, loss=0.3, window=1) == Target(0.8, 0.3)
    for end, (accuracy, loss) in enumerate(scores, start=1):  # the engine's question after each round
        assert Target(0.8, 0.3).reached(scores[:end]) == (accuracy >= 0.8 or loss <= 0.3)
