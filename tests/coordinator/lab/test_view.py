"""The lab page's JSON (``lab/view.py``) and its run pages' catalog (``lab/pages.py: LabCatalog``).

Built from a real lab database (``LabStore``) and real run databases in the
runs' folders, written as the driver writes them (``dashboard_runs``).
"""

from __future__ import annotations

import datetime as dt
import gc
import itertools
import json
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_runs import bars_of, records, write_run

from mjfl.coordinator.dashboard.catalog import timeline_of
from mjfl.coordinator.lab import view as lab_view
from mjfl.coordinator.lab.config import LabLimits
from mjfl.coordinator.lab.pages import LAB_LOG, LabCatalog
from mjfl.coordinator.lab.store import LabStore
from mjfl.coordinator.lab.view import LabView, serving
from mjfl.coordinator.results.wallclock import unix_time
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path

WAITS = "waiting for a place: the lab runs at most 1 run at once (limits.max_running), 1 running now"
CONNECTED = [
    {"device": "d0", "connected_at": 1.0, "address": "127.0.0.1:4001", "serving": {"run": "0002-bob", "job": "cnn"},
     "hardware": {"model": "Pixel 8", "os": "Android 14", "device_state": {"battery_pct": 99}}},
    {"device": "zz", "connected_at": 2.0, "address": "127.0.0.1:4002", "serving": None, "hardware": None},
]
STARTED = unix_time("2026-11-27T01:00:00")  # the run databases' started_at (dashboard_runs.write_run)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[tuple[LabStore, LabView]]:
    """Alice's run completed (4 devices), Bob's running (2 devices), Alice's second queued, Bob's second cancelled."""
    with LabStore(tmp_path / "lab.db") as store:
        yield store, _recorded(store, tmp_path)


def _recorded(store: LabStore, tmp_path: Path) -> LabView:
    for name in ("alice", "bob"):
        store.add_researcher(name)
    ids = [store.submit(owner, method="meta-greedy", needs=2, config_toml="", key=None)[0].run_id
           for owner in ("alice", "bob", "alice", "bob")]
    for run_id in ids[:2]:
        store.move(run_id, "admitted")
        store.move(run_id, "running")
    store.move(ids[0], "completed", "every job reached its target", reached=True)
    store.note(ids[2], WAITS)
    store.move(ids[3], "cancelled", "cancelled before it started")
    write_run(tmp_path / "runs" / ids[0], ids[0], devices=4)
    write_run(tmp_path / "runs" / ids[1], ids[1], devices=2, finished=False, status="running")
    return LabView(store, tmp_path / "runs", LabLimits(max_running=1))


def held(run_id: str, devices: int) -> float:
    return sum(part.duration_s for record in records(run_id, devices) for part in record.devices)


def own_timeline(view: LabView, run_id: str) -> dict[str, Any]:
    """The run's own dashboard's timeline (`mjfl dashboard` of its folder), whatever its state."""
    with Storage.read_only(database_path(view.folder(run_id))) as storage:
        return timeline_of(storage, run_id)


def spans(bars: list[dict[str, Any]]) -> list[tuple[str, str, int, float, float, str]]:
    return [(b["device"], b["job"], b["round"], b["start_s"], b["end_s"], b["status"]) for b in bars]


