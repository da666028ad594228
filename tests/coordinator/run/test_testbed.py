"""`mjfl testbed run` as lab staff run it: a real process, emulated devices, crashes and Ctrl-C."""

import hashlib
import io
import json
import os
import signal
from pathlib import Path

import pytest
from processes import SMALL_TESTBED, group_alive, mjfl_args, query, wait_for
from rich.console import Console

import mjfl
from mjfl.coordinator.results.report import report_runs
from mjfl.coordinator.storage.layout import database_path

pytestmark = pytest.mark.slow

CONFIG = """
seed = 2
out_dir = "{out}"
[fleet]
size = 4
workers = 2
[scheduler]
method = "meta-greedy"
[scheduler.options.rlds]
pretrain_rounds = 5
[testbed]
port = 0
wait_timeout_s = 120
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
partition = "iid"
batch_size = 8
fraction = 0.5
max_rounds = {rounds}
[[jobs]]
name = "cnn"
model = "cnn-a-noniid"
image_size = 8
batch_size = 8
fraction = 0.5
max_rounds = {rounds}
"""


ROUNDS = "SELECT job, round, started_s, ended_s, accuracy, loss FROM rounds ORDER BY job, round"


PROVENANCE = "SELECT config_text, config_file, config_sha256, versions_json FROM provenance"
PROGRAMS = "SELECT job, sha256, file, shard_samples_json FROM provenance_programs ORDER BY job"
ADMISSIONS = "SELECT device, shard, hello_json, profile_json, app_json FROM provenance_devices ORDER BY admission_id"


def coordinator_args(config: Path, *extra: str) -> list[str]:
    return mjfl_args("testbed", "run", str(config), "--emulate", "4", "--no-live", *extra)


def assert_provenance(db: Path, config: Path) -> None:
    """The run kept what it ran on: the config verbatim, versions, each device admitted with its hello and
    profile, a shard of every device that trained, each job's program as the file the devices were sent."""
    ((text, file, sha, versions),) = query(db, PROVENANCE)
    assert text == config.read_text() and file == str(config) and sha == hashlib.sha256(text.encode()).hexdigest()
    assert json.loads(versions)["mjfl"] == mjfl.__version__ and json.loads(versions)["torch"]
    admitted = {}
    for device, shard, hello, profile, app in query(db, ADMISSIONS):
        hello, profile, app = json.loads(hello), json.loads(profile), json.loads(app)
        assert hello["device_id"] == device and hello["hardware"]["emulated"] is True and "token" not in hello
        assert profile["source"] == "hello" and profile["a"] == hello["hardware"]["a"]  # the profile it impersonates
        assert app["sha256"] is None and app["absent"]  # an emulated device has no app
        admitted[device] = shard
    trained = {d for (d,) in query(db, "SELECT DISTINCT device FROM device_rounds WHERE status = 'ok'")}
    assert trained and trained <= {d for d, shard in admitted.items() if shard is not None}
    programs = query(db, PROGRAMS)
    assert [job for job, *_ in programs] == sorted(j for (j,) in query(db, "SELECT job FROM jobs"))
    for job, sha, program_file, samples in programs:
        assert sha == hashlib.sha256(Path(program_file).read_bytes()).hexdigest(), job
        assert len(json.loads(samples)) == 4 and min(json.loads(samples)) > 0


def test_a_killed_coordinator_resumes_without_losing_or_repeating_a_round(tmp_path, processes):
    out = tmp_path / "run"
    config = tmp_path / "testbed.toml"
    config.write_text(CONFIG.format(out=out, rounds=8))
    db = database_path(out)
    first = processes(coordinator_args(config), read=True)
    wait_for(lambda: len(query(db, ROUNDS)) >= 4, 300, first)
    first.proc.kill()  # the coordinator alone, mid-run, as a crash would
    first.wait(30)
    # Its emulated devices notice they are orphaned and exit instead of
    # reconnecting under the ids the restart will use.
    wait_for(lambda: not group_alive(first.pid), 60, what="the orphaned devices to exit")
    before = query(db, ROUNDS)
    assert 4 <= len(before) < 16
    kept = [query(db, sql) for sql in (PROVENANCE, PROGRAMS, ADMISSIONS)]
    assert len(kept[2]) == 4, kept[2]  # the four devices, each admitted once

    second = processes(coordinator_args(config, "--resume"), read=True)
    assert second.wait(600) == 0, "".join(second.output)
    second.line_with("resuming run", timeout=60)
    after = query(db, ROUNDS)
    for job in ("lenet", "cnn"):
        assert [r[1] for r in after if r[0] == job] == list(range(1, 9)), f"{job} lost or repeated a round"
    assert set(before) <= set(after), "a round finished before the crash changed"
    assert query(db, "SELECT status FROM runs") == [("finished",)]
    # The run clock continues after the crash instead of starting over.
    resumed = [r for r in after if r not in before]
    assert min(r[2] for r in resumed) >= max(r[3] for r in before) - 1e-6
    assert (out / "summary.json").exists()
    # The resumed run kept what it ran on before the crash; its devices, back with the same hellos, once each.
    assert [query(db, sql) for sql in (PROVENANCE, PROGRAMS, ADMISSIONS)] == kept
    assert_provenance(db, config)
    console = Console(file=io.StringIO(), width=400)
    figures = report_runs([out], console=console)
    assert "Provenance" in console.file.getvalue() and "emulated x4" in console.file.getvalue()
    (document,) = figures["provenance"].values()
    assert [d["device"] for d in document["devices"]] == [r[0] for r in kept[2]]


