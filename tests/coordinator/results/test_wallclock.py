"""A run-clock time on the wall clock (``results.wallclock``): anchors made here, the times worked out by hand."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mjfl.coordinator.results.wallclock import on_wall_clock, unix_time

START = "2026-11-27T01:00:00"  # RunInfo.started_at as mjfl writes it (UTC); without a zone, read as UTC
WALL = 1_795_741_200.0  # START in Unix seconds


def test_a_time_is_placed_by_the_latest_anchor_at_or_before_it() -> None:
    # Started 90 s after its driver (the jobs' preparation), stopped at run time 36 s, resumed an hour later.
    anchors = [(0.0, WALL + 90.0), (36.0, WALL + 90.0 + 3600.0 + 36.0)]
    assert on_wall_clock(0.0, anchors, START) == WALL + 90.0
    assert on_wall_clock(35.5, anchors, START) == WALL + 125.5
    assert on_wall_clock(36.0, anchors, START) == WALL + 3726.0  # the resumed run's clock takes up here
    assert on_wall_clock(50.0, anchors, START) == WALL + 3740.0


def test_without_anchors_or_before_the_first_the_runs_start_is_its_clocks_zero() -> None:
    assert unix_time(START) == WALL == unix_time("2026-11-27T01:00:00+00:00")
    assert on_wall_clock(12.5, [], START) == WALL + 12.5  # a database from before anchors were kept
    # Recorded by an older mjfl, resumed by one that keeps them: its first rounds have none.
    assert on_wall_clock(10.0, [(36.0, WALL + 5000.0)], START) == WALL + 10.0


def test_of_anchors_at_one_run_time_the_last_kept_holds() -> None:
    # Resumed twice before any round ended: the run clock read 20 s at both starts.
    anchors = [(0.0, WALL), (20.0, WALL + 100.0), (20.0, WALL + 400.0)]
    assert on_wall_clock(25.0, anchors, START) == WALL + 405.0


@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 10_000)), min_size=1, max_size=6), st.integers(0, 2000))
def test_between_two_anchors_the_wall_clock_runs_with_the_run_clock(points: list[tuple[int, int]], at: int) -> None:
    anchors = sorted((float(run), WALL + wall) for run, wall in points)
    later = at + 1.0
    if not any(at < run <= later for run, _ in anchors):  # no anchor in between: one second on both clocks
        assert on_wall_clock(later, anchors, START) - on_wall_clock(float(at), anchors, START) == 1.0
