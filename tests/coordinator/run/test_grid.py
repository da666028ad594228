"""A study's worker processes: each computes on one thread, BLAS and OpenMP included."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from mjfl.coordinator.run import grid


def _pools() -> list[tuple[str, int]]:
    """The thread pools of a worker that has run a study's planning (BODS's process, RLDS's policy)."""
    import threadpoolctl
    import torch

    from mjfl.schedulers import bods, rlds  # noqa: F401  (their numerics load scipy's and sklearn's libraries)

    return [("torch", torch.get_num_threads())] + [(i["prefix"], i["num_threads"]) for i in threadpoolctl.threadpool_info()]


def test_a_study_worker_holds_every_thread_pool_to_one_thread():
    spawn = multiprocessing.get_context("spawn")  # as run_cells starts them
    with ProcessPoolExecutor(1, mp_context=spawn, initializer=grid._one_thread) as pool:
        pools = pool.submit(_pools).result(timeout=120)
    assert any(name != "torch" for name, _ in pools)  # numpy's BLAS at least
    assert {name: n for name, n in pools if n != 1} == {}