def test_the_lab_state_shows_devices_queue_runs_and_each_researchers_device_time(lab: tuple[LabStore, LabView]) -> None:
    store, view = lab
    state = view.state(CONNECTED)

    assert state["lab"] == {"devices": 2, "running": 1, "queued": 1, "max_running": 1, "share": "equal", "draining": False}
    busy, idle = state["devices"]
    assert (busy["device"], busy["state"], busy["run"], busy["job"], busy["model"], busy["kind"]) == (
        "d0", "busy", "0002-bob", "cnn", "Pixel 8", "phone")
    # Counted over both runs' rounds; the battery as its last round told it (not its hello).
    parts = [p for run, n in (("0001-alice", 4), ("0002-bob", 2)) for r in records(run, n) for p in r.devices if p.device == "d0"]
    assert (busy["rounds"], busy["ok"]) == (len(parts), sum(p.status == "ok" for p in parts))
    assert busy["battery_pct"] == parts[-1].device_state["battery_pct"] != 99
    assert busy["last_round_s"] == parts[-1].duration_s
    assert (idle["device"], idle["state"], idle["run"], idle["rounds"], idle["kind"]) == ("zz", "lobby", None, 0, None)

    assert state["queue"] == [{"id": "0003-alice", "owner": "alice", "method": "meta-greedy", "needs": 2, "position": 1,
                               "reason": WAITS, "submitted_at": store.run("0003-alice").submitted_at}]
    (running,) = state["running"]
    assert (running["id"], running["owner"], running["state"], running["reason"]) == ("0002-bob", "bob", "running", None)
    cnn = next(job for job in running["jobs"] if job["job"] == "cnn")
    assert (cnn["rounds"], cnn["max_rounds"], cnn["target"]["accuracy"]) == (3, 50, 0.8)
    assert cnn["accuracy"] is None  # its last round diverged (NaN): JSON says null
    assert cnn["time_to_target_s"] == 20.0

    alice, bob = held("0001-alice", 4), held("0002-bob", 2)
    assert alice != bob
    assert state["shares"] == [
        {"owner": "alice", "device_s": round(alice, 3), "fraction": alice / (alice + bob), "runs": 1},
        {"owner": "bob", "device_s": round(bob, 3), "fraction": bob / (alice + bob), "runs": 1},
    ]
    assert [(r["id"], r["state"], r["targets_reached"]) for r in state["finished"]] == [
        ("0001-alice", "completed", True), ("0004-bob", "cancelled", None)]


def test_the_lab_timelines_bars_of_a_run_are_its_own_dashboards_bars_on_the_wall_clock(
    lab: tuple[LabStore, LabView], tmp_path: Path,
) -> None:
    _, view = lab
    timeline = view.timeline(CONNECTED)
    assert timeline["jobs"] == ["0001-alice/cnn", "0001-alice/lenet", "0002-bob/cnn", "0002-bob/lenet"]
    assert (timeline["runs"], timeline["job_runs"]) == (["0001-alice", "0002-bob"], [0, 0, 1, 1])
    assert timeline["devices"] == ["d0", "d1", "d2", "d3", "zz"]  # every device with a round, and every connected one
    # Neither database has anchors: each run's clock starts at its started_at, the same moment for both.
    assert timeline["origin"] == STARTED and timeline["live"] == [0.0, 36.0]  # Bob's rounds: he runs still
    lab_bars = bars_of(timeline)
    assert {"failed", "rejected", "ok"} == {b["status"] for b in lab_bars}
    for run in ("0001-alice", "0002-bob"):
        own = bars_of(own_timeline(view, run))
        ours = [{**b, "job": b["job"].split("/")[1]} for b in lab_bars if b["job"].startswith(run + "/")]
        assert spans(ours) == spans(own)  # the run dashboard's bars: clipped to the round's end the same way
    failed = next(b for b in lab_bars if b["job"] == "0001-alice/lenet" and b["round"] == 2 and b["device"] == "d1")
    assert failed["end_s"] == 21.0  # 12 s + 9 s, no later than the round's end (24 s)
    # The busy column: a device busy on any shown run's job, over the shown rounds' span.
    assert timeline["utilisation"]["span_s"] == 36.0 and timeline["utilisation"]["devices"]["zz"] == 0.0


