"""Busy fractions (``results.utilisation``): records made here, the numbers worked out by hand in each test."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjfl.coordinator.results.utilisation import (
    busy_fractions,
    busy_interval,
    busy_line,
    utilisation,
)
from mjfl.coordinator.storage.records import DeviceRound, RoundRecord
from mjfl.ids import DeviceId, JobId


def part(device: str, seconds: float, *, status: str = "ok", wait_s: float = 0.0) -> DeviceRound:
    return DeviceRound(DeviceId(device), status, 0 if status == "failed" else 100, None, seconds,  # type: ignore[arg-type]
                       error=None if status == "ok" else "timeout", wait_s=wait_s)


def round_of(job: str, number: int, started: float, ended: float, *parts: DeviceRound) -> RoundRecord:
    return RoundRecord("r", JobId(job), number, started, ended, parts, 0.5, 1.0, True, 1.0, 1.0)


def test_overlapping_rounds_of_one_device_count_once_and_a_late_device_is_measured_over_the_whole_run() -> None:
    rounds = [
        round_of("a", 1, 0.0, 10.0, part("d0", 10.0)),
        round_of("b", 1, 5.0, 15.0, part("d0", 10.0)),  # d0 in two jobs' rounds at once: [0, 15] busy, not 20 s
        round_of("a", 2, 10.0, 20.0, part("late", 4.0, status="failed")),  # joined at 10, failed after 4 s: busy still
    ]
    busy = utilisation(rounds, devices=["idle"])  # connected, never planned
    assert busy.span_s == 20.0
    assert busy.devices == {"idle": 0.0, "d0": 0.75, "late": 0.2}
    assert busy.fleet == pytest.approx((15.0 + 4.0) / (3 * 20.0))  # the sum over devices x span: the mean here
    assert busy.least() == ("idle", 0.0) and busy.most() == ("d0", 0.75)
    figures = busy.figures()
    assert figures["least"] == {"device": "idle", "busy": 0.0} and figures["most"] == {"device": "d0", "busy": 0.75}
    assert busy_line(figures) == "the fleet busy 32% of 20.0 s (3 devices); least busy idle 0%, most busy d0 75%"


def test_a_device_is_busy_from_after_its_wait_to_the_end_of_its_round_at_most() -> None:
    record = round_of("a", 1, 100.0, 110.0, part("d0", 3.0, wait_s=2.0), part("d1", 30.0, wait_s=1.0))
    assert busy_interval(record, record.devices[0]) == (102.0, 105.0)
    assert busy_interval(record, record.devices[1]) == (101.0, 110.0)  # its round ended without it
    # The span starts at the first round (a fleet gathering before it is nobody's idle time).
    assert utilisation([record]).devices == {"d0": 0.3, "d1": 0.9}


def test_no_round_or_a_span_of_nothing_has_no_fleet_fraction() -> None:
    assert utilisation([], devices=["d0"]).fleet is None
    assert utilisation([round_of("a", 1, 5.0, 5.0, part("d0", 0.0))]).fleet is None
    assert busy_line(utilisation([]).figures()) == "no device round"


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.floats(0, 50), st.floats(0, 20), st.floats(0, 30), st.floats(0, 5)),
                min_size=1, max_size=12))
def test_every_fraction_is_between_0_and_1_and_the_fleet_is_the_devices_mean(rows) -> None:
    rounds = [round_of("a", n + 1, start, start + length, part(f"d{device}", seconds, wait_s=wait))
              for n, (device, start, length, seconds, wait) in enumerate(rows)]
    busy = utilisation(rounds)
    assert all(0.0 <= f <= 1.0 + 1e-9 for f in busy.devices.values())
    if busy.fleet is not None:
        assert busy.fleet == pytest.approx(sum(busy.devices.values()) / len(busy.devices))


def test_busy_fractions_count_intervals_once_within_the_span_whatever_clock_they_are_on() -> None:
    # Two runs' tasks on the wall clock: d0 in both at once for a while; the span is the second run's.
    intervals = {"d0": [(100.0, 130.0), (120.0, 150.0), (190.0, 260.0)], "d1": [(0.0, 500.0)], "d2": []}
    busy = busy_fractions(intervals, 110.0, 210.0)
    # d0: [110, 150] and [190, 210] of the 100 s span; d1 the whole span; d2 none.
    assert busy.span_s == 100.0 and busy.devices == {"d0": 0.6, "d1": 1.0, "d2": 0.0}
    assert busy.fleet == (60.0 + 100.0) / (3 * 100.0)
    assert busy_fractions(intervals, 5.0, 5.0).fleet is None
