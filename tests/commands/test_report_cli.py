"""`mjfl report RUN_DIR...`: the table rebuilt from run databases alone, gathered over runs and seeds."""

import json
import statistics
import subprocess
from pathlib import Path

from processes import mjfl_args
from run_records import record_run


def test_report_gathers_the_runs_of_several_folders_per_method(tmp_path: Path) -> None:
    seed0, seed1 = tmp_path / "seed0", tmp_path / "seed1"
    record_run(seed0, "random", 0, [2.0, 4.0, 6.0], [0.5, 0.7, 0.85])
    record_run(seed1, "random", 1, [3.0, 6.0], [0.6, 0.81])
    record_run(seed0, "meta-greedy", 0, [1.0, 2.0], [0.7, 0.9], winners=["genetic", "rlds"])
    record_run(seed1, "meta-greedy", 1, [1.0, 2.0, 3.0], [0.5, 0.6, 0.7], winners=["genetic"] * 3)  # never reached
    record_run(seed1, "meta-greedy", 2, [1.0], [0.9], options={"meta-greedy": {"horizon": 10.0}})
    record_run(seed1, "genetic", 2, [1.0], [0.9], finished=False)  # interrupted: shown apart, labelled so
    out = tmp_path / "report.json"
    result = subprocess.run(
        mjfl_args("report", str(seed0), str(seed1), "--json", str(out), "--plots", str(tmp_path / "plots")),
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "left out" not in result.stderr  # nothing running or failed
    methods = json.loads(out.read_text())["methods"]
    assert list(methods) == ["random", "meta-greedy", "meta-greedy (horizon=10.0)", "genetic (interrupted)"]
    random = methods["random"]
    assert random["runs"] == 2 and random["seeds"] == [0, 1]
    assert random["group_time_s"] == {"mean": 6.0, "sd": 0.0, "reached": 2, "runs": 2}
    assert random["jobs"]["lenet"]["final_accuracy"]["mean"] == statistics.fmean([0.85, 0.81])
    meta = methods["meta-greedy"]
    # One run of two reached the target: its time is the mean, and the table says 1/2.
    assert meta["group_time_s"] == {"mean": 2.0, "sd": None, "reached": 1, "runs": 2}
    assert meta["wins"] == {"genetic": 0.8, "rlds": 0.2}
    assert "2.0 (1/2)" in result.stderr
    # Digits is no set-up of the paper's: no paper rows, and one line says so.
    assert json.loads(out.read_text())["paper"]["matches"] == {}
    assert "(paper)" not in result.stderr
    assert "the paper's figures: no job here matches a set-up of its Tables 4-5" in result.stderr
    assert methods["meta-greedy (horizon=10.0)"]["group_time_s"]["mean"] == 1.0
    # The plots: accuracy against time per job, and Meta-Greedy's member wins over the rounds.
    for name in ("accuracy-lenet.png", "member-wins.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_of_a_cancelled_runs_pulled_folder_shows_its_rounds_labelled_interrupted(tmp_path: Path) -> None:
    # A lab's cancelled run (mjfl pull): its records end "interrupted".
    record_run(tmp_path, "meta-greedy", 0, [2.0, 4.0], [0.5, 0.6], finished=False)
    out = tmp_path / "report.json"
    result = subprocess.run(mjfl_args("report", str(tmp_path), "--json", str(out)),
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "meta-greedy (interrupted)" in result.stderr
    stopped = json.loads(out.read_text())["methods"]["meta-greedy (interrupted)"]
    assert stopped["runs"] == 1 and stopped["jobs"]["lenet"]["final_accuracy"]["mean"] == 0.6  # its last round's


def test_report_names_a_folder_without_runs(tmp_path: Path) -> None:
    result = subprocess.run(mjfl_args("report", str(tmp_path)), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert f"{tmp_path}: no run database (mjfl.db) here" in result.stderr


def test_report_shows_the_papers_figures_beside_a_job_with_the_papers_set_up(tmp_path: Path) -> None:
    # The paper's group B AlexNet on non-IID MNIST, target 0.976 (Table 5).
    setup = ("alexnet", "mnist", 0.976, "noniid")
    record_run(tmp_path, "random", 0, [600.0, 1200.0], [0.95, 0.98], setup=setup)
    record_run(tmp_path, "meta-greedy", 0, [500.0], [0.977], setup=setup)
    out = tmp_path / "report.json"
    result = subprocess.run(
        mjfl_args("report", str(tmp_path), "--json", str(out)), capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    match = json.loads(out.read_text())["paper"]["matches"]["lenet"]
    assert (match["table"], match["job"], match["stand_in"]) == ("Table 5 (Group B)", "AlexNet", False)
    assert match["methods"]["Meta-Greedy"] == {"time_to_target_min": 45.0, "time_to_target_s": 2700.0, "final_accuracy": 0.99}
    assert match["methods"]["Greedy"]["time_to_target_s"] == 181.2 * 60
    # Beside ours in the table: one row per method of the paper, its minutes as seconds.
    rows = [line for line in result.stderr.splitlines() if "(paper)" in line and "│" in line]
    assert len(rows) == 7
    meta = next(line for line in rows if "Meta-Greedy (paper)" in line)
    assert "2700.0" in meta and "0.9900" in meta
    assert "lenet = Table 5 (Group B) AlexNet noniid (AlexNet)" in result.stderr


def test_report_matches_the_paper_only_on_the_same_partition_and_target(tmp_path: Path) -> None:
    # VGG-16 on CIFAR-10 runs as vgg6 (a stand-in); Table 4's IID target is also 0.55.
    iid, other = tmp_path / "iid", tmp_path / "other"
    record_run(iid, "random", 0, [1.0], [0.6], setup=("vgg6", "cifar10", 0.55, "iid"))
    record_run(other, "random", 0, [1.0], [0.6], setup=("vgg6", "cifar10", 0.6, "iid"))
    out = tmp_path / "report.json"
    result = subprocess.run(
        mjfl_args("report", str(iid), "--json", str(out)), capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    match = json.loads(out.read_text())["paper"]["matches"]["lenet"]
    assert (match["partition"], match["network"], match["stand_in"]) == ("iid", "VGG-16", True)
    assert match["methods"]["Greedy"]["time_to_target_s"] is None  # "/" in the paper
    assert match["methods"]["Meta-Greedy"]["time_to_target_min"] == 30.34
    assert "run as vgg6, a stand-in" in result.stderr
    result = subprocess.run(mjfl_args("report", str(other)), capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "(paper)" not in result.stderr and "no job here matches" in result.stderr
