"""What the lab's page shows (`mjfl serve`'s dashboard, docs/dashboard.md): its devices, queue, runs and shares.

Read from the lab's database (``store.py``: who submitted what, each run's
state and why a queued one waits), each run's own run database in its
folder (``LAB_DIR/runs/<run>/mjfl.db``, read-only, as `mjfl dashboard`
reads one) and the devices connected now. ``LabView.state()`` is what
``/lab/state`` sends::

    {"lab":      {"devices", "running", "queued", "max_running", "share", "draining"},
     "devices":  [state.device_row + {"state": "lobby" | "busy", "run", "job", "connected_at", "address"}],
     "queue":    [{"id", "owner", "method", "needs", "position", "reason", "submitted_at"}],
     "running":  [{"id", "owner", "method", "state", "started_at",
                   "jobs": [{"job", "rounds", "max_rounds", "accuracy", "target": {"accuracy", "loss"},
                             "time_to_target_s"}]}],
     "shares":   [{"owner", "device_s", "fraction", "runs"}],
     "finished": [{"id", "owner", "method", "state", "reason", "ended_at", "targets_reached"}]}

A device's row is ``state.device_row`` of its hello, counted over the
device rounds of every run of the lab (``state.add_round``: rounds, last
round's time, battery, charging, thermal status as last told), and says
whom it serves now (``busy``: the run and job; ``lobby``: none).
``connected_at`` is Unix time. A researcher's share is the device-seconds
of their runs' device rounds (each device round's ``duration_s``, whatever
its outcome: the device was held), from the run databases, so it survives a
restart of the service; ``fraction`` is of every researcher's.

``LabView.timeline()`` is what ``/lab/timeline`` sends, in the shape of the
dashboard's timeline component, for the runs going and the newest that
ended (``TIMELINE_RUNS`` in all)::

    {"devices": [id, ...], "jobs": ["<run>/<job>", ...],
     "bars": [{"device", "job", "run", "round", "start_s", "end_s", "status"}]}

A bar is one device round: it starts at the round's start plus the
device's wait (``DeviceRound.wait_s``) and lasts its ``duration_s``, on the
run's clock shifted by the run's wall-clock start, in seconds from the
earliest shown run's start. A bar names its run and its job; ``jobs`` lists
each as ``<run>/<job>`` (``0003-alice/lenet``), the key the component colours
a bar with a ``run`` by: two runs' jobs of one name are two jobs. ``status``
is ``ok``, ``failed`` or ``rejected`` (an update refused).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mjfl.coordinator.dashboard.catalog import entry_of
from mjfl.coordinator.dashboard.state import add_round, device_row, jobs_view
from mjfl.coordinator.lab.config import LabLimits
from mjfl.coordinator.lab.store import LabRun, LabStore
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.coordinator.storage.records import JobInfo, RoundRecord, RunInfo

__all__ = ["Connected", "LabView", "Recorded"]

TIMELINE_RUNS = 8  # the runs the lab's timeline shows: every one going, then the newest that ended


@dataclass(frozen=True)
class Recorded:
    """What a lab run's folder recorded so far: its run, status, jobs and rounds."""

    info: RunInfo
    status: str
    jobs: Sequence[JobInfo]
    rounds: Sequence[RoundRecord]

    @property
    def started(self) -> float:
        """The run's start, Unix time (its run clock's zero)."""
        return dt.datetime.fromisoformat(self.info.started_at).timestamp()


Connected = Mapping[str, Any]
"""A connected device as ``LabFleet.devices`` gives it (``device``, ``connected_at``, ``address``, ``serving``),
with its hello's ``hardware``."""


