"""A researcher's model code runs in a bounded child (mjfl.coordinator.lab.sandbox): real processes, real limits.

Each misbehaving factory of own_models/bad.py ends in its typed refusal, and
the caller (here the test's process, in the lab the service) goes on.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from mjfl.coordinator.lab.sandbox import CodeLimits, Sandbox
from mjfl.coordinator.run.preparation import converted, evaluate_job
from mjfl.errors import Refusal, UserError
from mjfl.jobs import custom
from mjfl.jobs.base import ModelSpec, file_sha256
from mjfl.jobs.models import initial_weights

pytestmark = pytest.mark.timeout(900)

BAD = Path(__file__).parent / "own_models" / "bad.py"
GOOD = Path(__file__).parents[2] / "commands" / "custom_models" / "models.py"
SLACK_S = 60.0  # past a wall-time limit: the kill and the reaping, on a loaded machine


def spec(path: Path, factory: str) -> ModelSpec:
    return ModelSpec(f"{path}:{factory}", (1, 8, 8), 10, sha256=file_sha256(path))


def build(spec: ModelSpec) -> str:
    model, _, report = converted(spec)
    return f"{type(model).__name__}: {sum(n for _, _, n in report.counts())} operators"


def refused(limits: CodeLimits, factory: str) -> tuple[Refusal, float]:
    """``factory`` of bad.py built in a fresh sandbox: its refusal, and how long the call took once started."""
    sandbox = Sandbox(limits, what=f"{factory}'s model")
    try:
        sandbox.call(time.monotonic)  # started: what follows is the factory's time alone
        started = time.monotonic()
        with pytest.raises(Refusal) as error:
            sandbox.call(build, spec(BAD, factory))
        took = time.monotonic() - started
        if error.value.code == "model_invalid":
            assert sandbox.call(time.monotonic) > started  # the model failed, its child did not: it still answers
        else:
            with pytest.raises(Refusal) as again:  # a breach ends the child: every later call has the same answer
                sandbox.call(time.monotonic)
            assert again.value is error.value
        return error.value, took
    finally:
        sandbox.shutdown()


def test_each_breach_and_failure_is_its_typed_refusal_and_the_caller_goes_on() -> None:
    limits = CodeLimits(wall_s=20, cpu_s=600, memory_mb=3072)
    cases = {
        "sleeps": ("model_timeout", "longer than 20 s (limits.code_wall_s)"),
        "allocates": ("model_memory_limit", "more than 3072 MB (limits.code_memory_mb)"),
        "raises": ("model_invalid", "ValueError: this factory has no layer for 8x8 inputs"),
        "crashes": ("model_crashed", "ended its process (SIGSEGV)"),
        "exits": ("model_crashed", "ended its process (exit status 3)"),
        "not_a_module": ("model_invalid", "returned a str, not an nn.Module"),
    }
    with ThreadPoolExecutor(len(cases)) as pool:  # side by side: each its own child
        found = dict(zip(cases, pool.map(lambda f: refused(limits, f), cases), strict=True))
    for factory, (code, needle) in cases.items():
        error, took = found[factory]
        assert (error.code, error.status) == (code, 400), (factory, error)
        assert needle in error.message and f"{factory}'s model" in error.message, (factory, error.message)
        assert took < limits.wall_s + SLACK_S, (factory, took)


def test_cpu_past_its_limit_ends_the_child_with_its_own_refusal() -> None:
    error, _ = refused(CodeLimits(wall_s=600, cpu_s=2, memory_mb=3072), "spins")
    assert error.code == "model_cpu_limit" and "more than 2 s of CPU (limits.code_cpu_s)" in error.message


def test_a_good_model_builds_trains_nothing_here_and_evaluates_there_as_here(tmp_path: Path) -> None:
    model = spec(GOOD, "MobileNetStyle")
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(40, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 40)
    weights = initial_weights(model, 0)
    sandbox = Sandbox(CodeLimits(wall_s=600, cpu_s=600, memory_mb=4096), what="a good model")
    try:
        assert sandbox.call(build, model).startswith("MobileNetStyle: ")
        with pytest.raises(UserError):  # an error of ours, raised there, is the same error here: the child goes on
            sandbox.call(converted, ModelSpec(f"{GOOD}:MobileNetStyle", (1, 8, 8), 10, sha256="0" * 64))
        here = evaluate_job(model, weights, x, y)
        assert sandbox.evaluate(model, weights, x, y) == here
        assert sandbox.evaluate(model, weights, x, y) == here  # the test set kept there, sent once
        assert sandbox.submit(build, model).result().startswith("MobileNetStyle")  # an Executor, as the driver uses it
    finally:
        sandbox.shutdown()


def test_a_process_that_runs_no_models_code_refuses_to_import_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(custom, "_FORBIDDEN", "the lab's service process")
    with pytest.raises(RuntimeError, match="was about to run in the lab's service process"):
        custom.load_factory(f"{GOOD}:MobileNetStyle")
