"""The micro-batcher: a turn's requests trained together per model, every request settled on its own."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from waiting import PATIENCE_S

from mjfl.coordinator.engine.clock import VirtualClock, run_virtual
from mjfl.device.emulated.microbatch import MicroBatcher

pytestmark = pytest.mark.timeout(30)


@dataclass(frozen=True)
class Model:
    name: str


A, B = Model("a"), Model("b")


class Recorder:
    """A batch trainer that answers ``(model, item * 10)`` per item and records every call."""

    def __init__(self, fail: Model | None = None, gate: threading.Event | None = None) -> None:
        self.calls: list[tuple[str, list[int]]] = []
        self.fail = fail
        self.gate = gate
        self.started = threading.Event()

    def __call__(self, model: Model, items: list[int]) -> list[tuple[str, int]]:
        self.started.set()
        if self.gate is not None:
            self.gate.wait(PATIENCE_S)  # released by the test; bounded so that a failed test leaves no thread
        self.calls.append((model.name, list(items)))
        if model == self.fail:
            raise RuntimeError(f"{model.name} diverged")
        return [(model.name, item * 10) for item in items]


def on_threads(pool: ThreadPoolExecutor):
    async def run_blocking(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    return run_blocking


async def test_a_turns_requests_are_one_call_per_model_and_each_gets_its_own_result():
    train = Recorder()
    with ThreadPoolExecutor(2) as pool:
        batcher = MicroBatcher(train, on_threads(pool), name="test")
        results = await asyncio.gather(*(batcher.submit(model, k) for k, model in enumerate([A, B, A, A, B])))
    assert results == [("a", 0), ("b", 10), ("a", 20), ("a", 30), ("b", 40)]
    assert sorted(train.calls) == [("a", [0, 2, 3]), ("b", [1, 4])]


async def test_a_cancelled_request_is_left_out_and_a_failing_group_fails_only_its_own():
    train = Recorder(fail=B)
    with ThreadPoolExecutor(2) as pool:
        batcher = MicroBatcher(train, on_threads(pool), name="test")
        waits = [asyncio.ensure_future(batcher.submit(model, k)) for k, model in enumerate([A, A, B])]
        await asyncio.sleep(0)  # every request is queued; the flush comes next turn
        waits[1].cancel()
        outcomes = await asyncio.gather(*waits, return_exceptions=True)
    assert outcomes[0] == ("a", 0)
    assert isinstance(outcomes[1], asyncio.CancelledError)
    assert isinstance(outcomes[2], RuntimeError) and "b diverged" in str(outcomes[2])
    assert sorted(train.calls) == [("a", [0]), ("b", [2])]


@contextlib.asynccontextmanager
async def one_batch_training():
    """A serial batcher on one thread whose first batch (item 0 of model A) is training until ``gate`` is set."""
    gate = threading.Event()
    train = Recorder(gate=gate)
    with ThreadPoolExecutor(1) as pool:
        batcher = MicroBatcher(train, on_threads(pool), name="test", serial=True)
        first = asyncio.ensure_future(batcher.submit(A, 0))
        assert await asyncio.to_thread(train.started.wait, PATIENCE_S)
        try:
            yield batcher, first, train, gate
        finally:
            gate.set()


async def test_serial_requests_that_come_while_a_batch_trains_make_the_next_batch():
    async with one_batch_training() as (batcher, first, train, gate):
        later = []
        for k in (1, 2, 3):  # three turns while the first batch trains
            later.append(asyncio.ensure_future(batcher.submit(A, k)))
            await asyncio.sleep(0)
        gate.set()
        assert await asyncio.gather(first, *later) == [("a", 0), ("a", 10), ("a", 20), ("a", 30)]
    assert train.calls == [("a", [0]), ("a", [1, 2, 3])]


async def test_closing_cancels_what_waits_and_what_trains():
    async with one_batch_training() as (batcher, first, _, gate):
        queued = asyncio.ensure_future(batcher.submit(A, 1))
        await asyncio.sleep(0)
        batcher.close()
        gate.set()
        outcomes = await asyncio.gather(first, queued, return_exceptions=True)
    assert all(isinstance(o, asyncio.CancelledError) for o in outcomes)


def test_on_the_virtual_clock_no_time_passes_between_gathering_and_training():
    train = Recorder()

    async def device(batcher, clock, k, delay):
        await clock.sleep(delay)
        asked = clock.now()
        result = await batcher.submit(A, k)
        return asked, clock.now(), result

    async def main():
        clock = VirtualClock()
        with ThreadPoolExecutor(1) as pool:
            batcher = MicroBatcher(train, lambda fn, *args: clock.run_blocking(pool, fn, *args), name="test")
            return await asyncio.gather(*(device(batcher, clock, k, delay) for k, delay in enumerate([1.0, 1.0, 2.5])))

    (asked0, done0, r0), (asked1, done1, r1), (asked2, done2, r2) = run_virtual(main())
    assert (asked0, asked1, asked2) == (1.0, 1.0, 2.5)
    assert (done0, done1, done2) == (asked0, asked1, asked2)  # training takes no virtual time
    assert (r0, r1, r2) == (("a", 0), ("a", 10), ("a", 20))
    assert train.calls == [("a", [0, 1]), ("a", [2])]  # one batch per moment the devices asked
