"""The run going on now, as the dashboard shows it: an observer of the engine's events.

``LiveRun`` is called with every event of a ``mjfl testbed run``
(``engine/events.py``) and with every fleet event of the device registry
(``fleet``: joined, left, refused), and keeps ``state.py``'s shapes in memory
(the run's line, its jobs with their series, its devices, the scheduler's
choices, the newest events), so the page draws a live run as it draws a
finished one. Each device row gains a ``state``: ``idle``, ``downloading
<job>``, ``training <job>``, ``uploading <job>`` or ``offline``. What moves
on a device's connection is not an event: ``poll(transfer)``, called every
``POLL_INTERVAL_S`` by the server, asks the registry about the devices with
a task and turns ``training`` into ``downloading`` or ``uploading`` while it
lasts.

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
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mjfl.coordinator.dashboard import state
from mjfl.coordinator.dashboard.timeline import TimelineBars, timeline
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
from mjfl.coordinator.storage.records import (
    FleetEvent,
    JobInfo,
    RoundRecord,
    RunInfo,
    SchedulerChoice,
)

__all__ = ["LIVE_ID", "POLL_INTERVAL_S", "LiveRun", "Transfer"]

LIVE_ID = "live"  # the run's id on the page (a finished run's is "<folder>:<run id>")
POLL_INTERVAL_S = 0.5  # how often the server asks what moves on the devices' connections
Transfer = Callable[[str], str | None]  # device -> "downloading", "uploading" or None (DeviceRegistry.transfer)


class LiveRun:
    """The live run's shapes, updated per event; ``snapshot()`` is what ``/api/live`` sends."""

    def __init__(
        self, info: RunInfo, jobs: Sequence[JobInfo], *, profiles: Mapping[str, state.Speed] | None = None,
        epochs: Mapping[str, int] | None = None,
    ) -> None:
        self.info = info
        self.jobs: list[JobInfo] = []
        self._profiles: dict[str, state.Speed] = {}
        self._epochs: dict[str, int] = {}
        self.status = "running"
        self.version = 0  # bumped on every change
        self._rounds: dict[str, list[RoundRecord]] = {}
        self._job_views: dict[str, dict[str, Any]] = {}
        self._stale: set[str] = set()
        self._rows: dict[str, dict[str, Any]] = {}  # state.devices_table's rows, plus "state"
        self._tasks: dict[str, str] = {}  # device -> the job it has a task of
        self._choices: list[dict[str, Any]] = []
        self._bars = TimelineBars()  # the timeline's bars, a round's added as it ends
        self._events: deque[dict[str, Any]] = deque(maxlen=state.EVENTS_SHOWN)
        self._stopped: dict[str, str] = {}
        self._listeners: list[Callable[[], None]] = []
        self._add_jobs(jobs, profiles, epochs)

    def begin(
        self, jobs: Sequence[JobInfo], *, profiles: Mapping[str, state.Speed] | None = None,
        epochs: Mapping[str, int] | None = None,
    ) -> None:
        """The run's jobs, once they are prepared (a dashboard that opened while the fleet gathered had none yet),
        with the speed each device is planned with and each job's local epochs."""
        self._add_jobs(jobs, profiles, epochs)
        self._changed()

    def _add_jobs(
        self, jobs: Sequence[JobInfo], profiles: Mapping[str, state.Speed] | None, epochs: Mapping[str, int] | None
    ) -> None:
        self.jobs = list(jobs)
        self._profiles.update(profiles or {})
        self._epochs.update(epochs or {})
        for job in self.jobs:
            self._rounds.setdefault(str(job.job), [])
            self._stale.add(str(job.job))

    def on_change(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every change; returns a function that stops it."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            for device in event.devices:
                self._row(str(device))
        elif isinstance(event, DeviceJoined):
            self._row(str(event.device))
        elif isinstance(event, DeviceLeft):
            self._gone(str(event.device))
        elif isinstance(event, TaskSent):
            row = self._row(str(event.device))
            if row["state"] != "offline":
                self._tasks[row["device"]] = str(event.job)
                row["state"] = f"training {event.job}"
        elif isinstance(event, DeviceResult):
            self._done(str(event.result.device), str(event.job))
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

    def fleet(self, event: FleetEvent, profile: state.Speed | None = None) -> None:
        """The registry's word (``FleetEvent``): a device connected (with ``profile``, what it is planned with), left, or was refused.

        A device that drops is offline at once, whether or not the engine had
        it in a round; one that connects is idle until it gets a task.
        """
        self._events.append(state.event_row(event))
        device = None if event.device is None else str(event.device)
        if event.kind == "joined" and device is not None:
            row = self._row(device)
            row.update(state.identity(event.hardware))
            row.update(state.told_state(event.hardware))
            if row["state"] == "offline":
                row["state"] = "idle"
            if profile is not None:
                self._profiles[device] = profile
        elif event.kind == "left" and device is not None:
            self._gone(device)
        self._changed()

    def task_done(self, device: str, job: str | None, seconds: float | None, error: str | None = None) -> None:
        """A task outside any round ended (a profiling session's calibration task): counted in its device's row.

        ``seconds`` is its round time (None when it failed, for ``error``); the
        device is idle again, whichever task it had.
        """
        row = self._row(device)
        row["rounds"] += 1
        if error is None:
            row["ok"] += 1
            row["last_round_s"] = seconds
        else:
            row["failed"] += 1
            row["last_failure"] = error
            self._events.append({"at_s": None, "kind": "failed", "device": device, "job": job, "round": None,
                                 "detail": error})
        if self._tasks.pop(device, None) is not None and row["state"] != "offline":
            row["state"] = "idle"
        self._changed()

    def poll(self, transfer: Transfer) -> None:
        """Ask ``transfer`` what moves for each device with a task; a change is a change like any other."""
        changed = False
        for device, job in self._tasks.items():
            row = self._rows[device]
            moving = transfer(device)
            shown = f"{moving or 'training'} {job}"
            if row["state"] != shown:
                row["state"] = shown
                changed = True
        if changed:
            self._changed()

    def snapshot(self) -> state.RunView:
        """``{"run", "jobs", "devices", "choices"}`` as ``/api/runs/{id}`` sends it, with the device states, and how many timeline bars there are."""
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
        run = state.run_line(LIVE_ID, "", self.info.method, self.info, self.status, summary_jobs)
        return {
            "run": run, "jobs": jobs, "devices": [dict(row) for row in self._rows.values()],
            "choices": list(self._choices), "events": sorted(self._events, key=_when), "version": self.version,
            "timeline_bars": len(self._bars),  # the bars a page has to fetch (/api/live/timeline?since=N)
        }

    def round_devices(self, job: str, number: int) -> dict[str, Any] | None:
        """``state.round_devices`` of a finished round of this run; None if there is none such."""
        found = next((r for r in reversed(self._rounds.get(job, [])) if r.round == number), None)
        return None if found is None else state.round_devices(found)

    def timeline(self, since: int = 0) -> dict[str, Any]:
        """The run's device timeline so far (``timeline.timeline``), its bars from the ``since``-th on.

        The bars are kept as rounds end; the busy fractions are counted afresh
        (a page asks once per push at most, and only when bars were added).
        """
        rounds = [record for own in self._rounds.values() for record in own]
        return timeline([str(j.job) for j in self.jobs], rounds, list(self._rows), bars=self._bars, since=since)

    def recorded(
        self, rounds: Sequence[RoundRecord], choices: Sequence[SchedulerChoice], events: Sequence[FleetEvent] = ()
    ) -> None:
        """What a resumed run recorded before (``--resume``), so its series and events start where the run did."""
        for row in state.events_table(events, []):
            self._events.append(row)
        members: dict[tuple[str, int], dict[str, float]] = {}
        for choice in choices:
            members.setdefault((str(choice.job), choice.round), {})[choice.member] = choice.selector_cost
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
            self._row(str(part.device))  # a row with its state before state.add_round counts the round
            self._done(str(part.device), job)  # its round is over, whatever came of its task
        state.add_round(self._rows, record, self._profiles, self._epochs)
        self._bars.add(record)
        self._events.extend(state.round_events(record))
        members = [
            {"member": name, "cost": cost if math.isfinite(cost) else None, "won": name == record.winner}
            for name, cost in choices.items()
        ]
        self._choices.append(state.choice_row(record, members))

    def _done(self, device: str, job: str) -> None:
        """``device``'s task of ``job`` is over: idle, unless it went offline meanwhile."""
        if self._tasks.get(device) == job:
            del self._tasks[device]
            row = self._row(device)
            if row["state"] != "offline":
                row["state"] = "idle"

    def _gone(self, device: str) -> None:
        self._tasks.pop(device, None)
        self._row(device)["state"] = "offline"

    def _row(self, device: str) -> dict[str, Any]:
        row = self._rows.get(device)
        if row is None:
            row = self._rows[device] = {**state.device_row(device), "state": "idle"}
        return row

    def _changed(self) -> None:
        self.version += 1
        for listener in list(self._listeners):
            listener()


def _when(row: Mapping[str, Any]) -> float:
    """An event's place in the list: its run-clock time (a round's failures come before the round ends)."""
    return math.inf if row["at_s"] is None else float(row["at_s"])
