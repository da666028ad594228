"""The task generator: batch order and dropout noise from a task's seed.

Every device trains a task with the same numbers, whatever it runs on: an
emulated device here, the app on a phone (`TaskRandom.java`), the JVM. The
algorithm is docs/models.md, "The task generator"; it is counter-based
SplitMix64, so each number is one formula of (key, index), drawn here for a
whole array at once. A task's seed is the coordinator's, derived from the
run's seed like every other stream (``mjfl.seeds``, ``Purpose.TASK``); this
generator, shared with the app, starts from it.

    ORDER = draw(seed, 0), NOISE = draw(seed, 1)
    epoch e's permutation: 0..n-1 sorted by draw(draw(ORDER, e), j), unsigned
    noise value c (one running counter per task): (draw(NOISE, c) >> 40) * 2**-24
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_SEED", "TaskRandom", "draw"]

MAX_SEED = 2**63 - 1
"""Seeds are 0..2**63-1: a signed 64-bit integer on every platform."""

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_ONE = np.uint64(1)
_S30, _S27, _S31, _S40 = (np.uint64(k) for k in (30, 27, 31, 40))
_UNIT = np.float32(2.0**-24)


def draw(key: int | np.uint64, index: np.ndarray | int) -> np.ndarray:
    """mix(key + (index + 1) * GAMMA) for every index, as uint64 (wrapping arithmetic)."""
    i = np.atleast_1d(np.asarray(index, dtype=np.uint64))
    z = np.uint64(key) + (i + _ONE) * _GAMMA
    z = (z ^ (z >> _S30)) * _MIX1
    z = (z ^ (z >> _S27)) * _MIX2
    return z ^ (z >> _S31)


def _one(key: int | np.uint64, index: int) -> np.uint64:
    return np.uint64(draw(key, index)[0])


class TaskRandom:
    """One task's numbers: `permutation(epoch, n)` for its batch order, `noise(shape)` for dropout.

    `noise` draws from the task's single running counter, so calls must
    follow the training contract's order: step after step, and within a step
    the dropout sites in the program's input order.
    """

    def __init__(self, seed: int) -> None:
        if not 0 <= int(seed) <= MAX_SEED:
            raise ValueError(f"a task seed must be in [0, 2**63), got {seed}")
        self.seed = int(seed)
        self._order = _one(self.seed, 0)
        self._noise = _one(self.seed, 1)
        self._counter = 0

    def permutation(self, epoch: int, n: int) -> np.ndarray:
        """Epoch ``epoch``'s order of 0..n-1 (int64): by increasing unsigned key, ties by index."""
        keys = draw(_one(self._order, epoch), np.arange(n, dtype=np.uint64))
        return np.argsort(keys, kind="stable").astype(np.int64)

    def noise(self, shape: tuple[int, ...]) -> np.ndarray:
        """The next ``prod(shape)`` numbers as float32 U[0, 1) in C order (24 random bits each)."""
        count = int(np.prod(shape, dtype=np.int64))
        start = self._counter
        self._counter += count
        bits = draw(self._noise, np.arange(start, start + count, dtype=np.uint64)) >> _S40
        return (bits.astype(np.float32) * _UNIT).reshape(shape)
