"""Reconnect delays of an emulated device (exponential backoff with jitter)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DEFAULT_BACKOFF", "Backoff"]


@dataclass(frozen=True)
class Backoff:
    """Reconnect delays: ``min(maximum, initial * factor**attempt)``, less up to ``jitter`` of it at random.

    The jitter spreads a fleet that lost its coordinator at once, so the
    restarted coordinator does not get every reconnect in the same instant.
    """

    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not (0 < self.initial <= self.maximum and self.factor >= 1 and 0 <= self.jitter < 1):
            raise ValueError("need 0 < initial <= maximum, factor >= 1 and 0 <= jitter < 1")

    def delay(self, attempt: int, rng: np.random.Generator) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return float(base * (1.0 - self.jitter * rng.random()))


DEFAULT_BACKOFF = Backoff()
"""0.5 s doubling to 30 s, less up to half at random (the JVM client's ``Backoff.defaults`` too)."""
