"""Across the language boundary: the real coordinator with Java devices from the JVM launcher.

`mjfl testbed run` (Python, emulated devices in worker processes) and
`android/client-core/bin/mjfl-device` (Java, the phone client's core with a
stand-in trainer: the JVM has no ExecuTorch runtime) train one run together.
Everything is checked from the run's SQLite records, as a lab would.
"""

import json
import os
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = ROOT / "android" / "client-core" / "bin" / "mjfl-device"

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("javac") is None, reason="needs a JDK: make setup installs one"),
]

CONFIG = """
seed = 3
out_dir = "{out}"
[fleet]
size = 6
workers = 2
[scheduler]
method = "meta-greedy"
[scheduler.options.rlds]
pretrain_rounds = 5
[testbed]
port = 0
min_devices = 4
wait_timeout_s = 120
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
partition = "iid"
batch_size = 8
fraction = 1.0
target_accuracy = 0.85
max_rounds = 60
[[jobs]]
name = "cnn"
model = "cnn-a-noniid"
image_size = 8
partition = "iid"
batch_size = 8
fraction = 1.0
target_accuracy = 0.85
max_rounds = 60
"""


def records(db: Path) -> list[tuple]:
    if not db.exists():
        return []
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10) as conn:
        try:
            return conn.execute(
                "SELECT d.job, d.round, d.device, d.status, d.samples, d.error, r.aggregated"
                " FROM device_rounds AS d JOIN rounds AS r USING (run_id, job, round) ORDER BY d.round"
            ).fetchall()
        except sqlite3.OperationalError:
            return []  # the schema is not there yet


def wait_for(predicate, timeout: float, *procs: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        for proc in procs:
            assert proc.poll() is None, f"{proc.args[:3]} exited early ({proc.returncode})"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def jvm_devices(url: str, count: int, prefix: str, cache: Path, round_s: float = 0.0) -> subprocess.Popen:
    return subprocess.Popen(
        [str(LAUNCHER), "--url", url, "--count", str(count), "--id-prefix", prefix, "--cache", str(cache),
         "--round-s", str(round_s)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )


def test_java_devices_train_with_the_python_coordinator_fail_cleanly_and_join_late(tmp_path):
    out = tmp_path / "run"
    config = tmp_path / "cross.toml"
    config.write_text(CONFIG.format(out=out))
    db = out / "mjfl.db"
    coordinator = subprocess.Popen(
        [sys.executable, "-m", "mjfl.cli", "testbed", "run", str(config), "--emulate", "2", "--no-live"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in coordinator.stdout], daemon=True).start()
    jvm = late = None
    try:
        url = None
        while url is None:
            line = lines.get(timeout=120)
            if "emulated devices" in line and "ws://" in line:
                url = line.split(" for ")[-1].strip()
        # Two Java devices make the four the run waits for; they take 3 s a round, like slow
        # phones, so that they are busy with a task whenever they are killed below.
        jvm = jvm_devices(url, 2, "jvm", tmp_path / "cache-a", round_s=3.0)
        wait_for(lambda: sum(r[3] == "ok" and r[2] in ("jvm-0", "jvm-1") for r in records(db)) >= 2, 300, coordinator, jvm)
        # A Java device that connects to the running run takes a free shard and gets tasks.
        late = jvm_devices(url, 1, "jvm-late", tmp_path / "cache-b")
        wait_for(lambda: any(r[2] == "jvm-late-0" and r[3] == "ok" for r in records(db)), 300, coordinator, late)
        # Kill the first Java devices' process mid-run: every device is in every
        # round (fraction 1.0), so one of its tasks is in flight.
        done = {job: max((r[1] for r in records(db) if r[0] == job), default=0) for job in ("lenet", "cnn")}
        os.killpg(jvm.pid, signal.SIGKILL)
        jvm.wait(timeout=10)
        assert coordinator.wait(timeout=900) == 0
        late.wait(timeout=60)  # the coordinator's bye going_away stops it
    finally:
        for proc in (coordinator, jvm, late):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    rows = records(db)
    # The Java devices' results were accepted and aggregated, for both jobs.
    for job in ("lenet", "cnn"):
        ok = [r for r in rows if r[0] == job and r[2] in ("jvm-0", "jvm-1") and r[3] == "ok"]
        assert ok and all(r[4] > 0 and r[6] == 1 for r in ok), job
    # The kill is a recorded failure of the round, which completed without them.
    lost = [r for r in rows if r[2] in ("jvm-0", "jvm-1") and r[3] == "failed"]
    assert lost and all("connection lost" in r[5] and r[1] > done[r[0]] for r in lost), lost
    # The late device joined the running run and trained.
    late_ok = [r for r in rows if r[2] == "jvm-late-0" and r[3] == "ok"]
    assert late_ok and min(r[1] for r in late_ok) > 1
    # Every job reached its target.
    summary = json.loads((out / "summary.json").read_text())
    for job, row in summary["methods"]["meta-greedy"]["jobs"].items():
        assert row["time_to_target_s"] is not None, (job, row)
