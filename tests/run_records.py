"""Runs made up for the tests of the results: jobs, round records, and run databases as the driver writes them.

Shared by the tests of ``mjfl.coordinator.results`` and of `mjfl report`;
importable as ``run_records`` (pytest puts tests/ on the path for its conftest.py).
"""

from __future__ import annotations

import json
from pathlib import Path

from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.coordinator.storage.records import DeviceRound, JobInfo, RoundRecord, RunInfo
from mjfl.ids import DeviceId, JobId

CNN, LENET = JobId("cnn"), JobId("lenet")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def jobs_of(run_id: str) -> list[JobInfo]:
    """Two jobs of run ``run_id``: cnn with an accuracy target (0.8), lenet with only a loss target (0.3)."""
    return [
        JobInfo(run_id, CNN, "cnn", "emnist-letters", 0.8, None, 50, "cnn/emnist-letters"),
        # Only a loss target: reaching it is decided by the loss, not the accuracy.
        JobInfo(run_id, LENET, "lenet5", "emnist-digits", None, 0.3, 50, "lenet5/emnist-digits"),
    ]


def rounds_of(
    run_id: str, job: JobId, points: list[tuple[float, float, float]], winner: str | None = None
) -> list[RoundRecord]:
    """Records ending at the given run-clock times with the given (accuracy, loss)."""
    records = []
    started = 0.0
    for number, (end, accuracy, loss) in enumerate(points, start=1):
        ended = float(end)
        devices = (
            DeviceRound(DeviceId("d3"), "ok", 100, 0.5, ended - started),
            DeviceRound(DeviceId("d1"), "failed", 0, None, 1.0, error="timeout"),
        )
        records.append(
            RoundRecord(run_id, job, number, started, ended, devices, accuracy, loss, True, ended - started, 2.5, winner)
        )
        started = ended
    return records


def record_run(folder: Path, method: str, seed: int, ends: list[float], accuracies: list[float], *,
               options: dict | None = None, winners: list[str] | None = None, finished: bool = True,
               setup: tuple[str, str, float, str] = ("lenet5", "digits", 0.8, "noniid"),
               energies: list[float | None] | None = None, states: list[dict | None] | None = None) -> None:
    """A run as the driver records it: info, its job ``lenet``, its rounds (real SQLite in ``folder``).

    ``setup``: the job's model, data set, target accuracy and partition. ``energies``: device d0's
    energy in each round, as a phone's battery told it (none: not known); ``states``: d0's device state
    in each round instead of the one ``energies`` implies (a phone that charged: ``energy_source`` "charging").
    """
    run_id = f"{method}-{seed}-{len(ends)}"
    scheduler = {"method": method, "alpha": 1.0, "beta": 0.05, "omega": "sqrt", "options": options or {}}
    model, dataset, target, scheme = setup
    config = {"scheduler": scheduler, "jobs": [{"name": LENET, "partition": scheme, "classes_per_device": 2}]}
    with Storage(database_path(folder)) as storage:
        storage.start_run(
            RunInfo(run_id, method, "virtual", seed, json.dumps(config), "2026-11-26T10:00:00"),
            [JobInfo(run_id, LENET, model, dataset, target, None, 40, f"{model}/{dataset}")],
        )
        started = 0.0
        for number, (end, accuracy) in enumerate(zip(ends, accuracies), start=1):
            winner = winners[number - 1] if winners else None
            joules = energies[number - 1] if energies else None
            state = None if joules is None else {"energy_j": joules, "energy_source": "battery"}
            state = states[number - 1] if states else state
            devices = (DeviceRound(DeviceId("d0"), "ok", 10, 0.5, end - started, device_state=state, energy_j=joules),)
            record = RoundRecord(run_id, LENET, number, started, end, devices, accuracy, 1.0, True, 1.0, 1.0, winner)
            storage.record_round(record, {w: 1.0 for w in set(winners)} if winners else None)
            started = end
        storage.finish_run(run_id, "finished" if finished else "interrupted", "2026-11-26T10:05:00")


def assert_png(path: Path) -> None:
    """``path`` is a PNG with something drawn on it."""
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5_000  # axes, lines and text, not an empty canvas
