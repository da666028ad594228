"""`mjfl bench soak` (mjfl.bench.soak): a 5-minute slice of the lab service's soak, through the command line.

Everything real: `mjfl serve`, two JVM device processes (the phone client's
core) and two emulated ones, one device each, a JVM one and an emulated one
SIGKILLed in turn every 30 s and started again, runs submitted all along.
The slice must meet the soak's own verdicts, which are about leaks and
losses and hold on a busy machine (a busy machine runs fewer runs, it loses
no round and leaves no disconnect without its cause): memory and
descriptors of the service and of the never-killed JVM flat after the
warm-up (the JVM's memory and the service's descriptors within 25% in so short a slice: `SLICE_GOALS`), no finished round lost or repeated, every disconnect with a cause
and every killed device's recorded as a lost connection, no device process
that ended by itself. Its cost: about 6 minutes (5 of soak, the lab's and
devices' start and stop), on 2 busy cores.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import pytest

from mjfl.bench.soak import GOALS

# The slice's goals are the hour's but one: a JVM's resident memory outside its fixed,
# pre-touched heap (JIT-compiled code, metaspace) still grows for its first minutes, and the
# slice's 4 minutes after a 1-minute warm-up lie inside them (measured: +7% once, where the
# hour's soak, warmed up for 12 minutes, held +0.2%). A leak in the heap itself ends the
# process with an OutOfMemoryError, which `device_exits_unbidden` counts; the hour holds
# the JVM's memory to the bench's own 5%.
# The service's descriptors are few (about 25), and at any moment 1-3 of them belong to the
# runs then open (their databases) and the devices then connected, so 5% is one descriptor's
# noise (measured: 23 -> 25, +8.7%, once in CI). A leak of one per run or per disconnect
# would add 25 or 13 in the slice (+50% and more); 25% catches either.
SLICE_GOALS = {**GOALS, "jvm_rss_growth": ("<", 0.25), "service_fds_growth": ("<", 0.25)}


def met(name: str, value: float | None) -> bool:
    op, goal = SLICE_GOALS[name]
    return value is not None and (value < goal if op == "<" else value == goal)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK: make setup installs one"),
]

MINUTES = 5
ARGS = ["--minutes", str(MINUTES), "--jvm", "2", "--emulated", "2", "--per-process", "1", "--kill-every-s", "30",
        "--sample-s", "5"]


@pytest.fixture(scope="module")
def soak(tmp_path_factory) -> tuple[dict, str]:
    """The slice's figures and what it said on stderr."""
    folder = tmp_path_factory.mktemp("bench-soak")
    bench = subprocess.Popen(
        [sys.executable, "-m", "mjfl.cli", "bench", "soak", *ARGS, "--out", str(folder / "out"),
         "--json", str(folder / "soak.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        _, said = bench.communicate(timeout=780)
    except subprocess.TimeoutExpired:
        bench.send_signal(signal.SIGTERM)  # the soak stops the lab and the devices it started
        _, said = bench.communicate(timeout=120)
    assert bench.returncode == 0, said[-4000:]
    return json.loads((folder / "soak.json").read_text()), said


def test_the_slice_meets_every_verdict(soak) -> None:
    figures, said = soak
    unmet = {name: figures[name] for name in SLICE_GOALS if not met(name, figures[name])}
    assert not unmet, (unmet, figures["rounds"], figures["disconnects"], figures["exited_unbidden"])
    for name in GOALS:  # the table says each figure
        assert name in said


def test_the_figures_are_measured_not_vacuous(soak) -> None:
    figures, _ = soak
    # Runs went, rounds were seen finishing and were checked at the end.
    assert figures["runs"]["completed"] >= 1
    assert figures["rounds"]["rounds"] > 0
    # Both kinds were killed (a JVM one and an emulated one in turn), each kill of one device recorded.
    killed = {kill["process"] for kill in figures["kills"]}
    assert {"jvm1", "emu1"} <= killed, figures["kills"]
    assert figures["disconnects"]["killed_devices"] == len(figures["kills"])
    assert figures["disconnects"]["killed_recorded"] == figures["disconnects"]["killed_as_lost"] == len(figures["kills"])
    assert figures["disconnects"]["disconnects"] >= len(figures["kills"])
    # Sampled all along, the service and both JVMs; the warm-up ended before the last window.
    times = [s["t_s"] for s in figures["samples"]]
    assert times == sorted(times) and times[-1] >= MINUTES * 60 - 10
    assert all(s["service"]["rss_mb"] and s["service"]["fds"] for s in figures["samples"])
    assert any("jvm0" in s and "jvm1" in s for s in figures["samples"])
    assert figures["warm_up_end_s"] is not None and figures["warm_up_end_s"] < times[-1] / 2


def test_it_says_how_it_goes_while_it_runs(soak) -> None:
    _, said = soak
    for minute in range(1, MINUTES):
        assert f"soak {minute}/{MINUTES} min: " in said
    assert "kills;" in said and "rounds seen;" in said
