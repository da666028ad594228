"""`mjfl report RUN_DIR...`: the table rebuilt from run databases alone, gathered over runs and seeds."""

import json
import statistics
import subprocess
from pathlib import Path

from processes import mjfl_args

from mjfl.coordinator.records import DeviceRound, JobInfo, RoundRecord, RunInfo
from mjfl.coordinator.storage import Storage
from mjfl.ids import DeviceId, JobId

JOB = JobId("lenet")


def record_run(folder: Path, method: str, seed: int, ends: list[float], accuracies: list[float], *,
               options: dict | None = None, winners: list[str] | None = None, finished: bool = True) -> None:
    """A run as the driver records it: info, its job, its rounds (real SQLite in ``folder``)."""
    run_id = f"{method}-{seed}-{len(ends)}"
    scheduler = {"method": method, "alpha": 1.0, "beta": 0.05, "omega": "sqrt", "options": options or {}}
    with Storage(folder / "mjfl.db") as storage:
        storage.start_run(
            RunInfo(run_id, method, "virtual", seed, json.dumps({"scheduler": scheduler}), "2026-11-26T10:00:00"),
            [JobInfo(run_id, JOB, "lenet5", "digits", 0.8, None, 40, "lenet5/digits")],
        )
        started = 0.0
        for number, (end, accuracy) in enumerate(zip(ends, accuracies), start=1):
            winner = winners[number - 1] if winners else None
            devices = (DeviceRound(DeviceId("d0"), "ok", 10, 0.5, end - started),)
            record = RoundRecord(run_id, JOB, number, started, end, devices, accuracy, 1.0, True, 1.0, 1.0, winner)
            storage.record_round(record, {w: 1.0 for w in set(winners)} if winners else None)
            started = end
        storage.finish_run(run_id, "finished" if finished else "interrupted", "2026-11-26T10:05:00")


def test_report_gathers_the_runs_of_several_folders_per_method(tmp_path: Path) -> None:
    seed0, seed1 = tmp_path / "seed0", tmp_path / "seed1"
    record_run(seed0, "random", 0, [2.0, 4.0, 6.0], [0.5, 0.7, 0.85])
    record_run(seed1, "random", 1, [3.0, 6.0], [0.6, 0.81])
    record_run(seed0, "meta-greedy", 0, [1.0, 2.0], [0.7, 0.9], winners=["genetic", "rlds"])
    record_run(seed1, "meta-greedy", 1, [1.0, 2.0, 3.0], [0.5, 0.6, 0.7], winners=["genetic"] * 3)  # never reached
    record_run(seed1, "meta-greedy", 2, [1.0], [0.9], options={"meta-greedy": {"horizon": 10.0}})
    record_run(seed1, "genetic", 2, [1.0], [0.9], finished=False)  # interrupted: left out
    out = tmp_path / "report.json"
    result = subprocess.run(
        mjfl_args("report", str(seed0), str(seed1), "--json", str(out), "--plots", str(tmp_path / "plots")),
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "left out 1 unfinished run" in result.stderr
    methods = json.loads(out.read_text())["methods"]
    assert list(methods) == ["random", "meta-greedy", "meta-greedy (horizon=10.0)"]
    random = methods["random"]
    assert random["runs"] == 2 and random["seeds"] == [0, 1]
    assert random["group_time_s"] == {"mean": 6.0, "sd": 0.0, "reached": 2, "runs": 2}
    assert random["jobs"]["lenet"]["final_accuracy"]["mean"] == statistics.fmean([0.85, 0.81])
    meta = methods["meta-greedy"]
    # One run of two reached the target: its time is the mean, and the table says 1/2.
    assert meta["group_time_s"] == {"mean": 2.0, "sd": None, "reached": 1, "runs": 2}
    assert meta["wins"] == {"genetic": 0.8, "rlds": 0.2}
    assert "2.0 (1/2)" in result.stderr
    assert methods["meta-greedy (horizon=10.0)"]["group_time_s"]["mean"] == 1.0
    # The plots: accuracy against time per job, and Meta-Greedy's member wins over the rounds.
    for name in ("accuracy-lenet.png", "member-wins.png"):
        assert (tmp_path / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_names_a_folder_without_runs(tmp_path: Path) -> None:
    result = subprocess.run(mjfl_args("report", str(tmp_path)), capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert f"{tmp_path}: no run database (mjfl.db) here" in result.stderr
