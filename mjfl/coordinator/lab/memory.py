"""The lab service's memory over many runs: ended runs' pages handed back, without stalling the loop.

What a run allocates for its life (its data, programs, evaluations) is freed
when it ends, but glibc keeps freed pages inside its arenas, and the service's
resident memory grows run after run though no object of an ended run is left
(`mjfl bench serve`'s memory figure measures it; docs/lab.md, section 9, has
the readings). So after each run the ended run's reference cycles are
collected and the free pages handed back (glibc's ``malloc_trim``).

A full collection walks every object the process holds; once the service is
up, those are its imports and its long-lived state, never garbage. ``settle``
moves them out of the collector's sight (``gc.freeze``), so a collection
after a run walks only what came since: a few milliseconds where a full one
of the whole heap was 0.1-0.3 s on the loop that carries every run and
heartbeat. The trim runs on a thread (ctypes lets the GIL go for the call).
Elsewhere than glibc (musl, macOS) there is nothing to trim this way.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
import gc
from collections.abc import Callable


def settle() -> None:
    """The service is up: what it holds now is kept for its life, and no collection walks it again."""
    gc.collect()
    gc.freeze()


async def give_back_free_memory() -> None:
    """A run ended: its cycles collected (those since ``settle`` only), then the heap's free pages handed back."""
    gc.collect()  # the ended run's reference cycles first, or what they hold is freed after the trim
    trim = _malloc_trim()
    if trim is not None:
        await asyncio.to_thread(trim, 0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name is not None else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to hand back this way
        return None
