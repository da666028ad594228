"""`mjfl bench serve --parts capacity,loop` (mjfl.bench.serve_load) at its smallest, through the command line.

A lab of 8 devices given 3 runs whose jobs train at least 3 devices a round
(it holds 2 at once), and a lab running 2 runs while its health is asked
for: the figures are checked for what holds whatever the timings.
"""

from __future__ import annotations

import pytest
from serve_bench import run_bench

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ARGS = ["--devices", "8", "--runs", "2", "--sizes", "8", "--rounds", "1", "--capacity-runs", "3", "--loop-runs", "2",
        "--timeout-s", "300", "--parts", "capacity,loop"]


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> tuple[dict, str]:
    """The bench's figures and what it said on stderr."""
    return run_bench(tmp_path_factory.mktemp("bench-serve-capacity"), ARGS)


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

