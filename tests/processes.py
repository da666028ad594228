"""Running mjfl as lab staff do: real processes, read back through the run database.

Shared by the tests that start `mjfl testbed run`, `mjfl devices emulate` or the
JVM devices as separate processes, each in its own process group (the
``processes`` fixture of conftest.py kills them when a test ends, whatever
happened). Importable as ``processes`` (pytest puts tests/ on the path for
its conftest.py).
"""

from __future__ import annotations

import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from waiting import eventually


class Process:
    """A started process; ``lines`` gets its merged stdout/stderr when ``read`` is set."""

    def __init__(self, args: list[str], *, read: bool) -> None:
        self.proc = subprocess.Popen(
            args, stdout=subprocess.PIPE if read else subprocess.DEVNULL, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        if read:
            threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.output.append(line)
            self.lines.put(line)

    def line_with(self, text: str, timeout: float = 120) -> str:
        """The first line (from now on) that holds ``text``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {text!r} in {timeout:g} s:\n{''.join(self.output)}") from None
            if text in line:
                return line

    def url(self) -> str:
        """The coordinator's URL, as `mjfl testbed run --emulate N` announces it."""
        return self.line_with("emulated device").split(" for ")[-1].strip()

    def wait(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL the whole process group (the command and the processes it started)."""
        if group_alive(self.proc.pid):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    @property
    def pid(self) -> int:
        return self.proc.pid


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def mjfl_args(*args: str) -> list[str]:
    return [sys.executable, "-m", "mjfl.cli", *args]


def query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    """Rows of ``sql`` from the run database, read-only; [] until the schema is there."""
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        try:
            return conn.execute(sql).fetchall()
        except sqlite3.OperationalError:
            return []


def rounds_recorded(db: Path) -> int:
    """How many rounds the run database holds: 0 until the file and its schema are there (a run still preparing)."""
    rows = query(db, "SELECT count(*) FROM rounds")
    return int(rows[0][0]) if rows else 0


def wait_for(predicate: Callable[[], Any], timeout: float, *processes: Process, what: str | None = None) -> Any:
    """Poll ``predicate`` until it holds (its value); fail at once if one of ``processes`` exits first."""

    def exited() -> str | None:
        for process in processes:
            if process.proc.poll() is not None:
                return f"{process.proc.args[:4]} exited early ({process.proc.returncode}):\n{''.join(process.output)}"
        return None

    return eventually(predicate, timeout=timeout, interval=0.2, what=what, stop_if=exited)


# A testbed run of one small job on emulated devices: two to start, room for more to join
# ({out}: the output folder, {rounds}: the job's budget).
SMALL_TESTBED = """
seed = 1
out_dir = "{out}"
[fleet]
size = 4
workers = 1
[scheduler]
method = "random"
[testbed]
port = 0
min_devices = 2
wait_timeout_s = 120
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
partition = "iid"
batch_size = 8
fraction = 1.0
max_rounds = {rounds}
"""
