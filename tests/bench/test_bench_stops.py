"""A long bench stops on SIGTERM as on Ctrl-C, and leaves no process behind (checked with ps).

`bench gpu` trains in a process pool (simulate's), `bench scale` in emulator
workers, `bench faults` runs coordinators, `bench serve` labs and `bench soak` a
lab and its device processes (JVM and emulated) in sessions of their own; each
is stopped while those are busy.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from processes import Process, mjfl_args, wait_for
from waiting import eventually

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def table() -> list[tuple[int, int, int, str, str]]:
    """Every process (``ps``): pid, parent, session, state, command line."""
    listed = subprocess.run(["ps", "-eo", "pid=,ppid=,sid=,stat=,args="], capture_output=True, text=True, check=True)
    rows = []
    for line in listed.stdout.splitlines():
        pid, ppid, sid, stat, *args = line.split(None, 4)
        rows.append((int(pid), int(ppid), int(sid), stat, " ".join(args)))
    return rows


def sessions_below(pid: int) -> set[int]:
    """The sessions of ``pid`` and of every process it started, however deep."""
    rows, found, sessions = table(), {pid}, set()
    while True:
        more = {p for p, parent, *_ in rows if parent in found} - found
        if not more:
            break
        found |= more
    for p, _, sid, *_ in rows:
        if p in found:
            sessions.add(sid)
    return sessions


def running_in(sessions: set[int]) -> list[str]:
    """The processes of ``sessions`` that still run (zombies are only records, not processes)."""
    return [args for _, _, sid, stat, args in table() if sid in sessions and not stat.startswith("Z")]


@pytest.mark.parametrize(("args", "busy"), [
    (["bench", "gpu", "--cpu", "--scale", "0.001", "--rounds", "60", "--devices-per-step", "2", "--out", "OUT"],
     "part 2 of 2"),
    (["bench", "scale", "--fleet-sizes", "6", "--rounds", "500", "--backends", "local"], "local: 6 emulated devices"),
    (["bench", "faults", "--devices", "5", "--rounds", "8", "--coordinator-kills", "1"], "fault scenario coordinator"),
    (["bench", "serve", "--devices", "4", "--runs", "2", "--sizes", "4", "--rounds", "5"], "equal: 2 runs"),
    pytest.param(["bench", "soak", "--minutes", "10", "--per-process", "1"], "soaking for",
                 marks=pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK: make setup installs one")),
], ids=["gpu", "scale", "faults", "serve", "soak"])
def test_sigterm_stops_the_bench_and_every_process_it_started(
    args: list[str], busy: str, tmp_path: Path, processes
) -> None:
    bench: Process = processes(mjfl_args(*[str(tmp_path / "out") if a == "OUT" else a for a in args]), read=True)
    bench.line_with(busy, timeout=300)
    wait_for(lambda: len(sessions_below(bench.pid)) > 1 or len(running_in({bench.pid})) > 1, 120, bench)
    sessions = sessions_below(bench.pid)
    os.kill(bench.pid, signal.SIGTERM)
    # Bounded generously for a busy machine: the defect was a bench that went on for minutes.
    assert bench.wait(timeout=60) == 130, "".join(bench.output)
    # A process of the bench's (a resource tracker reading its pipe to the end) may take a moment
    # after the bench to exit; one left behind never does.
    eventually(lambda: not running_in(sessions), what="the bench's processes exited",
               explain=lambda: f"still running: {running_in(sessions)}\n{''.join(bench.output)}")
