"""The lab's memory over many runs (``lab/memory.py``): what a run's end hands back, and what it costs the loop."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from mjfl.coordinator.lab import memory


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(memory._malloc_trim() is None or not Path("/proc/self/status").exists(), reason="glibc on Linux only")
async def test_a_runs_end_hands_the_heaps_free_pages_back() -> None:
    # A heap left as a run leaves it: most of what it allocated freed, a little kept here and there, so that
    # glibc cannot hand the freed pages back on its own (they are not at the heap's top).
    chunks = [bytearray(2048) for _ in range(40_000)]  # 80 MiB, each chunk from malloc (too big for Python's own)
    kept = chunks[::64]
    del chunks
    held = _rss_mib()
    await memory.give_back_free_memory()
    assert held - _rss_mib() > 40, "the freed 79 MiB stayed in the heap"
    assert len(kept) == 625


def test_once_settled_a_collection_walks_only_what_came_since() -> None:
    try:
        memory.settle()
        assert gc.get_freeze_count() > 0  # the service's imports and state, out of the collector's sight
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1  # what came since is still collected
    finally:
        gc.unfreeze()
