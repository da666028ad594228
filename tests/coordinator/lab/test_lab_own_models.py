"""A lab that runs researchers' own models (LAB.toml custom_code = "researchers"): a real `mjfl serve`, 8 emulated
devices, the real client sending the model's file, the real export and runtime.

A run of a model of one's own trains beside a zoo run and both reach their
targets, its file kept verbatim with its digest in the run's folder and its
archive; factories that sleep forever, raise, or allocate without end are
refused within the lab's limits while a third run trains, and queue nothing.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from lab_service import Lab, run_config, submit_body

from mjfl.coordinator.storage.database import Storage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

HERE = Path(__file__).parent
GOOD = HERE.parents[1] / "commands" / "custom_models" / "models.py"
BAD = HERE / "own_models" / "bad.py"
CHECK_S = 30  # the lab's limits.code_check_s here: the sleeping factory holds a test worker this long
START_S = 300  # the most a model's child may take to start (sandbox.START_S)

LIMITS = f"code_check_s = {CHECK_S}\ncode_memory_mb = 3072\n"

ONE_JOB = """
seed = {seed}
[fleet]
size = 4
shards = "present"
[scheduler]
method = "random"
min_plan = 2
[[jobs]]
name = "{name}"
model = "{model}"
image_size = {size}
partition = "iid"
epochs = 1
{training}
fraction = 0.5
target_accuracy = {target}
max_rounds = {rounds}
"""


def own_run(model: str) -> str:
    """A run of one job whose model is ``model`` (a factory of one's own), to a target the digits reach."""
    return ONE_JOB.format(seed=3, name="mobilenet", model=model, size=8, training="batch_size = 16\nlr = 0.05\nmomentum = 0.9",
                          target=0.5, rounds=40)


# One job that never reaches its target in 500 rounds: beside the other two runs' three jobs, the fleet holds every
# job's smallest plan (2 devices each, 8 in all), so the lab admits all three at once.
LONG = ONE_JOB.format(seed=4, name="lenet", model="lenet5", size=12, training="batch_size = 8", target=0.999, rounds=500)


def _refusal(lab: Lab, token: str, factory: str) -> tuple[int, dict[str, str], float]:
    started = time.monotonic()
    body = submit_body(own_run(f"bad.py:{factory}"), files={"bad.py": BAD.read_bytes()})
    status, answer = lab.call("POST", "/api/lab/runs", body, token=token, timeout=CHECK_S + START_S + 120)
    return status, answer["error"], time.monotonic() - started


def test_own_models_train_beside_a_zoo_run_and_misbehaving_ones_are_refused_within_the_limits(tmp_path: Path, processes) -> None:
    lab = Lab.start(processes, tmp_path, devices=8, max_running=4, top='custom_code = "researchers"', limits=LIMITS)
    alice, bob, carol = lab.researcher("alice"), lab.researcher("bob"), lab.researcher("carol")

    # Alice's folder as she keeps it: her config beside her model's file; `mjfl submit` sends both.
    folder = tmp_path / "alice"
    folder.mkdir()
    shutil.copy(GOOD, folder / "models.py")
    (folder / "run.toml").write_text(own_run("models.py:MobileNetStyle"))
    sent = subprocess.run(
        [sys.executable, "-m", "mjfl.cli", "submit", str(folder / "run.toml"), "--lab", lab.url, "--token", alice, "--json"],
        check=False, capture_output=True, text=True, timeout=CHECK_S + START_S + 120, stdin=subprocess.DEVNULL,
    )
    assert sent.returncode == 0, sent.stderr
    own = json.loads(sent.stdout)["run"]
    zoo = lab.submit(run_config(seed=2, size=4, target=0.8), bob)
    # And one that goes on until it is cancelled, so that some run surely trains while the refusals are made.
    going = lab.submit(LONG, bob)
    lab.until(lambda: lab.run(going["id"])["state"] == "running", 600, what="bob's long run to start")

    # While they run: three misbehaving models, side by side, each refused with its reason, within the limit.
    window = time.time()
    expected = {
        "sleeps": ("model_timeout", f"took longer than {CHECK_S} s (limits.code_check_s)"),
        "raises": ("model_invalid", "ValueError: this factory has no layer for 8x8 inputs"),
        "allocates": ("model_memory_limit", "allocated more than 3072 MB (limits.code_memory_mb)"),
    }
    with ThreadPoolExecutor(len(expected)) as pool:
        answers = dict(zip(expected, pool.map(lambda f: _refusal(lab, carol, f), expected), strict=True))
    for factory, (code, needle) in expected.items():
        status, error, took = answers[factory]
        assert (status, error["code"]) == (400, code) and needle in error["message"], (factory, error)
        assert took < CHECK_S + START_S, (factory, took)  # the child's start, then at most the limit
    window = (window, time.time())
    assert {run["owner"] for run in lab.call("GET", "/api/lab/runs")[1]["runs"]} == {"alice", "bob"}  # nothing queued

    for run in (own, zoo):
        ended = lab.ended(run["id"], timeout=1800)
        assert (ended["state"], ended["targets_reached"]) == ("completed", True), ended
    # The lab went on training while it refused: the long run's devices trained through the refusals' window.
    during = [t for t in lab.tasks() if t["run"] == going["id"] and window[0] < t["ended"] < window[1]]
    assert during, window
    assert lab.call("POST", f"/api/lab/runs/{going['id']}/cancel", token=bob)[1]["run"]["state"] == "cancelled"

    # The model's file, verbatim in the run's folder with its digest, recorded in the run, pulled with it.
    data = GOOD.read_bytes()
    run_folder = lab.folder / "runs" / own["id"]
    assert (run_folder / "code" / "models.py").read_bytes() == data
    manifest = json.loads((run_folder / "code.json").read_text())["files"]
    assert manifest == {"models.py": {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}}
    with Storage.read_only(run_folder / "mjfl.db") as storage:
        ((recorded_run, _),) = storage.runs()
        provenance, _ = storage.provenance(recorded_run.run_id)
    assert provenance is not None
    (program,) = provenance.programs
    assert program.model == f"{(run_folder / 'code' / 'models.py').resolve()}:MobileNetStyle"
    assert program.model_sha256 == hashlib.sha256(data).hexdigest()
    status, archive = lab.call("GET", f"/api/lab/runs/{own['id']}/archive", token=alice)
    assert status == 200
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        member = tar.extractfile(f"{own['id']}/code/models.py")
        assert member is not None and member.read() == data
