"""The run going on now, as the dashboard shows it: an observer of the engine's events.

``LiveRun`` is called with every event of a ``mjfl testbed run``
(``engine/events.py``) and keeps ``state.py``'s shapes in memory (the run's
line, its jobs with their series, its devices, the scheduler's choices), so
the page draws a live run as it draws a finished one. Each device row gains
a ``state``: ``idle``, ``training <job>`` or ``offline``.

An event costs O(1) (a device's state) or the round's devices (a finished
round); nothing walks the run's history per event. A job's view (its
series, time to target and energy, ``state.jobs_view``) is rebuilt only when
a snapshot is taken after that job finished a round; the server takes one at
most every ``PUSH_INTERVAL_S`` however many events came.

Pure: no asyncio, no clock; listeners (``on_change``) are told that something
changed and decide themselves when to read it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mjfl.coordinator.dashboard import state
from mjfl.coordinator.engine.events import (
    DeviceJoined,
    DeviceLeft,
    DeviceResult,
    JobStopped,
    RoundAggregated,
    RunEvent,
    RunFinished,
    RunStarted,
    TaskSent,
)
from mjfl.coordinator.storage.records import JobInfo, RoundRecord, RunInfo, SchedulerChoice
from mjfl.profiling.profiles import DeviceProfile

__all__ = ["LIVE_ID", "LiveRun"]

LIVE_ID = "live"  # the run's id on the page (a finished run's is "<folder>:<run id>")


class LiveRun:
    """The live run's shapes, updated per event; ``snapshot()`` is what ``/api/live`` sends."""

    def __init__(
        self, info: RunInfo, jobs: Sequence[JobInfo], *, profiles: Mapping[str, DeviceProfile] | None = None,
        epochs: Mapping[str, int] | None = None,
    ) -> None:
        self.info = info
        self.jobs = list(jobs)
        self._profiles = dict(profiles or {})
        self._epochs = dict(epochs or {})
        self.status = "running"
        self.version = 0  # bumped on every change
        self._rounds: dict[str, list[RoundRecord]] = {str(j.job): [] for j in jobs}
        self._job_views: dict[str, dict[str, Any]] = {}
        self._stale: set[str] = {str(j.job) for j in jobs}
        self._rows: dict[str, dict[str, Any]] = {}  # state.devices_table's rows, plus "state"
        self._choices: list[dict[str, Any]] = []
        self._stopped: dict[str, str] = {}
        self._listeners: list[Callable[[], None]] = []

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every change; returns a function that stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            for device in event.devices:
                self._row(str(device))["state"] = "idle"
        elif isinstance(event, DeviceJoined):
            self._row(str(event.device))["state"] = "idle"
        elif isinstance(event, DeviceLeft):
            self._row(str(event.device))["state"] = "offline"
        elif isinstance(event, TaskSent):
            row = self._row(str(event.device))
            if row["state"] != "offline":
                row["state"] = f"training {event.job}"
        elif isinstance(event, DeviceResult):
            row = self._row(str(event.result.device))
            if row["state"] == f"training {event.job}":
                row["state"] = "idle"
        elif isinstance(event, RoundAggregated):
            self._round(event)
        elif isinstance(event, JobStopped):
            self._stopped[str(event.job)] = event.reason
            self._stale.add(str(event.job))
        elif isinstance(event, RunFinished):
            self.status = "finished"
        else:
            return  # ProfileRefitted: nothing the page shows
        self._changed()

    def left(self, device: str, reason: str = "") -> None:
        """A device left the registry (it disconnected, for ``reason``), whether or not the engine knew it."""
        self._row(device)["state"] = "offline"
        self._changed()

    def joined(self, device: str) -> None:
        """A device connected to the registry: idle until it gets a task."""
        row = self._row(device)
        if row["state"] == "offline":
            row["state"] = "idle"
        self._changed()

    def snapshot(self) -> state.RunView:
        """``{"run", "jobs", "devices", "choices"}`` as ``/api/runs/{id}`` sends it, with the device states."""
        for job in self._stale:
            info = next(j for j in self.jobs if str(j.job) == job)
            (self._job_views[job],) = state.jobs_view([info], self._rounds[job])
            self._job_views[job]["stopped"] = self._stopped.get(job)
        self._stale.clear()
        jobs = [self._job_views[str(j.job)] for j in self.jobs]
        summary_jobs = [
            {"job": view["job"], "time_to_target_s": view["time_to_target_s"], "final_accuracy": view["final_accuracy"]}
            for view in jobs
        ]
        times = [view["time_to_target_s"] for view in jobs]
        run = {
            "id": LIVE_ID, "folder": "", "run_id": self.info.run_id, "method": self.info.method,
            "label": self.info.method, "mode": self.info.mode, "seed": self.info.seed,
            "started_at": self.info.started_at, "status": self.status, "jobs": summary_jobs,
            "total_time_s": None if not times or None in times else max(times),
        }
        return {
            "run": run, "jobs": jobs, "devices": [dict(row) for row in self._rows.values()],
            "choices": list(self._choices), "version": self.version,
        }

    def recorded(self, rounds: Sequence[RoundRecord], choices: Sequence[SchedulerChoice]) -> None:
        """The rounds a resumed run recorded before (``--resume``), so its series start where the run did."""
        members: dict[tuple[str, int], dict[str, float]] = {}
        for choice in choices:
            members.setdefault((str(choice.job), choice.round), {})[choice.member] = choice.recost
        for record in rounds:
            self._add(record, members.get((str(record.job), record.round), {}))
        self._changed()

    def _round(self, event: RoundAggregated) -> None:
        self._add(event.record, event.choices or {})
        if event.stopped is not None:
            self._stopped[str(event.job)] = event.stopped

    def _add(self, record: RoundRecord, choices: Mapping[str, float]) -> None:
        job = str(record.job)
        self._rounds.setdefault(job, []).append(record)
        self._stale.add(job)
        for part in record.devices:
            row = self._row(str(part.device))
            if row["state"] == f"training {job}":  # its round is over, whatever came of its task
                row["state"] = "idle"
        state.add_round(self._rows, record, self._profiles, self._epochs)
        members = [
            {"member": name, "recost": cost if math.isfinite(cost) else None, "won": name == record.winner}
            for name, cost in choices.items()
        ]
        self._choices.append(state.choice_row(record, members))

    def _row(self, device: str) -> dict[str, Any]:
        row = self._rows.get(device)
        if row is None:
            row = self._rows[device] = {
                "device": device, "rounds": 0, "ok": 0, "failed": 0, "rejected": 0, "last_failure": None,
                "last_round_s": None, "expected_round_s": None, "battery_pct": None, "charging": None,
                "thermal_status": None, "energy_j": None, "state": "idle",
            }
        return row

    def _changed(self) -> None:
        self.version += 1
        for listener in list(self._listeners):
            listener()

