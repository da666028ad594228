"""The run database as a run uses it: one thread owns it, so no read, write, commit or sync blocks the event loop.

The event loop carries every run and every device's heartbeat (a lab service
runs many runs on one loop), so a run never touches its ``Storage`` from the
loop. ``RunDatabase`` opens it on a thread of its own and does every read and
write there, one at a time, in the order they were asked: one writer per
database.

* ``call(fn)`` waits (without blocking the loop) for ``fn(storage)`` and
  returns its result: the reads and writes whose answer the run needs before
  it goes on (a resumed run's state, the run's record at its start);
* ``put(fn)`` queues ``fn(storage)`` and returns at once: what observers keep
  while the run goes (a round's checkpoint and commit, a fleet event, an
  admission). Writes happen in the order they were put, so a round's
  checkpoint is written before its commit and round r before round r+1, and
  resume stays exact (``storage/checkpoints.py``).
* A put that fails is kept: no put queued after it runs, and the next
  ``put`` or ``drain`` raises it, so nothing after an unsaved round is saved
  and the run stops on the first failure with its message (what is saved can
  still be read: ``call``). A ``call`` that fails only raises to its caller.

The thread is made when the database opens and ends at ``close``; ``sync``
runs a function there from code that has no event loop (the commands' own
set-up, before and after their loops).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
from collections.abc import Callable
from typing import Self, TypeVar

from mjfl.coordinator.storage.database import Storage

T = TypeVar("T")


class RunDatabase:
    """The run database at ``path``, owned by one thread (see the module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mjfl-database")
        self._storage: Storage | None = None
        self._failure: Exception | None = None

    @classmethod
    async def open(cls, path: str | os.PathLike[str]) -> RunDatabase:
        """The database, opened (created, migrated) on its own thread."""
        database = cls(path)
        try:
            await database.call(lambda storage: None)
        except BaseException:
            database.close()
            raise
        return database

    def __enter__(self) -> Self:
        self.sync(lambda storage: None)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def call(self, fn: Callable[[Storage], T]) -> T:
        """``fn(storage)`` on the database's thread, after everything asked before it; its result."""
        return await asyncio.wrap_future(self._thread.submit(self._do, fn))

    def sync(self, fn: Callable[[Storage], T]) -> T:
        """``call`` for code with no event loop: waits on this thread."""
        return self._thread.submit(self._do, fn).result()

    def put(self, fn: Callable[[Storage], None]) -> None:
        """Queue ``fn(storage)``, in order after everything asked before it; a failure is raised later."""
        self._raise()
        self._thread.submit(self._kept, fn)

    async def drain(self) -> None:
        """Wait until everything put so far is done; raise the first failure among them."""
        await self.call(lambda storage: None)
        self._raise()

    def flush(self) -> None:
        """``drain`` for code with no event loop."""
        self.sync(lambda storage: None)
        self._raise()

    def close(self) -> None:
        """Finish what was put, close the database and end its thread (idempotent)."""
        try:
            self._thread.submit(self._close).result()
        except RuntimeError:  # closed already
            return
        self._thread.shutdown(wait=True)

    # -- on the database's thread ------------------------------------------------------

    def _do(self, fn: Callable[[Storage], T]) -> T:
        if self._storage is None:
            self._storage = Storage(self.path)
        return fn(self._storage)

    def _kept(self, fn: Callable[[Storage], None]) -> None:
        if self._failure is not None:
            return  # nothing after a failed write is written
        try:
            self._do(fn)
        except Exception as exc:  # noqa: BLE001 - kept, and raised to the run by its next put, call or drain
            self._failure = exc

    def _close(self) -> None:
        if self._storage is not None:
            self._storage.close()
            self._storage = None

    def _raise(self) -> None:
        if self._failure is not None:
            raise self._failure
