"""How late the service's event loop runs: the one loop that carries every run and every device's heartbeat.

A task asks to wake every ``every_s`` seconds and notes how late it woke:
that lateness is the loop's lag, what any callback (a heartbeat's ack, a
task's result, an API request) waits behind work that held the loop. The
lab's health (``GET /api/lab/health``) reports its p50, p99 and maximum over
the last samples kept, and `mjfl bench serve` reads them while runs share the
fleet: its goal is a p99 under 20 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Iterable
from typing import Any

import numpy as np

RECENT = 30_000  # samples a summary reads: five minutes of the loop's, at its 10 ms



class LoopWatch:
    """The loop's lag, sampled every ``every_s`` seconds; the newest ``keep`` samples kept."""

    def __init__(self, every_s: float = 0.01, keep: int = RECENT) -> None:
        self.every_s = every_s
        self.lags: deque[float] = deque(maxlen=keep)

    @classmethod
    @contextlib.asynccontextmanager
    async def watching(cls, every_s: float = 0.01) -> AsyncIterator[LoopWatch]:
        """A watch sampling while the block runs."""
        watch = cls(every_s)
        async with asyncio.TaskGroup() as group:
            task = group.create_task(watch.run(), name="loop lag")
            try:
                yield watch
            finally:
                task.cancel()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time()
            await asyncio.sleep(self.every_s)
            self.lags.append(max(loop.time() - asked - self.every_s, 0.0))

    def figures(self) -> dict[str, Any]:
        """p50, p99 and max of the lags kept, in milliseconds, and how many samples they are of."""
        return summary_ms(self.lags)


def summary_ms(seconds: Iterable[float]) -> dict[str, Any]:
    """p50 / p99 / max of ``seconds`` in milliseconds (None where there is none), and their count."""
    values = np.fromiter(seconds, dtype=float)
    if values.size == 0:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None, "samples": 0}
    p50, p99 = np.percentile(values, [50, 99])
    return {
        "p50_ms": round(float(p50) * 1e3, 3), "p99_ms": round(float(p99) * 1e3, 3),
        "max_ms": round(float(values.max()) * 1e3, 3), "samples": int(values.size),
    }
