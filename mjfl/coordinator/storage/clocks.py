"""The run clock's anchors, in the run database (``run_clocks``, schema version 9).

An anchor says that at run-clock time ``run_s`` (seconds since the run's start, as ``RoundRecord.started_s``
and ``ended_s`` count them; a resumed run continues its clock) the wall clock read ``wall_s`` (Unix seconds).
The run driver keeps one each time a run's engine starts, its first start and each resume;
``records.wall_time`` puts a run-clock time on the wall clock by the latest anchor at or before it.
"""

from __future__ import annotations

import math

from mjfl.coordinator.storage.connection import Connection, refused
from mjfl.coordinator.storage.records import ClockAnchor
from mjfl.coordinator.storage.schema import RUN_CLOCKS
from mjfl.errors import StorageError

__all__ = ["anchors", "record"]


def record(db: Connection, run_id: str, run_s: float, wall_s: float) -> None:
    what = f"clock anchor of run {run_id!r} not recorded"
    if not (math.isfinite(run_s) and run_s >= 0):
        raise StorageError(f"{what}: run_s must be a finite time >= 0 s on the run clock, not {run_s!r}")
    if not math.isfinite(wall_s):
        raise StorageError(f"{what}: wall_s must be a finite Unix time, not {wall_s!r}")
    with db.transaction() as conn, refused(what):
        conn.execute(RUN_CLOCKS.insert(), {"run_id": run_id, "run_s": float(run_s), "wall_s": float(wall_s)})


def anchors(db: Connection, run_id: str) -> list[ClockAnchor]:
    # none in a file read as it is from before version 9 (``RUN_CLOCKS.added``).
    rows = RUN_CLOCKS.rows(db, "run_id = ?", (run_id,), order="run_s, anchor_id")
    return [(r["run_s"], r["wall_s"]) for r in rows]