def test_ctrl_c_stops_cleanly_and_keeps_every_round(tmp_path, processes):
    out = tmp_path / "run"
    config = tmp_path / "testbed.toml"
    config.write_text(CONFIG.format(out=out, rounds=50))
    db = database_path(out)
    run = processes(coordinator_args(config), read=True)
    wait_for(lambda: len(query(db, ROUNDS)) >= 2, 300, run)
    os.killpg(run.pid, signal.SIGINT)
    assert run.wait(60) == 130, "".join(run.output)
    run.line_with("--resume", timeout=60)
    assert query(db, "SELECT status FROM runs") == [("interrupted",)]
    assert len(query(db, ROUNDS)) >= 2




def test_devices_that_join_a_running_run_take_a_shard_and_get_tasks(tmp_path, processes):
    # Two devices start the run; two more connect once it has recorded rounds.
    # The data was cut for the fleet's four devices, so the late ones take the
    # free shards and are planned like the others (fraction 1.0: every device).
    out = tmp_path / "run"
    config = tmp_path / "late.toml"
    config.write_text(SMALL_TESTBED.format(out=out, rounds=14))
    db = database_path(out)
    coordinator = processes(mjfl_args("testbed", "run", str(config), "--emulate", "2", "--no-live"), read=True)
    url = coordinator.url()
    wait_for(lambda: len(query(db, ROUNDS)) >= 2, 300, coordinator)
    late = processes(mjfl_args(
        "devices", "emulate", "--url", url, "--count", "2", "--id-prefix", "late", "--workers", "1", "--seed", "5",
    ))
    assert coordinator.wait(600) == 0, "".join(coordinator.output)
    late.wait(60)  # the coordinator's bye going_away stops them
    rows = query(db, "SELECT round, device, status FROM device_rounds ORDER BY round")
    (config_json,) = query(db, "SELECT config_json FROM runs")[0]
    assert json.loads(config_json)["shards"] == 4
    first = min(r for r, d, _ in rows if d.startswith("late-"))
    assert first > 1, "the late devices were there from the start"
    for device in ("late-0", "late-1"):
        ok = [r for r, d, s in rows if d == device and s == "ok"]
        assert len(ok) >= 3, f"{device} trained in rounds {ok}"
    # Every round after both had joined used all four devices (fraction 1.0).
    joined = max(min(r for r, d, _ in rows if d == device) for device in ("late-0", "late-1"))
    assert all(len({d for r, d, _ in rows if r == round_}) == 4 for round_ in range(joined + 1, 15))
    # The late devices were admitted as they joined, each with a free shard, after the two that started it.
    admitted = [(d, shard) for d, shard, *_ in query(db, ADMISSIONS)]
    assert len(admitted) == 4 and {d for d, _ in admitted[2:]} == {"late-0", "late-1"}, admitted
    assert sorted(s for _, s in admitted) == [0, 1, 2, 3]


def test_a_batched_emulated_fleet_trains_its_devices_together_to_the_targets(tmp_path, processes):
    """`fleet.runtime = "batched"`: one worker process trains the devices' tasks together, each its own device."""
    out = tmp_path / "run"
    config = tmp_path / "batched.toml"
    text = CONFIG.format(out=out, rounds=40).replace('workers = 2', 'runtime = "batched"')
    config.write_text(text.replace('fraction = 0.5\nmax_rounds', 'fraction = 0.5\ntarget_accuracy = 0.6\nmax_rounds'))
    run = processes(coordinator_args(config, "--no-dashboard"), read=True)
    assert run.wait(600) == 0, "".join(run.output)
    summary = json.loads((out / "summary.json").read_text())
    jobs = summary["methods"]["meta-greedy"]["jobs"]
    assert set(jobs) == {"lenet", "cnn"} and all(row["time_to_target_s"] is not None for row in jobs.values()), jobs
    # Every device round that trained went through the batched lane (how many
    # tasks share a batch depends on when they arrive: the micro-batcher's own
    # tests pin that down with controlled arrivals).
    log = (out / "mjfl.log").read_text()
    together = [int(line.split("batched lane: ")[1].split()[0]) for line in log.splitlines() if "batched lane: " in line]
    (trained,) = query(database_path(out), "SELECT COUNT(*) FROM device_rounds WHERE status = 'ok'")[0]
    assert trained > 0 and sum(together) >= trained, (sum(together), trained)
    assert "devices connected" in "".join(run.output)
