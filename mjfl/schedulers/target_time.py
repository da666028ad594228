"""How many more rounds a kind of plan needs before a job's progress first reaches its target.

A round's test accuracy on non-IID data swings by 0.1-0.15 around a slowly
moving level (FedAvg pulls the model toward the classes of the round's
devices), so a target can be reached by a round that lands above the level
as well as by a level that rises to it. The forecast models both: the
job's recent values lie on a line (its slope floored at 0) with Gaussian
scatter around it, each kind of plan at its own level (what its devices
teach the model, measured on the rounds it planned), each future round
crosses the target with the probability the scatter gives, and the
expected number of rounds until the first crossing is summed over the
rounds left. A run that does not reach within them misses its target,
which costs more than any round: it is charged ``miss_rounds`` times the
rounds left on top.

Progress is on one scale, higher is better (an accuracy, or minus a loss).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Forecast:
    """Expected rounds until the target is first reached (a miss charged extra), and the chance of a miss."""

    rounds: float
    miss: float


def forecasts(
    history: Sequence[tuple[str, float]], target: float, rounds_left: int, *, noise: float, miss_rounds: float = 1.0
) -> dict[str, Forecast]:
    """Each kind's forecast from ``history``, the (kind of plan, value) of each recent round, oldest first.

    The line is fitted by least squares, one level per kind and one slope
    (>= 0) for all: every round moves the same model. With too few rounds for
    a slope and a scatter (the kinds plus two), each kind's level is the mean
    of its values, flat, with scatter ``noise``; the scatter is never below
    ``noise``.
    """
    if not history:
        return {}
    kinds = sorted({kind for kind, _ in history})
    y = np.asarray([value for _, value in history], dtype=np.float64)
    x = np.arange(y.size, dtype=np.float64) - (y.size - 1) / 2
    onehot = np.asarray([[kind == k for k in kinds] for kind, _ in history], dtype=np.float64)
    levels = (onehot.T @ y) / onehot.sum(axis=0)
    slope, scatter = 0.0, noise
    if y.size >= len(kinds) + 2:
        coef = np.linalg.lstsq(np.column_stack([onehot, x]), y, rcond=None)[0]
        if coef[-1] > 0:
            levels, slope = coef[:-1] + coef[-1] * x[-1], float(coef[-1])
        residuals = y - (onehot @ (levels - slope * x[-1]) + slope * x)
        scatter = max(noise, math.sqrt(float(residuals @ residuals) / (y.size - len(kinds) - 1)))
    return {
        kind: _hitting(float(level), slope, scatter, target, rounds_left, miss_rounds)
        for kind, level in zip(kinds, levels)
    }


def forecast(values: Sequence[float], target: float, rounds_left: int, *, noise: float, miss_rounds: float = 1.0) -> Forecast:
    """The forecast of one kind of plan from its own ``values`` alone (oldest first)."""
    if not values:
        raise ValueError("a forecast needs at least one value")
    return forecasts([("", v) for v in values], target, rounds_left, noise=noise, miss_rounds=miss_rounds)[""]


def _hitting(level: float, slope: float, scatter: float, target: float, rounds_left: int, miss_rounds: float) -> Forecast:
    ahead = np.arange(1, max(1, rounds_left) + 1, dtype=np.float64)
    z = (level + slope * ahead - target) / (scatter * math.sqrt(2.0))
    crossing = 0.5 * (1.0 + np.vectorize(math.erf)(z))  # P(a round's value >= target)
    survival = np.concatenate(([1.0], np.cumprod(1.0 - crossing)))  # P(not reached after j rounds)
    miss = float(survival[-1])
    return Forecast(float(survival[:-1].sum()) + miss * miss_rounds * ahead.size, miss)
