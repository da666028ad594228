"""Micro-batching: the tasks handed over in one turn of the event loop, trained together per model.

The batched runtime (``mjfl.jobs.batched``) trains many devices' tasks of one
model as one computation. Devices ask for their training one by one, each
from its own coroutine; ``MicroBatcher`` turns those requests into batches,
for simulated and emulated devices alike:

- gather: the first request of a turn schedules a flush for the loop's next
  turn, by which time every device that got a task in this turn has asked;
- group: the flush groups the requests by key (a job's model), leaving out
  those whose device no longer waits (cancelled);
- train: each group is one blocking call, ``train(key, items)``, run off the
  event loop by the injected ``run_blocking``;
- settle: every waiting device gets its own result, or the group's exception;
  when the run is cancelled (the run is ending), so are its devices' waits.

The virtual-time fleet (``coordinator/run/simulated.py``) passes the virtual
clock's ``run_blocking`` over its worker pool: a flush is a ready callback and
the training the clock's blocking work, so no virtual time passes between
gathering and training. An emulated worker's batched training lane
(``emulator/lane.py``) passes its one training thread, ``serial``: the
requests that arrive while a batch trains make the next batch, rather than
queueing behind it a turn's worth at a time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["BatchKey", "BlockingRunner", "MicroBatcher"]

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")
Item = TypeVar("Item")


class BatchKey(Hashable, Protocol):
    """What tasks are grouped by: a job's model (the zoo's or the wire's ``ModelSpec``)."""

    @property
    def name(self) -> str: ...


K = TypeVar("K", bound=BatchKey)


class BlockingRunner(Protocol):
    """``await run_blocking(fn, *args)``: ``fn(*args)`` off the event loop (a clock's, or a thread's)."""

    def __call__(self, fn: Callable[..., T], /, *args: Any) -> Awaitable[T]: ...


class MicroBatcher(Generic[K, Item, R]):
    """Gathers a turn's requests, trains each key's together, settles every request (module docstring).

    ``train(key, items)`` returns one result per item, in order; it runs
    through ``run_blocking`` (it must pickle where that runs it in another
    process). ``name`` starts the log line of each batch.
    """

    def __init__(
        self,
        train: Callable[[K, list[Item]], Sequence[R]],
        run_blocking: BlockingRunner,
        *,
        name: str,
        serial: bool = False,
    ) -> None:
        self._train = train
        self._run_blocking = run_blocking
        self.name = name
        self.serial = serial
        self._pending: list[tuple[K, Item, asyncio.Future[R]]] = []
        self._flush_due = False
        self._running: set[asyncio.Task[None]] = set()

    async def submit(self, key: K, item: Item) -> R:
        """Queue ``item`` under ``key`` and wait for its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[R] = loop.create_future()
        self._schedule_flush(loop)
        self._pending.append((key, item, future))
        return await future

    def close(self) -> None:
        """Cancel what is queued and what is training; a call already running finishes on its own."""
        for *_, future in self._pending:
            future.cancel()
        self._pending = []
        for running in list(self._running):
            running.cancel()

    def _schedule_flush(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._flush_due or (self.serial and self._running):
            return
        self._flush_due = True
        loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_due = False
        groups: dict[K, list[tuple[Item, asyncio.Future[R]]]] = {}
        for key, item, future in self._pending:
            if not future.done():  # a device no longer waited for (cancelled) is not trained
                groups.setdefault(key, []).append((item, future))
        self._pending = []
        for key, members in groups.items():
            running = asyncio.ensure_future(self._run(key, members))
            self._running.add(running)
            running.add_done_callback(self._finished)

    def _finished(self, running: asyncio.Task[None]) -> None:
        self._running.discard(running)
        if self._pending:  # serial: what came while the batch trained is the next batch
            self._schedule_flush(running.get_loop())

    async def _run(self, key: K, members: list[tuple[Item, asyncio.Future[R]]]) -> None:
        log.info("%s: %d devices of a %s job trained together", self.name, len(members), key.name)
        try:
            results = await self._run_blocking(self._train, key, [item for item, _ in members])
        except asyncio.CancelledError:  # the run is ending: so are its devices' waits
            for _, future in members:
                future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every waiting device fails as its own training would
            for _, future in members:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), result in zip(members, results, strict=True):
            if not future.done():
                future.set_result(result)
