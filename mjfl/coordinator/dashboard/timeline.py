"""The device timeline's JSON: a bar per device round, as columns, for one run or several on the wall clock.

Pure, as ``state.py``: records in, JSON-able dicts out. Served apart from a
run's view (``/api/runs/{id}/timeline``, ``/api/live/timeline``): it is the
run's whole history, a bar per device round (100,000 at 1,000 devices x 100
rounds), while the view is pushed whole after every change of a live run.
``static/timeline.js`` draws it. One run's shape (``timeline``)::

    {"devices": [id, ...],                  # one row each, in this order
     "jobs": [name, ...],                   # a bar's colour: its job's index here
     "statuses": ["ok", "failed", "rejected"],
     "bars": {"device": [i], "job": [i], "round": [n], "start_s": [s], "end_s": [s], "status": [i]},
                                            # a column per field, a bar per position
     "utilisation": {"span_s", "fleet", "devices": {id: fraction}, "least", "most"},   # Utilisation.figures
     "total": n}                            # bars in the run (``bars`` may be those from ``since`` on)

Columns, indices instead of repeated strings, and where each bar is only:
100,000 bars are about 2.7 MB of JSON, where a dict a bar with what
hovering it shows was 14.6 MB. What hovering a bar shows (its samples,
wait, download, compute, upload, loss, error) is its round's
(``state.round_devices``: ``/api/runs/{id}/rounds/{job}/{round}``), asked
for when a bar is hovered. Times are on the run clock (s, to the ms). A bar
is when its device held its task (``results.utilisation.busy_interval``:
from its round's start plus its wait, for its round time, no later than its
round's end), the one rule of the timeline, the busy fractions and the
lab's page.

The lab's timeline (``lab_timeline``) puts several runs on one clock, the
wall clock (``results.wallclock``): the same bars, each run's moved by its
run clock's offset, in seconds from ``origin`` (Unix time), with::

    "jobs": ["<run>/<job>", ...], "runs": [run, ...], "job_runs": [i],   # each job's run: its index in runs
    "origin": unix_s, "live": [start_s, end_s] | null                    # the span of the runs going

and its utilisation counts a device busy on any shown run's job.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mjfl.coordinator.results.utilisation import Utilisation, busy_fractions, busy_interval
from mjfl.coordinator.results.wallclock import on_wall_clock
from mjfl.coordinator.storage.records import ClockAnchor, RoundRecord

__all__ = [
    "STATUSES", "PlacedRun", "TimelineBars", "busy_of", "device_intervals", "lab_timeline", "shared_busy", "timeline",
]

STATUSES = ("ok", "failed", "rejected")  # a bar's status: its index here
_COLUMNS = ("device", "job", "round", "start_s", "end_s", "status")  # a bar's columns


class TimelineBars:
    """A run's bars on its run clock, as columns, a round's added at a time (the live run adds each as it ends).

    Devices and jobs are kept as indices, in the order first seen, so a bar
    never changes once added and a page that has the first N bars fetches
    the rest (``since``).
    """

    def __init__(self, jobs: Iterable[str] = ()) -> None:
        self.devices: dict[str, int] = {}
        self.jobs: dict[str, int] = {}
        self.columns: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
        self.first: float | None = None  # the earliest round's start (run clock)
        self.last: float | None = None  # the latest round's end
        for job in jobs:
            self.jobs.setdefault(str(job), len(self.jobs))

    def __len__(self) -> int:
        return len(self.columns["round"])

    def add(self, record: RoundRecord) -> None:
        """``record``'s bars, one per device in plan order, when each held its task (``busy_interval``)."""
        job = self.jobs.setdefault(str(record.job), len(self.jobs))
        self.first = record.started_s if self.first is None else min(self.first, record.started_s)
        self.last = record.ended_s if self.last is None else max(self.last, record.ended_s)
        columns = self.columns
        for part in record.devices:
            start, end = busy_interval(record, part)
            columns["device"].append(self.devices.setdefault(str(part.device), len(self.devices)))
            columns["job"].append(job)
            columns["round"].append(record.round)
            columns["start_s"].append(start)
            columns["end_s"].append(end)
            columns["status"].append(STATUSES.index(part.status))

    def extend(self, rounds: Iterable[RoundRecord]) -> TimelineBars:
        for record in rounds:
            self.add(record)
        return self

    def intervals(self, shift: Callable[[float], float] | None = None) -> dict[str, list[tuple[float, float]]]:
        """Each device's busy intervals (its bars), each moved by ``shift(its start)`` (a run's wall clock)."""
        names = list(self.devices)
        found: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        columns = self.columns
        for device, start, end in zip(columns["device"], columns["start_s"], columns["end_s"], strict=True):
            by = 0.0 if shift is None else shift(start)
            found[names[device]].append((start + by, end + by))
        return found


