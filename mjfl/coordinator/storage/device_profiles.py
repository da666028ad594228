"""The latest known profile of every device, in the run database (``device_profiles``).

A row mirrors a device entry of the profile file (docs/profiles.md, section 7), written by the profile
file's renderer and read back through its parser, so that the file and the database agree on what a valid
profile is.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from mjfl.coordinator.storage.connection import Connection
from mjfl.coordinator.storage.schema import DEVICE_PROFILES, from_json, to_json
from mjfl.errors import DataError
from mjfl.profiling.profiles import (
    FORMAT,
    DeviceProfile,
    profiles_from_document,
    profiles_to_document,
)

__all__ = ["load", "save"]


def save(db: Connection, profiles: Sequence[DeviceProfile], updated_at: str | None) -> None:
    when = updated_at if updated_at is not None else datetime.now(UTC).isoformat()
    entries = profiles_to_document(profiles, created=when)["devices"]
    with db.transaction() as conn:
        conn.executemany(DEVICE_PROFILES.upsert("device_id"), [_profile_row(e, when) for e in entries])


def load(db: Connection) -> list[DeviceProfile]:
    rows = DEVICE_PROFILES.rows(db, None, (), order="rowid")
    if not rows:
        return []
    try:
        devices = [_entry_from(r) for r in rows]
    except json.JSONDecodeError as exc:
        raise DataError(f"{db.origin}: device_profiles holds invalid JSON: {exc}") from exc
    document = {"format": FORMAT, "created": max(r["updated_at"] for r in rows), "devices": devices}
    return profiles_from_document(document, origin=f"{db.origin}:device_profiles")


def _profile_row(entry: dict[str, Any], when: str) -> dict[str, Any]:
    """A device entry of the profile file as its row, saved at ``when``."""
    a_low, a_high = _interval_columns(entry["a_ci"])
    mu_low, mu_high = _interval_columns(entry["mu_ci"])
    return {
        "device_id": entry["device_id"], "a": entry["a"], "mu": entry["mu"], "a_ci_low": a_low, "a_ci_high": a_high,
        "mu_ci_low": mu_low, "mu_ci_high": mu_high, "ks_statistic": entry["ks_statistic"], "n": entry["n"],
        "source": entry["source"], "compute_json": to_json(entry["compute"]),
        "communication_json": to_json(entry["communication"]),
        "hardware_json": json.dumps(entry["hardware"], allow_nan=False), "updated_at": when,
        "power_w": entry.get("power_w"),
    }


def _entry_from(row: sqlite3.Row) -> dict[str, Any]:
    """A row as the device entry of a profile file, for its parser."""
    return {
        "device_id": row["device_id"],
        "a": row["a"],
        "mu": row["mu"],
        "a_ci": _interval_from_columns(row["a_ci_low"], row["a_ci_high"]),
        "mu_ci": _interval_from_columns(row["mu_ci_low"], row["mu_ci_high"]),
        "ks_statistic": row["ks_statistic"],
        "n": row["n"],
        "source": row["source"],
        "compute": from_json(row["compute_json"]),
        "communication": from_json(row["communication_json"]),
        "hardware": json.loads(row["hardware_json"]),
        **({"power_w": row["power_w"]} if row["power_w"] is not None else {}),
    }


def _interval_columns(interval: list[float] | None) -> tuple[float | None, float | None]:
    return (None, None) if interval is None else (interval[0], interval[1])


def _interval_from_columns(low: float | None, high: float | None) -> list[float] | None:
    return None if low is None or high is None else [low, high]
