"""What the lab's page shows (`mjfl serve`'s dashboard, docs/dashboard.md): its devices, queue, runs, shares, timeline.

Read from the lab's database (``store.py``: who submitted what, each run's
state and why it waits or ended), each run's own run database in its folder
(``LAB_DIR/runs/<run>/mjfl.db``, read-only, as `mjfl dashboard` reads one)
and the devices connected now. Every figure is the run dashboard's
(``dashboard/state.py``, ``dashboard/timeline.py``, ``results/``); this
module picks the runs and reads them. ``LabView.state()`` is what
``/lab/state`` sends::

    {"lab":      {"devices", "running", "queued", "max_running", "share", "draining"},
     "devices":  [state.device_row + {"state": "lobby" | "busy", "run", "job", "connected_at", "address"}],
     "queue":    [{"id", "owner", "method", "needs", "position", "reason", "submitted_at"}],
     "running":  [{"id", "owner", "method", "state", "reason", "started_at",
                   "jobs": [{"job", "rounds", "max_rounds", "accuracy", "target": {"accuracy", "loss"},
                             "time_to_target_s"}]}],
     "shares":   [{"owner", "device_s", "fraction", "runs"}],
     "finished": [{"id", "owner", "method", "state", "reason", "ended_at", "targets_reached"}]}

A device's row is ``state.device_row`` of its hello, counted over the
device rounds of every run of the lab (``state.add_round``), and says whom
it serves now (``busy``: the run and job; ``lobby``: none). ``connected_at``
is Unix time. A researcher's share is the device-seconds of their runs'
device rounds (each one's ``duration_s``, whatever its outcome: the device
was held), from the run databases, so it survives a restart of the
service; ``fraction`` is of every researcher's.

``LabView.timeline()`` is what ``/lab/timeline`` sends: ``timeline.lab_timeline``
of the runs going and the newest that ended (``TIMELINE_RUNS`` in all), each
run's bars its own dashboard's, placed on the wall clock by its run clock's
anchors (``results/wallclock.py``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mjfl.coordinator.dashboard.catalog import entry_of
from mjfl.coordinator.dashboard.state import add_round, device_row, jobs_view
from mjfl.coordinator.dashboard.timeline import PlacedRun, TimelineBars, lab_timeline
from mjfl.coordinator.lab.config import LabLimits
from mjfl.coordinator.lab.store import LabRun, LabStore
from mjfl.coordinator.results.wallclock import unix_time
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.coordinator.storage.records import ClockAnchor, JobInfo, RoundRecord, RunInfo

__all__ = ["Connected", "LabView", "Recorded", "lab_line", "serving"]

TIMELINE_RUNS = 8  # the runs the lab's timeline shows: every one going, then the newest that ended


@dataclass(frozen=True)
class Recorded:
    """What a lab run's folder recorded so far: its run, status, jobs, rounds and run clock's anchors."""

    info: RunInfo
    status: str
    jobs: Sequence[JobInfo]
    rounds: Sequence[RoundRecord]
    anchors: tuple[ClockAnchor, ...]

    def placed(self, *, going: bool) -> PlacedRun:
        """Its bars and where its run clock is on the wall clock."""
        bars = TimelineBars(str(job.job) for job in self.jobs).extend(self.rounds)
        return PlacedRun(self.info.run_id, bars, self.anchors, self.info.started_at, going=going)


Connected = Mapping[str, Any]
"""A connected device as ``LabFleet.devices`` gives it (``device``, ``connected_at``, ``address``, ``serving``),
with its hello's ``hardware``."""


