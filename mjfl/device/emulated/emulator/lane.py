"""The training lane: one thread where the emulated devices of a process train, one at a time or batched."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from mjfl.device.emulated.device_model import ModelName, TrainerCache, TrainerFactory
from mjfl.device.emulated.microbatch import MicroBatcher
from mjfl.device.protocol import Task
from mjfl.jobs.base import TrainResult

__all__ = ["TrainingLane"]

T = TypeVar("T")


@dataclass(frozen=True)
class _Queued:
    """A device's task waiting for the batched lane: the task, its shard and its seed."""

    task: Task
    x: np.ndarray
    y: np.ndarray
    seed: int


class TrainingLane:
    """One training thread and its trainer cache: devices sharing a lane train one at a time.

    The trainers (ExecuTorch modules) are kept by the device model's
    ``TrainerCache``, so a job's program is loaded once per lane.
    ``torch_threads`` sets torch's intra-op threads for the process before the
    first training (1 in worker processes: they share the cores).

    A ``batched`` lane (the batched runtime, ``mjfl.jobs.batched``) trains
    the devices' tasks together instead, through the micro-batcher
    (``devices/microbatch.py``) on its thread: the tasks that arrive while it
    trains (or in the same turn of the event loop) are its next batch, each
    model's in one ``train_many`` call; every device still gets its own
    result.
    """

    def __init__(
        self,
        make_trainer: TrainerFactory | None = None,
        *,
        max_trainers: int = 8,
        torch_threads: int | None = None,
        batched: bool = False,
    ) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mjfl-train")
        self._trainers = TrainerCache(make_trainer, size=max_trainers, torch_threads=torch_threads)
        self.batched = batched
        self._torch_threads = torch_threads
        self._batcher: MicroBatcher[ModelName, _Queued, TrainResult] | None = None
        if batched:
            self._batcher = MicroBatcher(self._train_batch, self._on_thread, name="batched lane", serial=True)
        self._batched_trainers: dict[ModelName, Any] = {}

    async def train(
        self, runtime: str, model: ModelName, program_sha256: str, program: bytes, task: Task,
        x: np.ndarray, y: np.ndarray, seed: int,
    ) -> tuple[TrainResult, float]:
        """Train ``task`` on the lane's thread; the result and the seconds spent loading the trainer."""
        if self._batcher is not None:
            return await self._batcher.submit(model, _Queued(task, x, y, seed)), 0.0
        work = functools.partial(
            self._trainers.train, runtime, model, program_sha256, lambda: program, task.weights, x, y,
            task.training, seed=seed,
        )
        return await self._on_thread(work)

    async def _on_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _train_batch(self, model: ModelName, queued: Sequence[_Queued]) -> list[TrainResult]:
        """On the lane's thread: the batched trainer of ``model`` over the queued tasks."""
        from mjfl.jobs.batched import BatchedTask

        tasks = [
            BatchedTask({k: np.array(v) for k, v in q.task.weights.items()}, q.x, q.y, q.task.training, q.seed)
            for q in queued
        ]
        return list(self._batched_trainer(model).train_many(tasks))

    def _batched_trainer(self, model: ModelName) -> Any:
        trainer = self._batched_trainers.get(model)
        if trainer is None:
            from mjfl.jobs.base import ModelSpec
            from mjfl.jobs.batched import BatchedTrainer

            if self._torch_threads is not None:
                import torch

                torch.set_num_threads(self._torch_threads)
            # The eager model of the provision's spec, as the torch runtime's trainer builds it.
            spec = ModelSpec(model.name, tuple(model.input_shape), model.num_classes)  # type: ignore[arg-type]
            trainer = self._batched_trainers[model] = BatchedTrainer(spec)
        return trainer

    def close(self) -> None:
        """Stop taking work; a training already running finishes on its own."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._batcher is not None:
            self._batcher.close()
