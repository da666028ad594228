"""Runs made up for the dashboard's tests: a run database as the driver writes it, and the same rounds live.

Both runs are meta-greedy runs of ``run_records``' two jobs (cnn: accuracy
target 0.8; lenet: loss target 0.3), three rounds each, whose devices fail,
have updates refused and tell (or not) their energy (``device_rounds``).
``write_run`` records one in a real run database; ``records``, ``aggregated``
and ``new_live`` give the same rounds to a ``LiveRun`` as the engine's events.
Importable as ``dashboard_runs`` (pytest puts tests/ on the path for its conftest.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from run_records import CNN, LENET, jobs_of

from mjfl.coordinator.dashboard.live import LiveRun
from mjfl.coordinator.dashboard.state import epochs_of
from mjfl.coordinator.engine.events import RoundAggregated
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.coordinator.storage.records import (
    DeviceAdmission,
    DeviceRound,
    ProgramBuild,
    RoundRecord,
    RunInfo,
    RunProvenance,
)
from mjfl.ids import DeviceId, JobId
from mjfl.profiling.profiles import DeviceProfile

CONFIG = {
    "scheduler": {"method": "meta-greedy"},
    "jobs": [{"name": "cnn", "training": {"epochs": 2}}, {"name": "lenet", "training": {"epochs": 1}}],
}
MEMBERS = {"random": 3.0, "genetic": 1.5, "bods": 2.0}
# Each job's rounds: (end, accuracy, loss); cnn's third round is NaN (diverged).
POINTS: dict[JobId, list[tuple[float, float, float]]] = {
    CNN: [(10.0, 0.5, 1.0), (20.0, 0.85, 0.6), (30.0, math.nan, math.nan)],
    LENET: [(12.0, 0.6, 0.5), (24.0, 0.7, 0.4), (36.0, 0.8, 0.2)],
}
INFO = RunInfo("live-0", "meta-greedy", "real", 0, json.dumps(CONFIG), "2026-11-27T01:00:00")
"""The live run's line (``new_live``)."""


def device_rounds(number: int, devices: int) -> tuple[DeviceRound, ...]:
    """``devices`` devices: d1 fails every round (timeout), d2 answers with a rejected update in round 2."""
    parts = []
    for k in range(devices):
        name = DeviceId(f"d{k}")
        if k == 1:
            parts.append(DeviceRound(name, "failed", 0, None, 9.0, error=f"timeout in round {number}"))
        elif k == 2 and number == 2:
            parts.append(DeviceRound(name, "rejected", 50, None, 4.0, error="NaN weights"))
        else:
            state = {"battery_pct": 80 - number, "charging": k % 2 == 0, "thermal_status": 1}
            # d0 tells its energy (2 J a round), the others do not.
            energy = 2.0 if k == 0 else None
            parts.append(DeviceRound(name, "ok", 100, 0.5, 2.0 + number, device_state=state, energy_j=energy))
    return tuple(parts)


def records(run_id: str = "live-0", devices: int = 4) -> list[RoundRecord]:
    """Every round of both jobs, job by job, each with ``device_rounds``; Meta-Greedy kept genetic's plan."""
    out = []
    for job, rows in POINTS.items():
        started = 0.0
        for number, (end, accuracy, loss) in enumerate(rows, start=1):
            out.append(RoundRecord(run_id, job, number, started, end, device_rounds(number, devices),
                                   accuracy, loss, True, 8.0, 2.5, "genetic"))
            started = end
    return out


def write_run(
    folder: Path, run_id: str = "mg-0", *, devices: int = 4, finished: bool = True, status: str = "interrupted",
    clocks: Sequence[tuple[float, float]] = (), started_at: str = "2026-11-27T01:00:00",
) -> None:
    """``records`` as a finished run ``run_id`` in ``folder``'s run database, d0 profiled; not ``finished``: in
    ``status`` (interrupted, failed, or still running). ``clocks``: its run clock's anchors (``Storage.record_clock``);
    ``started_at``: its driver's start."""
    with Storage(database_path(folder)) as storage:
        storage.start_run(RunInfo(run_id, "meta-greedy", "virtual", 0, json.dumps(CONFIG), started_at),
                          jobs_of(run_id))
        for run_s, wall_s in clocks:
            storage.record_clock(run_id, run_s, wall_s)
        for record in records(run_id, devices):
            storage.record_round(record, MEMBERS)
        storage.save_profiles([DeviceProfile(DeviceId("d0"), a=0.01, mu=50.0)])
        if finished or status != "running":
            storage.finish_run(run_id, "finished" if finished else status, "2026-11-27T01:05:00")


def write_provenance(folder: Path, run_id: str = "mg-0") -> None:
    """What run ``run_id`` of ``folder`` ran on: a configuration, versions, both jobs' programs, d0 (a phone) admitted."""
    programs = (ProgramBuild(CNN, "c" * 64, 1000, None, (6, 5)), ProgramBuild(LENET, "e" * 64, 2000, None, (6, 5)))
    hello = {"device_id": "d0", "runtime": "executorch", "versions": [1], "hardware": {"model": "Pixel 7", "os": "Android 14"}}
    with Storage(database_path(folder)) as storage:
        storage.record_provenance(RunProvenance(
            run_id, "2026-11-27T01:00:00+00:00", "seed = 0\n", "run.toml", "a" * 64, (), {"mjfl": "0.1.0"}, programs,
        ))
        storage.record_admissions([DeviceAdmission(
            run_id, DeviceId("d0"), "2026-11-27T01:00:01+00:00", 0, hello, {"a": 0.01, "mu": 50.0, "source": "profiles"},
            {"sha256": "f" * 64, "source": "adb"},
        )])


def aggregated(record: RoundRecord) -> RoundAggregated:
    """The engine's event for ``record``, every member's cost as ``MEMBERS``."""
    return RoundAggregated(record, MEMBERS, None, {}, None, 0.0)


def new_live() -> LiveRun:
    """A live run of ``INFO`` with both jobs and their epochs, before any event."""
    return LiveRun(INFO, jobs_of("live-0"), epochs=epochs_of(CONFIG))


def bars_of(timeline: Mapping[str, Any] | bytes) -> list[dict[str, Any]]:
    """A timeline's bars (``dashboard/timeline.py``'s columns, or their JSON) as a dict each, its indices turned into
    what they name (device, job, status)."""
    document = json.loads(timeline) if isinstance(timeline, bytes) else timeline
    columns = document["bars"]
    names = {"device": document["devices"], "job": document["jobs"], "status": document["statuses"]}
    return [{name: names[name][column[at]] if name in names else column[at] for name, column in columns.items()}
            for at in range(len(columns["round"]))]
