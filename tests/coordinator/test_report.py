"""Tests of the reports: outcomes, summary.json, rounds.csv, plots, tables, live view."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest
from rich.console import Console

from mjfl.coordinator.results.report import (
    CSV_COLUMNS,
    LiveView,
    job_outcomes,
    plot_accuracy,
    plot_meta_greedy_wins,
    results_table,
    summary,
    write_rounds_csv,
    write_summary,
)
from mjfl.coordinator.storage.records import DeviceRound, JobInfo, RoundRecord, SchedulerChoice
from mjfl.ids import DeviceId, JobId

CNN, LENET = JobId("cnn"), JobId("lenet")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def jobs_of(run_id: str) -> list[JobInfo]:
    return [
        JobInfo(run_id, CNN, "cnn", "emnist-letters", 0.8, None, 50, "cnn/emnist-letters"),
        # Only a loss target: reaching it is decided by the loss, not the accuracy.
        JobInfo(run_id, LENET, "lenet5", "emnist-digits", None, 0.3, 50, "lenet5/emnist-digits"),
    ]


def rounds_of(
    run_id: str, job: JobId, points: list[tuple[float, float, float]], winner: str | None = None
) -> list[RoundRecord]:
    """Records ending at the given run-clock times with the given (accuracy, loss)."""
    records = []
    started = 0.0
    for number, (end, accuracy, loss) in enumerate(points, start=1):
        ended = float(end)
        devices = (
            DeviceRound(DeviceId("d3"), "ok", 100, 0.5, ended - started),
            DeviceRound(DeviceId("d1"), "failed", 0, None, 1.0, error="timeout"),
        )
        records.append(
            RoundRecord(
                run_id,
                job,
                number,
                started,
                ended,
                devices,
                accuracy,
                loss,
                True,
                ended - started,
                2.5,
                winner,
            )
        )
        started = ended
    return records


@pytest.fixture
def results() -> dict[str, tuple[list[JobInfo], list[RoundRecord]]]:
    meta = (
        rounds_of(
            "mg",
            CNN,
            [(10, 0.5, 1.0), (25, 0.82, 0.6), (40, 0.79, 0.6), (50, 0.85, 0.5)],
            winner="bods",
        )
        # lenet's accuracy is high from round 1, but its target is the loss.
        + rounds_of("mg", LENET, [(12, 0.9, 0.5), (30, 0.97, 0.29)], winner="greedy")
        # Another run's record must not count for this one.
        + rounds_of("elsewhere", CNN, [(1, 0.99, 0.01)])
    )
    random = rounds_of("rnd", CNN, [(20, 0.6, 1.0), (60, 0.81, 0.4)]) + rounds_of(
        "rnd", LENET, [(30, 0.9, 0.4), (120, 0.95, 0.2)]
    )
    greedy = rounds_of("gr", CNN, [(45, 0.8, 0.7)]) + rounds_of("gr", LENET, [(90, 0.9, 0.3)])
    fedcs = rounds_of("fc", CNN, [(30, 0.7, 0.9)]) + rounds_of("fc", LENET, [(20, 0.9, 0.25)])
    return {
        "meta-greedy": (jobs_of("mg"), meta),
        "random": (jobs_of("rnd"), random),
        "greedy": (jobs_of("gr"), greedy),
        "fedcs": (jobs_of("fc"), fedcs),
    }


EXPECTED = {
    "methods": {
        "meta-greedy": {
            "jobs": {
                # The first reaching round (25 s), not the dip after it nor the last one.
                "cnn": {"time_to_target_s": 25.0, "final_accuracy": 0.85, "rounds": 4},
                "lenet": {"time_to_target_s": 30.0, "final_accuracy": 0.97, "rounds": 2},
            },
            "total_time_s": 30.0,
        },
        "random": {
            "jobs": {
                "cnn": {"time_to_target_s": 60.0, "final_accuracy": 0.81, "rounds": 2},
                "lenet": {"time_to_target_s": 120.0, "final_accuracy": 0.95, "rounds": 2},
            },
            "total_time_s": 120.0,
        },
        "greedy": {
            "jobs": {  # targets are inclusive: 0.8 >= 0.8 and 0.3 <= 0.3
                "cnn": {"time_to_target_s": 45.0, "final_accuracy": 0.8, "rounds": 1},
                "lenet": {"time_to_target_s": 90.0, "final_accuracy": 0.9, "rounds": 1},
            },
            "total_time_s": 90.0,
        },
        "fedcs": {
            "jobs": {
                "cnn": {"time_to_target_s": None, "final_accuracy": 0.7, "rounds": 1},
                "lenet": {"time_to_target_s": 20.0, "final_accuracy": 0.9, "rounds": 1},
            },
            "total_time_s": None,  # one job never reached its target
        },
    }
}


def test_summary_has_exactly_the_specified_shape_and_values(results: dict) -> None:
    got = summary(results)
    assert got == EXPECTED
    assert list(got) == ["methods"]
    assert list(got["methods"]) == ["meta-greedy", "random", "greedy", "fedcs"]
    for method in got["methods"].values():
        assert set(method) == {"jobs", "total_time_s"}
        assert method["total_time_s"] is None or type(method["total_time_s"]) is float
        for job in method["jobs"].values():
            assert set(job) == {"time_to_target_s", "final_accuracy", "rounds"}
            assert job["time_to_target_s"] is None or type(job["time_to_target_s"]) is float
            assert type(job["final_accuracy"]) is float and type(job["rounds"]) is int


def test_write_summary_is_json_with_null(results: dict, tmp_path: Path) -> None:
    path = write_summary(tmp_path / "out" / "summary.json", summary(results))
    text = path.read_text()
    assert json.loads(text) == EXPECTED
    assert '"time_to_target_s": null' in text and "NaN" not in text


def test_job_outcomes_edge_cases() -> None:
    both = JobInfo("r", CNN, "cnn", "d", 0.9, 0.5, 10, "k")
    neither = JobInfo("r", LENET, "lenet", "d", None, None, 10, "k2")
    empty = JobInfo("r", JobId("idle"), "m", "d", 0.5, None, 10, "k3")
    records = rounds_of("r", CNN, [(5, 0.5, 0.1), (9, 0.91, 0.9)]) + rounds_of(
        "r", LENET, [(3, 1.0, 0.0)]
    )
    outcomes = job_outcomes([both, neither, empty], list(reversed(records)))
    # With both targets the first one met counts (the engine stops the job there):
    # the loss target, met in round 1.
    assert outcomes[CNN].time_to_target_s == 5.0 and outcomes[CNN].reached_target
    assert outcomes[CNN].final_accuracy == 0.91  # last by round, not by list order
    assert outcomes[LENET].time_to_target_s is None and not outcomes[LENET].reached_target
    assert outcomes[JobId("idle")].rounds == 0 and math.isnan(
        outcomes[JobId("idle")].final_accuracy
    )
    assert summary({"m": ([empty], [])})["methods"]["m"] == {
        "jobs": {"idle": {"time_to_target_s": None, "final_accuracy": None, "rounds": 0}},
        "total_time_s": None,
    }


def test_rounds_csv_has_header_and_a_row_per_round(results: dict, tmp_path: Path) -> None:
    path = write_rounds_csv(tmp_path / "rounds.csv", results)
    with path.open(newline="") as handle:
        rows = list(csv.reader(handle))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert len(rows) - 1 == sum(len(records) for _, records in results.values())
    first = dict(zip(rows[0], rows[1]))
    assert first == {
        "method": "meta-greedy", "run_id": "mg", "job": "cnn", "round": "1",
        "started_s": "0.0", "ended_s": "10.0", "accuracy": "0.5", "loss": "1.0",
        "aggregated": "1", "devices": "2", "failed": "1", "expected_time_s": "10.0",
        "cost": "2.5", "winner": "bods", "plan": "d3;d1",
    }  # fmt: skip
    random_rows = [dict(zip(rows[0], row)) for row in rows[1:] if row[0] == "random"]
    assert [(r["job"], r["round"]) for r in random_rows] == [
        ("cnn", "1"), ("cnn", "2"), ("lenet", "1"), ("lenet", "2"),
    ]  # fmt: skip
    assert all(r["winner"] == "" for r in random_rows)


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5_000  # axes, lines and text, not an empty canvas


def test_accuracy_plots_are_pngs(results: dict, tmp_path: Path) -> None:
    paths = plot_accuracy(tmp_path / "plots", results)
    assert [p.name for p in paths] == ["accuracy-cnn.png", "accuracy-lenet.png"]
    for path in paths:
        assert_png(path)


def test_meta_greedy_wins_plot(tmp_path: Path) -> None:
    choices = [
        SchedulerChoice("mg", job, number, member, 1.0, member == winner)
        for job, winners in ((CNN, ["bods", "bods", "rlds"]), (LENET, ["greedy", "bods"]))
        for number, winner in enumerate(winners, start=1)
        for member in ("random", "greedy", "bods", "rlds")
    ]
    path = plot_meta_greedy_wins(tmp_path / "wins.png", choices)
    assert path is not None
    assert_png(path)
    assert plot_meta_greedy_wins(tmp_path / "none.png", []) is None
    assert not (tmp_path / "none.png").exists()


def test_results_table_renders_the_numbers(results: dict) -> None:
    table = results_table(summary(results), jobs_of("mg"))
    console = Console(record=True, width=240, color_system=None)
    console.print(table)
    text = console.export_text()
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 3}
    assert [cell.strip() for cell in lines["meta-greedy"].split("│")[2:-1]] == [
        "25.0", "0.8500", "30.0", "0.9700", "30.0", "4.00x",
    ]  # fmt: skip
    assert [cell.strip() for cell in lines["fedcs"].split("│")[2:-1]] == [
        "—", "0.7000", "20.0", "0.9000", "—", "—",
    ]  # fmt: skip
    assert "1.00x" in lines["random"] and "1.33x" in lines["greedy"]
    assert "fastest group: meta-greedy, 4.00x faster than random" in text
    assert "acc >= 0.8" in text and "loss <= 0.3" in text
    # The best of each column is highlighted, and only that cell.
    cnn_time = list(table.columns[1].cells)
    assert cnn_time[0] == "[bold green]25.0[/]"
    assert not any("bold" in str(cell) for cell in cnn_time[1:])
    lenet_time = list(table.columns[3].cells)
    assert lenet_time[3] == "[bold green]20.0[/]"  # fedcs is fastest on lenet


def test_the_caption_compares_only_what_can_be_compared(results: dict) -> None:
    # One method: nothing to compare it with (not "random, 1.00x faster than random").
    alone = {"random": results["random"]}
    assert results_table(summary(alone), jobs_of("rnd")).caption is None
    # The baseline itself fastest: said so, without a speedup of 1.
    assert results_table(summary({"random": results["random"], "fedcs": results["fedcs"]}), jobs_of("mg")).caption == (
        "fastest group: random, the baseline"
    )


def test_results_table_without_random_has_no_speedup(results: dict) -> None:
    del results["random"]
    table = results_table(summary(results), jobs_of("mg"))
    assert [str(c.header).split("\n")[0] for c in table.columns][-1] == "group"
    assert table.caption is None


def live_records() -> list[RoundRecord]:
    return rounds_of("mg", CNN, [(10, 0.5, 1.0), (25, 0.82, 0.6), (40, 0.79, 0.6)])


def test_live_view_off_a_terminal_prints_a_few_lines_not_frames() -> None:
    out = io.StringIO()
    console = Console(file=out, width=120)
    assert not console.is_terminal
    with LiveView({"meta-greedy": jobs_of("mg")}, console=console) as view:
        for record in live_records():
            view.update(record, "meta-greedy")
        view.set_status("meta-greedy", LENET, "stopped")
        row = view.render()
    text = out.getvalue()
    assert text.count("mjfl run") == 1  # the final table, once
    assert "meta-greedy / cnn: target reached in round 2" in text
    assert "meta-greedy / lenet: stopped" in text
    assert len(text.splitlines()) < 20
    assert text.endswith("┘\n"), "what prints next starts on a line of its own"
    cells = {c.header: list(c.cells) for c in row.columns}
    assert cells["round"] == ["3", "0"] and cells["accuracy"][0] == "0.7900"
    assert cells["best"][0] == "0.8200" and "reached" in cells["status"][0]
    assert cells["virtual time"][0] == "0:00:40"


def test_live_view_disabled_prints_nothing() -> None:
    out = io.StringIO()
    with LiveView({"m": jobs_of("mg")}, console=Console(file=out), enabled=False) as view:
        for record in live_records():
            view.update(record, "m")
        view.set_status("m", CNN, "stopped")
    assert out.getvalue() == ""


@pytest.mark.timeout(10)
def test_live_view_on_a_terminal_starts_and_stops() -> None:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=120)
    with LiveView(console=console, clock="wall", refresh_per_second=50) as view:
        view.add_jobs("random", jobs_of("rnd"))
        for record in live_records():
            view.update(record, "random")
    assert "wall time" in out.getvalue() and "0.7900" in out.getvalue()