class LabView:
    """The lab's page's JSON (see the module docstring), read afresh on each call but for ended runs.

    An ended run records nothing more: it is read once, and what the page
    needs of it is kept in place of its rounds (its catalog line, its device
    rounds counted into the devices' rows and its owner's share, and its
    records while it is among the newest ``TIMELINE_RUNS``), so that the
    lab's history does not grow the service's memory with every run's rounds.

    Safe in a worker thread: it reads the lab's database and the run
    databases only; the connected devices are given by the caller, who
    asks the registry on the event loop.
    """

    def __init__(
        self, store: LabStore, runs_dir: Path, limits: LabLimits, draining: Callable[[], bool] = lambda: False,
    ) -> None:
        self.store = store
        self.runs_dir = runs_dir
        self.limits = limits
        self.draining = draining
        self._ended: dict[str, dict[str, Any] | None] = {}  # each ended run's catalog line (None: it recorded nothing)
        self._counted: dict[str, dict[str, Any]] = {}  # the devices' rows over every ended run's rounds
        self._held: dict[str, tuple[float, int]] = {}  # owner -> their ended runs' device-seconds, and how many runs
        self._newest: dict[str, Recorded] = {}  # the records of the latest ended runs seen, TIMELINE_RUNS at most

    def folder(self, run_id: str) -> Path:
        return self.runs_dir / run_id

    def recorded(self, run: LabRun) -> Recorded | None:
        """The run's records in its folder (None before it recorded anything)."""
        if run.run_id in self._newest:
            return self._newest[run.run_id]
        return self._read(run.run_id)

    def entry(self, run: LabRun) -> dict[str, Any] | None:
        """The run's line of the run pages' catalog (``entry_of``; None before it recorded anything)."""
        if run.final:
            return self._ending(run)
        found = self._read(run.run_id)
        return None if found is None else self._entry(run, found)

    def _entry(self, run: LabRun, found: Recorded) -> dict[str, Any]:
        return entry_of(run.run_id, self.folder(run.run_id), found.info, found.status, found.jobs, found.rounds)

    def _ending(self, run: LabRun) -> dict[str, Any] | None:
        """An ended run's catalog line; the first time it is seen ended, it is read and counted once for good."""
        if run.run_id in self._ended:
            return self._ended[run.run_id]
        found = self._read(run.run_id)
        entry = self._ended[run.run_id] = None if found is None else self._entry(run, found)
        if found is not None:
            for record in found.rounds:
                add_round(self._counted, record, {}, {})
            seconds, runs = self._held.get(run.owner, (0.0, 0))
            self._held[run.owner] = (seconds + _held(found), runs + 1)
            self._newest[run.run_id] = found
            while len(self._newest) > TIMELINE_RUNS:
                del self._newest[next(iter(self._newest))]
        return entry

    def _read(self, run_id: str) -> Recorded | None:
        path = database_path(self.folder(run_id))
        if not path.is_file():
            return None
        with Storage.read_only(path) as storage:
            info = next(((i, s) for i, s in storage.runs() if i.run_id == run_id), None)
            if info is None:
                return None
            return Recorded(info[0], info[1], storage.jobs(run_id), storage.rounds(run_id))

    def state(self, connected: Sequence[Connected]) -> dict[str, Any]:
        """Everything the lab's page shows but its timeline, ``connected`` the devices connected now."""
        runs = self.store.runs()
        for run in runs:
            if run.final:
                self._ending(run)
        records = {run.run_id: self._read(run.run_id) for run in runs if run.state == "running"}
        queued = [run for run in runs if run.state == "queued"]
        devices = self._devices(connected, self._counted, (r for r in records.values() if r is not None))
        return {
            "lab": {
                "devices": len(devices), "running": sum(r.state in ("admitted", "running") for r in runs),
                "queued": len(queued), "max_running": self.limits.max_running, "share": self.limits.share,
                "draining": self.draining(),
            },
            "devices": devices,
            "queue": [_queued(run, position) for position, run in enumerate(queued, start=1)],
            "running": [_running(run, records.get(run.run_id)) for run in runs if run.state in ("admitted", "running")],
            "shares": _shares(runs, records, self._held),
            "finished": [_finished(run) for run in runs if run.final],
        }

    @staticmethod
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
            serving = lobby.get("serving")
            row.update({
                "state": "lobby" if serving is None else "busy",
                "run": None if serving is None else serving["run"], "job": None if serving is None else serving["job"],
                "connected_at": lobby.get("connected_at"), "address": lobby.get("address"),
            })
            rows.append(row)
        return rows

    def timeline(self, connected: Sequence[Connected]) -> dict[str, Any]:
        """The shown runs' device rounds as bars (see the module docstring); a row for each device connected too.

        Shown: every run going and the newest that ended, ``TIMELINE_RUNS`` in
        all (a lab's history would grow the answer without end).
        """
        runs = self.store.runs()
        going = [(run, found) for run in runs if not run.final and (found := self._read(run.run_id)) is not None]
        room = max(TIMELINE_RUNS - len(going), 0)
        newest = [run for run in runs if run.final and self._ending(run) is not None][-room:] if room else []
        ended = [(run, found) for run in newest if (found := self.recorded(run)) is not None]
        shown = sorted([*ended, *going], key=lambda pair: pair[0].seq)
        if not shown:
            return {"devices": sorted(str(d["device"]) for d in connected), "jobs": [], "bars": []}
        origin = min(found.started for _, found in shown)
        bars, jobs = [], []
        for run, found in shown:
            jobs.extend(f"{run.run_id}/{job.job}" for job in found.jobs)
            offset = found.started - origin
            for record in found.rounds:
                for part in record.devices:
                    start = offset + record.started_s + part.wait_s
                    bars.append({
                        "device": str(part.device), "job": str(record.job), "run": run.run_id,
                        "round": record.round, "start_s": _seconds(start), "end_s": _seconds(start + part.duration_s),
                        "status": part.status,
                    })
        devices = {str(d["device"]) for d in connected} | {bar["device"] for bar in bars}
        return {"devices": sorted(devices), "jobs": jobs, "bars": bars}


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
    return {"id": run.run_id, "owner": run.owner, "method": run.method, "state": run.state,
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
