"""A real-time run's fleet events in the run database (``fleet_events``): devices that connected, whose
connections ended, and connections refused (``records.FleetEvent``)."""

from __future__ import annotations

import json

from mjfl.coordinator.storage.connection import Connection, refused
from mjfl.coordinator.storage.records import FleetEvent
from mjfl.coordinator.storage.schema import FLEET_EVENTS, from_json, record_of

__all__ = ["events", "record"]


def record(db: Connection, event: FleetEvent) -> None:
    hardware = None if event.hardware is None else json.dumps(dict(event.hardware), allow_nan=False, default=str)
    with db.transaction() as conn, refused(f"{event.kind} event of run {event.run_id!r} not recorded"):
        conn.execute(FLEET_EVENTS.insert(), FLEET_EVENTS.row(event, hardware_json=hardware))


def events(db: Connection, run_id: str) -> list[FleetEvent]:
    rows = FLEET_EVENTS.rows(db, "run_id = ?", (run_id,), order="event_id")
    return [record_of(FleetEvent, r, hardware=from_json(r["hardware_json"])) for r in rows]
