"""The lab page's JSON (``lab/view.py``) and its run pages' catalog (``lab/pages.py: LabCatalog``).

Built from a real lab database (``LabStore``) and real run databases in the
runs' folders, written as the driver writes them (``dashboard_runs``).
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_runs import records, write_run

from mjfl.coordinator.lab import view as lab_view
from mjfl.coordinator.lab.config import LabLimits
from mjfl.coordinator.lab.pages import LabCatalog
from mjfl.coordinator.lab.store import LabStore
from mjfl.coordinator.lab.view import LabView

WAITS = "waiting for a place: the lab runs at most 1 run at once (limits.max_running), 1 running now"
CONNECTED = [
    {"device": "d0", "connected_at": 1.0, "address": "127.0.0.1:4001", "serving": {"run": "0002-bob", "job": "cnn"},
     "hardware": {"model": "Pixel 8", "os": "Android 14", "device_state": {"battery_pct": 99}}},
    {"device": "zz", "connected_at": 2.0, "address": "127.0.0.1:4002", "serving": None, "hardware": None},
]


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
    write_run(tmp_path / "runs" / ids[1], ids[1], devices=2, finished=False)
    return LabView(store, tmp_path / "runs", LabLimits(max_running=1))


def held(run_id: str, devices: int) -> float:
    return sum(part.duration_s for record in records(run_id, devices) for part in record.devices)


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
    assert (running["id"], running["owner"], running["state"]) == ("0002-bob", "bob", "running")
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


def test_the_lab_timeline_has_a_bar_per_device_round_of_every_run(lab: tuple[LabStore, LabView]) -> None:
    _, view = lab
    timeline = view.timeline(CONNECTED)
    assert timeline["jobs"] == ["0001-alice/cnn", "0001-alice/lenet", "0002-bob/cnn", "0002-bob/lenet"]
    assert timeline["devices"] == ["d0", "d1", "d2", "d3", "zz"]  # every device with a round, and every connected one
    expected = [
        (str(p.device), str(r.job), run, r.round, round(r.started_s + p.wait_s, 3),
         round(r.started_s + p.wait_s + p.duration_s, 3), p.status)
        for run, n in (("0001-alice", 4), ("0002-bob", 2)) for r in records(run, n) for p in r.devices
    ]
    shown = [(b["device"], b["job"], b["run"], b["round"], b["start_s"], b["end_s"], b["status"]) for b in timeline["bars"]]
    assert shown == expected  # both runs started at the same moment: no offset between them
    assert {"failed", "rejected", "ok"} == {b["status"] for b in timeline["bars"]}



def test_the_lab_timeline_shows_the_runs_going_before_the_runs_that_ended(
    lab: tuple[LabStore, LabView], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, view = lab
    monkeypatch.setattr(lab_view, "TIMELINE_RUNS", 1)
    timeline = view.timeline(CONNECTED)
    assert {bar["run"] for bar in timeline["bars"]} == {"0002-bob"}
    assert timeline["jobs"] == ["0002-bob/cnn", "0002-bob/lenet"]
    assert timeline["bars"][0]["start_s"] == 0.0  # the origin: the earliest shown run's start


def test_the_page_keeps_no_ended_runs_records_but_the_newest_and_counts_each_once(
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
    read, reads = view._read, {}

    def spied(run_id: str) -> lab_view.Recorded | None:
        found = read(run_id)
        if found is not None:
            reads.setdefault(run_id, []).append(weakref.ref(found))
        return found

    monkeypatch.setattr(view, "_read", spied)
    first = view.state(CONNECTED)
    view.timeline(CONNECTED)
    LabCatalog(view).runs()
    assert view.state(CONNECTED) == first  # an ended run is counted once, however often the page asks
    gc.collect()
    assert len(reads["0001-alice"]) == 1 and reads["0001-alice"][0]() is None  # read once, then let go
    assert reads[carol][0]() is not None  # the newest ended run: the timeline shows it
    alice = held("0001-alice", 4) + held(carol, 2)
    assert first["shares"][0] == {"owner": "alice", "device_s": round(alice, 3), "runs": 2,
                                  "fraction": alice / (alice + held("0002-bob", 2))}


def test_the_run_pages_catalog_lists_the_lab_runs_that_recorded_any_state_and_only_those(lab: tuple[LabStore, LabView]) -> None:
    _, view = lab
    catalog = LabCatalog(view)
    assert [(e["id"], e["status"]) for e in catalog.runs()] == [("0001-alice", "finished"), ("0002-bob", "running")]
    running = catalog.run("0002-bob")
    assert running is not None and running["run"]["status"] == "running"
    assert {d["device"] for d in running["devices"]} == {"d0", "d1"}
    assert catalog.round_devices("0001-alice", "cnn", 2)["round"] == 2
    assert catalog.run("0003-alice") is None  # queued: nothing recorded
    for stranger in ("../0001-alice", "nope", ""):
        assert catalog.folder(stranger) is None and catalog.run(stranger) is None