def test_two_runs_on_one_device_are_never_drawn_overlapping_where_their_tasks_did_not(tmp_path: Path) -> None:
    # The second run's driver started 10 s after the first's, its engine 60 s after the first's rounds ended:
    # placed by started_at their 36 s of rounds would overlap for 26 s; by their run clocks' anchors, never.
    with LabStore(tmp_path / "lab.db") as store:
        store.add_researcher("alice")
        first, second = (store.submit("alice", method="meta-greedy", needs=2, config_toml="", key=None)[0].run_id
                         for _ in range(2))
        for run_id in (first, second):
            store.move(run_id, "admitted")
            store.move(run_id, "running")
            store.move(run_id, "completed", "every job reached its target", reached=True)
        engine = {first: STARTED + 90.0, second: STARTED + 90.0 + 36.0 + 60.0}
        write_run(tmp_path / "runs" / first, first, devices=2, clocks=[(0.0, engine[first])])
        write_run(tmp_path / "runs" / second, second, devices=2, clocks=[(0.0, engine[second])],
                  started_at="2026-11-27T01:00:10")
        bars = bars_of(LabView(store, tmp_path / "runs", LabLimits()).timeline([]))
    # What the fleet's task log says (wall clock): each device round from its run's engine start on.
    tasks = sorted((str(p.device), engine[run] + r.started_s + p.wait_s, engine[run] + min(r.ended_s, r.started_s + p.duration_s))
                   for run in (first, second) for r in records(run, 2) for p in r.devices)
    origin = engine[first]
    assert sorted((b["device"], b["start_s"] + origin, b["end_s"] + origin) for b in bars) == tasks
    for device in ("d0", "d1"):
        own = sorted((b["start_s"], b["end_s"], b["job"].split("/")[0]) for b in bars if b["device"] == device)
        between = [(a, b) for a, b in itertools.pairwise(own) if a[2] != b[2]]
        assert between and all(earlier[1] <= later[0] for earlier, later in between)  # the runs' bars never overlap


