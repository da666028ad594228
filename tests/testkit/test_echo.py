"""The echo trainer (mjfl.testkit.echo): what devices under a coordinator test train with."""

from __future__ import annotations

import functools
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from mjfl.jobs.base import LocalTraining, ModelSpec, TrainResult
from mjfl.testkit.echo import EchoTrainer, echo_trainer

SPEC = ModelSpec("lenet5", (1, 12, 12), 10)
WEIGHTS = {"w": np.zeros((2, 3), np.float32), "b": np.arange(4, dtype=np.float32)}


def train_with(factory, weights):
    """What a worker process does with the factory it was given (``TrainerCache``): make, then train."""
    trainer = factory("torch", SPEC, b"program")
    return trainer.train(weights, np.zeros((5, 1, 12, 12), np.float32), np.zeros(5, np.int64), LocalTraining(epochs=2, batch_size=4, lr=0.1))


def test_it_returns_the_weights_plus_delta_in_their_dtype():
    result = EchoTrainer(delta=0.5).train(WEIGHTS, np.zeros((5, 1, 12, 12), np.float32), np.zeros(5), LocalTraining(epochs=3, batch_size=2, lr=0.1))
    assert isinstance(result, TrainResult) and result.samples == 5 and result.epochs == 3
    assert set(result.weights) == {"w", "b"}
    assert np.array_equal(result.weights["b"], WEIGHTS["b"] + 0.5) and result.weights["w"].dtype == np.float32
    assert np.all(WEIGHTS["w"] == 0)  # the caller's weights are left alone


def test_a_partial_of_the_factory_trains_in_a_spawned_worker():
    factory = functools.partial(echo_trainer, work_s=0.01, delta=2.0)
    assert pickle.loads(pickle.dumps(factory)).keywords == {"work_s": 0.01, "delta": 2.0}
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        result = pool.submit(train_with, factory, WEIGHTS).result(timeout=120)
    assert np.array_equal(result.weights["b"], WEIGHTS["b"] + 2.0)
    assert result.compute_s >= 0.01  # it slept its work_s there