def timeline(
    jobs: Sequence[str], rounds: Sequence[RoundRecord], devices: Sequence[str] = (), *,
    bars: TimelineBars | None = None, since: int = 0, busy: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A run's device timeline (the module docstring's shape), its bars from the ``since``-th on.

    ``jobs``: the run's jobs in order (their colours); ``devices``: devices
    to show besides those of the rounds (connected, never planned), rows
    sorted by id. ``bars``: ``TimelineBars`` of ``rounds`` when the caller
    keeps them (the live run adds a round's at a time). ``busy``: the busy
    figures to show, when they count more than this run's rounds (a lab run's
    page: every run's jobs, ``shared_busy``); else ``busy_of`` its bars.
    """
    bars = TimelineBars(jobs).extend(rounds) if bars is None else bars
    rows = sorted(set(map(str, devices)) | set(bars.devices))
    start = min(max(since, 0), len(bars))
    document = _columns(bars, rows, start)
    names = list(jobs) + [job for job in bars.jobs if job not in set(jobs)]
    remap = [names.index(job) for job in bars.jobs]
    document["bars"]["job"] = [remap[j] for j in document["bars"]["job"]]
    figures = busy_of(bars, devices).figures() if busy is None else dict(busy)
    return {"devices": rows, "jobs": names, **document, "utilisation": figures, "total": len(bars)}


def busy_of(bars: TimelineBars, devices: Iterable[str] = ()) -> Utilisation:
    """The busy fractions of one run's bars over its rounds' span (``results.utilisation``'s rule)."""
    intervals = {str(device): [] for device in devices} | bars.intervals()
    if bars.first is None or bars.last is None:
        return busy_fractions(intervals, 0.0, 0.0)
    return busy_fractions(intervals, bars.first, bars.last)


@dataclass(frozen=True)
class PlacedRun:
    """A run's bars and where its run clock is on the wall clock: its anchors (``Storage.clocks``) and start."""

    run_id: str
    bars: TimelineBars
    anchors: tuple[ClockAnchor, ...]
    started_at: str  # RunInfo.started_at: run-clock time 0 where no anchor says (``results.wallclock``)
    going: bool = False  # whether it is still running (the lab's timeline follows those)

    def shift(self, origin: float = 0.0) -> Callable[[float], float]:
        """What moves a bar starting at a run-clock time onto the wall clock, less ``origin`` (``on_wall_clock``).

        A bar (a device's task) is moved whole by where its start is: its end
        may be a later anchor's reading (the last round before a stop ends
        where the resumed run's clock takes up), and no task spans a stop.
        """
        if len(self.anchors) < 2 and (not self.anchors or self.anchors[0][0] == 0.0):  # never resumed: one offset
            constant = on_wall_clock(0.0, self.anchors, self.started_at) - origin
            return lambda start: constant
        return lambda start: on_wall_clock(start, self.anchors, self.started_at) - start - origin

    def wall_span(self) -> tuple[float, float] | None:
        """Its rounds' span on the wall clock (None before any round)."""
        if self.bars.first is None or self.bars.last is None:
            return None
        shift = self.shift()
        return self.bars.first + shift(self.bars.first), self.bars.last + shift(self.bars.last)

    def wall_intervals(self) -> dict[str, list[tuple[float, float]]]:
        """Each device's busy intervals on the wall clock, each bar moved by its start's offset."""
        return self.bars.intervals(self.shift())


def device_intervals(placed: Iterable[PlacedRun], devices: Iterable[str] = ()) -> dict[str, list[tuple[float, float]]]:
    """Every device's busy intervals on the wall clock over the ``placed`` runs: busy on any run's job."""
    found: dict[str, list[tuple[float, float]]] = {str(device): [] for device in devices}
    for run in placed:
        for device, own in run.wall_intervals().items():
            found.setdefault(device, []).extend(own)
    return found


def shared_busy(run: PlacedRun, others: Iterable[PlacedRun], devices: Iterable[str] = ()) -> dict[str, Any]:
    """The busy figures of ``run``'s devices over its rounds' span, a device busy while it held a task of ``run``
    or of any of ``others`` (the lab's other runs, on the wall clock): ``Utilisation.figures`` with ``own_fleet``,
    the fleet's fraction on ``run``'s jobs alone, and ``runs``, how many runs' tasks fell in the span.

    A lab's devices serve every run: counted over one run's tasks only, time a
    device spent on another's reads as idle. The span is on the wall clock, so
    a resumed run's counts the time it stood still too.
    """
    own = busy_of(run.bars, devices)
    span = run.wall_span()
    if span is None:
        return own.figures() | {"own_fleet": own.fleet, "runs": 1}
    counted = [run] + [other for other in others if (near := other.wall_span()) and near[0] < span[1] and near[1] > span[0]]
    intervals = device_intervals(counted, own.devices)
    busy = busy_fractions({device: intervals[device] for device in own.devices}, *span)
    return busy.figures() | {"own_fleet": own.fleet, "runs": len(counted)}


def lab_timeline(runs: Sequence[PlacedRun], devices: Iterable[str] = ()) -> dict[str, Any]:
    """Several runs' timelines on the wall clock, one row per device (the module docstring's lab shape).

    Each run's bars are its own timeline's (``TimelineBars``), each moved by
    its run clock's offset on the wall clock; times are seconds from the
    earliest shown round's start (``origin``, Unix time). ``live`` is the
    span of the runs going (what the page shows unless zoomed out), None
    when none is. The busy fractions count a device busy while it held any
    shown run's task, over the shown rounds' span. ``devices``: rows besides
    the rounds' (connected now).
    """
    spans = {run.run_id: span for run in runs if (span := run.wall_span()) is not None}
    shown = [run for run in runs if run.run_id in spans]
    rows = sorted(set(map(str, devices)) | {device for run in shown for device in run.bars.devices})
    origin = min((span[0] for span in spans.values()), default=0.0)
    last = max((span[1] for span in spans.values()), default=0.0)
    merged: dict[str, list[Any]] = {name: [] for name in _COLUMNS}
    jobs: list[str] = []
    job_runs: list[int] = []
    for index, run in enumerate(shown):
        part = _columns(run.bars, rows, 0, run.shift(origin))["bars"]
        part["job"] = [len(jobs) + j for j in part["job"]]
        jobs.extend(f"{run.run_id}/{job}" for job in run.bars.jobs)
        job_runs.extend(index for _ in run.bars.jobs)
        for name in _COLUMNS:
            merged[name].extend(part[name])
    going = [spans[run.run_id][0] for run in shown if run.going]
    busy = busy_fractions(device_intervals(shown, rows), origin, last)
    return {
        "devices": rows, "jobs": jobs, "runs": [run.run_id for run in shown], "job_runs": job_runs,
        "statuses": list(STATUSES), "bars": merged, "origin": origin if shown else None,
        "live": [_round(min(going) - origin), _round(last - origin)] if going else None,
        "utilisation": busy.figures(), "total": len(merged["round"]),
    }


def _columns(
    bars: TimelineBars, rows: Sequence[str], since: int, shift: Callable[[float], float] | None = None,
) -> dict[str, Any]:
    """``bars`` from the ``since``-th on as the answer's columns: devices as indices into ``rows``, each bar's
    times moved by ``shift(its start)`` and rounded to the millisecond."""
    position = {row: at for at, row in enumerate(rows)}
    device_rows = [position[name] for name in bars.devices]
    columns = {name: column[since:] for name, column in bars.columns.items()}
    moved = [0.0] * len(columns["start_s"]) if shift is None else [shift(start) for start in columns["start_s"]]
    columns["start_s"] = [_round(start + by) for start, by in zip(columns["start_s"], moved, strict=True)]
    columns["end_s"] = [_round(end + by) for end, by in zip(columns["end_s"], moved, strict=True)]
    columns["device"] = [device_rows[d] for d in columns["device"]]
    return {"statuses": list(STATUSES), "bars": columns}


def _round(value: float) -> float | None:
    """Seconds to the millisecond, for JSON; None for NaN or infinity."""
    return round(float(value), 3) if math.isfinite(value) else None