def test_the_lab_timeline_shows_the_runs_going_before_the_runs_that_ended(
    lab: tuple[LabStore, LabView], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, view = lab
    monkeypatch.setattr(lab_view, "TIMELINE_RUNS", 1)
    timeline = view.timeline(CONNECTED)
    assert timeline["runs"] == ["0002-bob"] and timeline["jobs"] == ["0002-bob/cnn", "0002-bob/lenet"]
    assert min(timeline["bars"]["start_s"]) == 0.0  # the origin: the earliest shown round's start


def test_the_page_keeps_no_ended_runs_records_but_the_newest_bars_and_counts_each_once(
    lab: tuple[LabStore, LabView], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A lab's service lives for many runs: its page must not hold every ended run's rounds for good.
    store, view = lab
    carol = store.submit("alice", method="meta-greedy", needs=2, config_toml="", key=None)[0].run_id
    store.move(carol, "admitted")
    store.move(carol, "running")
    store.move(carol, "completed", "a job stopped short of its target", reached=False)
    write_run(tmp_path / "runs" / carol, carol, devices=2)
    monkeypatch.setattr(lab_view, "TIMELINE_RUNS", 1)
    read, reads = view.read, {}

    def spied(run_id: str) -> lab_view.Recorded | None:
        found = read(run_id)
        if found is not None:
            reads.setdefault(run_id, []).append(weakref.ref(found))
        return found

    monkeypatch.setattr(view, "read", spied)
    first = view.state(CONNECTED)
    view.timeline(CONNECTED)
    LabCatalog(view).runs()
    assert view.state(CONNECTED) == first  # an ended run is counted once, however often the page asks
    gc.collect()
    assert len(reads["0001-alice"]) == 1 and reads["0001-alice"][0]() is None  # read once, then let go
    assert len(reads[carol]) == 1 and reads[carol][0]() is None  # the newest ended run: its bars kept, not its rounds
    assert list(view._newest) == [carol]
    alice = held("0001-alice", 4) + held(carol, 2)
    assert first["shares"][0] == {"owner": "alice", "device_s": round(alice, 3), "runs": 2,
                                  "fraction": alice / (alice + held("0002-bob", 2))}


def test_the_run_pages_catalog_serves_every_lab_run_with_where_it_stands(lab: tuple[LabStore, LabView]) -> None:
    store, view = lab
    catalog = LabCatalog(view)
    listed = catalog.runs()
    assert [(e["id"], e["status"], e["lab"]["state"]) for e in listed] == [
        ("0001-alice", "finished", "completed"), ("0002-bob", "running", "running")]
    running = catalog.run("0002-bob")
    assert running is not None and running["run"]["status"] == "running"
    assert {d["device"]: d["state"] for d in running["devices"]} == {"d0": "offline", "d1": "offline"}  # none connected
    assert catalog.round_devices("0001-alice", "cnn", 2)["round"] == 2
    # Queued: nothing recorded, but its page says why it waits.
    queued = catalog.run("0003-alice")
    assert queued is not None and queued["jobs"] == [] and queued["run"]["status"] == "queued"
    assert (queued["run"]["lab"]["state"], queued["run"]["lab"]["reason"]) == ("queued", WAITS)
    store.move("0002-bob", "failed", "job cnn: its data set could not be read")
    failed = catalog.run("0002-bob")
    assert failed is not None and failed["run"]["lab"] == {**failed["run"]["lab"], "state": "failed",
                                                           "reason": "job cnn: its data set could not be read"}
    for stranger in ("../0001-alice", "nope", ""):
        assert catalog.folder(stranger) is None and catalog.run(stranger) is None and catalog.timeline(stranger) is None


def test_a_devices_state_on_a_run_page_says_whom_it_serves_now() -> None:
    connected = [{"device": "a", "serving": {"run": "r1", "job": "cnn"}}, {"device": "b", "serving": {"run": "r2", "job": "x"}},
                 {"device": "c", "serving": None}]
    assert serving(connected, "r1") == {"a": "training cnn", "b": "busy r2/x", "c": "idle"}


def test_a_lab_runs_busy_fractions_count_the_other_runs_tasks(lab: tuple[LabStore, LabView]) -> None:
    # Alice's and Bob's runs ran at once (the lab's times) on d0 and d1, both from their started_at on.
    _, view = lab
    own = own_timeline(view, "0002-bob")["utilisation"]
    shared = json.loads(LabCatalog(view).timeline("0002-bob"))["utilisation"]
    assert (shared["runs"], shared["own_fleet"]) == (2, own["fleet"])
    assert shared["span_s"] == own["span_s"] == 36.0
    # d0 alone: [0, 3] u [10, 14] u [12, 16] u [20, 25] u [24, 29] in each run, the same intervals: 18 s either way.
    assert shared["devices"]["d0"] == own["devices"]["d0"] == 0.5
    assert set(shared["devices"]) == {"d0", "d1"}  # its own devices' rows only


def test_a_devices_log_on_a_lab_run_page_has_the_labs_lines_naming_it_while_the_run_ran(
    lab: tuple[LabStore, LabView], tmp_path: Path,
) -> None:
    store, view = lab
    bob = store.run("0002-bob")
    assert bob is not None and bob.started_at is not None
    started = dt.datetime.fromtimestamp(unix_time(bob.started_at))  # lab.log's stamps: local time, as logging writes them

    def stamp(moment: dt.datetime) -> str:
        return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{moment.microsecond // 1000:03d}"

    (tmp_path / LAB_LOG).write_text(
        f"{stamp(started - dt.timedelta(hours=1))} SpawnProcess-1 mjfl.device INFO: d1: connected to lab\n"
        f"{stamp(started + dt.timedelta(seconds=1))} SpawnProcess-1 mjfl.device WARNING: d1: task 7 failed: boom\n"
        "Traceback (most recent call last):\n"
        f"{stamp(started + dt.timedelta(seconds=2))} MainProcess mjfl.coordinator.remote INFO: device d10 connected\n")
    (view.folder("0002-bob") / "mjfl.log").write_text(
        f"{stamp(started + dt.timedelta(seconds=3))} mjfl.coordinator.engine WARNING: d1 timed out in round 1\n")
    log = LabCatalog(view, tmp_path / LAB_LOG).device_log("0002-bob", "d1")
    assert log is not None and log["source"] == "mjfl.log and lab.log"
    assert [line.split(": ", 1)[1] for line in log["lines"]] == ["d1: task 7 failed: boom", "d1 timed out in round 1"]
    assert LabCatalog(view).device_log("0002-bob", "d1")["source"] == "mjfl.log"  # no lab log given: the run's only
