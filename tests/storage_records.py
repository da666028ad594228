"""Run records made up for the run database's tests: a run, its two jobs, device rounds and round records;
and a database file as an earlier mjfl left it.

Importable as ``storage_records`` (pytest puts tests/ on the path for its conftest.py), also from the
child process of the crash test, which imports no test module.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from mjfl.coordinator.storage.records import DeviceRound, JobInfo, RoundRecord, RunInfo
from mjfl.coordinator.storage.schema import MIGRATIONS
from mjfl.ids import DeviceId, JobId

A, B = JobId("cnn"), JobId("lenet")


def run_info(run_id: str = "r1", method: str = "meta-greedy") -> RunInfo:
    return RunInfo(
        run_id=run_id,
        method=method,
        mode="virtual",
        seed=7,
        config_json='{"jobs": 2}',
        started_at="2025-03-01T12:00:00+00:00",
    )


def job_infos(run_id: str = "r1") -> list[JobInfo]:
    return [
        JobInfo(run_id, B, "lenet5", "emnist-digits", 0.95, None, 40, "lenet5/emnist-digits"),
        JobInfo(run_id, A, "cnn", "emnist-letters", None, 0.4, 60, "cnn/emnist-letters"),
    ]


def device(name: str, status: str = "ok", **fields: object) -> DeviceRound:
    values: dict[str, object] = {
        "device": DeviceId(name),
        "status": status,
        "samples": 120,
        "mean_loss": 0.75,
        "duration_s": 3.5,
    }
    values.update(fields)
    return DeviceRound(**values)  # type: ignore[arg-type]


def round_record(
    job: JobId = A,
    number: int = 1,
    *,
    run_id: str = "r1",
    devices: tuple[DeviceRound, ...] = (),
    loss: float = 1.0,
    winner: str | None = None,
) -> RoundRecord:
    return RoundRecord(
        run_id=run_id,
        job=job,
        round=number,
        started_s=10.0 * (number - 1),
        ended_s=10.0 * number,
        devices=devices or (device("d3"), device("d1", "failed", mean_loss=None, error="gone")),
        accuracy=0.1 * number,
        loss=loss,
        aggregated=True,
        expected_time_s=9.5,
        cost=12.25,
        winner=winner,
    )


def database_at(path: Path, version: int, *statements: str) -> None:
    """A file of schema ``version`` as an earlier mjfl left it (migrations only append), one run and one job in it,
    then what ``statements`` add, committed."""
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        for statement in (*(s for migration in MIGRATIONS[:version] for s in migration), *_RUN_AND_JOB, *statements):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
        conn.commit()
    finally:
        conn.close()


_RUN_AND_JOB = (
    "INSERT INTO runs (run_id, method, mode, seed, config_json, started_at) VALUES ('r1', 'm', 'real', 7, '{}', 't')",
    "INSERT INTO jobs (run_id, job, position, model, dataset, max_rounds, job_key) VALUES ('r1', 'cnn', 0, 'cnn', 'd', 5, 'k')",
)
