"""A job's round budget R_m from its earlier runs (Formula 10).

``Loss_m(r) = 1 / (g0 r + g1) + g2`` with non-negative coefficients is fitted to
the loss curves of earlier runs of the same job; R_c is the first round at
which the fitted curve reaches the target loss, and ``R_m = 1.3 R_c`` (the
paper observed a 30% error in R_c).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class LossCurve:
    """Formula 10's coefficients."""

    g0: float
    g1: float
    g2: float

    def loss(self, round_: float) -> float:
        return 1.0 / (self.g0 * round_ + self.g1) + self.g2

    def rounds_to(self, target_loss: float) -> float | None:
        """Smallest r with Loss(r) <= target (None if the curve never gets there)."""
        if target_loss <= self.g2 or self.g0 <= 0:
            return None
        return max(1.0, (1.0 / (target_loss - self.g2) - self.g1) / self.g0)


def fit_loss_curve(histories: Sequence[Sequence[float]]) -> LossCurve | None:
    """Least-squares fit of Formula 10 to every (round, loss) of earlier runs; None if too little data."""
    from scipy.optimize import curve_fit

    rounds = np.concatenate([np.arange(1, len(h) + 1) for h in histories]) if histories else np.array([])
    losses = np.concatenate([np.asarray(h, dtype=np.float64) for h in histories]) if histories else np.array([])
    keep = np.isfinite(losses)
    rounds, losses = rounds[keep], losses[keep]
    if rounds.size < 3:
        return None

    def model(r: np.ndarray, g0: float, g1: float, g2: float) -> np.ndarray:
        return 1.0 / (g0 * r + g1) + g2

    start = (1.0 / max(losses[0], 1e-3) / 2, 1.0 / max(losses[0], 1e-3), max(0.0, float(losses.min()) * 0.5))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (g0, g1, g2), _ = curve_fit(model, rounds, losses, p0=start, bounds=([0, 1e-9, 0], [np.inf, np.inf, np.inf]), maxfev=5000)
    except (RuntimeError, ValueError):
        return None
    return LossCurve(float(g0), float(g1), float(g2))


def round_budget(
    histories: Sequence[Sequence[float]],
    target_loss: float | None,
    *,
    cap: int,
    margin: float = 1.3,
) -> tuple[int, LossCurve | None]:
    """R_m = ceil(1.3 R_c) from earlier runs, never above ``cap``; ``cap`` when there is no history.

    Returns the budget and the fitted curve (None when it was not used).
    """
    if target_loss is None or not histories:
        return cap, None
    curve = fit_loss_curve(histories)
    if curve is None:
        return cap, None
    needed = curve.rounds_to(target_loss)
    if needed is None:
        return cap, curve
    return min(cap, max(1, math.ceil(margin * needed))), curve
