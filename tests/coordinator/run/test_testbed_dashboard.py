"""The live dashboard of `mjfl testbed run`, read by a real HTTP client while the run goes."""

from __future__ import annotations

import json
import signal
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from processes import SMALL_TESTBED, Process, mjfl_args

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]



def write_config(tmp_path: Path, rounds: int) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = tmp_path / "live.toml"
    config.write_text(SMALL_TESTBED.format(out=tmp_path / "run", rounds=rounds))
    return config


def live(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "api/live", timeout=10) as response:
        return json.load(response)


def stream(url: str) -> Iterator[dict[str, Any]]:
    """The snapshots the SSE endpoint pushes, as they come (each read times out after 30 s)."""
    with urllib.request.urlopen(url + "api/live/events", timeout=30) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        for raw in response:
            line = raw.decode().rstrip("\n")
            if line.startswith("data: "):
                yield json.loads(line.removeprefix("data: "))


def first(items: Iterator[dict[str, Any]], holds: Callable[[dict[str, Any]], bool], timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    for item in items:
        if holds(item):
            return item
        assert time.monotonic() < deadline, f"timed out; last: {item}"
    raise AssertionError("the stream ended")


def states(view: dict[str, Any]) -> dict[str, str]:
    return {row["device"]: row["state"] for row in view["devices"]}


def test_the_live_dashboard_follows_the_run(tmp_path, processes):
    coordinator: Process = processes(mjfl_args(
        "testbed", "run", str(write_config(tmp_path, 400)), "--emulate", "2", "--no-live", "--dashboard-port", "0",
    ), read=True)
    # The dashboard's address comes first, then the devices, then the jobs' programs (lines are read in order).
    dashboard = coordinator.line_with("dashboard: ").split("dashboard: ")[-1].strip()
    assert dashboard.startswith("http://127.0.0.1:")
    url = coordinator.url()
    coordinator.line_with("job lenet: program")
    view = first(stream(dashboard), lambda v: v["jobs"], 300)
    assert view["run"]["status"] == "running" and [j["job"] for j in view["jobs"]] == ["lenet"]

    late = processes(mjfl_args(
        "devices", "emulate", "--url", url, "--count", "1", "--id-prefix", "late", "--workers", "1", "--seed", "5",
    ))
    snapshots = stream(dashboard)
    # Every device listed (the two started here and the late one), and the accuracy series grows.
    seen = first(snapshots, lambda v: len(v["devices"]) == 3 and len(v["jobs"][0]["series"]["accuracy"]) >= 2, 300)
    assert sorted(d.startswith("late-") for d in states(seen)) == [False, False, True]
    grown = len(seen["jobs"][0]["series"]["accuracy"])
    later = first(snapshots, lambda v: len(v["jobs"][0]["series"]["accuracy"]) > grown, 120)
    assert all(a is None or 0.0 <= a <= 1.0 for a in later["jobs"][0]["series"]["accuracy"])
    # The late device goes away: it is shown offline, the others are not.
    late_id = next(d for d in states(later) if d.startswith("late-"))
    late.kill()
    gone = first(snapshots, lambda v: states(v)[late_id] == "offline", 60)
    assert sum(s == "offline" for s in states(gone).values()) == 1
    # The fleet's events: every device's join (what it is, from its hello) and the late one's leave.
    rows = {row["device"]: row for row in gone["devices"]}
    assert {row["kind"] for row in rows.values()} == {"emulated"}
    joined = [e["device"] for e in gone["events"] if e["kind"] == "joined"]
    assert sorted(joined) == sorted(rows)
    assert [e["device"] for e in gone["events"] if e["kind"] == "left"] == [late_id]
    # On the run clock: those there from the start joined at 0 s, the run's start; the late one left after it
    # joined.
    assert [e["at_s"] for e in gone["events"] if e["kind"] == "joined" and e["device"] != late_id] == [0.0, 0.0]
    (late_joined,) = [e["at_s"] for e in gone["events"] if e["kind"] == "joined" and e["device"] == late_id]
    (late_left,) = [e["at_s"] for e in gone["events"] if e["kind"] == "left"]
    assert 0.0 <= late_joined <= late_left
    # One click away: the run log's lines that name a device (emulated devices log into the run's log).
    with urllib.request.urlopen(dashboard + f"api/live/devices/{late_id}/log", timeout=10) as response:
        log = json.load(response)
    assert log["source"] == "mjfl.log" and any("connected" in line for line in log["lines"])

    coordinator.proc.send_signal(signal.SIGINT)  # Ctrl-C: the run stops and so does its dashboard
    assert coordinator.wait(120) == 130, "".join(coordinator.output)
    with pytest.raises(urllib.error.URLError):
        live(dashboard)


def test_a_busy_port_only_warns_and_no_dashboard_serves_nothing(tmp_path, processes):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = processes(mjfl_args(
            "testbed", "run", str(write_config(tmp_path / "a", 2)), "--emulate", "2", "--no-live",
            "--dashboard-port", str(port),
        ), read=True)
        busy.line_with(f"cannot listen on 127.0.0.1 port {port}", 300)
        assert busy.wait(300) == 0, "".join(busy.output)
        assert not any("dashboard: http" in line for line in busy.output)
    off = processes(mjfl_args(
        "testbed", "run", str(write_config(tmp_path / "b", 2)), "--emulate", "2", "--no-live", "--no-dashboard",
    ), read=True)
    assert off.wait(300) == 0, "".join(off.output)
    assert not any("dashboard: http" in line or "warning" in line for line in off.output)
