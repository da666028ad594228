"""The report steps: at the end of a run, and over the finished runs of folders."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from run_records import CNN, assert_png, record_run

from mjfl.coordinator.results.files import CSV_COLUMNS
from mjfl.coordinator.results.outcomes import summary
from mjfl.coordinator.results.report import gathered_figures, report_run, report_runs
from mjfl.coordinator.results.runs import finished_runs
from mjfl.coordinator.storage.records import SchedulerChoice
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
    record_run(tmp_path / "s1", "genetic", 1, [1.0], [0.9], finished=False)
    out = console()
    folders = [tmp_path / "s0", tmp_path / "s1"]
    figures = report_runs(folders, console=out, json_path=tmp_path / "r.json", plots=tmp_path / "plots", title="t: ")
    assert figures == gathered_figures(finished_runs(folders).finished)
    assert json.loads((tmp_path / "r.json").read_text()) == figures
    assert list(figures) == ["methods", "paper"] and list(figures["methods"]) == ["random", "meta-greedy"]
    assert figures["methods"]["random"]["group_time_s"] == {"mean": 3.5, "sd": 0.7071067811865476, "reached": 2, "runs": 2}
    assert figures["methods"]["meta-greedy"]["wins"] == {"genetic": 0.5, "rlds": 0.5}
    text = out.file.getvalue()
    assert "t: Time to target accuracy" in text and "left out 1 unfinished run(s)" in text
    assert figures["paper"]["note"] in text
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["accuracy-lenet.png", "member-wins.png"]


def test_folders_without_a_finished_run_are_the_users_mistake(tmp_path: Path) -> None:
    record_run(tmp_path, "random", 0, [1.0], [0.9], finished=False)
    with pytest.raises(UserError, match="no finished run in"):
        report_runs([tmp_path], console=console())
