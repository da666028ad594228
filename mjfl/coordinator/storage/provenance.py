"""What a run ran on, in the run database: its configuration, versions and programs (``provenance``,
``provenance_programs``) and each device as admitted (``provenance_devices``), docs/storage.md, section 2."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from mjfl.coordinator.storage.connection import Connection, refused
from mjfl.coordinator.storage.records import DeviceAdmission, ProgramBuild, RunProvenance
from mjfl.coordinator.storage.schema import (
    PROVENANCE,
    PROVENANCE_DEVICES,
    PROVENANCE_PROGRAMS,
    from_json,
    record_of,
)

__all__ = ["provenance", "record", "record_admissions"]


def record(db: Connection, p: RunProvenance) -> None:
    head = PROVENANCE.row(
        p, redacted_json=json.dumps(list(p.redacted)), versions_json=json.dumps(dict(p.versions), default=str)
    )
    programs = [
        PROVENANCE_PROGRAMS.row(
            b, run_id=p.run_id, shard_samples_json=json.dumps(list(b.shard_samples)),
            model_files_json=json.dumps(dict(b.model_files), sort_keys=True),
        )
        for b in p.programs
    ]
    with db.transaction() as conn, refused(f"provenance of run {p.run_id!r} not recorded"):
        conn.execute(PROVENANCE.insert("INSERT OR IGNORE"), head)
        conn.executemany(PROVENANCE_PROGRAMS.insert("INSERT OR IGNORE"), programs)


def record_admissions(db: Connection, admissions: Sequence[DeviceAdmission]) -> int:
    rows = [_admission_row(a) for a in admissions]
    with db.transaction() as conn, refused("admissions not recorded"):
        before = conn.total_changes
        conn.executemany(PROVENANCE_DEVICES.insert("INSERT OR IGNORE"), rows)
        return conn.total_changes - before


def provenance(db: Connection, run_id: str) -> tuple[RunProvenance | None, list[DeviceAdmission]]:
    head = PROVENANCE.rows(db, "run_id = ?", (run_id,), order="rowid")  # none in a version 5 or 6 file read as it is
    devices = PROVENANCE_DEVICES.rows(db, "run_id = ?", (run_id,), order="admission_id")
    if not head:
        return None, [_admission_from(r) for r in devices]
    with db.reading() as conn:
        programs = conn.execute(
            f"SELECT {PROVENANCE_PROGRAMS.select(conn, of='p')} FROM provenance_programs AS p JOIN jobs AS j"
            " ON j.run_id = p.run_id AND j.job = p.job WHERE p.run_id = ? ORDER BY j.position", (run_id,),
        ).fetchall()
    return _provenance_from(head[0], programs), [_admission_from(r) for r in devices]


def _admission_row(a: DeviceAdmission) -> dict[str, Any]:
    """An admission's row; its ``digest`` is of what it told (shard, hello, profile, app), what makes it new."""
    told = {
        "hello_json": None if a.hello is None else json.dumps(dict(a.hello), sort_keys=True, default=str),
        "profile_json": json.dumps(dict(a.profile), sort_keys=True, default=str),
        "app_json": json.dumps(dict(a.app), sort_keys=True, default=str),
    }
    digest = hashlib.sha256(json.dumps([a.shard, *told.values()]).encode()).hexdigest()
    return PROVENANCE_DEVICES.row(a, **told, digest=digest)


def _provenance_from(head: sqlite3.Row, programs: Sequence[sqlite3.Row]) -> RunProvenance:
    return record_of(
        RunProvenance,
        head,
        redacted=tuple(json.loads(head["redacted_json"])),
        versions=json.loads(head["versions_json"]),
        programs=tuple(
            record_of(
                ProgramBuild, r, shard_samples=tuple(json.loads(r["shard_samples_json"])),
                model_files=json.loads(r["model_files_json"] or "{}"),
            )
            for r in programs
        ),
    )


def _admission_from(row: sqlite3.Row) -> DeviceAdmission:
    return record_of(
        DeviceAdmission,
        row,
        hello=from_json(row["hello_json"]),
        profile=json.loads(row["profile_json"]),
        app=json.loads(row["app_json"]),
    )
