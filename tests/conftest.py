"""Fixtures for every test."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from processes import Process, group_alive


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
