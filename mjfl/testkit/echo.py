"""The echo trainer: devices that answer without training, for benches and tests of the coordinator.

``EchoTrainer`` returns the weights it was given plus ``delta`` after
``work_s`` seconds of sleep, so the coordinator is what is under test, not
learning: a hundred emulated devices fit on two cores (`mjfl bench
coordinator`, `mjfl bench faults`, the server and fault tests). Plug it in
through an emulated device's trainer factory, ``make_trainer=echo_trainer``
or ``functools.partial(echo_trainer, work_s=..., delta=...)``: the factory
pickles, so it reaches spawned worker processes (``run_emulated_fleet``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from mjfl.device.emulated.device_model import ModelName
from mjfl.jobs.base import LocalTraining, TrainResult

__all__ = ["EchoTrainer", "echo_trainer"]


class EchoTrainer:
    """A ``Trainer`` that returns the weights it was given, plus ``delta``, after ``work_s`` seconds of sleep."""

    def __init__(self, work_s: float = 0.0, delta: float = 0.0) -> None:
        self.work_s = work_s
        self.delta = delta

    def train(
        self, weights: Mapping[str, np.ndarray], x: np.ndarray, y: np.ndarray, training: LocalTraining, *,
        seed: int = 0,
    ) -> TrainResult:
        started = time.perf_counter()
        if self.work_s > 0:
            time.sleep(self.work_s)
        out = {k: np.asarray(v) + np.asarray(self.delta, dtype=np.asarray(v).dtype) for k, v in weights.items()}
        return TrainResult(out, len(y), training.epochs, 0, 0.0, time.perf_counter() - started)


def echo_trainer(runtime: str, model: ModelName, program: bytes, *, work_s: float = 0.0, delta: float = 0.0) -> EchoTrainer:
    """A ``TrainerFactory`` of EchoTrainers (module level, so it and its ``functools.partial`` pickle)."""
    return EchoTrainer(work_s, delta)
