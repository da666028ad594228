"""A long bench stops on SIGTERM as on Ctrl-C, and leaves no process behind (checked with ps).

`bench gpu` trains in a process pool (simulate's), `bench scale` in emulator
workers; both are stopped while their workers are busy.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from processes import Process, mjfl_args, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def session(sid: int) -> list[str]:
    """The processes of session ``sid`` that are still running (``ps``; zombies excluded, they are only records)."""
    listed = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-s", str(sid)], capture_output=True, text=True, check=False)
    return [line for line in listed.stdout.splitlines() if line.split()[1][0] != "Z"]


@pytest.mark.parametrize(("args", "running"), [
    (["bench", "gpu", "--cpu", "--scale", "0.001", "--rounds", "60", "--devices-per-step", "2", "--out", "OUT"],
     "part 2 of 2"),
    (["bench", "scale", "--fleet-sizes", "6", "--rounds", "500", "--backends", "local"], "local: 6 emulated devices"),
], ids=["gpu", "scale"])
def test_sigterm_stops_the_bench_and_its_workers(args: list[str], running: str, tmp_path: Path, processes) -> None:
    bench: Process = processes(mjfl_args(*[str(tmp_path / "gpu") if a == "OUT" else a for a in args]), read=True)
    bench.line_with(running, timeout=300)
    wait_for(lambda: len(session(bench.pid)) > 1, 120, bench)  # its workers are up
    os.kill(bench.pid, signal.SIGTERM)
    # Bounded generously for a busy machine: the defect was a bench that went on for minutes.
    assert bench.wait(timeout=60) == 130, "".join(bench.output)
    assert session(bench.pid) == [], "".join(bench.output)
