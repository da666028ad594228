"""`mjfl testbed run` as lab staff run it: a real process, emulated devices, crashes and Ctrl-C."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

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


def start(config: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "mjfl.cli", "testbed", "run", str(config), "--emulate", "4", "--no-live", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True,
    )


def rounds(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        try:
            return conn.execute(
                "SELECT job, round, started_s, ended_s, accuracy, loss FROM rounds ORDER BY job, round"
            ).fetchall()
        except sqlite3.OperationalError:
            return []  # the schema is not there yet


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_for(predicate, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"testbed exited early ({proc.returncode}):\n{proc.stdout.read()}")
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("timed out")
        time.sleep(0.2)


def test_a_killed_coordinator_resumes_without_losing_or_repeating_a_round(tmp_path):
    out = tmp_path / "run"
    config = tmp_path / "testbed.toml"
    config.write_text(CONFIG.format(out=out, rounds=8))
    db = out / "mjfl.db"
    first = start(config)
    try:
        wait_for(lambda: len(rounds(db)) >= 4, 300, first)
        first.kill()  # the coordinator alone, mid-run, as a crash would
        first.wait()
        # Its emulated devices notice they are orphaned and exit instead of
        # reconnecting under the ids the restart will use.
        deadline = time.monotonic() + 20
        while group_alive(first.pid):
            assert time.monotonic() < deadline, "emulated devices outlived their coordinator"
            time.sleep(0.2)
    finally:
        if group_alive(first.pid):
            os.killpg(first.pid, signal.SIGKILL)
    before = rounds(db)
    assert 4 <= len(before) < 16

    second = start(config, "--resume")
    output, _ = second.communicate(timeout=600)
    assert second.returncode == 0, output
    assert "resuming run" in output
    after = rounds(db)
    for job in ("lenet", "cnn"):
        assert [r[1] for r in after if r[0] == job] == list(range(1, 9)), f"{job} lost or repeated a round"
    assert set(before) <= set(after), "a round finished before the crash changed"
    with sqlite3.connect(db) as conn:
        statuses = conn.execute("SELECT status FROM runs").fetchall()
    assert statuses == [("finished",)]
    # The run clock continues after the crash instead of starting over.
    resumed = [r for r in after if r not in before]
    assert min(r[2] for r in resumed) >= max(r[3] for r in before) - 1e-6
    assert (out / "summary.json").exists()


def test_ctrl_c_stops_cleanly_and_keeps_every_round(tmp_path):
    out = tmp_path / "run"
    config = tmp_path / "testbed.toml"
    config.write_text(CONFIG.format(out=out, rounds=50))
    db = out / "mjfl.db"
    proc = start(config)
    try:
        wait_for(lambda: len(rounds(db)) >= 2, 300, proc)
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, output
    assert "--resume" in output
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
    assert len(rounds(db)) >= 2


LATE = """
seed = 1
out_dir = "{out}"
[fleet]
size = 4
workers = 1
[scheduler]
method = "random"
[testbed]
port = 0
min_devices = 2
wait_timeout_s = 120
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
partition = "iid"
batch_size = 8
fraction = 1.0
max_rounds = {rounds}
"""


def test_devices_that_join_a_running_run_take_a_shard_and_get_tasks(tmp_path):
    # Two devices start the run; two more connect once it has recorded rounds.
    # The data was cut for the fleet's four devices, so the late ones take the
    # free shards and are planned like the others (fraction 1.0: every device).
    import queue
    import threading

    out = tmp_path / "run"
    config = tmp_path / "late.toml"
    config.write_text(LATE.format(out=out, rounds=14))
    db = out / "mjfl.db"
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "mjfl.cli", "testbed", "run", str(config), "--emulate", "2", "--no-live"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in coordinator.stdout], daemon=True).start()
    late = None
    try:
        url = None
        while url is None:
            line = lines.get(timeout=120)
            if "emulated devices" in line and "ws://" in line:
                url = line.split(" for ")[-1].strip()
        wait_for(lambda: len(rounds(db)) >= 2, 300, coordinator)
        late = subprocess.Popen(
            [sys.executable, "-m", "mjfl.cli", "device", "emulate", "--url", url, "--count", "2",
             "--id-prefix", "late", "--workers", "1", "--seed", "5"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        assert coordinator.wait(timeout=600) == 0
        late.wait(timeout=60)  # the coordinator's bye going_away stops them
    finally:
        for proc in (coordinator, late):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT round, device, status FROM device_rounds ORDER BY round"
        ).fetchall()
        shards = json.loads(conn.execute("SELECT config_json FROM runs").fetchone()[0])["shards"]
    assert shards == 4
    first = min(r for r, d, _ in rows if d.startswith("late-"))
    assert first > 1, "the late devices were there from the start"
    for device in ("late-0", "late-1"):
        ok = [r for r, d, s in rows if d == device and s == "ok"]
        assert len(ok) >= 3, f"{device} trained in rounds {ok}"
    # Every round after both had joined used all four devices (fraction 1.0).
    joined = max(min(r for r, d, _ in rows if d == device) for device in ("late-0", "late-1"))
    assert all(len({d for r, d, _ in rows if r == round_}) == 4 for round_ in range(joined + 1, 15))