class LabView:
    """The lab's page's JSON (see the module docstring), read afresh on each call but for ended runs.

    An ended run records nothing more: it is read once, and what the page
    needs of it is kept in place of its rounds (its catalog line, its device
    rounds counted into the devices' rows and its owner's share, and its bars
    while it is among the newest ``TIMELINE_RUNS``), so that the lab's
    history does not grow the service's memory with every run's rounds.

    Called in worker threads, several at once: it reads the lab's database
    and the run databases only, and what it keeps of ended runs is its own,
    under its lock (an ended run is counted once however many ask). The
    connected devices are given by the caller, who asks the registry on the
    event loop.
    """

    def __init__(
        self, store: LabStore, runs_dir: Path, limits: LabLimits, draining: Callable[[], bool] = lambda: False,
    ) -> None:
        self.store = store
        self.runs_dir = runs_dir
        self.limits = limits
        self.draining = draining
        self._lock = threading.Lock()  # guards the four below
        self._ended: dict[str, dict[str, Any] | None] = {}  # each ended run's catalog line (None: it recorded nothing)
        self._counted: dict[str, dict[str, Any]] = {}  # the devices' rows over every ended run's rounds
        self._held: dict[str, tuple[float, int]] = {}  # owner -> their ended runs' device-seconds, and how many runs
        self._newest: dict[str, PlacedRun] = {}  # the bars of the latest ended runs seen, TIMELINE_RUNS at most

    def folder(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    def read(self, run_id: str) -> Recorded | None:
        """Run ``run_id``'s records in its folder (None before it recorded anything)."""
        path = database_path(self.folder(run_id))
        if not path.is_file():
            return None
        with Storage.read_only(path) as storage:
            info = next(((i, s) for i, s in storage.runs() if i.run_id == run_id), None)
            if info is None:
                return None
            return Recorded(info[0], info[1], storage.jobs(run_id), storage.rounds(run_id), tuple(storage.clocks(run_id)))

    def entry(self, run: LabRun) -> dict[str, Any] | None:
        """The run's line of the run pages' catalog (``entry_of``; None before it recorded anything)."""
        if run.final:
            return self._ending(run)
        found = self.read(run.run_id)
        return None if found is None else self._entry(run, found)

    def _entry(self, run: LabRun, found: Recorded) -> dict[str, Any]:
        return entry_of(run.run_id, self.folder(run.run_id), found.info, found.status, found.jobs, found.rounds)

    def _ending(self, run: LabRun) -> dict[str, Any] | None:
        """An ended run's catalog line; the first time it is seen ended, it is read and counted once for good."""
        with self._lock:
            if run.run_id in self._ended:
                return self._ended[run.run_id]
        found = self.read(run.run_id)  # outside the lock: a large run takes a while to read
        entry = None if found is None else self._entry(run, found)
        with self._lock:
            if run.run_id in self._ended:  # another thread counted it meanwhile
                return self._ended[run.run_id]
            self._ended[run.run_id] = entry
            if found is not None:
                for record in found.rounds:
                    add_round(self._counted, record, {}, {})
                seconds, runs = self._held.get(run.owner, (0.0, 0))
                self._held[run.owner] = (seconds + _held(found), runs + 1)
                self._newest[run.run_id] = found.placed(going=False)
                while len(self._newest) > TIMELINE_RUNS:
                    del self._newest[next(iter(self._newest))]
        return entry

    def placed(self, run: LabRun) -> PlacedRun | None:
        """The run's bars on the wall clock (None before it recorded anything); an ended one's kept while it is new."""
        if run.final:
            self._ending(run)
            with self._lock:
                kept = self._newest.get(run.run_id)
            if kept is not None:
                return kept
        found = self.read(run.run_id)
        return None if found is None else found.placed(going=not run.final)

    def state(self, connected: Sequence[Connected]) -> dict[str, Any]:
        """Everything the lab's page shows but its timeline, ``connected`` the devices connected now."""
        runs = self.store.runs()
        for run in runs:
            if run.final:
                self._ending(run)
        records = {run.run_id: self.read(run.run_id) for run in runs if run.state == "running"}
        queued = [run for run in runs if run.state == "queued"]
        with self._lock:
            counted = {device: dict(row) for device, row in self._counted.items()}
            held = dict(self._held)
        going = [run for run in runs if run.state in ("admitted", "running")]
        return {
            "lab": {
                "devices": len(connected), "running": len(going), "queued": len(queued),
                "max_running": self.limits.max_running, "share": self.limits.share, "draining": self.draining(),
            },
            "devices": _devices(connected, counted, (r for r in records.values() if r is not None)),
            "queue": [_queued(run, position) for position, run in enumerate(queued, start=1)],
            "running": [_running(run, records.get(run.run_id)) for run in going],
            "shares": _shares(runs, records, held),
            "finished": [_finished(run) for run in runs if run.final],
        }

    def timeline(self, connected: Sequence[Connected]) -> dict[str, Any]:
        """The shown runs' device rounds on the wall clock (``timeline.lab_timeline``), a row for each device connected too.

        Shown: every run going and the newest that ended, ``TIMELINE_RUNS`` in
        all (a lab's history would grow the answer without end).
        """
        runs = self.store.runs()
        going = [placed for run in runs if not run.final and (placed := self.placed(run)) is not None]
        room = max(TIMELINE_RUNS - len(going), 0)
        newest = [run for run in runs if run.final and self._ending(run) is not None][-room:] if room else []
        ended = [placed for run in newest if (placed := self.placed(run)) is not None]
        order = {run.run_id: run.seq for run in runs}
        shown = sorted([*ended, *going], key=lambda placed: order[placed.run_id])
        return lab_timeline(shown, (str(d["device"]) for d in connected))

    def neighbours(self, run: LabRun) -> tuple[list[PlacedRun], bool]:
        """The lab's other runs that ran while ``run`` did (by the lab's times), placed; and whether all have ended."""
        runs = [other for other in self.store.runs() if other.run_id != run.run_id and _overlap(other, run)]
        return [placed for other in runs if (placed := self.placed(other)) is not None], all(r.final for r in runs)


def lab_line(run: LabRun) -> dict[str, Any]:
    """Where a run stands in the lab (``store.py``): its state, why it waits or ended, whose it is and when."""
    return {"state": run.state, "reason": run.reason, "owner": run.owner, "needs": run.needs,
            "submitted_at": run.submitted_at, "started_at": run.started_at, "ended_at": run.ended_at}


def serving(connected: Iterable[Connected], run_id: str) -> dict[str, str]:
    """Each connected device's state as a run's page shows it: ``training <job>`` for this run's job, ``busy <run>/<job>``
    for another run's, ``idle``; a device not connected is ``offline`` (the live run's words)."""
    states = {}
    for device in connected:
        held = device.get("serving")
        if held is None:
            states[str(device["device"])] = "idle"
        elif held["run"] == run_id:
            states[str(device["device"])] = f"training {held['job']}"
        else:
            states[str(device["device"])] = f"busy {held['run']}/{held['job']}"
    return states


def _overlap(one: LabRun, other: LabRun) -> bool:
    """Whether the two runs ran at once, by the lab's times (a run not started yet ran with none)."""
    if one.started_at is None or other.started_at is None:
        return False
    ends = [math.inf if r.ended_at is None else unix_time(r.ended_at) for r in (one, other)]
    return unix_time(one.started_at) <= ends[1] and unix_time(other.started_at) <= ends[0]


def _devices(
    connected: Sequence[Connected], ended: Mapping[str, Mapping[str, Any]], records: Iterable[Recorded],
) -> list[dict[str, Any]]:
    """Each connected device's row: its hello, its rounds in every run (``ended``: counted over the ended
    runs' already), whom it serves now."""
    counted = {device: dict(row) for device, row in ended.items()}
    for found in records:
        for record in found.rounds:
            add_round(counted, record, {}, {})
    rows = []
    for lobby in sorted(connected, key=lambda d: str(d["device"])):
        device = str(lobby["device"])
        row = device_row(device, lobby.get("hardware"))
        if device in counted:  # what its rounds told, over what its hello did
            row.update({k: v for k, v in counted[device].items() if v is not None and k not in ("kind", "model", "os")})
        held = lobby.get("serving")
        row.update({
            "state": "lobby" if held is None else "busy",
            "run": None if held is None else held["run"], "job": None if held is None else held["job"],
            "connected_at": lobby.get("connected_at"), "address": lobby.get("address"),
        })
        rows.append(row)
    return rows


def _queued(run: LabRun, position: int) -> dict[str, Any]:
    return {"id": run.run_id, "owner": run.owner, "method": run.method, "needs": run.needs, "position": position,
            "reason": run.reason, "submitted_at": run.submitted_at}


def _running(run: LabRun, found: Recorded | None) -> dict[str, Any]:
    """A running run and each job's progress: rounds done of its budget, its latest accuracy against its target."""
    jobs = [] if found is None else [
        {"job": view["job"], "rounds": view["rounds"], "max_rounds": view["max_rounds"],
         "accuracy": view["final_accuracy"], "target": view["target"], "time_to_target_s": view["time_to_target_s"]}
        for view in jobs_view(found.jobs, found.rounds)
    ]
    return {"id": run.run_id, "owner": run.owner, "method": run.method, "state": run.state, "reason": run.reason,
            "started_at": run.started_at, "jobs": jobs}


def _finished(run: LabRun) -> dict[str, Any]:
    return {"id": run.run_id, "owner": run.owner, "method": run.method, "state": run.state, "reason": run.reason,
            "ended_at": run.ended_at, "targets_reached": run.targets_reached}


def _shares(
    runs: Sequence[LabRun], records: Mapping[str, Recorded | None], ended: Mapping[str, tuple[float, int]],
) -> list[dict[str, Any]]:
    """Each researcher with a run that recorded something: the device-seconds of their runs' device rounds, and its
    fraction; ``ended``: each researcher's ended runs' device-seconds and how many, counted already."""
    seconds = {owner: held for owner, (held, _) in ended.items()}
    counted = {owner: count for owner, (_, count) in ended.items()}
    for run in runs:
        found = records.get(run.run_id)
        if found is None:  # never started, nothing recorded yet, or ended (counted in ``ended``)
            continue
        seconds[run.owner] = seconds.get(run.owner, 0.0) + _held(found)
        counted[run.owner] = counted.get(run.owner, 0) + 1
    total = sum(seconds.values())
    return [
        {"owner": owner, "device_s": _seconds(held), "fraction": held / total if total > 0 else None, "runs": counted[owner]}
        for owner, held in sorted(seconds.items())
    ]


def _held(found: Recorded) -> float:
    """The device-seconds of a run's device rounds (each one's ``duration_s``, whatever its outcome)."""
    return sum(part.duration_s for r in found.rounds for part in r.devices if math.isfinite(part.duration_s))


def _seconds(value: float) -> float | None:
    """Seconds for JSON, to the millisecond; None for NaN or infinity (JSON has neither)."""
    return round(float(value), 3) if math.isfinite(value) else None
