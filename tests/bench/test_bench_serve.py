"""`mjfl bench serve` (mjfl.bench.serve) at its smallest, through the command line.

Every part runs for real: two labs (`mjfl serve`, shared and reserved), the
testbed runs one after another, a lab taking submits with devices connected,
a lab running tiny runs for its memory. The figures are checked for what
holds whatever the timings: every run of every way ended and completed, the
ways ran the same runs, the figures agree with each other. Its cost: about
150 s on 2 busy cores (the bench's parts: equal 30 s, reserved 25 s, the two
testbed runs 45 s, submits 6 s, memory 40 s), the least that still runs every
part with two runs each: an emulated round lasts its phone's Formula 4 time
for its shard, and every testbed run starts its own devices.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

WAYS = ("equal", "reserved", "sequential")
ARGS = [
    "--devices", "8", "--runs", "2", "--researchers", "2", "--sizes", "8", "--rounds", "1",
    "--connections", "3", "--submits", "4", "--memory-runs", "1,2", "--capacity-runs", "3", "--loop-runs", "2",
    "--timeout-s", "300",
]


def fast_phones(path: Path) -> Path:
    """A profile file of phones a hundred times faster than the synthetic fleet's: rounds of a few milliseconds."""
    from mjfl.profiling.profiles import DeviceProfile, save_profiles

    phones = [DeviceProfile(device_id=f"fast-{n}", a=1e-5, mu=1e5, source="synthetic") for n in range(8)]
    save_profiles(path, phones, created="2026-01-01T00:00:00+00:00")
    return path


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> tuple[dict, str]:
    """The bench's figures and what it said on stderr."""
    folder = tmp_path_factory.mktemp("bench-serve")
    profiles = ["--profiles", str(fast_phones(folder / "phones.json"))]
    bench = subprocess.Popen(
        [sys.executable, "-m", "mjfl.cli", "bench", "serve", *ARGS, *profiles, "--json", str(folder / "serve.json")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        _, said = bench.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        bench.send_signal(signal.SIGTERM)  # the bench stops the labs and runs it started, in their own sessions
        _, said = bench.communicate(timeout=120)
    assert bench.returncode == 0, said[-4000:]
    return json.loads((folder / "serve.json").read_text()), said


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


def test_a_lab_at_capacity_runs_what_its_fleet_holds_and_queues_the_rest_saying_why(bench) -> None:
    figures, said = bench
    capacity = figures["capacity"]
    assert (capacity["devices"], capacity["min_plan"], capacity["runs"], capacity["holds"]) == (8, 3, 3, 2)
    assert capacity["completed"] == capacity["runs"]  # one round each (--rounds 1): none starved, none left queued
    assert capacity["most_at_once"] <= capacity["holds"] and figures["capacity_over_holds"] <= 0
    assert capacity["queued_said_why"]
    assert figures["capacity_idle_over_round"] == capacity["idle_over_round"] >= 0
    assert "capacity: " in said


def test_the_loop_part_reads_the_services_own_lag_and_heartbeats(bench) -> None:
    figures, said = bench
    this = figures["loop"]["this"]
    assert this["runs"] == 2 and this["completed"] == 2
    lag, beats = this["loop"], this["heartbeats"]
    assert lag["samples"] > 0 and 0 <= lag["p50_ms"] <= lag["p99_ms"] <= lag["max_ms"]
    assert beats["missed"] == figures["heartbeats_missed"] and beats["rtt"]["samples"] >= 0
    assert (figures["loop_lag_p99_ms"], figures["loop_lag_max_ms"]) == (lag["p99_ms"], lag["max_ms"])
    assert this["health"]["samples"] > 0 and "loop (this checkout)" in said


def test_a_size_the_lab_cannot_hold_names_the_flag(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mjfl.cli", "bench", "serve", "--devices", "2", "--sizes", "3"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 2 and "--sizes" in done.stderr, done.stderr
