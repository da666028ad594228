"""`mjfl bench serve` (mjfl.bench.serve) at its smallest, through the command line.

Its parts run for real: two labs (`mjfl serve`, shared and reserved), the
testbed runs one after another, a lab taking submits with devices connected,
a lab running tiny runs for its memory (the capacity and loop parts, in a
bench of their own: test_bench_serve_at_capacity.py, so the two run side by
side in `make test`). The figures are checked for what
holds whatever the timings: every run of every way ended and completed, the
ways ran the same runs, the figures agree with each other. Its cost: about
150 s on 2 busy cores (the bench's parts: equal 30 s, reserved 25 s, the two
testbed runs 45 s, submits 6 s, memory 40 s), the least that still runs every
part with two runs each: an emulated round lasts its phone's Formula 4 time
for its shard, and every testbed run starts its own devices.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from serve_bench import run_bench

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WAYS = ("equal", "reserved", "sequential")
ARGS = [
    "--devices", "8", "--runs", "2", "--researchers", "2", "--sizes", "8", "--rounds", "1",
    "--connections", "3", "--submits", "4", "--memory-runs", "1,2", "--timeout-s", "300",
]
PARTS = ["--parts", "makespan,submit,memory"]  # the capacity and loop parts: test_bench_serve_at_capacity.py


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> tuple[dict, str]:
    """The bench's figures and what it said on stderr."""
    return run_bench(tmp_path_factory.mktemp("bench-serve"), [*ARGS, *PARTS])


def test_each_way_runs_the_same_runs_to_their_end(bench) -> None:
    figures, said = bench
    makespan = figures["makespan"]
    assert sorted(makespan) == sorted(WAYS)
    shape = [(r["run"], r["size"], r["method"]) for r in makespan["sequential"]["each"]]
    assert shape == [("run01", 8, "random"), ("run02", 8, "meta-greedy")]  # sizes and methods in turn
    for way in WAYS:
        rows = makespan[way]["each"]
        assert [(r["run"], r["size"], r["method"]) for r in rows] == shape, way
        assert [r["state"] for r in rows] == ["completed", "completed"], way
        assert makespan[way]["ended"] == makespan[way]["runs"] == 2
        assert makespan[way]["reached"] == sum(r["reached"] for r in rows)
        assert f"{way}: 2 runs in {makespan[way]['seconds']:.1f} s" in said
    for way in ("equal", "reserved"):  # the researchers submit in turn, each run recorded as theirs
        assert [r["owner"] for r in makespan[way]["each"]] == ["r1", "r2"]


def test_the_makespans_and_ratios_agree_with_the_runs(bench) -> None:
    figures, _ = bench
    makespan = figures["makespan"]
    for way in ("equal", "reserved"):  # from the first submission to the last end: no run outlasts it
        longest = max(r["waited_s"] + r["ran_s"] for r in makespan[way]["each"])
        assert longest <= makespan[way]["seconds"] + 0.1, way
    sequential = makespan["sequential"]  # one after another: at least the sum of the runs
    assert sum(r["ran_s"] for r in sequential["each"]) <= sequential["seconds"] + 0.1
    for way in WAYS:
        assert figures[f"makespan_{way}_s"] == makespan[way]["seconds"] <= makespan[way]["part_s"]
    equal = makespan["equal"]["seconds"]
    assert figures["makespan_ratio_reserved"] == round(equal / makespan["reserved"]["seconds"], 3)
    assert figures["makespan_ratio_sequential"] == round(equal / sequential["seconds"], 3)


def test_submits_are_timed_with_every_device_connected_and_none_runs(bench) -> None:
    figures, _ = bench
    submit = figures["submit"]
    assert submit["connections"] == submit["connected"] == figures["submit_connections"] == 3
    assert submit["submits"] == 4 and submit["queued"] == 4 + 5  # and the 5 warm-up submits: all wait
    assert 0 < submit["p50_ms"] <= submit["p99_ms"] <= submit["max_ms"]
    assert (figures["submit_p50_ms"], figures["submit_p99_ms"]) == (submit["p50_ms"], submit["p99_ms"])


def test_memory_is_read_after_each_count_of_ended_runs(bench) -> None:
    figures, said = bench
    memory = figures["memory"]
    assert memory["runs"] == memory["completed"] == 2
    assert list(memory["rss_mb"]) == ["0", "1", "2"] and min(memory["rss_mb"].values()) > 0
    assert figures["rss_mb"] == memory["rss_mb"]
    assert figures["rss_growth"] == memory["growth"] == round(memory["rss_mb"]["2"] / memory["rss_mb"]["1"] - 1, 4)
    assert "memory: RSS" in said and "after 2 runs" in said
    assert figures["settings"]["memory_runs"] == [1, 2] and figures["settings"]["connections"] == 3


def test_a_size_the_lab_cannot_hold_names_the_flag(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mjfl.cli", "bench", "serve", "--devices", "2", "--sizes", "3"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 2 and "--sizes" in done.stderr, done.stderr
