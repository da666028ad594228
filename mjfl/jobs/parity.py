"""Parity: does a training program take the same SGD steps as eager PyTorch?

`teacher_forced` trains `steps` mini-batches, each from the *same* state in
both runtimes (the eager trajectory's weights and buffers), and returns how
far each update of the program was from eager's. Two float32
implementations that sum in different orders part at a ReLU kink (an input
within rounding of zero), so a program is judged by `PARITY`: every update
within `STEP_BOUND` but at most `KINK_STEPS`, and those within `KINK_BOUND`;
a defect (a wrong backward, a lost momentum) parts every step. The bounds
are the zoo's, measured on AVX2 and AVX-512 machines (tests/jobs/test_trainers.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mjfl.jobs.base import LocalTraining, ModelSpec

__all__ = ["KINK_BOUND", "KINK_STEPS", "STEP_BOUND", "Parity", "teacher_forced"]

STEP_BOUND = 1e-5
KINK_BOUND = 1e-3
KINK_STEPS = 3


@dataclass(frozen=True)
class Parity:
    """Per-step largest difference of the program's update from eager's, and the losses'."""

    diffs: tuple[float, ...]
    loss_diffs: tuple[float, ...]
    moved: float  # how far eager's weights moved over the steps

    @property
    def ok(self) -> bool:
        ranked = sorted(self.diffs)
        within = ranked[-KINK_STEPS - 1] if len(ranked) > KINK_STEPS else 0.0
        return bool(self.diffs) and max(self.diffs) < KINK_BOUND and within < STEP_BOUND and self.moved > 0

    def summary(self) -> str:
        kinks = sum(d >= STEP_BOUND for d in self.diffs)
        return (f"{len(self.diffs)} steps, largest update difference {max(self.diffs):.1e} "
                f"({kinks} at a kink, at most {KINK_STEPS} allowed), weights moved {self.moved:.1e}")


def _max_diff(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


def teacher_forced(
    spec: ModelSpec, program: bytes, weights: dict[str, np.ndarray], x: np.ndarray, y: np.ndarray, *,
    steps: int = 20, batch: int = 16, seed: int = 1, lr: float = 0.01, momentum: float = 0.9,
) -> Parity:
    """`steps` steps of `program` against eager PyTorch, each from eager's state (module docstring).

    Dropout noise comes from each step's seed in both runtimes alike.
    """
    from mjfl.jobs.trainers import ExecuTorchTrainer, TorchTrainer, batches

    et = ExecuTorchTrainer(program, spec)
    eager = TorchTrainer(spec, device="cpu")
    plan = batches(len(x), epochs=max(1, -(-steps * batch // len(x))), batch_size=batch, seed=seed)[:steps]
    training = LocalTraining(epochs=1, batch_size=batch, lr=lr, momentum=momentum)
    w = w0 = weights
    diffs, losses = [], []
    for i, idx in enumerate(plan):
        a = et.train(w, x[idx], y[idx], training, seed=i)
        b = eager.train(w, x[idx], y[idx], training, seed=i)
        diffs.append(_max_diff(a.weights, b.weights))
        losses.append(abs(a.mean_loss - b.mean_loss))
        w = b.weights
    return Parity(tuple(diffs), tuple(losses), _max_diff(w, w0))
