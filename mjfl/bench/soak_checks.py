"""What the soak checks besides memory: no finished round lost or repeated, every disconnect with a cause.

Rounds. While the soak goes it reads every run's database (read-only, as a
lab's researcher would) and keeps each round it saw finished, with when it
ended (``RoundLedger.observe``). At the end, each run's database must still
hold every one of them, unchanged (a round recorded again, with another end,
was repeated), its rounds numbered 1, 2, ... without a gap, and, for a run
that completed, as many as its ``summary.json`` says.

Disconnects. The service records each device's disconnect with its cause:
the lab's log (``device D disconnected: CAUSE``, ``remote/registry.py``)
and, while a run runs, the run's ``fleet_events`` (kind ``left``, the cause
its ``detail``). A disconnect without a cause is one whose cause is empty.
Each device the soak killed must have a disconnect recorded after the kill,
and its cause must say the connection was lost (a killed process says no
bye).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

Figures = dict[str, Any]

_DISCONNECT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+) .*? device (\S+) disconnected: ?(.*)$")
_NO_CAUSE = ("", "None", "None: None")
KILLED_CAUSE = "connection lost"  # how the server names a connection that ended without a bye


def read_rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` from a run database, read-only; [] while it or its tables are not there yet."""
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
            return list(conn.execute(sql))
    except sqlite3.OperationalError:
        return []  # the run is still creating its schema


class RoundLedger:
    """Every finished round seen in the runs' databases while the soak went (see the module docstring)."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str, int], float] = {}  # (run, job, round) -> its end, as first seen
        self.rewritten: set[tuple[str, str, int]] = set()

    def observe(self, run_id: str, db: Path) -> int:
        """Read ``run_id``'s finished rounds now; how many it has."""
        rows = read_rows(db, "SELECT job, round, ended_s FROM rounds")
        for job, number, ended in rows:
            key = (run_id, str(job), int(number))
            first = self.seen.setdefault(key, float(ended))
            if first != float(ended):
                self.rewritten.add(key)
        return len(rows)

    def verdict(self, folders: dict[str, Path]) -> Figures:
        """The runs' databases at the end against what was seen: rounds lost, repeated, missing from the numbering."""
        lost, repeated, gaps, short, total = [], sorted(self.rewritten), [], [], 0
        for run_id, folder in folders.items():
            self.observe(run_id, folder / "mjfl.db")
            final = {(str(j), int(n)): float(e) for j, n, e in read_rows(folder / "mjfl.db", "SELECT job, round, ended_s FROM rounds")}
            total += len(final)
            lost += [key for key in self.seen if key[0] == run_id and key[1:] not in final]
            for job in {j for j, _ in final}:
                numbers = sorted(n for j, n in final if j == job)
                if numbers != list(range(1, len(numbers) + 1)):
                    gaps.append((run_id, job, numbers))
                said = _summary_rounds(folder / "summary.json", job)
                if said is not None and said != len(numbers):
                    short.append((run_id, job, said, len(numbers)))
        return {
            "rounds": total, "lost": len(lost) + len(gaps) + len(short), "repeated": len(repeated),
            "examples": [str(x) for x in (lost + repeated + gaps + short)[:10]],
        }


def _summary_rounds(summary: Path, job: str) -> int | None:
    """The rounds a completed run's ``summary.json`` gives ``job`` (None: no summary, or no such job)."""
    if not summary.exists():
        return None
    methods = json.loads(summary.read_text())["methods"]
    for method in methods.values():
        if job in method["jobs"]:
            return int(method["jobs"][job]["rounds"])
    return None


@dataclasses.dataclass(frozen=True)
class Disconnect:
    """A device's disconnect as the service recorded it."""

    at: float  # wall clock, seconds
    device: str
    cause: str


@dataclasses.dataclass(frozen=True)
class Kill:
    """The soak killed ``devices`` (one process's) at ``at`` (wall clock)."""

    at: float
    process: str
    devices: tuple[str, ...]


def logged_disconnects(log: Path) -> list[Disconnect]:
    """The disconnects in the lab's log, in order."""
    out = []
    if not log.exists():
        return out
    for line in log.read_text(errors="replace").splitlines():
        found = _DISCONNECT.match(line)
        if found:
            at = dt.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()  # the log's local time
            out.append(Disconnect(at, found.group(2), found.group(3).strip()))
    return out


def run_disconnects(folders: Iterable[Path]) -> list[str]:
    """The causes of the ``left`` events in the runs' databases."""
    causes = []
    for folder in folders:
        causes += [str(d or "") for (d,) in read_rows(folder / "mjfl.db", "SELECT detail FROM fleet_events WHERE kind = 'left'")]
    return causes


def disconnect_verdict(logged: Sequence[Disconnect], in_runs: Sequence[str], kills: Sequence[Kill]) -> Figures:
    """Disconnects without a cause, and each killed device's recorded disconnect after its kill."""
    # The log's timestamps have milliseconds and the kill's are taken just before it: a second's slack.
    unexplained = [d for d in logged if d.cause.strip() in _NO_CAUSE]
    killed = found = as_lost = 0
    other: list[str] = []
    for kill in kills:
        for device in kill.devices:
            killed += 1
            after = next((d for d in logged if d.device == device and d.at >= kill.at - 1.0), None)
            if after is None:
                other.append(f"{device} killed at {kill.at:.0f}: no disconnect recorded")
                continue
            found += 1
            if after.cause.startswith(KILLED_CAUSE):
                as_lost += 1
            else:
                other.append(f"{device} killed: recorded as {after.cause!r}")
    causes: dict[str, int] = {}
    for d in logged:
        causes[_kind(d.cause)] = causes.get(_kind(d.cause), 0) + 1
    return {
        "disconnects": len(logged), "without_cause": len(unexplained) + sum(c.strip() in _NO_CAUSE for c in in_runs),
        "in_runs": len(in_runs), "causes": causes, "killed_devices": killed, "killed_recorded": found,
        "killed_as_lost": as_lost, "examples": other[:10],
    }


def _kind(cause: str) -> str:
    """A cause without its particulars, to count alike ones together: up to its first parenthesis or colon."""
    return re.split(r"[(:]", cause, maxsplit=1)[0].strip() or "(none)"
