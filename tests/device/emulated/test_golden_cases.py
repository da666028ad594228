"""The golden cases of the first-day check: what they hold, that the app trains them, and why the tolerance is sound.

The zoo's programs come from the repository's `.mjfl-cache/programs`
(exported on the first run only); the sets are made in a temporary folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from repository import ROOT

from mjfl.device.emulated.golden import (
    FORMAT,
    TOLERANCE,
    ZOO_CASES,
    golden_set,
    relative_difference,
    write_case,
)
from mjfl.device.protocol import messages as wire
from mjfl.device.protocol.codec import decode
from mjfl.errors import ConfigError
from mjfl.jobs.base import MODEL_NAMES, LocalTraining, TrainResult

PROGRAMS = ROOT / ".mjfl-cache" / "programs"
SELFTEST = ROOT / "android" / "app" / "bin" / "mjfl-selftest"


def test_the_relative_difference_is_the_largest_against_the_tensors_largest_value() -> None:
    # The same examples as the app's ComparisonTest.
    assert relative_difference(np.array([1, -2]), np.array([1, -2])) == 0.0
    assert relative_difference(np.array([1.5, -2]), np.array([1, -2])) == 0.25
    assert relative_difference(np.array([1e-9]), np.array([0.0])) == float("inf")
    assert relative_difference(np.array([0.0]), np.array([0.0])) == 0.0
    assert np.isnan(relative_difference(np.array([np.nan]), np.array([1.0])))


def test_every_zoo_model_has_one_case_with_a_short_last_batch_momentum_and_its_own_seed() -> None:
    assert [c.model for c in ZOO_CASES] == list(MODEL_NAMES)
    assert len({c.seed for c in ZOO_CASES}) == len(ZOO_CASES)
    for c in ZOO_CASES:
        t = c.training
        assert c.samples % t.batch_size and t.epochs >= 2 and t.momentum and t.weight_decay, c
        assert c.steps == 6
        x, y = c.shard()
        assert x.shape == (c.samples, *c.input_shape) and x.dtype == np.float32 and y.dtype == np.int64
        assert np.array_equal(c.shard()[0], x), "the shard is the seed's"
    with pytest.raises(ConfigError, match="unknown model"):
        golden_set(["lenet6"])


def test_a_case_is_the_wire_protocols_own_messages(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.random((5, 1, 2, 2), dtype=np.float32), np.arange(5) % 2
    weights = {"fc.weight": np.ones((2, 4), np.float32), "fc.bias": np.zeros(2, np.float32)}
    trained = {"fc.weight": np.full((2, 4), 0.5, np.float32), "fc.bias": np.ones(2, np.float32)}
    training = LocalTraining(epochs=2, batch_size=2, lr=0.1, momentum=0.9, weight_decay=1e-3)
    model = wire.ModelSpec("softmax", (1, 2, 2), 2, (), ((3,),))
    write_case(tmp_path, name="c", model=model, program=b"PROGRAM", weights=weights, x=x, y=y,
               training=training, seed=42, expected=TrainResult(trained, 5, 2, 6, 0.75, 1.5))  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expected.mjfl", "program.pte", "provision.mjfl", "task.mjfl"]
    provision = decode((tmp_path / "provision.mjfl").read_bytes())
    task = decode((tmp_path / "task.mjfl").read_bytes())
    result = decode((tmp_path / "expected.mjfl").read_bytes())
    assert isinstance(provision, wire.Provision) and isinstance(task, wire.Task) and isinstance(result, wire.Result)
    assert provision.model == model and provision.program is None and provision.shard is not None
    assert provision.program_sha256 == task.program_sha256 == hashlib.sha256(b"PROGRAM").hexdigest()
    assert np.array_equal(provision.shard.x, x) and np.array_equal(provision.shard.y, y)
    assert task.training == training and task.seed == 42 and task.deadline_s is None
    assert list(task.weights) == ["fc.weight", "fc.bias"]
    assert result.task_id == task.task_id and result.mean_loss == 0.75 and result.samples == 5
    assert all(np.array_equal(result.weights[k], trained[k]) for k in trained)


def test_the_lenet_set_is_the_python_runtimes_answer_cached_and_read_by_the_app(tmp_path: Path) -> None:
    from mjfl.jobs.export import cached_program, planned_memory
    from mjfl.jobs.models import initial_weights
    from mjfl.jobs.trainers import ExecuTorchTrainer, TorchTrainer

    folder = golden_set(["lenet5"], cache=tmp_path / "golden", programs=PROGRAMS)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (manifest["format"], manifest["key"], manifest["tolerance"], manifest["cases"]) == (
        FORMAT, folder.name, TOLERANCE, ["lenet5"],
    )  # fmt: skip
    assert manifest["details"][0]["steps"] == 6 and manifest["made_by"]["executorch"] == "1.5.1"
    stamp = (folder / "lenet5" / "expected.mjfl").stat().st_mtime_ns
    assert golden_set(["lenet5"], cache=tmp_path / "golden", programs=PROGRAMS) == folder
    assert (folder / "lenet5" / "expected.mjfl").stat().st_mtime_ns == stamp, "a hit trains nothing"

    case = ZOO_CASES[0]
    program, _ = cached_program(case.spec, PROGRAMS, max_batch=case.training.batch_size)
    assert (folder / "lenet5" / "program.pte").read_bytes() == program.read_bytes()
    expected = decode((folder / "lenet5" / "expected.mjfl").read_bytes())
    assert isinstance(expected, wire.Result)
    x, y = case.shard()
    w0 = initial_weights(case.spec, case.seed)
    again = ExecuTorchTrainer(program.read_bytes(), case.spec).train(w0, x, y, case.training, seed=case.seed)
    for k, v in again.weights.items():
        assert np.array_equal(expected.weights[k], v), k  # the runtime is deterministic
    eager = TorchTrainer(case.spec, device="cpu").train(w0, x, y, case.training, seed=case.seed)
    assert max(relative_difference(eager.weights[k], again.weights[k]) for k in again.weights) < TOLERANCE / 10

    if shutil.which("javac") is None:
        pytest.skip("needs a JDK for the app's side")
    # The app's self-test on the JVM (its ExecuTorch code over the double whose runtime is
    # ExecuTorch's in Python) reads the set as Python wrote it and trains it to the same bits.
    run = subprocess.run(
        [str(SELFTEST), "--run", "r", "--dir", str(folder), "--work", str(tmp_path / "work")],
        check=True, capture_output=True, text=True, timeout=300, env={**os.environ, "MJFL_PYTHON": sys.executable},
    )  # fmt: skip
    start, line, done = (json.loads(s) for s in run.stdout.splitlines())
    assert (start["event"], start["cases"], start["set"], start["tolerance"]) == ("start", ["lenet5"], folder.name, TOLERANCE)
    assert (line["case"], line["pass"], line["max_rel_diff"], line["loss_rel_diff"], line["error"]) == (
        "lenet5", True, 0.0, 0.0, None,
    )  # fmt: skip
    # The app's reader of the memory plan (ProgramSignature) agrees with the exporter's.
    assert line["planned_mb"] * 2**20 == pytest.approx(planned_memory(program.read_bytes()), abs=0.5)
    assert done["event"] == "done" and done["pass"] is True and done["failed"] == []


@pytest.mark.slow
def test_the_tolerance_is_ten_times_the_rounding_and_a_tenth_of_a_defect() -> None:
    """Every zoo case: eager PyTorch (other kernels, other summation orders) stands in for a phone's
    rounding and must stay 10x under the tolerance; training with another seed (batch order and
    noise) or without momentum stands in for a defect and must land 10x over it."""
    import torch

    from mjfl.jobs.export import cached_programs
    from mjfl.jobs.models import initial_weights
    from mjfl.jobs.trainers import ExecuTorchTrainer, TorchTrainer

    torch.set_num_threads(1)
    programs = cached_programs([c.spec for c in ZOO_CASES], PROGRAMS, max_batch=8, workers=min(2, os.cpu_count() or 1))
    for case in ZOO_CASES:
        et = ExecuTorchTrainer(programs[case.spec][0].read_bytes(), case.spec)
        x, y = case.shard()
        w0 = initial_weights(case.spec, case.seed)
        ref = et.train(w0, x, y, case.training, seed=case.seed)

        eager = TorchTrainer(case.spec, device="cpu").train(w0, x, y, case.training, seed=case.seed)
        assert _worst(eager, ref) < TOLERANCE / 10, case.model
        assert _weakest(et.train(w0, x, y, case.training, seed=case.seed + 1), ref) > TOLERANCE * 10, case.model
        no_momentum = replace(case.training, momentum=0.0)
        assert _weakest(et.train(w0, x, y, no_momentum, seed=case.seed), ref) > TOLERANCE * 10, case.model


def _worst(r: TrainResult, ref: TrainResult) -> float:
    """The largest relative difference of any tensor: what the check compares."""
    return max(relative_difference(r.weights[k], ref.weights[k]) for k in ref.weights)


def _weakest(r: TrainResult, ref: TrainResult) -> float:
    """The smallest relative difference of any trained tensor: how plainly a defect shows in all of them."""
    return min(relative_difference(r.weights[k], ref.weights[k]) for k in ref.weights if "num_batches" not in k)


def test_a_configs_own_model_joins_the_first_day_set_and_the_app_trains_it(tmp_path: Path) -> None:
    """`mjfl devices check --config`: a job's model of its own is one more case, made and trained like the zoo's."""
    from mjfl.commands.device_check import custom_cases
    from mjfl.coordinator.config import load_config
    from mjfl.jobs.models import initial_weights
    from mjfl.jobs.trainers import ExecuTorchTrainer

    models = ROOT / "tests" / "commands" / "custom_models" / "models.py"
    config = tmp_path / "run.toml"
    config.write_text(f'[fleet]\nsize = 2\n[[jobs]]\nname = "cam"\nmodel = "{models}:MobileNetStyle"\nimage_size = 8\n'
                      'model_args = { width = 4 }\n[[jobs]]\nname = "zoo"\nmodel = "lenet5"\nimage_size = 12\n')
    (case,) = custom_cases(load_config(config))
    assert (case.key, case.input_shape, case.args) == ("custom-cam", (1, 8, 8), '{"width":4}')
    folder = golden_set(["lenet5"], cache=tmp_path / "golden", programs=PROGRAMS, extra=[case])
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["cases"] == ["lenet5", "custom-cam"]
    assert folder.name != golden_set(["lenet5"], cache=tmp_path / "golden", programs=PROGRAMS).name
    expected = decode((folder / "custom-cam" / "expected.mjfl").read_bytes())
    assert isinstance(expected, wire.Result)
    program = (folder / "custom-cam" / "program.pte").read_bytes()
    x, y = case.shard()
    again = ExecuTorchTrainer(program, case.spec).train(initial_weights(case.spec, case.seed), x, y, case.training,
                                                        seed=case.seed)
    assert all(np.array_equal(expected.weights[k], v) for k, v in again.weights.items())

    if shutil.which("javac") is None:
        pytest.skip("needs a JDK for the app's side")
    run = subprocess.run(
        [str(SELFTEST), "--run", "r", "--dir", str(folder), "--work", str(tmp_path / "work")],
        check=True, capture_output=True, text=True, timeout=300, env={**os.environ, "MJFL_PYTHON": sys.executable},
    )  # fmt: skip
    lines = [json.loads(s) for s in run.stdout.splitlines()]
    cam = next(line for line in lines if line.get("case") == "custom-cam")
    assert cam["pass"] is True and cam["error"] is None, cam
    assert lines[-1]["event"] == "done" and lines[-1]["pass"] is True
