"""The report steps: at the end of a run, and over the finished runs of folders."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from run_records import CNN, assert_png, record_run

from mjfl.coordinator.results.files import CSV_COLUMNS, ENERGY_COLUMNS
from mjfl.coordinator.results.outcomes import summary
from mjfl.coordinator.results.report import gathered_figures, report_run, report_runs
from mjfl.coordinator.results.runs import finished_runs
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.coordinator.storage.records import DeviceRound, SchedulerChoice
from mjfl.errors import UserError


def console() -> Console:
    return Console(file=io.StringIO(), width=240, color_system=None)


def test_the_end_of_a_run_writes_its_files_and_plots_and_prints_its_table(results: dict, tmp_path: Path) -> None:
    choices = [SchedulerChoice("mg", CNN, 1, member, 1.0, member == "bods") for member in ("bods", "greedy")]
    out = console()
    figures = report_run(tmp_path, results, choices, console=out)
    assert figures == summary(results)
    assert json.loads((tmp_path / "summary.json").read_text()) == figures
    with (tmp_path / "rounds.csv").open(newline="") as handle:
        assert tuple(next(csv.reader(handle))) == CSV_COLUMNS
    with (tmp_path / "energy.csv").open(newline="") as handle:
        assert tuple(next(csv.reader(handle))) == ENERGY_COLUMNS
    for name in ("accuracy-cnn.png", "accuracy-lenet.png", "meta-greedy-wins.png"):
        assert_png(tmp_path / name)
    assert "Time to target accuracy" in out.file.getvalue()
    # Without Meta-Greedy's choices there is no winners plot.
    report_run(tmp_path / "plain", results, [], console=console())
    assert not (tmp_path / "plain" / "meta-greedy-wins.png").exists()


def test_the_report_of_folders_prints_and_writes_the_gathered_figures(tmp_path: Path) -> None:
    record_run(tmp_path / "s0", "random", 0, [2.0, 4.0], [0.5, 0.85])
    record_run(tmp_path / "s1", "random", 1, [3.0], [0.9])
    record_run(tmp_path / "s1", "meta-greedy", 1, [1.0, 2.0], [0.7, 0.9], winners=["genetic", "rlds"])
    record_run(tmp_path / "s1", "genetic", 1, [1.0], [0.9], finished=False)  # interrupted: shown, apart
    running(tmp_path / "s1", "rlds", 1)
    out = console()
    folders = [tmp_path / "s0", tmp_path / "s1"]
    figures = report_runs(folders, console=out, json_path=tmp_path / "r.json", plots=tmp_path / "plots", title="t: ")
    assert figures == gathered_figures(finished_runs(folders).finished)
    assert json.loads((tmp_path / "r.json").read_text()) == figures
    assert list(figures) == ["methods", "paper", "utilisation", "provenance"]
    assert list(figures["methods"]) == ["random", "meta-greedy", "genetic (interrupted)"]
    assert list(figures["provenance"].values()) == [None, None, None, None]  # records written without it
    assert figures["methods"]["random"]["group_time_s"] == {"mean": 3.5, "sd": 0.7071067811865476, "reached": 2, "runs": 2}
    assert figures["methods"]["meta-greedy"]["wins"] == {"genetic": 0.5, "rlds": 0.5}
    text = out.file.getvalue()
    assert "t: Time to target accuracy" in text and "left out 1 unfinished run(s) (running or failed)" in text
    assert "genetic (interrupted)" in text
    assert figures["paper"]["note"] in text
    # A line per finished run of its busy fractions (results.utilisation), and a row of the JSON.
    assert [(u["label"], u["seed"]) for u in figures["utilisation"]] == [
        ("random", 0), ("random", 1), ("meta-greedy", 1), ("genetic (interrupted)", 1)]
    assert text.count("busy random · ") == 2 and text.count("busy meta-greedy · ") == 1
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["accuracy-lenet.png", "member-wins.png"]


def test_the_report_shows_energy_to_target_and_leaves_each_devices_to_the_json_in_device_order(tmp_path: Path) -> None:
    # random reaches 0.8 in round 2 of 3: rounds 1 and 2 count (5 + 7 J), not round 3's 100 J.
    record_run(tmp_path / "s0", "random", 0, [2.0, 4.0, 6.0], [0.5, 0.85, 0.9], energies=[5.0, 7.0, 100.0])
    record_run(tmp_path / "s1", "random", 1, [3.0], [0.9], energies=[9.0])
    # meta-greedy's phone told no energy (no charge counter): "—", never 0.
    record_run(tmp_path / "s1", "meta-greedy", 1, [1.0, 2.0], [0.7, 0.9], winners=["genetic", "rlds"])
    out = console()
    figures = report_runs([tmp_path / "s0", tmp_path / "s1"], console=out, json_path=tmp_path / "r.json")
    random, meta = figures["methods"]["random"]["energy"], figures["methods"]["meta-greedy"]["energy"]
    assert random["jobs"]["lenet"] == {"mean": 10.5, "sd": pytest.approx(2.1213203), "reached": 2, "runs": 2}
    assert random["group"] == random["jobs"]["lenet"]  # one job: the group is done when it is
    assert random["devices"] == {"d0": {"total_j": 121.0, "rounds": 4, "per_round_j": 30.25, "source": "battery",
                                        "resolution_j": None, "not_measured": {}}}
    assert meta["jobs"]["lenet"]["mean"] is None
    assert meta["devices"]["d0"] == {"total_j": None, "rounds": 0, "per_round_j": None, "source": None,
                                     "resolution_j": None, "not_measured": {}}
    assert json.loads((tmp_path / "r.json").read_text())["methods"]["random"]["energy"] == random
    text = out.file.getvalue()
    assert "Energy to target (J)" in text and "Energy per device" not in text
    lines = text.splitlines()
    assert any("random" in line and line.count("10.5 ± 2.1") == 2 for line in lines)  # lenet's and the group's
    assert not any("121.0" in line or "battery" in line for line in lines)  # d0's row: in the JSON only
    assert "each device's energy: mjfl report --json FILE" in text


def test_a_charging_phones_tasks_say_not_measured_charging_and_measured_ones_their_resolution(tmp_path: Path) -> None:
    """A phone on its USB cable charges while it trains: its tasks' energy is null, the app saying "charging"."""
    charging = {"energy_j": None, "energy_source": "charging", "energy_resolution_j": None, "plugged": "usb"}
    battery = {"energy_j": 14.4, "energy_source": "battery", "energy_resolution_j": 14.4, "plugged": "none"}
    record_run(tmp_path / "usb", "random", 0, [1.0, 2.0], [0.5, 0.9], states=[charging, charging])
    out = console()
    figures = report_runs([tmp_path / "usb"], console=out)
    text = out.file.getvalue()
    assert "no energy recorded for these runs" in text  # not a blank table, and why:
    assert "device d0: 2 not measured, charging" in text
    assert "a phone measures energy on battery only: docs/phones.md, energy (wireless debugging)" in text
    assert figures["methods"]["random"]["energy"]["devices"]["d0"]["not_measured"] == {"charging": 2}
    # On battery (over wireless debugging): measured, and the sum's resolution is the rounds' added.
    record_run(tmp_path / "battery", "random", 0, [1.0, 2.0], [0.5, 0.9], energies=[14.4, 28.8], states=[battery, battery])
    figures = report_runs([tmp_path / "battery"], console=console())
    d0 = figures["methods"]["random"]["energy"]["devices"]["d0"]
    assert (d0["total_j"], d0["resolution_j"], d0["not_measured"]) == (pytest.approx(43.2), 28.8, {})


