"""One task as an emulated device answers it: from its arrival to a result or an error (protocol.md 5.4-5.8).

``EmulatedDevice`` runs the steps (``device.py``: draw the round's fate,
train on the lane, stretch to the impersonated phone's time); ``TaskReply``
holds what they share: the task's session, its cancel, its record, and the
two ways a task ends. A step that ends the task without a result raises
``TaskEnded`` with the error the device answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NoReturn

import numpy as np

from mjfl.device.connection import Connection
from mjfl.device.emulated.device_model import modelled_energy
from mjfl.device.protocol import DeviceSession, Task, Timing
from mjfl.errors import SessionClosed
from mjfl.jobs.base import TrainResult

__all__ = ["Link", "TaskEnded", "TaskRecord", "TaskReply", "result_weights"]


@dataclass
class TaskRecord:
    """One task as the device saw it (times on the device's event-loop clock, ``time.monotonic``)."""

    task_id: str
    job_id: str
    round: int
    received_at: float
    target_s: float | None = None  # the impersonated round time drawn for this task
    started_at: float | None = None  # training started
    trained_at: float | None = None  # training ended
    answered_at: float | None = None
    download_s: float = 0.0
    compute_s: float = 0.0
    outcome: str = "pending"  # "result", "cancelled", "error", "lost"


@dataclass(eq=False)
class Link:
    """One session as the device sees it: the connection and the tasks it was given."""

    conn: Connection
    tasks: asyncio.Queue[tuple[Task, float, float]] = field(default_factory=asyncio.Queue)
    cancels: dict[str, asyncio.Event] = field(default_factory=dict)
    results: int = 0

    @property
    def session(self) -> DeviceSession:
        assert isinstance(self.conn.session, DeviceSession)
        return self.conn.session


class TaskEnded(Exception):
    """The task ends without a result: the error the device answers, and the record's outcome."""

    def __init__(self, code: str, reason: str, outcome: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason
        self.outcome = outcome


class TaskReply:
    """One task from its arrival (``arrived``; decoded at ``ready``) to its answer, on the link it came on."""

    def __init__(self, link: Link, task: Task, record: TaskRecord, arrived: float, ready: float) -> None:
        self.link = link
        self.task = task
        self.record = record
        self.arrived = arrived
        self.ready = ready
        self.cancel = link.cancels[task.task_id]
        self._loop = asyncio.get_running_loop()

    def now(self) -> float:
        return self._loop.time()

    async def wait_until(self, seconds: float | None) -> None:
        """Wait until ``seconds`` after the task arrived (``None``: for ever), or a cancel."""
        delay = None if seconds is None else max(0.0, self.arrived + seconds - self.now())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self.cancel.wait()

    async def drop_out(self, round_s: float | None) -> NoReturn:
        """A lost round: ``TaskEnded`` once the coordinator gave up on it, or when it would have ended.

        Silence until the coordinator's deadline cancels the task (the grace
        keeps us from racing its timer), or, with no deadline, an error when
        the round (``round_s``) would have ended.
        """
        deadline = self.task.deadline_s
        await self.wait_until(2 * deadline + 1.0 if deadline is not None else round_s or 0.0)
        self.check_cancel()
        raise TaskEnded("task_failed", "dropped out", "error")

    def check_cancel(self) -> None:
        """Raise ``TaskEnded`` (cancelled) if the coordinator cancelled the task."""
        if self.cancel.is_set():
            raise TaskEnded("cancelled", "cancelled by the coordinator", "cancelled")

    def check_in_time(self) -> None:
        """Before training: the task is neither cancelled nor past its deadline."""
        if self.cancel.is_set():
            raise TaskEnded("cancelled", "cancelled before training", "cancelled")
        if self.task.deadline_s is not None and self.now() - self.arrived > self.task.deadline_s:
            raise TaskEnded("cancelled", "the deadline passed before training", "cancelled")

    def answer_error(self, ended: TaskEnded) -> None:
        self.record.outcome, self.record.answered_at = ended.outcome, self.now()
        with contextlib.suppress(SessionClosed):
            self.link.session.send_error(ended.code, ended.reason, task_id=self.task.task_id)
            self.link.conn.flush()

    def answer_result(
        self, weights: Mapping[str, np.ndarray], trained: TrainResult, loaded: float, *,
        power_w: float | None, round_s: float | None,
    ) -> None:
        """Send the result with its timing and modelled energy (protocol.md 5.5).

        ``loaded``: the seconds spent loading the trainer; ``round_s``: the
        impersonated phone's round time, if any, which the energy is modelled
        over instead of this machine's compute time.
        """
        record, conn = self.record, self.link.conn
        done = self.now()
        record.download_s = (self.ready - self.arrived) + loaded
        record.compute_s = done - self.ready - loaded
        # The previous result's upload: binary sends since then (the link sends little else).
        upload = conn.binary_send_s if self.link.results else None
        energy = modelled_energy(power_w, record.compute_s if round_s is None else round_s)
        try:
            self.link.session.send_result(
                self.task.task_id, weights=weights, samples=int(trained.samples), mean_loss=float(trained.mean_loss),
                timing=Timing(record.download_s, record.compute_s, upload), device_state=energy,
            )
        except SessionClosed:
            return
        conn.binary_send_s = 0.0
        self.link.results += 1
        record.outcome, record.answered_at = "result", done
        conn.flush()


def result_weights(task: Task, trained: TrainResult) -> dict[str, np.ndarray]:
    """The trained weights in the task's order and dtypes; ``TaskEnded`` if one is lost or not finite."""
    try:
        ordered = {name: np.asarray(trained.weights[name], dtype=task.weights[name].dtype) for name in task.weights}
    except KeyError as exc:
        raise TaskEnded("task_failed", f"the trainer lost tensor {exc}", "error") from None
    if not math.isfinite(trained.mean_loss) or not all(np.isfinite(a).all() for a in ordered.values()):
        # Protocol 5.8: never send such weights, nor a loss the result cannot carry.
        raise TaskEnded("diverged", "the loss or weights became NaN or infinite", "error")
    return ordered
