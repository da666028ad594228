"""A run-clock time on the wall clock: where several runs of one fleet are drawn side by side (the lab's timeline).

A run's records count time on its run clock (docs/storage.md): seconds from
its engine's start, carried on across a resume from where the run stopped.
Each time a run's engine starts (its first start, each resume) its run
database keeps an anchor, the run clock's reading and the Unix time then
(``Storage.record_clock``, read back by ``Storage.clocks``), and a
run-clock time is on the wall clock by the latest anchor at or before it
(``records.wall_time``, the one rule): the run clock stood still while the
run did not run, and each anchor says where it took up again.

A database without anchors (a run recorded before they were kept), or whose
first anchor comes after some of its rounds (resumed by a later mjfl), takes
the run's ``started_at`` (``RunInfo``) as its run clock's zero for the times
before its first anchor. That moment is the run driver's start, before the
jobs are prepared, so such a run is drawn early by its preparation's time
(a minute or two for a lab's first runs, whose data is read then).

Pure: anchors in, seconds out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from mjfl.coordinator.storage.records import ClockAnchor, wall_time

__all__ = ["on_wall_clock", "unix_time"]


def on_wall_clock(run_s: float, anchors: Sequence[ClockAnchor], started_at: str) -> float:
    """Run-clock time ``run_s`` of a run on the wall clock (Unix seconds), by ``anchors`` (``Storage.clocks``).

    The latest anchor at or before ``run_s`` says it (``records.wall_time``);
    before the first anchor, or with none, the run's ``started_at`` (ISO 8601)
    is run-clock time 0 (the module docstring says how far off that is).
    """
    found = wall_time(anchors, run_s)
    return unix_time(started_at) + run_s if found is None else found


def unix_time(iso: str) -> float:
    """An ISO 8601 time as Unix seconds; one without a zone is UTC (mjfl writes UTC: ``RunInfo.started_at``)."""
    moment = dt.datetime.fromisoformat(iso)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()
