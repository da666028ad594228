"""Run databases written with the real Storage API for the dashboard's tests."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from run_records import CNN, LENET, jobs_of

from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.coordinator.storage.records import DeviceRound, RoundRecord, RunInfo
from mjfl.ids import DeviceId
from mjfl.profiling.profiles import DeviceProfile

CONFIG = {
    "scheduler": {"method": "meta-greedy"},
    "jobs": [{"name": "cnn", "training": {"epochs": 2}}, {"name": "lenet", "training": {"epochs": 1}}],
}
MEMBERS = {"random": 3.0, "genetic": 1.5, "bods": 2.0}


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


def write_run(folder: Path, run_id: str = "mg-0", *, devices: int = 4, finished: bool = True) -> None:
    """A meta-greedy run of cnn (accuracy target 0.8) and lenet (loss target 0.3), three rounds each."""
    points = {CNN: [(10.0, 0.5, 1.0), (20.0, 0.85, 0.6), (30.0, math.nan, math.nan)],
              LENET: [(12.0, 0.6, 0.5), (24.0, 0.7, 0.4), (36.0, 0.8, 0.2)]}
    with Storage(database_path(folder)) as storage:
        storage.start_run(RunInfo(run_id, "meta-greedy", "virtual", 0, json.dumps(CONFIG), "2026-11-27T01:00:00"),
                          jobs_of(run_id))
        for job, rows in points.items():
            started = 0.0
            for number, (end, accuracy, loss) in enumerate(rows, start=1):
                record = RoundRecord(run_id, job, number, started, end, device_rounds(number, devices),
                                     accuracy, loss, True, 8.0, 2.5, "genetic")
                storage.record_round(record, MEMBERS)
                started = end
        storage.save_profiles([DeviceProfile(DeviceId("d0"), a=0.01, mu=50.0)])
        if finished:
            storage.finish_run(run_id, "finished", "2026-11-27T01:05:00")


@pytest.fixture
def run_writer() -> Callable[..., None]:
    """``write_run(folder, run_id="mg-0", *, devices=4, finished=True)``."""
    return write_run


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An output folder with one finished run (``mg-0``) and one interrupted (``mg-1``)."""
    out = tmp_path / "out"
    write_run(out)
    write_run(out, "mg-1", finished=False)
    return out
