"""The dashboard's state: runs, jobs, devices and choices from a real run database, read-only."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from dashboard_runs import bars_of, jobs_of, write_run

from mjfl.coordinator.dashboard.catalog import Catalog
from mjfl.coordinator.dashboard.state import add_round, device_row, jobs_view, round_devices
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.coordinator.storage.records import DeviceRound, RoundRecord
from mjfl.errors import UserError
from mjfl.ids import DeviceId, JobId


def test_the_runs_list_holds_the_runs_that_ended_with_their_time_to_target(folder: Path) -> None:
    runs = Catalog([folder]).runs()
    assert [(r["id"], r["status"]) for r in runs] == [("0:mg-0", "finished"), ("0:mg-1", "interrupted")]
    run = runs[0]
    assert (run["method"], run["label"], run["status"], run["folder"]) == ("meta-greedy", "meta-greedy", "finished", str(folder))
    # cnn reaches 0.8 in round 2 (t = 20); lenet only its loss target 0.3 in round 3 (t = 36).
    assert run["jobs"] == [
        {"job": "cnn", "time_to_target_s": 20.0, "final_accuracy": None, "rounds": 3},
        {"job": "lenet", "time_to_target_s": 36.0, "final_accuracy": 0.8, "rounds": 3},
    ]
    assert run["total_time_s"] == 36.0


def test_a_run_shows_each_jobs_series_target_and_budget(folder: Path) -> None:
    view = Catalog([folder]).run("0:mg-0")
    assert view is not None
    cnn = view["jobs"][0]
    assert cnn["target"] == {"accuracy": 0.8, "loss": None, "window": 1}
    smoothed = jobs_view([dataclasses.replace(job, target_window=3) for job in jobs_of("mg-0")], [])
    assert [j["target"]["window"] for j in smoothed] == [3, 3]  # a smoothed target says over how many rounds
    assert (cnn["rounds"], cnn["max_rounds"], cnn["rounds_left"]) == (3, 50, 47)
    assert cnn["series"] == {"round": [1, 2, 3], "time_s": [10.0, 20.0, 30.0],
                             "accuracy": [0.5, 0.85, None], "loss": [1.0, 0.6, None]}  # NaN is null
    json.dumps(view, allow_nan=False)  # what the server sends: no NaN anywhere


def test_devices_show_rounds_failures_state_and_the_profiles_expected_time(folder: Path) -> None:
    view = Catalog([folder]).run("0:mg-0")
    assert view is not None
    devices = {d["device"]: d for d in view["devices"]}
    assert list(devices) == ["d0", "d1", "d2", "d3"]
    failing = devices["d1"]
    assert (failing["rounds"], failing["ok"], failing["failed"]) == (6, 0, 6)
    assert failing["last_failure"] == "timeout in round 3"  # lenet's round 3 is recorded last
    assert failing["battery_pct"] is None
    rejected = devices["d2"]
    assert (rejected["ok"], rejected["rejected"], rejected["last_failure"]) == (4, 2, "NaN weights")
    d0 = devices["d0"]
    assert (d0["battery_pct"], d0["charging"], d0["thermal_status"], d0["last_round_s"]) == (77, True, 1, 5.0)
    # d0's last round: lenet, tau = 1 epoch, D = 100 samples, a = 0.01, mu = 50: 1*0.01*100 + 1*100/50.
    assert d0["expected_round_s"] == pytest.approx(3.0)
    assert devices["d3"]["expected_round_s"] is None  # no profile stored
    # d0 told 2 J in each of its 6 rounds (3 of each job); the others told none.
    assert (d0["energy_j"], devices["d3"]["energy_j"]) == (12.0, None)


def test_a_jobs_energy_to_target_counts_its_device_rounds_up_to_the_target(folder: Path) -> None:
    view = Catalog([folder]).run("0:mg-0")
    assert view is not None
    cnn = view["jobs"][0]
    # cnn reaches its target in round 2: 8 device rounds, of which d0's two told 2 J each.
    assert (cnn["energy_to_target_j"], cnn["energy_known"], cnn["energy_device_rounds"]) == (4.0, 2, 8)


def test_choices_show_the_plan_kept_and_planned_vs_answered(folder: Path) -> None:
    view = Catalog([folder]).run("0:mg-0")
    assert view is not None
    choices = view["choices"]
    assert len(choices) == 6
    second = next(c for c in choices if (c["job"], c["round"]) == ("cnn", 2))
    assert second["winner"] == "genetic"
    assert second["members"] == [{"member": "random", "cost": 3.0, "won": False},
                                 {"member": "genetic", "cost": 1.5, "won": True},
                                 {"member": "bods", "cost": 2.0, "won": False}]
    # d1 failed (no answer); d2 answered with a rejected update.
    assert (second["planned"], second["answered"], second["used"]) == (4, 3, 2)
    assert second["time_s"] == 10.0 and second["expected_time_s"] == 8.0


def test_an_interrupted_run_is_shown_as_such_and_a_running_or_failed_one_not_at_all(folder: Path) -> None:
    # A lab's cancelled run, pulled: its records end "interrupted", its rounds up to the stop are all there.
    catalog = Catalog([folder])
    interrupted = catalog.run("0:mg-1")
    assert interrupted is not None and interrupted["run"]["status"] == "interrupted"
    assert [j["rounds"] for j in interrupted["jobs"]] == [3, 3]
    assert len(bars_of(catalog.timeline("0:mg-1"))) == 24
    write_run(folder, "mg-2", finished=False, status="running")
    write_run(folder, "mg-3", finished=False, status="failed")
    assert [r["id"] for r in catalog.runs()] == ["0:mg-0", "0:mg-1"]
    assert catalog.run("0:mg-2") is None and catalog.run("0:mg-3") is None and catalog.timeline("0:mg-2") is None


def test_an_unknown_run_is_none(folder: Path) -> None:
    catalog = Catalog([folder])
    assert catalog.run("0:nope") is None
    assert catalog.run("1:mg-0") is None  # no second folder
    assert catalog.run("x") is None


def test_runs_of_two_folders_are_told_apart_by_folder(
    folder: Path, tmp_path: Path, run_writer: Callable[..., None]
) -> None:
    other = tmp_path / "other"
    run_writer(other)  # the same run id in another folder
    assert [r["id"] for r in Catalog([folder, other]).runs()] == ["0:mg-0", "0:mg-1", "1:mg-0"]


def test_a_folder_without_a_run_database_is_named(folder: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match=f"{empty}: no run database"):
        Catalog([folder, empty])


def test_reading_writes_nothing(folder: Path) -> None:
    database = database_path(folder)
    before = hashlib.sha256(database.read_bytes()).hexdigest()
    catalog = Catalog([folder])
    catalog.runs()
    catalog.run("0:mg-0")
    assert hashlib.sha256(database.read_bytes()).hexdigest() == before


def test_the_timeline_has_a_bar_per_device_round_and_each_devices_busy_fraction(folder: Path) -> None:
    timeline = json.loads(Catalog([folder]).timeline("0:mg-0"))
    assert (timeline["devices"], timeline["jobs"], timeline["total"]) == (["d0", "d1", "d2", "d3"], ["cnn", "lenet"], 24)
    bars = {(b["job"], b["round"], b["device"]): b for b in bars_of(timeline)}
    assert len(bars) == 24  # 2 jobs x 3 rounds x 4 devices
    # lenet's round 2 runs from 12 s to 24 s: d0 used for 2 + 2 s, d1 failed after 9 s, d2's update refused after 4 s.
    assert bars[("lenet", 2, "d0")] == {"device": "d0", "job": "lenet", "round": 2, "start_s": 12.0, "end_s": 16.0,
                                        "status": "ok"}
    assert (bars[("lenet", 2, "d1")]["end_s"], bars[("lenet", 2, "d1")]["status"]) == (21.0, "failed")
    assert bars[("lenet", 2, "d2")]["status"] == "rejected"
    busy = timeline["utilisation"]
    # d0: [0,3] in both jobs' round 1 (once), [10,14] u [12,16], [20,25] u [24,29]: 18 s of the 36 s run.
    assert busy["span_s"] == 36.0 and busy["devices"]["d0"] == 0.5
    assert busy["most"] == {"device": "d1", "busy": 32 / 36}  # failing after 9 s each round is busy too
    # From the 20th bar on (a live page asks for what it lacks); its indices are its own answer's.
    tail = json.loads(Catalog([folder]).timeline("0:mg-0", since=20))
    assert bars_of(tail) == bars_of(timeline)[20:] and tail["total"] == 24
    assert Catalog([folder]).timeline("0:nope") is None and Catalog([folder]).timeline("7:mg-0") is None


def test_a_finished_runs_view_and_timeline_are_read_once_and_kept(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = Catalog([folder])
    first = catalog.timeline("0:mg-0"), catalog.run("0:mg-0")
    reads = []
    monkeypatch.setattr(Storage, "rounds", lambda self, *args: reads.append(args) or [])
    assert (catalog.timeline("0:mg-0"), catalog.run("0:mg-0")) == first and reads == []
    catalog.run("0:mg-1")  # interrupted: it may be resumed, so it is read afresh
    assert reads == [("mg-1",)]


def test_a_charging_phones_tasks_read_not_measured_charging_and_measured_ones_their_resolution() -> None:
    """The energy column of the devices and of a round's devices, as the app's device_state tells it."""
    charging = {"energy_j": None, "energy_source": "charging", "energy_resolution_j": None, "plugged": "usb"}
    battery = {"energy_j": 14.4, "energy_source": "battery", "energy_resolution_j": 14.4, "plugged": "none"}
    usb, wifi, emulated, quiet = DeviceId("usb-phone"), DeviceId("wifi-phone"), DeviceId("emu-0"), DeviceId("failing")

    def record(number: int, *parts: DeviceRound) -> RoundRecord:
        return RoundRecord("r", JobId("cnn"), number, 0.0, 1.0, parts, 0.5, 1.0, True, 1.0, 1.0, None)

    first = record(
        1,
        DeviceRound(usb, "ok", 10, 0.5, 1.0, device_state=charging),
        DeviceRound(wifi, "ok", 10, 0.5, 1.0, device_state=battery, energy_j=14.4),
        DeviceRound(emulated, "ok", 10, 0.5, 1.0, device_state={"energy_j": 3.21, "energy_source": "modelled"}, energy_j=3.21),
        DeviceRound(quiet, "failed", 0, None, 1.0, error="timeout"),
    )
    shown = [d["energy"] for d in round_devices(first)["devices"]]
    assert shown == ["not measured, charging", "14.4 J ± 14.4", "3.2 J", ""]  # a failed task: nothing to say
    rows = {d: device_row(d) for d in (usb, wifi, emulated, quiet)}
    add_round(rows, first, {}, {})
    add_round(rows, record(2, DeviceRound(wifi, "ok", 10, 0.5, 1.0, device_state=battery, energy_j=28.8)), {}, {})
    assert [rows[d]["energy"] for d in (usb, wifi, emulated, quiet)] == [
        "not measured, charging", "43.2 J ± 28.8", "3.2 J", "",
    ]  # fmt: skip
    # Plugged in later: its latest task says so, with what it measured before.
    add_round(rows, record(3, DeviceRound(wifi, "ok", 10, 0.5, 1.0, device_state=charging)), {}, {})
    assert rows[wifi]["energy"] == "not measured, charging (earlier tasks 43.2 J)"
    assert rows[wifi]["energy_j"] == pytest.approx(43.2)  # the sum the column sorts by