def test_runs_without_energy_say_so_in_one_line(tmp_path: Path) -> None:
    record_run(tmp_path, "random", 0, [1.0], [0.9])
    out = console()
    report_runs([tmp_path], console=out)
    assert "no energy recorded for these runs" in out.file.getvalue()
    assert "Energy per device" not in out.file.getvalue()


def test_the_end_of_a_run_prints_its_energy_to_target_and_writes_each_devices_to_energy_csv(
    results: dict, tmp_path: Path
) -> None:
    jobs, records = results["random"]
    told = [
        replace(r, devices=(DeviceRound(r.devices[0].device, "ok", 10, 0.5, 1.0, energy_j=4.0), r.devices[1]))
        for r in records
    ]
    out = console()
    figures = report_run(tmp_path, {"random": (jobs, told), "fedcs": results["fedcs"]}, [], console=out)
    energy = figures["methods"]["random"]["energy"]
    # cnn reaches its target in round 2: two rounds of d3 (4 J each); d1 failed both (not known).
    assert energy["jobs"]["cnn"] == {"to_target_j": 8.0, "known": 2, "device_rounds": 4}
    # lenet reaches its target in round 2 too: the group counts both jobs' two rounds.
    assert energy["group"] == {"to_target_j": 16.0, "known": 4, "device_rounds": 8}
    text = out.file.getvalue()
    assert "8.0 (2/4 known)" in text and "16.0 (4/8 known)" in text
    assert "each device's energy: energy.csv" in text and "Energy per device" not in text
    with (tmp_path / "energy.csv").open(newline="") as handle:
        rows = list(csv.reader(handle))
    # Method by method, then device by device (d1 before d3), whatever order they first appeared in.
    assert tuple(rows[0]) == ENERGY_COLUMNS
    assert rows[1:] == [
        ["random", "d1", "", "0", "", "", "", ""],  # it failed every round: no energy known
        ["random", "d3", "16.0", "4", "4.0", "unknown", "", ""],  # told, but not where from
        ["fedcs", "d1", "", "0", "", "", "", ""],
        ["fedcs", "d3", "", "0", "", "", "", ""],
    ]


def test_a_long_path_the_report_names_stays_on_one_line(tmp_path: Path) -> None:
    record_run(tmp_path, "random", 0, [1.0], [0.9])
    deep = tmp_path / ("a-long-folder-name-" * 8) / "report.json"
    out = Console(file=io.StringIO(), width=80, color_system=None)
    report_runs([tmp_path], console=out, json_path=deep)
    assert f"wrote {deep}\n" in out.file.getvalue()


def test_folders_without_a_finished_or_interrupted_run_are_the_users_mistake(tmp_path: Path) -> None:
    running(tmp_path, "random", 0)
    with pytest.raises(UserError, match="no finished or interrupted run in"):
        report_runs([tmp_path], console=console())


def test_an_interrupted_run_is_reported_labelled_so_with_its_rounds_up_to_its_stop(tmp_path: Path) -> None:
    # A lab's cancelled run, pulled: its records end "interrupted".
    record_run(tmp_path, "random", 0, [2.0, 4.0], [0.5, 0.85], finished=False)
    out = console()
    figures = report_runs([tmp_path], console=out)
    (label,) = figures["methods"]
    assert label == "random (interrupted)" and figures["methods"][label]["group_time_s"]["mean"] == 4.0
    assert "random (interrupted)" in out.file.getvalue() and "left out" not in out.file.getvalue()


def running(folder: Path, method: str, seed: int) -> None:
    """A run still running (or one whose process died): recorded, stopped, then resumed."""
    record_run(folder, method, seed, [1.0], [0.9], finished=False)
    with Storage(database_path(folder)) as storage:
        storage.resume_run(f"{method}-{seed}-1")
