"""Fixtures for every test."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator

import pytest
from processes import Process, group_alive

# A shell without job control starts background commands with SIGINT ignored,
# and every process they start inherits that: mjfl would never see the Ctrl-C
# that some tests press. A handler (unlike "ignored") is not inherited across
# exec, so with one here the processes the tests start hear SIGINT again.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture
def processes() -> Iterator[Callable[..., Process]]:
    """``start(args, read=False)``: a process that is killed, with its group, when the test ends."""
    started: list[Process] = []

    def start(args: list[str], *, read: bool = False) -> Process:
        process = Process(args, read=read)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None or group_alive(process.pid):
            process.kill()
