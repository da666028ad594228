"""The plots: their series from records (every run a line), and the PNGs drawn from them."""

from __future__ import annotations

from pathlib import Path

from run_records import CNN, LENET, assert_png, jobs_of, rounds_of

from mjfl.coordinator.results.plots import (
    accuracy_curves,
    member_shares,
    meta_greedy_wins,
    plot_accuracy,
    plot_member_wins,
    plot_meta_greedy_wins,
)
from mjfl.coordinator.storage.records import JobInfo, SchedulerChoice
from mjfl.ids import JobId


def one_run_each(results: dict) -> dict:
    return {method: [run] for method, run in results.items()}


def test_accuracy_plots_are_pngs(results: dict, tmp_path: Path) -> None:
    paths = plot_accuracy(tmp_path / "plots", one_run_each(results))
    assert [p.name for p in paths] == ["accuracy-cnn.png", "accuracy-lenet.png"]
    for path in paths:
        assert_png(path)


def test_accuracy_curves_draw_each_run_of_a_method_as_its_own_line(results: dict) -> None:
    runs = {"meta-greedy": [results["meta-greedy"], results["greedy"]], "random": [results["random"]]}
    cnn, lenet = accuracy_curves(runs)
    assert (cnn.job.job, lenet.job.job) == (CNN, LENET)
    # Meta-greedy's records hold another run's cnn round (run "elsewhere"): it joins no line.
    assert cnn.lines["meta-greedy"] == [[(10.0, 0.5), (25.0, 0.82), (40.0, 0.79), (50.0, 0.85)], [(45.0, 0.8)]]
    assert cnn.lines["random"] == [[(20.0, 0.6), (60.0, 0.81)]]


def test_a_job_without_rounds_gets_no_curve_nor_plot(tmp_path: Path) -> None:
    idle = JobInfo("r", JobId("idle job"), "m", "d", 0.5, None, 10, "k")
    runs = {"random": [([idle, *jobs_of("r")], rounds_of("r", CNN, [(5, 0.9, 0.1)]))]}
    assert [c.job.job for c in accuracy_curves(runs)] == [CNN]
    assert [p.name for p in plot_accuracy(tmp_path, runs)] == ["accuracy-cnn.png"]


def test_meta_greedy_wins_plot(tmp_path: Path) -> None:
    choices = [
        SchedulerChoice("mg", job, number, member, 1.0, member == winner)
        for job, winners in ((CNN, ["bods", "bods", "rlds"]), (LENET, ["greedy", "bods"]))
        for number, winner in enumerate(winners, start=1)
        for member in ("random", "greedy", "bods", "rlds")
    ]
    assert meta_greedy_wins(choices) == {
        CNN: {"random": 0, "greedy": 0, "bods": 2, "rlds": 1},
        LENET: {"random": 0, "greedy": 1, "bods": 1, "rlds": 0},
    }
    path = plot_meta_greedy_wins(tmp_path / "wins.png", choices)
    assert path is not None
    assert_png(path)
    assert plot_meta_greedy_wins(tmp_path / "none.png", []) is None
    assert not (tmp_path / "none.png").exists()


def test_member_shares_cumulate_over_rounds_and_runs(results: dict, tmp_path: Path) -> None:
    runs = {"meta-greedy": [results["meta-greedy"]] * 2, "random": [results["random"]]}
    shares = member_shares(runs)
    assert list(shares) == ["meta-greedy"]  # random recorded no winner
    # Rounds 1-2: bods (cnn) and greedy (lenet) each win once a run; rounds 3-4: bods alone.
    assert shares["meta-greedy"].rounds == [1, 2, 3, 4]
    assert shares["meta-greedy"].shares == {"bods": [0.5, 0.5, 6 / 10, 8 / 12], "greedy": [0.5, 0.5, 4 / 10, 4 / 12]}
    [path] = plot_member_wins(tmp_path, runs)
    assert path.name == "member-wins.png"
    assert_png(path)
    assert plot_member_wins(tmp_path / "none", {"random": [results["random"]]}) == []
