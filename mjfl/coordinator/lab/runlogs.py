"""Each lab run's own log: its lines in its folder's ``mjfl.log``, as `mjfl testbed run` would write them.

The lab service is one process running several runs at once; its own log
is ``LAB_DIR/lab.log`` (``mjfl.logs.setup``). A run's task sets
``current_run``, which every task it starts inherits (asyncio copies the
context into each new task), so the records logged on that run's behalf,
the engine's, the driver's, the remote fleet's for its tasks, also go to
its folder's ``mjfl.log``; so does what the run driver prints (its console,
``RunLogs.of``). `mjfl log RUN` reads that file.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path
from typing import TextIO

from rich.console import Console

from mjfl import logs

current_run: ContextVar[str | None] = ContextVar("mjfl_lab_run", default=None)

LAB_LOG = "lab.log"  # LAB_DIR's own log: its device server's and its emulated devices' lines, every run's too

_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"


class RunLogs(logging.Handler):
    """Routes each record to the log of the run whose task logged it (see the module docstring)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter(_FORMAT))
        self._files: dict[str, TextIO] = {}

    def emit(self, record: logging.LogRecord) -> None:
        run = current_run.get()
        sink = None if run is None else self._files.get(run)
        if sink is None:
            return
        try:
            sink.write(self.format(record) + "\n")
        except (OSError, ValueError):  # a full disk or a closed file must not take the run down
            self.handleError(record)

    @contextlib.contextmanager
    def of(self, run_id: str, folder: Path) -> Iterator[Console]:
        """Inside, the records of this task (and the tasks it starts) go to ``folder/mjfl.log``; yields the run's console."""
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / logs.LOG_FILE, "a", buffering=1, encoding="utf-8") as sink:
            self._files[run_id] = sink
            token = current_run.set(run_id)
            try:
                yield Console(file=sink, width=160, force_terminal=False, color_system=None, soft_wrap=True)
            finally:
                current_run.reset(token)
                self._files.pop(run_id, None)
