"""Where log lines go: a quiet terminal, everything in the run's log file.

A user's terminal shows mjfl's progress and results (its rich console) and
mjfl's own warnings; the rest goes to the log file of the run (``mjfl.log``
in the output folder; a bench's beside its JSON; none for `mjfl export`,
whose rest is dropped), or to the terminal as well with ``--verbose``. "The
rest" is mostly third-party noise, of three kinds:

* Python logging: torchao's "Failed to load ..." lines (logger ``torchao``,
  on every import of ``executorch.exir``) and PyTorch's pytree deprecation
  line (logger ``torch.utils._pytree``, which torch writes with a handler of
  its own, so it is re-routed by name);
* Python warnings (FutureWarning, DeprecationWarning), captured into logging;
* C++ lines of ExecuTorch's runtime (``cpuinfo_utils.cpp`` ...), which
  pybind11 writes to ``sys.stderr`` on the first training call of a process
  (native code may also write to file descriptors 1 and 2 directly). Worker
  processes (simulated devices, emulated devices) point their ``sys.stderr``
  at the log file in ``setup_worker``; a command that trains or exports in its
  own process (`mjfl bench trainers`, `mjfl export`) does that work inside
  ``native_output``, which sends both to where ``setup`` sends the rest.

Every process calls ``setup`` (the command line, in ``mjfl.cli``, again for a
bench's log; the run driver once it knows the output folder) or
``setup_worker`` (worker processes) before importing torch or ExecuTorch.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

__all__ = ["LOG_FILE", "PHONE_LOGS", "add_handler", "native_output", "phone_log_name", "setup", "setup_worker"]

LOG_FILE = "mjfl.log"
PHONE_LOGS = "phones"  # the output folder's subfolder where each attached phone's app log is copied


def phone_log_name(serial: str) -> str:
    """The file, in ``PHONE_LOGS``, of a phone's app log: its serial made a file name (a Wi-Fi phone's is HOST:PORT)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", serial) + ".logcat"
"""The log file's name in a run's output folder."""

# Loggers that write with handlers of their own instead of propagating to the root.
_SELF_HANDLED = ("torch.utils._pytree",)
_FORMAT = "%(asctime)s %(processName)s %(name)s %(levelname)s: %(message)s"
_OURS = "mjfl"  # a handler attribute that marks the handlers set up here
# Where the last ``setup`` sends third-party output: its log file (None: nowhere) and verbosity.
_routing: tuple[Path | None, bool] = (None, False)
# The terminal while ``native_output`` has taken sys.stderr: mjfl's own records still go there.
_terminal: TextIO | None = None


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record comes (it may be swapped, e.g. by tests)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property  # type: ignore[override]
    def stream(self) -> TextIO:
        return _terminal or sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass


class _OwnRecords(logging.Filter):
    """Lets through mjfl's own records only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.name == "mjfl" or record.name.startswith("mjfl.")


class _LogFile(logging.FileHandler):
    """The run's log file. A full or unwritable disk loses log lines, not the terminal's quiet:
    logging would print a traceback per record there; the run's own error says what happened."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


class _WorkerLog(logging.StreamHandler):  # type: ignore[type-arg]
    """A worker's log file (its stderr too), as quiet as ``_LogFile`` when it cannot be written."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def setup(log_file: Path | None = None, *, verbose: bool = False, stream: TextIO | None = None) -> None:
    """Route this process's log records (see the module docstring); safe to call again.

    ``log_file`` (appended to) receives every record at INFO and above (DEBUG
    with ``verbose``). ``stream`` (default ``sys.stderr``) shows mjfl's own
    warnings, or every record at INFO and above with ``verbose``.
    """
    handlers: list[logging.Handler] = []
    console = logging.StreamHandler(stream) if stream is not None else _Stderr()
    console.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    if verbose:
        console.setLevel(logging.INFO)
    else:
        console.setLevel(logging.WARNING)
        console.addFilter(_OwnRecords())
    handlers.append(console)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        to_file = _LogFile(log_file, encoding="utf-8", delay=True)
        to_file.setFormatter(logging.Formatter(_FORMAT))
        handlers.append(to_file)
    _install(handlers, level=logging.DEBUG if verbose else logging.INFO)
    global _routing
    _routing = (log_file, verbose)


@contextlib.contextmanager
def native_output() -> Iterator[None]:
    """Inside, what this process writes to its stdout and stderr goes where ``setup`` sends third-party records.

    That is the log file of the last ``setup`` (appended to), nowhere without
    one, and the terminal, unchanged, with ``verbose``. Both the Python streams
    (pybind11 writes C++'s ``std::cerr`` to ``sys.stderr``) and file
    descriptors 1 and 2 (C code's ``stdout`` and ``stderr``) are redirected.
    mjfl's log records still reach the terminal; print the console's lines
    outside the block, as they would go to the log too.
    """
    log_file, verbose = _routing
    if verbose:
        yield
        return
    global _terminal
    sys.stdout.flush()
    sys.stderr.flush()
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
    sink = open(log_file or os.devnull, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - closed below
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    streams = sys.stdout, sys.stderr
    terminal = open(saved[2], "w", buffering=1, encoding="utf-8", closefd=False)  # noqa: SIM115 - closed below
    try:
        for fd in saved:
            os.dup2(sink.fileno(), fd)
        sys.stdout = sys.stderr = sink
        _terminal = terminal
        yield
    finally:
        sink.flush()
        _flush_c_streams()  # what C code buffered belongs in the sink, not on the restored terminal
        sys.stdout, sys.stderr = streams
        _terminal = None
        terminal.close()
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)
        sink.close()


def _flush_c_streams() -> None:
    with contextlib.suppress(OSError, AttributeError, TypeError):  # no C library to ask: nothing buffered there
        ctypes.CDLL(None).fflush(None)


def setup_worker(log_file: Path | None, *, verbose: bool = False, level: int = logging.INFO) -> None:
    """A worker process: its records, warnings and native lines go to ``log_file``.

    With ``verbose`` they go to the worker's stderr (the terminal) instead;
    without a log file they are dropped. mjfl's own warnings reach the
    terminal in every case.
    """
    sink: TextIO
    if verbose:
        sink = sys.stderr
    elif log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        sink = open(log_file, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    else:
        sink = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
    # Native libraries write through sys.stderr (pybind11 redirects std::cerr to it).
    terminal = sys.stderr
    sys.stderr = sink
    handler = _WorkerLog(sink)
    handler.setFormatter(logging.Formatter(_FORMAT))
    handlers: list[logging.Handler] = [handler]
    if not verbose:
        console = logging.StreamHandler(terminal)
        console.setFormatter(logging.Formatter("%(processName)s %(name)s: %(message)s"))
        console.setLevel(logging.WARNING)
        console.addFilter(_OwnRecords())
        handlers.append(console)
    _install(handlers, level=logging.DEBUG if verbose else level)


def add_handler(handler: logging.Handler) -> None:
    """Also give every record of this process to ``handler``, which later ``setup`` calls keep."""
    logging.getLogger().addHandler(handler)


def _install(handlers: list[logging.Handler], *, level: int) -> None:
    for handler in handlers:
        setattr(handler, _OURS, True)
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, _OURS, False)]:
        root.removeHandler(old)
        old.close()
    for handler in handlers:
        root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    for name in _SELF_HANDLED:
        logger = logging.getLogger(name)
        logger.propagate = False
        for old in [h for h in logger.handlers if getattr(h, _OURS, False)]:
            logger.removeHandler(old)
        for handler in handlers:
            logger.addHandler(handler)
