"""RLDS's state in its one format (mjfl/schedulers/rlds/persistence.py): kept, restored, and read from older formats.

``rlds-format-1/`` holds a checkpoint of an RLDS job as mjfl wrote it before
the state was numbered (commit 9c8ffe6): ``scheduler_rounds.py``'s rounds 1-4
played by ``rlds``, and its checkpoint after round 8, as the uninterrupted run
went on (``rounds.json``: its seed and options, and each round's decision). Format 0 (a pickled scheduler) is read by the checkpoints' own
test (tests/coordinator/storage/test_checkpoints.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import scheduler_rounds as rounds

from mjfl.coordinator.storage.checkpoints import Checkpoints, JobCheckpoint
from mjfl.ids import JobId
from mjfl.schedulers.base import JobModel, Objective
from mjfl.schedulers.registry import make_scheduler
from mjfl.schedulers.rlds import FEATURES, RLDSScheduler
from mjfl.schedulers.rlds.persistence import FORMAT

FORMAT_1 = Path(__file__).parent / "rlds-format-1"
FAST = {"pretrain_rounds": 3, "plans_per_round": 4, "hidden": 8}
WEIGHTS = {"w": np.arange(4, dtype=np.float32)}


def job() -> JobModel:
    return JobModel(JobId("job"), 1, rounds.samples(), rounds.FRACTION, Objective(accuracy=0.9, rounds=40))


def test_a_checkpoint_of_format_1_resumes_as_the_original_run_went_on(tmp_path):
    recorded = json.loads((FORMAT_1 / "rounds.json").read_text())
    shutil.copytree(FORMAT_1 / "checkpoints", tmp_path / "checkpoints")
    saved = Checkpoints(tmp_path / "checkpoints").load("job", recorded["saved"])
    assert "format" not in saved.scheduler_state  # as written before the format was numbered
    rlds = make_scheduler("rlds", seed=recorded["seed"], options=recorded["options"])
    saved.restore_scheduler(rlds)
    assert rlds.state()["format"] == FORMAT
    assert rlds.state()["policy"]["features"] == FEATURES and rlds.learner.pretrained
    before, after = recorded["rounds"][: recorded["saved"]], recorded["rounds"][recorded["saved"] :]
    frequencies = np.zeros(rounds.DEVICES, np.int64)
    for decision in before:
        frequencies[decision["plan"]] += 1
    start = recorded["saved"] + 1
    played = rounds.play(rlds, rounds.fleet(), job(), range(start, start + len(after)), frequencies)
    assert rounds.as_recorded(played, after), (played, after)
    # What it learned since is the original's: generator and step to the bit; Adam's moments and the
    # policy to float rounding (the checkpoint was written on another machine). Where a parameter's
    # gradients were rounding noise (second moment under 1e-12), Adam scales that noise to steps of
    # its learning rate, so those few parameters are only bounded.
    went_on = Checkpoints(tmp_path / "checkpoints").load("job", start + len(after) - 1).scheduler_state
    now = rlds.state()
    assert (now["optimizer"]["step"], now["rng"]) == (went_on["optimizer"]["step"], went_on["rng"])
    assert now["baseline"] == pytest.approx(went_on["baseline"], rel=1e-6)
    second = np.asarray(went_on["optimizer"]["exp_avg_sq"])
    assert np.allclose(now["optimizer"]["exp_avg_sq"], second, rtol=1e-4, atol=1e-12)
    parameters, original = np.asarray(now["policy"]["parameters"]), np.asarray(went_on["parameters"])
    learned = second > 1e-12
    assert learned.mean() > 0.8
    assert np.allclose(parameters[learned], original[learned], rtol=1e-4, atol=1e-5)
    assert np.all(np.abs(parameters - original) <= 2 * len(after) * 0.1)


def test_a_state_kept_between_plan_and_observe_learns_and_plans_as_the_original(tmp_path):
    fleet, model, frequencies = rounds.fleet(), job(), np.zeros(rounds.DEVICES, np.int64)
    original = RLDSScheduler(11, **FAST)
    rounds.play(original, fleet, model, range(1, 3), frequencies)
    ctx = rounds.context(fleet, model, 3, frequencies)
    plan = original.plan(ctx).plan
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save("job", JobCheckpoint(3, WEIGHTS, original.state(), 0.3, None))
    kept = checkpoints.load("job", 3).scheduler_state
    assert kept["format"] == FORMAT and [d["round"] for d in kept["drawn"]] == [3]
    resumed = RLDSScheduler(99, **FAST)
    resumed.load_state(kept)
    for scheduler in (original, resumed):
        scheduler.observe(ctx, rounds.outcome(ctx, plan))
    frequencies[list(plan)] += 1
    later = [rounds.play(s, fleet, model, range(4, 8), frequencies.copy()) for s in (original, resumed)]
    assert later[0] == later[1]
    assert np.array_equal(original.learner.policy.parameters, resumed.learner.policy.parameters)


def test_a_state_that_does_not_fit_is_refused_by_name():
    state = RLDSScheduler(0, **FAST).state()
    with pytest.raises(ValueError, match="hidden size 8, not the configured 32"):
        RLDSScheduler(0).load_state(state)
    with pytest.raises(ValueError, match="format 7"):
        RLDSScheduler(0, **FAST).load_state({**state, "format": 7})
    policy = {**state["policy"], "parameters": state["policy"]["parameters"][:-1]}
    with pytest.raises(ValueError, match="parameters"):
        RLDSScheduler(0, **FAST).load_state({**state, "policy": policy})
