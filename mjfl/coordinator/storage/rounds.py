"""Rounds in the run database: each finished round (``rounds``), its devices' parts (``device_rounds``) and its
Meta-Greedy candidates (``scheduler_choices``), written together in one transaction; and what resume and
Formula 10 read back of them (docs/storage.md, sections 2 and 4)."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from mjfl.coordinator.storage.connection import Connection, refused
from mjfl.coordinator.storage.records import DeviceRound, RoundRecord, SchedulerChoice
from mjfl.coordinator.storage.schema import (
    DEVICE_ROUNDS,
    ROUNDS,
    SCHEDULER_CHOICES,
    from_json,
    record_of,
    to_json,
)
from mjfl.errors import DuplicateRoundError, StorageError
from mjfl.ids import DeviceId, JobId

__all__ = [
    "choices", "elapsed_s", "last_losses", "last_round", "loss_history", "participation", "record", "recorded",
    "rounds",
]

T = TypeVar("T")


def record(db: Connection, round_: RoundRecord, costs: Mapping[str, float] | None) -> None:
    where = f"round {round_.round} of job {round_.job!r} in run {round_.run_id!r}"
    if costs and round_.winner not in costs:
        raise StorageError(f"{where}: winner {round_.winner!r} is not among the candidates {sorted(costs)}")
    key = {"run_id": round_.run_id, "job": round_.job, "round": round_.round}
    with db.transaction() as conn:
        if conn.execute(
            "SELECT 1 FROM rounds WHERE run_id = :run_id AND job = :job AND round = :round", key
        ).fetchone():
            raise DuplicateRoundError(f"{where} is already recorded")
        with refused(f"{where} not recorded"):
            conn.execute(ROUNDS.insert(), ROUNDS.row(round_, aggregated=int(round_.aggregated)))
            conn.executemany(
                DEVICE_ROUNDS.insert(),
                [
                    DEVICE_ROUNDS.row(d, **key, position=position, device_state=to_json(d.device_state))
                    for position, d in enumerate(round_.devices)
                ],
            )
            conn.executemany(
                SCHEDULER_CHOICES.insert(),
                [
                    {**key, "position": position, "member": member, "selector_cost": cost,
                     "won": int(member == round_.winner)}
                    for position, (member, cost) in enumerate((costs or {}).items())
                ],
            )


def rounds(db: Connection, run_id: str, job: str | None) -> list[RoundRecord]:
    where, params = _run_job_filter(run_id, job)
    with db.reading():  # both under one hold of the lock
        rows = ROUNDS.rows(db, where, params, order="rowid")
        device_rows = DEVICE_ROUNDS.rows(db, where, params, order="job, round, position")
    devices: dict[tuple[str, int], list[DeviceRound]] = {}
    for d in device_rows:
        devices.setdefault((d["job"], d["round"]), []).append(
            record_of(DeviceRound, d, device_state=from_json(d["device_state"]))
        )
    return [_round_from(r, tuple(devices.get((r["job"], r["round"]), ()))) for r in rows]


def choices(db: Connection, run_id: str, job: str | None) -> list[SchedulerChoice]:
    where, params = _run_job_filter(run_id, job, table="c.")
    with db.reading() as conn:
        rows = conn.execute(
            f"SELECT {SCHEDULER_CHOICES.select(conn, of='c')} FROM scheduler_choices AS c"
            f" JOIN rounds AS r USING (run_id, job, round) WHERE {where} ORDER BY r.rowid, c.position",
            params,
        ).fetchall()
    return [
        record_of(SchedulerChoice, r, selector_cost=_nan_if_null(r["selector_cost"]), won=bool(r["won"])) for r in rows
    ]


def recorded(db: Connection, run_id: str | None) -> list[tuple[JobId, int]]:
    where, params = ("", ()) if run_id is None else (" WHERE run_id = ?", (run_id,))
    with db.reading() as conn:
        rows = conn.execute(f"SELECT job, round FROM rounds{where} ORDER BY job, round, rowid", params).fetchall()
    return [(JobId(r["job"]), int(r["round"])) for r in rows]


def last_round(db: Connection, run_id: str, job: str) -> int:
    with db.reading() as conn:
        row = conn.execute(
            "SELECT MAX(round) AS last FROM rounds WHERE run_id = ? AND job = ?", (run_id, job)
        ).fetchone()
    return int(row["last"] or 0)


def elapsed_s(db: Connection, run_id: str) -> float:
    with db.reading() as conn:
        row = conn.execute("SELECT MAX(ended_s) AS last FROM rounds WHERE run_id = ?", (run_id,)).fetchone()
    return float(row["last"] or 0.0)


def participation(db: Connection, run_id: str) -> dict[JobId, dict[DeviceId, int]]:
    with db.reading() as conn:
        rows = conn.execute(
            "SELECT job, device, COUNT(*) AS value FROM device_rounds WHERE run_id = ?"
            " GROUP BY job, device ORDER BY job, device",
            (run_id,),
        ).fetchall()
    return _by_job_and_device(rows, int)


def last_losses(db: Connection, run_id: str) -> dict[JobId, dict[DeviceId, float]]:
    with db.reading() as conn:
        rows = conn.execute(
            "SELECT job, device, mean_loss AS value FROM device_rounds AS d WHERE run_id = ? AND status = 'ok'"
            " AND mean_loss IS NOT NULL AND round = (SELECT MAX(round) FROM device_rounds"
            " WHERE run_id = d.run_id AND job = d.job AND device = d.device AND status = 'ok'"
            " AND mean_loss IS NOT NULL) ORDER BY job, device",
            (run_id,),
        ).fetchall()
    return _by_job_and_device(rows, float)


def loss_history(db: Connection, job_key: str, exclude_run: str | None) -> list[list[float]]:
    with db.reading() as conn:
        rows = conn.execute(
            "SELECT r.run_id, r.job, r.loss FROM rounds AS r"
            " JOIN jobs AS j USING (run_id, job)"
            " JOIN runs AS u USING (run_id)"
            " WHERE j.job_key = ? AND u.status = 'finished' AND u.run_id IS NOT ?"
            " ORDER BY u.rowid, j.position, r.round",
            (job_key, exclude_run),
        ).fetchall()
    curves: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        curves.setdefault((r["run_id"], r["job"]), []).append(_nan_if_null(r["loss"]))
    return list(curves.values())


def _round_from(row: sqlite3.Row, devices: tuple[DeviceRound, ...]) -> RoundRecord:
    """A round of its row and its device rounds; a NULL accuracy, loss, expected time or cost was a NaN."""
    return record_of(
        RoundRecord,
        row,
        devices=devices,
        accuracy=_nan_if_null(row["accuracy"]),
        loss=_nan_if_null(row["loss"]),
        aggregated=bool(row["aggregated"]),
        expected_time_s=_nan_if_null(row["expected_time_s"]),
        cost=_nan_if_null(row["cost"]),
    )


def _run_job_filter(run_id: str, job: str | None, *, table: str = "") -> tuple[str, tuple[str, ...]]:
    # Only fixed column names go into the SQL text; the values stay bound.
    if job is None:
        return f"{table}run_id = ?", (run_id,)
    return f"{table}run_id = ? AND {table}job = ?", (run_id, job)


def _nan_if_null(value: float | None) -> float:
    # The column was written from a float that cannot be None, so NULL is a NaN.
    return math.nan if value is None else value


def _by_job_and_device(rows: Sequence[sqlite3.Row], value: Callable[[Any], T]) -> dict[JobId, dict[DeviceId, T]]:
    """``(job, device, value)`` rows as ``{job: {device: value(value)}}``."""
    out: dict[JobId, dict[DeviceId, T]] = {}
    for row in rows:
        out.setdefault(JobId(row["job"]), {})[DeviceId(row["device"])] = value(row["value"])
    return out
