"""Across the language boundary: the real coordinator with Java devices from the JVM launcher.

`mjfl testbed run` (Python, emulated devices in worker processes) and
`android/client-core/bin/mjfl-device` (Java, the phone client's core with a
stand-in trainer: the JVM has no ExecuTorch runtime) train one run together.
Everything is checked from the run's SQLite records, as a lab would.
"""

import json
import shutil
from pathlib import Path

import pytest
from processes import mjfl_args, query, wait_for
from repository import ROOT

from mjfl.coordinator.storage.layout import database_path

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


DEVICE_ROUNDS = (
    "SELECT d.job, d.round, d.device, d.status, d.samples, d.error, r.aggregated"
    " FROM device_rounds AS d JOIN rounds AS r USING (run_id, job, round) ORDER BY d.round"
)


def jvm_devices(url: str, count: int, prefix: str, cache: Path, round_s: float = 0.0) -> list[str]:
    return [str(LAUNCHER), "--url", url, "--count", str(count), "--id-prefix", prefix, "--cache", str(cache),
            "--round-s", str(round_s)]


def test_java_devices_train_with_the_python_coordinator_fail_cleanly_and_join_late(tmp_path, processes):
    out = tmp_path / "run"
    config = tmp_path / "cross.toml"
    config.write_text(CONFIG.format(out=out))
    db = database_path(out)
    coordinator = processes(mjfl_args("testbed", "run", str(config), "--emulate", "2", "--no-live"), read=True)
    url = coordinator.url()

    def rows() -> list[tuple]:
        return query(db, DEVICE_ROUNDS)

    # Two Java devices make the four the run waits for; they take 3 s a round, like slow
    # phones, so that they are busy with a task whenever they are killed below.
    jvm = processes(jvm_devices(url, 2, "jvm", tmp_path / "cache-a", round_s=3.0))
    wait_for(lambda: sum(r[3] == "ok" and r[2] in ("jvm-0", "jvm-1") for r in rows()) >= 2, 300, coordinator, jvm)
    # A Java device that connects to the running run takes a free shard and gets tasks.
    late = processes(jvm_devices(url, 1, "jvm-late", tmp_path / "cache-b"))
    wait_for(lambda: any(r[2] == "jvm-late-0" and r[3] == "ok" for r in rows()), 300, coordinator, late)
    # Kill the first Java devices' process mid-run: every device is in every
    # round (fraction 1.0), so one of its tasks is in flight.
    done = {job: max((r[1] for r in rows() if r[0] == job), default=0) for job in ("lenet", "cnn")}
    jvm.kill()
    assert coordinator.wait(900) == 0, "".join(coordinator.output)
    late.wait(60)  # the coordinator's bye going_away stops it
    rows = query(db, DEVICE_ROUNDS)
    # The Java devices' results were accepted and aggregated, for both jobs.
    for job in ("lenet", "cnn"):
        ok = [r for r in rows if r[0] == job and r[2] in ("jvm-0", "jvm-1") and r[3] == "ok"]
        assert ok and all(r[4] > 0 and r[6] == 1 for r in ok), job
    # The kill is a recorded failure of the round, which completed without them: the task in
    # flight lost its connection; a task the other job had already claimed the device for
    # (planned while it was busy) found it gone.
    lost = [r for r in rows if r[2] in ("jvm-0", "jvm-1") and r[3] == "failed"]
    assert lost and all(r[1] > done[r[0]] for r in lost), lost
    assert any("connection lost" in r[5] for r in lost), lost
    assert all("connection lost" in r[5] or "not connected" in r[5] for r in lost), lost
    # The late device joined the running run and trained.
    late_ok = [r for r in rows if r[2] == "jvm-late-0" and r[3] == "ok"]
    assert late_ok and min(r[1] for r in late_ok) > 1
    # Every job reached its target.
    summary = json.loads((out / "summary.json").read_text())
    for job, row in summary["methods"]["meta-greedy"]["jobs"].items():
        assert row["time_to_target_s"] is not None, (job, row)
