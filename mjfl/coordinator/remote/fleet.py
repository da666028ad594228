"""The real-time fleet: the engine's ``Fleet`` over the devices in the registry.

``RemoteFleet`` turns connected phones and emulated devices into what the
engine asks of a fleet (``mjfl.coordinator.engine.fleet``): their profiles,
the jobs' artifacts, and one training task at a time per device. It sends
over a registered device's connection (provision once per session and job,
then the task) and waits for the answer through the registry
(``registry.py``), which the server settles as the device answers.

The protocol lives in the sans-I/O session; this module maps its outcomes
onto the engine's vocabulary: a task answered with a valid update is a
``TaskResult``; anything else is a ``DeviceFailure`` ("rejected" when the
device broke the protocol or sent an invalid update, "failed" when it
disconnected, said bye, reported an error or missed its deadline), raised as
soon as it is known.

A task whose deadline passes is cancelled (``DeviceRegistry.abandon``); its
device stays out of ``profiles()`` until it has answered the cancelled task,
and ``run_task`` waits for that answer before sending it anything new, so a
device never trains two tasks at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mjfl.coordinator.config import TestbedConfig
from mjfl.coordinator.engine.fleet import DeviceProfileView, JobArtifacts, Task, TaskResult, Timing
from mjfl.coordinator.remote.registry import DeviceRegistry
from mjfl.device import protocol
from mjfl.device.connection import Connection
from mjfl.errors import ConfigError, DeviceFailure, EncodeError, SessionClosed
from mjfl.ids import DeviceId, JobId


@dataclass(eq=False)
class _Job:
    """A prepared job as devices receive it: its wire model spec, its program, the shards of its devices."""

    spec: protocol.ModelSpec
    program: protocol.Program
    data: dict[DeviceId, tuple[np.ndarray, np.ndarray]]
    shards: dict[DeviceId, protocol.Shard] = field(default_factory=dict)  # addressed once, when first sent

    def shard(self, job: JobId, device: DeviceId) -> protocol.Shard:
        shard = self.shards.get(device)
        if shard is None:
            if device not in self.data:
                raise RuntimeError(f"job {job!r} has no shard for device {device!r}")
            shard = self.shards[device] = protocol.Shard(*self.data[device])
        return shard


class RemoteFleet:
    """The engine's Fleet over the registry's connected devices (see the module docstring).

    ``task_timeout`` bounds every task on top of its own ``deadline_s``;
    ``max_tasks_in_flight`` tasks may be sent and not yet answered across the
    fleet, so results held at once stay bounded (a task waits for a slot
    within its deadline). ``None`` turns either off.
    """

    def __init__(
        self,
        registry: DeviceRegistry,
        *,
        task_timeout: float | None = None,
        max_tasks_in_flight: int | None = TestbedConfig.max_tasks_in_flight,
    ) -> None:
        if task_timeout is not None and not task_timeout > 0:
            raise ConfigError("task_timeout", f"must be a positive number of seconds or None, got {task_timeout!r}")
        if max_tasks_in_flight is not None and max_tasks_in_flight < 1:
            raise ConfigError("max_tasks_in_flight", f"must be >= 1 or None, got {max_tasks_in_flight!r}")
        self._registry = registry
        self.task_timeout = task_timeout
        self.max_tasks_in_flight = max_tasks_in_flight
        self._jobs: dict[JobId, _Job] = {}
        self._packs: dict[JobId, tuple[Mapping[str, Any], protocol.TensorPack]] = {}
        self._ids = itertools.count(1)
        self._slots = asyncio.Semaphore(max_tasks_in_flight) if max_tasks_in_flight is not None else None
        self.task_log: deque[tuple[DeviceId, JobId, int, float, float, str]] = deque(maxlen=100_000)
        """(device, job, round, sent_at, ended_at, outcome) of the latest tasks, event-loop time."""

    def profiles(self) -> list[DeviceProfileView]:
        """Connected devices that can take a task, in first-connection order."""
        return [info.profile for info in self._registry.available()]

    def prepare(self, jobs: Sequence[JobArtifacts]) -> None:
        """Keep each job's program, model spec and shards; devices get them with their first task.

        A job prepared again with the same program gains the shards of devices
        it had none for (a device that joined); with another program it
        starts over, and every device is provisioned again.
        """
        for job in jobs:
            program = protocol.Program(job.program)
            known = self._jobs.get(job.job)
            if known is not None and known.program.sha256 == program.sha256:
                for device, data in job.shards.items():
                    known.data.setdefault(device, data)
                continue
            spec = job.spec
            wire = protocol.ModelSpec(
                spec.label, tuple(spec.input_shape), spec.num_classes, job.batch_norm_pixels, job.dropout_shapes
            )
            self._jobs[job.job] = _Job(wire, program, dict(job.shards))

    def forget(self, jobs: Sequence[JobId]) -> None:
        """Let go of these jobs' programs, shards and last weights (their run is over; the lab service's runs
        come and go on one fleet). A job prepared again later is provisioned afresh."""
        for job in jobs:
            self._jobs.pop(job, None)
            self._packs.pop(job, None)
        # The devices stay connected: each session's binding of these jobs goes too, or it grows with every run.
        for device in self._registry.connected():
            conn = self._registry.connection(device)
            if conn is not None and isinstance(conn.session, protocol.CoordinatorSession):
                for job in jobs:
                    conn.session.forget(job)

    async def run_task(self, device: DeviceId, task: Task) -> TaskResult:
        """Provision (once per session and job), send the task, wait for a valid update.

        Raises DeviceFailure as soon as the outcome is known: the device is
        not connected, disconnects, reports an error, breaks the protocol or
        sends an invalid update, or misses ``task.deadline_s`` /
        ``task_timeout`` (the task is then cancelled).
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        limits = [x for x in (task.deadline_s, self.task_timeout) if x is not None]
        limit = min(limits) if limits else None
        conn = self._registry.connection(device)
        if conn is None or not conn.open:
            raise DeviceFailure(device, "not connected", status="failed")
        if self._registry.in_flight(device):
            # Still answering a cancelled task: never two tasks on one device.
            try:
                async with asyncio.timeout(limit):
                    await self._registry.wait_idle(device)  # also when the connection ends
            except TimeoutError:
                raise DeviceFailure(
                    device, "still busy with a cancelled task", status="failed", after_s=loop.time() - started
                ) from None
            if not conn.open:
                raise DeviceFailure(device, _gone(conn), status="failed")
        async with self._slot(device, None if limit is None else limit - (loop.time() - started)):
            if not conn.open:
                raise DeviceFailure(device, _gone(conn), status="failed")
            return await self._send_and_wait(conn, device, task, limit, None if limit is None else started + limit)

    @contextlib.asynccontextmanager
    async def _slot(self, device: DeviceId, timeout: float | None) -> AsyncIterator[None]:
        """One of ``max_tasks_in_flight`` slots, waited for at most ``timeout`` seconds."""
        if self._slots is None:
            yield
            return
        try:
            async with asyncio.timeout(timeout):
                await self._slots.acquire()
        except TimeoutError:
            raise DeviceFailure(
                device, f"no task slot free in time ({self.max_tasks_in_flight} tasks in flight)",
                status="failed", after_s=timeout or 0.0,
            ) from None
        try:
            yield
        finally:
            self._slots.release()

    async def _send_and_wait(
        self, conn: Connection, device: DeviceId, task: Task, limit: float | None, end: float | None
    ) -> TaskResult:
        """Provision if needed, send the task, wait for its valid update until ``end`` (loop time)."""
        loop = asyncio.get_running_loop()
        job = self._job(task.job)
        session = conn.session
        assert isinstance(session, protocol.CoordinatorSession)
        task_id = f"{task.job}/{task.round}/{next(self._ids)}"
        try:
            shard = job.shard(task.job, device)
            if session.binding(task.job) != (job.program.sha256, shard.sha256):
                session.send_provision(task.job, job.spec, job.program, shard)
            session.send_task(
                task_id=task_id, job_id=task.job, round=task.round, weights=self._pack(task),
                training=task.training, deadline_s=task.deadline_s, seed=task.seed,
            )
        except SessionClosed as exc:
            raise DeviceFailure(device, f"session closed: {exc.reason}", status="failed") from None
        except EncodeError as exc:
            # E.g. the message exceeds the device's announced size limit.
            raise DeviceFailure(device, f"cannot send the task: {exc}", status="failed") from None
        # No await since the checks above: the connection is still open here.
        sent_at = loop.time()
        answer = self._registry.expect(device, task_id)
        conn.flush()
        outcome = "failed"
        try:
            async with asyncio.timeout_at(end):
                result, arrived = await answer
            outcome = "ok"
        except TimeoutError:
            self._registry.abandon(device, task_id, f"no result within {limit:g} s")
            raise DeviceFailure(
                device, f"no result within the {limit:g} s deadline", status="failed", after_s=loop.time() - sent_at
            ) from None
        except DeviceFailure as failure:
            outcome = failure.status
            raise
        except asyncio.CancelledError:
            self._registry.abandon(device, task_id, "the coordinator no longer needs it")
            raise
        finally:
            self.task_log.append((device, task.job, task.round, sent_at, loop.time(), outcome))
        weights = {name: result.weights[name] for name in result.weights}
        t = result.timing
        return TaskResult(
            device, weights, result.samples, result.mean_loss, arrived - sent_at,
            Timing(t.download_s, t.compute_s, t.upload_s), result.device_state,
        )

    def _job(self, job_id: JobId) -> _Job:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise RuntimeError(f"job {job_id!r} was not prepared") from None

    def _pack(self, task: Task) -> protocol.TensorPack:
        """The task's weights laid out once per round: the engine hands every device the same dict."""
        cached = self._packs.get(task.job)
        if cached is not None and cached[0] is task.weights:
            return cached[1]
        pack = protocol.TensorPack.from_arrays({k: np.asarray(v) for k, v in task.weights.items()})
        self._packs[task.job] = (task.weights, pack)
        return pack


def _gone(conn: Connection) -> str:
    """Why a connection is no longer open, as far as its session knows."""
    session = conn.session
    return f"{session.close_code}: {session.close_reason}" if session.closed else "connection lost"


__all__ = ["RemoteFleet"]
