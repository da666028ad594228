"""A device's recent log lines, from the output folder of its run: what the page shows one click away.

Two sources, the better first:

* an attached phone's app log, which `mjfl testbed run` copies from logcat
  into ``<out>/phones/<serial>.logcat`` (``mjfl.logs.phone_log_name``; a
  phone's device id is its serial);
* otherwise the lines of the run's log (``<out>/mjfl.log``) that name the
  device: its connection, its failures, and, for emulated devices started by
  the run (whose processes log there), what they said themselves.

Only the tail of a file is read (``TAIL_BYTES``), so a click costs the same
after an hour as after a minute. The device id from the request becomes a
file name through ``phone_log_name`` (letters, digits, ``._-`` only, with a
suffix of its own), so no request reaches outside the folder.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from mjfl.logs import LOG_FILE, PHONE_LOGS, phone_log_name

__all__ = ["LINES", "TAIL_BYTES", "device_log"]

LINES = 200  # the newest lines shown
TAIL_BYTES = 1 << 20  # how much of a file's end is read


def device_log(folder: Path, device: str, *, lines: int = LINES) -> dict[str, Any]:
    """``{"device", "source", "lines"}``: the newest ``lines`` of ``device``'s log in ``folder``; ``source`` None when there is none."""
    phone = folder / PHONE_LOGS / phone_log_name(device)
    if phone.is_file():
        return {"device": device, "source": f"{PHONE_LOGS}/{phone.name}", "lines": _tail(phone)[-lines:]}
    run_log = folder / LOG_FILE
    if run_log.is_file():
        named = [line for line in _tail(run_log) if _names(line, device)]
        return {"device": device, "source": LOG_FILE, "lines": named[-lines:]}
    return {"device": device, "source": None, "lines": []}


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
