"""The device timeline's JSON (``dashboard/timeline.py``): one run's columns, several runs on the wall clock."""

from __future__ import annotations

import json

from dashboard_runs import bars_of, records

from mjfl.coordinator.dashboard.catalog import encoded
from mjfl.coordinator.dashboard.timeline import (
    PlacedRun,
    TimelineBars,
    lab_timeline,
    shared_busy,
    timeline,
)
from mjfl.coordinator.results.utilisation import utilisation
from mjfl.coordinator.results.wallclock import unix_time
from mjfl.coordinator.storage.records import DeviceRound, RoundRecord
from mjfl.ids import DeviceId, JobId

START = "2026-11-27T01:00:00"
WALL = unix_time(START)


def one(job: str, number: int, started: float, ended: float, *parts: tuple[str, float]) -> RoundRecord:
    devices = tuple(DeviceRound(DeviceId(d), "ok", 10, 0.5, seconds) for d, seconds in parts)
    return RoundRecord("r", JobId(job), number, started, ended, devices, 0.5, 1.0, True, 1.0, 1.0)


def test_a_bar_is_a_column_entry_its_device_job_and_status_indices_into_the_answers_lists() -> None:
    rounds = records("r", 3)
    document = timeline(["cnn", "lenet"], rounds, ["zz"])
    assert document["devices"] == ["d0", "d1", "d2", "zz"] and document["statuses"] == ["ok", "failed", "rejected"]
    columns = document["bars"]
    assert all(len(column) == 18 for column in columns.values())  # 2 jobs x 3 rounds x 3 devices
    assert set(columns["device"]) == {0, 1, 2} and set(columns["job"]) == {0, 1} and set(columns["status"]) == {0, 1, 2}
    assert document["utilisation"] == utilisation(rounds, ["zz"]).figures()  # one rule for the bars and the busy column
    tail = timeline(["cnn", "lenet"], rounds, since=12)
    assert bars_of(tail) == bars_of(document)[12:] and tail["total"] == 18
    # Much smaller than a dict a bar: the repeated names are indices.
    assert len(encoded(document["bars"])) < len(json.dumps(bars_of(document), separators=(",", ":"))) / 3


def test_a_resumed_runs_bars_are_placed_by_the_anchor_at_their_start() -> None:
    # Stopped at run time 20 s (its last round's end), resumed 600 s later on the wall clock.
    rounds = [one("cnn", 1, 0.0, 20.0, ("d0", 20.0)), one("cnn", 2, 20.0, 30.0, ("d0", 10.0))]
    anchors = ((0.0, WALL), (20.0, WALL + 620.0))
    placed = PlacedRun("r", TimelineBars(["cnn"]).extend(rounds), anchors, START)
    document = lab_timeline([placed])
    assert document["origin"] == WALL
    # Round 1's bar ends where the resumed clock takes up, but is placed by its start: 0 to 20 s, not to 620 s.
    assert list(zip(document["bars"]["start_s"], document["bars"]["end_s"], strict=True)) == [(0.0, 20.0), (620.0, 630.0)]
    assert placed.wall_span() == (WALL, WALL + 630.0)


def test_the_lab_timeline_follows_the_runs_going_and_colours_each_runs_jobs_apart() -> None:
    old = PlacedRun("0001-a", TimelineBars(["cnn"]).extend([one("cnn", 1, 0.0, 10.0, ("d0", 10.0))]), ((0.0, WALL),), START)
    going = PlacedRun("0002-b", TimelineBars(["cnn"]).extend([one("cnn", 1, 0.0, 5.0, ("d1", 5.0))]),
                      ((0.0, WALL + 100.0),), START, going=True)
    document = lab_timeline([old, going], ["d9"])
    assert (document["jobs"], document["runs"], document["job_runs"]) == (["0001-a/cnn", "0002-b/cnn"], ["0001-a", "0002-b"], [0, 1])
    assert document["live"] == [100.0, 105.0] and document["origin"] == WALL
    assert document["devices"] == ["d0", "d1", "d9"]
    # Busy over the shown span, 105 s: d0 10 s, d1 5 s, d9 none.
    assert document["utilisation"]["devices"] == {"d0": 10 / 105, "d1": 5 / 105, "d9": 0.0}
    assert lab_timeline([])["bars"]["round"] == [] and lab_timeline([])["live"] is None


def test_a_runs_busy_fractions_count_the_tasks_of_the_runs_it_shared_its_devices_with() -> None:
    mine = PlacedRun("mine", TimelineBars(["cnn"]).extend([one("cnn", 1, 0.0, 100.0, ("d0", 20.0), ("d1", 50.0))]),
                     ((0.0, WALL),), START)
    # Another run held d0 from 50 s to 90 s of mine; a third ran long after.
    other = PlacedRun("other", TimelineBars(["x"]).extend([one("x", 1, 0.0, 40.0, ("d0", 40.0))]), ((0.0, WALL + 50.0),), START)
    later = PlacedRun("later", TimelineBars(["x"]).extend([one("x", 1, 0.0, 40.0, ("d1", 40.0))]), ((0.0, WALL + 500.0),), START)
    busy = shared_busy(mine, [other, later])
    assert busy["devices"] == {"d0": 0.6, "d1": 0.5} and busy["runs"] == 2
    assert busy["own_fleet"] == (20.0 + 50.0) / 200.0 and busy["fleet"] == (60.0 + 50.0) / 200.0
