"""Two clocks for one engine: the wall clock and a virtual clock.

The engine only ever asks a Clock for the time, to sleep, and to run blocking
work (training, evaluation) off the event loop. With the real clock these are
``loop.time()``, ``asyncio.sleep`` and ``run_in_executor``. With the virtual
clock the event loop's time jumps to the next timer whenever every task is
waiting, so ``await clock.sleep(600)`` costs no wall time and a 100-device,
multi-hour experiment runs as fast as its training does.

Determinism. Blocking work runs for real (in threads or worker processes)
while virtual time stands still: the loop does not jump ahead while any such
work is outstanding. So what happens at which virtual time depends only on the
sampled durations, never on how fast this machine trains, and the same seed
gives the same schedule.
"""

from __future__ import annotations

import asyncio
import math
import selectors
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import Executor
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Clock(Protocol):
    """Time as the engine sees it (seconds; the origin is arbitrary)."""

    def now(self) -> float: ...

    async def sleep(self, seconds: float) -> None: ...

    async def run_blocking(self, executor: Executor | None, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` off the event loop and wait for its result."""
        ...


def wall_offset() -> float:
    """What turns the running event loop's time into the wall clock's (Unix seconds): add it."""
    return time.time() - asyncio.get_running_loop().time()


class RealClock:
    """The wall clock of the running event loop."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def run_blocking(self, executor: Executor | None, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(executor, fn, *args)


class _VirtualSelector(selectors.BaseSelector):
    """The loop's selector, but a wait with nothing to wait for advances virtual time."""

    def __init__(self, loop: VirtualEventLoop, real: selectors.BaseSelector) -> None:
        self._loop = loop
        self._real = real

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is not None and timeout <= 0:
            return self._real.select(0)
        if self._loop.outstanding:
            # Real work is running: wait for it in real time, time stands still.
            return self._real.select(None)
        events = self._real.select(0)
        if events or timeout is None:
            return events or self._real.select(None)
        self._loop.advance(timeout)
        return []

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._real.modify(fileobj, events, data)

    def close(self) -> None:
        self._real.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._real.get_key(fileobj)

    def get_map(self) -> Any:
        return self._real.get_map()


class VirtualEventLoop(asyncio.SelectorEventLoop):
    """An asyncio loop whose ``time()`` is virtual and jumps to the next timer when idle."""

    def __init__(self) -> None:
        self._virtual_now = 0.0
        self.outstanding = 0
        super().__init__(selectors.DefaultSelector())
        self._selector = _VirtualSelector(self, self._selector)  # type: ignore[has-type]

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        self._virtual_now += seconds
        # asyncio runs a timer once it is due within the clock's resolution of now (1 ns). Past 2**24 s (194
        # days) a nanosecond is below the spacing of floats there, so a timer due now would never run: the
        # resolution grows with the time, a few float spacings.
        self._clock_resolution = max(1e-9, 4 * math.ulp(self._virtual_now))


class VirtualClock:
    """The clock of a VirtualEventLoop: sleeping is free, blocking work freezes time."""

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def run_blocking(self, executor: Executor | None, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        if not isinstance(loop, VirtualEventLoop):
            raise RuntimeError("VirtualClock needs a VirtualEventLoop (use run_virtual)")  # noqa: TRY004 - a misuse, not a bad argument
        loop.outstanding += 1
        try:
            return await loop.run_in_executor(executor, fn, *args)
        finally:
            # Runs in the same loop iteration that delivers the result, before
            # the loop may next consider advancing time.
            loop.outstanding -= 1


def run_virtual(main: Coroutine[Any, Any, T]) -> T:
    """Run ``main`` on a fresh VirtualEventLoop (time starts at 0)."""
    with asyncio.Runner(loop_factory=VirtualEventLoop) as runner:
        return runner.run(main)
