"""Online refits of a device's profile during a run, in the run database (``profile_refits``, Formula 4)."""

from __future__ import annotations

from mjfl.coordinator.storage.connection import Connection, refused
from mjfl.coordinator.storage.records import ProfileRefit
from mjfl.coordinator.storage.schema import PROFILE_REFITS, record_of

__all__ = ["record", "refits"]


def record(db: Connection, refit: ProfileRefit) -> None:
    with db.transaction() as conn, refused(f"refit of {refit.device!r} in run {refit.run_id!r} not recorded"):
        conn.execute(PROFILE_REFITS.insert(), PROFILE_REFITS.row(refit))


def refits(db: Connection, run_id: str) -> list[ProfileRefit]:
    return [record_of(ProfileRefit, r) for r in PROFILE_REFITS.rows(db, "run_id = ?", (run_id,), order="refit_id")]
