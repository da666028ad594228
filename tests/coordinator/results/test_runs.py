"""Reading the finished runs of output folders back from their run databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from run_records import LENET, record_run

from mjfl.coordinator.results.runs import finished_runs, partition_name, run_label
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.errors import UserError


def test_ended_runs_come_folder_by_folder_an_interrupted_one_named_so_and_running_ones_are_counted(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    record_run(first, "random", 0, [2.0, 4.0], [0.5, 0.85])
    record_run(second, "meta-greedy", 1, [1.0], [0.9], winners=["rlds"], options={"meta-greedy": {"horizon": 10.0}})
    record_run(second, "genetic", 1, [1.0], [0.9], finished=False)
    record_run(second, "rlds", 1, [1.0], [0.9], finished=False)
    with Storage(database_path(second)) as storage:
        storage.resume_run("rlds-1-1")  # running again
    found = finished_runs([first, second])
    assert found.unfinished == 1
    assert [(r.label, r.info.seed, r.status) for r in found.finished] == [
        ("random", 0, "finished"), ("meta-greedy (horizon=10.0)", 1, "finished"), ("genetic (interrupted)", 1, "interrupted")]
    random = found.finished[0]
    assert [j.job for j in random.jobs] == [LENET] and [r.round for r in random.rounds] == [1, 2]
    assert random.records == (random.jobs, random.rounds)
    assert random.partitions == {"lenet": "noniid"}
    assert found.finished[1].rounds[0].winner == "rlds"


def test_a_folder_without_a_run_database_is_named_and_left_unwritten(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=f"{tmp_path}: no run database \\(mjfl.db\\) here"):
        finished_runs([tmp_path])
    assert list(tmp_path.iterdir()) == []


def test_a_run_is_labelled_by_what_makes_it_a_variant() -> None:
    defaults = {"alpha": 1.0, "beta": 0.05, "omega": "sqrt", "options": {"rlds": {"horizon": 3}}}
    assert run_label("random", defaults) == "random"  # another method's options are not its own
    assert run_label("rlds", defaults) == "rlds (horizon=3)"
    assert run_label("greedy", defaults | {"beta": 0.0, "omega": "log"}) == "greedy (beta=0.0, omega=log)"
    assert run_label("greedy", {}) == "greedy"


def test_partitions_are_named_as_the_papers_tables_name_them() -> None:
    assert partition_name({"partition": "iid"}) == "iid"
    assert partition_name({"partition": "noniid"}) == "noniid"
    assert partition_name({"partition": "noniid", "classes_per_device": 2}) == "noniid"
    assert partition_name({"partition": "noniid", "classes_per_device": 3}) == "noniid (3 classes per device)"
