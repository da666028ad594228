"""`mjfl serve` as a lab runs it: a real service process, 8 emulated devices, researchers over HTTP.

The researchers' side is what any client does: HTTP requests with a token
(``lab_service.Lab.call``), and the `mjfl` commands as processes.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from lab_service import Lab, run_config
from processes import query, rounds_recorded

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def mjfl(lab: Lab, token: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MJFL_LAB": lab.url, "MJFL_TOKEN": token}
    return subprocess.run([sys.executable, "-m", "mjfl.cli", *args], check=False, env=env, capture_output=True, text=True, timeout=300)


def assert_one_job_per_device(tasks: list[dict]) -> None:
    by_device = defaultdict(list)
    for task in tasks:
        by_device[task["device"]].append(task)
    for device, spans in by_device.items():
        spans.sort(key=lambda t: t["sent"])
        for first, then in itertools.pairwise(spans):
            assert then["sent"] >= first["ended"], f"{device} trained {first} and {then} at once"


def test_two_researchers_runs_share_the_fleet_round_by_round_and_are_pulled(tmp_path: Path, processes) -> None:
    lab = Lab.start(processes, tmp_path)
    alice, bob = lab.researcher("alice"), lab.researcher("bob")
    a = lab.submit(run_config(method="random", seed=1), alice)
    b = lab.submit(run_config(method="meta-greedy", seed=2), bob)
    assert (a["owner"], b["owner"]) == ("alice", "bob")
    a, b = lab.ended(a["id"]), lab.ended(b["id"])
    assert (a["state"], a["targets_reached"]) == ("completed", True), a
    assert (b["state"], b["targets_reached"]) == ("completed", True), b
    assert (a["method"], b["method"]) == ("random", "meta-greedy")

    tasks = lab.tasks()
    assert_one_job_per_device(tasks)
    of = {run: [t for t in tasks if t["run"] == run] for run in (a["id"], b["id"])}
    assert {t["job"] for t in of[a["id"]]} == {t["job"] for t in of[b["id"]]} == {"lenet", "cnn"}
    # Round by round on the shared fleet: devices trained for both runs at the same moments, many times.
    together = [(x, y) for x in of[a["id"]] for y in of[b["id"]] if x["sent"] < y["ended"] and y["sent"] < x["ended"]]
    assert len(together) >= 5
    assert {t["device"] for t in of[a["id"]]} & {t["device"] for t in of[b["id"]]}, "the runs never shared a device"

    for run, token in ((a, alice), (b, bob)):
        pulled = tmp_path / f"pulled-{run['id']}"
        assert mjfl(lab, token, "pull", run["id"], "--out", str(pulled)).returncode == 0
        report = mjfl(lab, token, "report", str(pulled))
        assert report.returncode == 0, report.stderr
        assert "lenet" in report.stderr and "cnn" in report.stderr and run["method"] in report.stderr
        assert "Provenance" in report.stderr and "emulated x8" in report.stderr  # what it ran on, a row
    listed = json.loads(mjfl(lab, alice, "runs", "--json").stdout)["runs"]  # on stdout, for scripts
    assert {(r["id"], r["owner"], r["state"]) for r in listed} == {(a["id"], "alice", "completed"), (b["id"], "bob", "completed")}


def test_back_to_back_runs_keep_their_devices_and_start_at_once_then_the_lab_drains(tmp_path: Path, processes) -> None:
    lab = Lab.start(processes, tmp_path)
    before = {d["device"]: d["address"] for d in lab.devices()}  # host:port: a new connection has a new port
    first = lab.ended(lab.submit(run_config(seed=3), lab.admin)["id"])
    second = lab.submit(run_config(seed=4, target=0.999, rounds=12), lab.admin)  # still going when the lab drains
    lab.until(lambda: any(t["run"] == second["id"] for t in lab.tasks()), 120)
    assert {d["device"]: d["address"] for d in lab.devices()} == before  # nobody reconnected
    first_task = min((t for t in lab.tasks() if t["run"] == second["id"]), key=lambda t: t["sent"])
    assert first_task["device"] in before
    # Draining while a run goes: no new run is admitted, the one going finishes, then the service exits.
    status, answer = lab.call("POST", "/api/lab/drain")
    assert status == 200 and answer["draining"]
    status, refused = lab.call("POST", "/api/lab/runs", {"config": run_config()})
    assert (status, refused["error"]["code"]) == (503, "draining")
    assert lab.process.wait(300) == 0
    assert any("drained" in line for line in lab.process.output)
    states = dict(query(lab.folder / "lab.db", "SELECT run_id, state FROM runs"))
    assert first["state"] == states[second["id"]] == "completed"
    # The second run started on the connections the lab had before the first: it waited for no device to
    # (re)connect. Its fleet record: every device joined once, from its address of before, and none came or went.
    events = query(lab.folder / "runs" / second["id"] / "mjfl.db", "SELECT kind, device, detail FROM fleet_events")
    assert sorted(events) == sorted(("joined", device, f"from {address}") for device, address in before.items())


def test_cancel_in_any_state_by_its_owner_only_and_again(tmp_path: Path, processes) -> None:
    lab = Lab.start(processes, tmp_path, max_running=1)
    alice, bob = lab.researcher("alice"), lab.researcher("bob")
    long = lab.submit(run_config(target=0.999, rounds=500), alice)
    waiting = lab.submit(run_config(seed=2), alice)
    lab.until(lambda: lab.run(long["id"])["state"] == "running", 120)
    queued = lab.run(waiting["id"])
    assert queued["position"] == 1 and "waiting for a place" in queued["reason"]

    status, refused = lab.call("POST", f"/api/lab/runs/{long['id']}/cancel", token=bob)
    assert (status, refused["error"]["code"]) == (403, "forbidden") and "alice" in refused["error"]["message"]
    for _ in range(2):  # queued, then again: the same answer
        status, answer = lab.call("POST", f"/api/lab/runs/{waiting['id']}/cancel", token=alice)
        assert (status, answer["run"]["state"]) == (200, "cancelled")

    database = lab.folder / "runs" / long["id"] / "mjfl.db"
    # Beside a second suite the run may still be preparing (no database, or no schema yet) when this is first asked.
    lab.until(lambda: rounds_recorded(database) >= 3, 300, what="3 rounds of the running run")
    for _ in range(2):  # running, then again
        status, answer = lab.call("POST", f"/api/lab/runs/{long['id']}/cancel", token=alice)
        assert (status, answer["run"]["state"]) == (200, "cancelled"), answer
    lab.until(lambda: all(d["serving"] is None for d in lab.devices()), 120, what="every device back in the lobby")
    assert query(database, "SELECT count(*) FROM rounds")[0][0] >= 3  # its rounds so far are kept
    pulled = tmp_path / "pulled"
    assert mjfl(lab, alice, "pull", long["id"], "--out", str(pulled)).returncode == 0
    assert query(pulled / "mjfl.db", "SELECT count(*) FROM rounds")[0][0] >= 3
    after = lab.ended(lab.submit(run_config(seed=5), bob)["id"])  # the devices serve the next run
    assert after["state"] == "completed"


def test_a_killed_service_resumes_its_running_runs_without_losing_or_repeating_a_round(tmp_path: Path, processes) -> None:
    lab = Lab.start(processes, tmp_path)
    runs = [lab.submit(run_config(seed=s, target=0.9, rounds=60), lab.admin)["id"] for s in (6, 7)]
    databases = [lab.folder / "runs" / run / "mjfl.db" for run in runs]
    rows = "SELECT job, round, started_s, ended_s, accuracy FROM rounds ORDER BY job, round"
    lab.until(lambda: all(len(query(db, rows)) >= 4 for db in databases), 300)
    os.killpg(lab.process.proc.pid, signal.SIGKILL)  # the service and its emulated devices, mid-round
    lab.process.proc.wait(30)
    kept = [query(db, rows) for db in databases]

    again = Lab.start(processes, tmp_path, lab_file=tmp_path / "lab.toml")
    assert any("resuming" in line and all(r in line for r in runs) for line in again.process.output)
    for run, db, before in zip(runs, databases, kept):
        assert again.ended(run)["state"] == "completed"
        after = query(db, rows)
        assert set(before) <= set(after)  # every round recorded before the kill is kept as it was
        for job in ("lenet", "cnn"):
            numbers = [r[1] for r in after if r[0] == job]
            assert numbers == list(range(1, len(numbers) + 1)), (run, job, numbers)  # none lost, none repeated
