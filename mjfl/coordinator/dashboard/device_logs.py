"""A device's recent log lines, from the output folder of its run: what the page shows one click away.

Two sources, the better first:

* an attached phone's app log, which `mjfl testbed run` copies from logcat
  into ``<out>/phones/<serial>.logcat`` (``mjfl.logs.phone_log_name``; a
  phone's device id is its serial);
* otherwise the lines of the run's log (``<out>/mjfl.log``) that name the
  device: its connection, its failures, and, for emulated devices started by
  the run (whose processes log there), what they said themselves;
* and, where the run is one of several that share the devices (a lab's),
  the lines of the log they share (``SharedLog``: ``LAB_DIR/lab.log``, where
  the lab's device server and the emulated devices `mjfl serve` starts
  write) that name the device while the run ran, by their time stamps.

Only the tail of a file is read (``TAIL_BYTES``), so a click costs the same
after an hour as after a minute. The device id from the request becomes a
file name through ``phone_log_name`` (letters, digits, ``._-`` only, with a
suffix of its own), so no request reaches outside the folder.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mjfl.logs import LOG_FILE, PHONE_LOGS, phone_log_name

__all__ = ["LINES", "TAIL_BYTES", "SharedLog", "device_log"]

LINES = 200  # the newest lines shown
TAIL_BYTES = 1 << 20  # how much of a file's end is read


@dataclass(frozen=True)
class SharedLog:
    """A log that several runs' devices write (a lab's ``lab.log``), and when the run ran (Unix seconds)."""

    path: Path
    since: float
    until: float | None  # None: it runs still


def device_log(folder: Path, device: str, *, lines: int = LINES, shared: SharedLog | None = None) -> dict[str, Any]:
    """``{"device", "source", "lines"}``: the newest ``lines`` of ``device``'s log in ``folder`` (and ``shared``'s
    lines naming it while the run ran, merged by time); ``source`` None when there is none."""
    phone = folder / PHONE_LOGS / phone_log_name(device)
    if phone.is_file():
        return {"device": device, "source": f"{PHONE_LOGS}/{phone.name}", "lines": _tail(phone)[-lines:]}
    sources, named = [], []
    run_log = folder / LOG_FILE
    if run_log.is_file():
        sources.append(LOG_FILE)
        named.extend(_stamped(line for line in _tail(run_log) if _names(line, device)))
    if shared is not None and shared.path.is_file():
        sources.append(shared.path.name)
        named.extend(_while(_stamped(_tail(shared.path)), shared, device))
        named.sort(key=lambda pair: pair[0])  # stable: each log's own order among lines of one time stamp
    return {"device": device, "source": " and ".join(sources) or None, "lines": [line for _, line in named][-lines:]}


def _stamped(found: Iterable[str]) -> list[tuple[float, str]]:
    """Each line with its time (``mjfl.logs``' lines begin with logging's ``asctime``, local time); a line without
    one (a traceback's) has its previous line's."""
    at, out = 0.0, []
    for line in found:
        try:
            at = dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except ValueError:
            pass
        out.append((at, line))
    return out


def _while(found: list[tuple[float, str]], shared: SharedLog, device: str) -> list[tuple[float, str]]:
    """The lines of ``found`` naming ``device`` from ``shared.since`` to ``shared.until``."""
    until = float("inf") if shared.until is None else shared.until
    return [(at, line) for at, line in found if shared.since <= at <= until and _names(line, device)]


def _tail(path: Path) -> list[str]:
    """The whole lines in the last ``TAIL_BYTES`` of ``path`` (a partial first line is dropped)."""
    with open(path, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        start = max(0, size - TAIL_BYTES)
        file.seek(start)
        data = file.read()
    text = data.decode("utf-8", errors="replace")
    found = text.splitlines()
    return found[1:] if start > 0 and found else found


def _names(line: str, device: str) -> bool:
    """Whether ``line`` names ``device`` as a word of its own ("d1" is not named by "d10")."""
    at = line.find(device)
    while at >= 0:
        end = at + len(device)
        before = line[at - 1] if at > 0 else " "
        after = line[end] if end < len(line) else " "
        if not (before.isalnum() or before in "-_") and not (after.isalnum() or after in "-_"):
            return True
        at = line.find(device, at + 1)
    return False
