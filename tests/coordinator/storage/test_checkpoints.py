"""Checkpoints keep each scheduler's state as plain data: a resumed scheduler plans as the uninterrupted one did.

``format-0/`` holds a checkpoint as mjfl wrote it while checkpoints pickled
the scheduler object (commit 6e1264b): the rounds of ``scheduler_rounds.py``
played by ``meta-greedy`` with every method as a member and the learned
selector (``rounds.json``: its options, and each round's decision, six
before the checkpoint and four after it, as the uninterrupted run went on).
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import scheduler_rounds as rounds

from mjfl.coordinator.storage.checkpoints import Checkpoints, JobCheckpoint
from mjfl.errors import RunError
from mjfl.ids import JobId
from mjfl.schedulers.base import JobModel, Objective
from mjfl.schedulers.registry import METHODS, SINGLE, make_scheduler

FORMAT_0 = Path(__file__).parent / "format-0"
FAST = {"rlds": {"pretrain_rounds": 3, "plans_per_round": 4, "hidden": 8}, "bods": {"candidates": 16}}
WEIGHTS = {"conv.weight": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4), "conv.bias": np.zeros(3, np.float32)}


def job() -> JobModel:
    return JobModel(JobId("job"), 1, rounds.samples(), rounds.FRACTION, Objective(accuracy=0.9, rounds=40))


CASES = [
    *((method, {}, ()) for method in METHODS),
    ("meta-greedy", {"meta-greedy": {"selector": "learned"}}, tuple(SINGLE)),
]


@pytest.mark.parametrize(("method", "options", "members"), CASES, ids=[f"{m}{'-' + str(len(n)) if n else ''}" for m, _, n in CASES])
def test_a_scheduler_restored_from_its_checkpoint_plans_as_the_uninterrupted_one(tmp_path, method, options, members):
    def build():
        extra = {"members": members} if members else {}
        return make_scheduler(method, seed=11, options={**FAST, **options}, **extra)

    fleet, model, frequencies = rounds.fleet(), job(), np.zeros(rounds.DEVICES, np.int64)
    running = build()
    rounds.play(running, fleet, model, range(1, 5), frequencies)
    checkpoints = Checkpoints(tmp_path)
    checkpoints.save("job", JobCheckpoint(4, WEIGHTS, running.state(), 0.3, None))
    saved_frequencies = frequencies.copy()
    expected = rounds.play(running, fleet, model, range(5, 9), frequencies)

    saved = checkpoints.load("job", 4)
    resumed = build()
    saved.restore_scheduler(resumed)
    assert rounds.play(resumed, fleet, model, range(5, 9), saved_frequencies) == expected
    assert (saved.round, saved.best_accuracy, saved.stopped) == (4, 0.3, None)
    assert list(saved.weights) == list(WEIGHTS) and all(np.array_equal(saved.weights[n], WEIGHTS[n]) for n in WEIGHTS)


def test_a_checkpoint_is_json_and_arrays_that_need_no_pickle(tmp_path):
    meta = make_scheduler("meta-greedy", seed=1, options=FAST)
    rounds.play(meta, rounds.fleet(), job(), range(1, 3), np.zeros(rounds.DEVICES, np.int64))
    Checkpoints(tmp_path).save("job", JobCheckpoint(2, WEIGHTS, meta.state(), 0.5, "target"))
    document = json.loads((tmp_path / "job" / "round-000002.json").read_text())
    assert document["format"] == 1 and document["stopped"] == "target"
    assert set(document["scheduler"]["members"]) == set(meta.wins())
    with np.load(tmp_path / "job" / "round-000002.npz", allow_pickle=False) as data:
        assert {"weights/conv.weight", "weights/conv.bias"} <= set(data.files)
        assert data["weights/conv.weight"].dtype == np.float32
    names = zipfile.ZipFile(tmp_path / "job" / "round-000002.npz").namelist()
    assert not [n for n in names if not n.endswith(".npy")]
    with pytest.raises(TypeError, match="plain data"):
        Checkpoints(tmp_path).save("job", JobCheckpoint(3, WEIGHTS, {"scheduler": meta}, 0.5, None))


def test_a_checkpoint_does_not_fit_a_scheduler_configured_otherwise(tmp_path):
    random = make_scheduler("random", seed=0)
    Checkpoints(tmp_path).save("job", JobCheckpoint(1, WEIGHTS, random.state(), 0.5, None))
    meta = make_scheduler("meta-greedy", seed=0, options=FAST)
    with pytest.raises(RunError, match="does not fit the configured meta-greedy scheduler"):
        Checkpoints(tmp_path).load("job", 1).restore_scheduler(meta)
    with pytest.raises(RunError, match="no checkpoint of job 'job' after round 2"):
        Checkpoints(tmp_path).load("job", 2)


def test_a_checkpoint_that_pickled_the_scheduler_resumes_as_the_original_run_went_on(tmp_path):
    recorded = json.loads((FORMAT_0 / "rounds.json").read_text())
    shutil.copytree(FORMAT_0 / "checkpoints", tmp_path / "checkpoints")
    checkpoints = Checkpoints(tmp_path / "checkpoints")
    saved = checkpoints.load("job", recorded["saved"])
    assert (saved.round, saved.best_accuracy, saved.stopped) == (6, 0.3, None)
    assert np.array_equal(saved.weights["w"], np.arange(4, dtype=np.float32))

    meta = make_scheduler("meta-greedy", seed=recorded["seed"], options=recorded["options"], members=recorded["members"])
    saved.restore_scheduler(meta)
    before, after = recorded["rounds"][: recorded["saved"]], recorded["rounds"][recorded["saved"] :]
    frequencies = np.zeros(rounds.DEVICES, np.int64)
    for decision in before:
        frequencies[decision["plan"]] += 1
    start = recorded["saved"] + 1
    went_on = rounds.play(meta, rounds.fleet(), job(), range(start, start + len(after)), frequencies)
    assert rounds.as_recorded(went_on, after), (went_on, after)
    # Saving goes on in today's format; the old files go once two newer checkpoints are kept.
    for r in (7, 8):
        checkpoints.save("job", JobCheckpoint(r, saved.weights, meta.state(), 0.3, None))
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "job").iterdir()) == [
        "round-000007.json", "round-000007.npz", "round-000008.json", "round-000008.npz",
    ]
