"""Runs and their jobs in the run database (tables ``runs`` and ``jobs``): ``Storage``'s start, finish,
resume and lookups of runs (docs/storage.md, section 2)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Literal, TypeAlias, get_args

from mjfl.coordinator.storage.connection import Connection, refused
from mjfl.coordinator.storage.records import JobInfo, RunInfo
from mjfl.coordinator.storage.schema import JOBS, RUNS, record_of
from mjfl.errors import StorageError, UnknownRunError

__all__ = ["RUN_STATUSES", "RunStatus", "finish", "jobs", "resume", "run", "runs", "start"]

RunStatus: TypeAlias = Literal["running", "finished", "interrupted", "failed"]
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)


def start(db: Connection, info: RunInfo, given: Sequence[JobInfo]) -> None:
    for job in given:
        if job.run_id != info.run_id:
            raise StorageError(f"job {job.job!r} belongs to run {job.run_id!r}, not {info.run_id!r}")
    with db.transaction() as conn:
        if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (info.run_id,)).fetchone():
            raise StorageError(f"run {info.run_id!r} is already recorded")
        with refused(f"run {info.run_id!r} not recorded"):
            conn.execute(RUNS.insert(), RUNS.row(info, ended_at=None, status="running"))
            conn.executemany(JOBS.insert(), [JOBS.row(j, position=position) for position, j in enumerate(given)])


def finish(db: Connection, run_id: str, status: RunStatus, ended_at: str) -> None:
    if status not in RUN_STATUSES or status == "running":
        raise StorageError(f"a run ends as finished, interrupted or failed, not {status!r}")
    _set_status(db, run_id, status, ended_at)


def resume(db: Connection, run_id: str) -> RunInfo:
    info, status = run(db, run_id)
    if status == "finished":
        raise StorageError(f"run {run_id!r} is finished; there is nothing to resume")
    _set_status(db, run_id, "running", None)
    return info


def run(db: Connection, run_id: str) -> tuple[RunInfo, RunStatus]:
    found = RUNS.rows(db, "run_id = ?", (run_id,), order="rowid")
    if not found:
        raise UnknownRunError(f"no run {run_id!r} in {db.origin}")
    return _run_from(found[0])


def runs(db: Connection) -> list[tuple[RunInfo, RunStatus]]:
    return [_run_from(row) for row in RUNS.rows(db, None, (), order="rowid")]


def jobs(db: Connection, run_id: str) -> list[JobInfo]:
    return [record_of(JobInfo, r) for r in JOBS.rows(db, "run_id = ?", (run_id,), order="position")]


def _set_status(db: Connection, run_id: str, status: RunStatus, ended_at: str | None) -> None:
    with db.transaction() as conn:
        changed = conn.execute(
            "UPDATE runs SET status = ?, ended_at = ? WHERE run_id = ?", (status, ended_at, run_id)
        ).rowcount
        if changed == 0:
            raise UnknownRunError(f"no run {run_id!r} in {db.origin}")


def _run_from(row: sqlite3.Row) -> tuple[RunInfo, RunStatus]:
    return record_of(RunInfo, row), row["status"]
