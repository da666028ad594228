"""A device's end of its protocol v1 session, sans I/O (docs/protocol.md, "Sessions").

``DeviceSession``: what a device sends and receives, and the checks it makes
of the coordinator's provisions and tasks (section 7.2). The receive path,
closing, heartbeats and limits are the shared ``Session``'s (session.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any, Unpack

import numpy.typing as npt

from mjfl.device.protocol import messages as wire
from mjfl.device.protocol.session import PendingTask, Session, SessionOptions, State, unexpected
from mjfl.device.protocol.tensors import _show, all_finite, as_arrays, mismatch, signature
from mjfl.errors import EncodeError, ProtocolError
from mjfl.ids import DeviceId, JobId


class DeviceSession(Session):
    """A device's end of its session with the coordinator.

    Sends hello, result, heartbeat(_ack), error and bye; receives welcome,
    provision, task, cancel, heartbeat(_ack), error and bye. Heartbeat settings
    and the coordinator's size limit come from the welcome.

    Its settings are the limits every session takes (``Session``); the
    ``max_message_bytes`` it accepts is announced in the hello, and an OkHttp
    client needs ``max_part_bytes``.
    """

    def __init__(self, **options: Unpack[SessionOptions]) -> None:
        super().__init__(**options)
        self.welcome: wire.Welcome | None = None
        self._jobs: dict[JobId, wire.Provision] = {}

    def job(self, job_id: str) -> wire.Provision | None:
        """The latest provision of ``job_id`` in this session (artifacts None once stored)."""
        return self._jobs.get(JobId(job_id))

    def send_hello(
        self,
        device_id: str,
        *,
        runtime: wire.Runtime = "executorch",
        token: str = "",
        hardware: Mapping[str, Any] | None = None,
        cached: Iterable[str] = (),
        proof: str | None = None,
    ) -> None:
        """Open the session. ``cached`` lists the sha256 of every program and shard
        the device holds; it must keep them until the session ends. ``proof``:
        ``credentials.hello_proof`` of the coordinator's nonce, for an enrolled device."""
        self._require(State.START)
        cached = tuple(cached)
        self._queue(
            wire.Hello(
                DeviceId(device_id),
                token,
                runtime,
                self.versions,
                dict(hardware or {}),
                cached,
                self.max_message_bytes,
                proof,
            )
        )
        self._inventory = set(cached)
        self.state = State.HELLO

    def send_result(
        self,
        task_id: str,
        *,
        weights: Mapping[str, npt.ArrayLike],
        samples: int,
        mean_loss: float,
        timing: wire.Timing,
        device_state: Mapping[str, Any] | None = None,
    ) -> None:
        """Answer a pending task with trained weights (same names, dtypes and shapes, in order).

        A task whose training diverged is answered with send_error(task_id=...)
        instead: weights holding NaN or infinities raise EncodeError here.
        ``device_state``: battery, charging, thermal status (protocol.md 5.5).
        """
        self._require(State.OPEN)
        pending = self._tasks.get(wire.TaskId(task_id))
        if pending is None:
            raise ValueError(f"task {task_id!r} is not pending")
        arrays = as_arrays(weights)
        problem = mismatch(signature(arrays), pending.signature)
        if problem:
            raise EncodeError(f"weights differ from the task's: {problem}")
        if not all_finite(arrays):
            raise EncodeError(
                "the weights hold NaN or infinite values; report send_error(..., task_id=)"
            )
        self._queue(
            wire.Result(
                wire.TaskId(task_id), pending.job_id, pending.round, arrays, samples, mean_loss, timing,
                device_state,
            )
        )
        del self._tasks[wire.TaskId(task_id)]

    def send_error(self, code: str, reason: str, *, task_id: str | None = None) -> None:
        """Report a failure; with ``task_id`` it answers that pending task (e.g. "task_failed")."""
        if task_id is not None and self.state is State.OPEN and wire.TaskId(task_id) not in self._tasks:
            raise ValueError(f"task {task_id!r} is not pending")
        super().send_error(code, reason, task_id=task_id)
        if task_id is not None:
            del self._tasks[wire.TaskId(task_id)]

    def _handle(self, message: wire.Message) -> None:
        if self.state is State.START:
            raise unexpected(f"{message.type} before the device's hello")
        if self.state is State.HELLO:
            self._on_welcome(message)
        elif isinstance(message, wire.Provision):
            self._on_provision(message)
        elif isinstance(message, wire.Task):
            self._on_task(message)
        elif isinstance(message, wire.Cancel):
            if message.task_id not in self._tasks:
                return  # it crossed the device's answer on the wire
        elif not isinstance(message, wire.Error):
            raise unexpected(f"a coordinator may not send {message.type}")
        self._events.append(message)

    def _on_welcome(self, message: wire.Message) -> None:
        """The coordinator's answer to the hello: its version and the session's settings."""
        if not isinstance(message, wire.Welcome):
            raise unexpected(f"expected {wire.Welcome.type}, got {message.type}")
        if message.version not in self.versions:
            raise ProtocolError(
                f"the coordinator chose version {message.version}, the device offered {list(self.versions)}",
                code="unsupported_version",
            )
        self.version = message.version
        self.welcome = message
        self.heartbeat_interval = message.settings.heartbeat_interval_s
        self.heartbeat_timeout = message.settings.heartbeat_timeout_s
        self._peer_max_message_bytes = message.settings.max_message_bytes
        self.state = State.OPEN

    def _on_provision(self, provision: wire.Provision) -> None:
        for what, sha256, artifact in (
            ("program", provision.program_sha256, provision.program),
            ("shard", provision.shard_sha256, provision.shard),
        ):
            if artifact is None and sha256 not in self._inventory:
                raise ProtocolError(
                    f"provision of job {_show(provision.job_id)} omits {what} {sha256[:16]}...,"
                    " which the device does not hold",
                    code="missing_artifact",
                )
        self._inventory |= {provision.program_sha256, provision.shard_sha256}
        # Keep the binding, not the artifacts: they are the caller's to store.
        self._jobs[provision.job_id] = dataclasses.replace(provision, program=None, shard=None)

    def _on_task(self, task: wire.Task) -> None:
        provision = self._jobs.get(task.job_id)
        if provision is None:
            raise ProtocolError(
                f"task for job {_show(task.job_id)}, never provisioned", code="unknown_job"
            )
        for sha256 in (task.program_sha256, task.shard_sha256):
            if sha256 not in self._inventory:
                raise ProtocolError(
                    f"task {_show(task.task_id)} needs {sha256[:16]}..., which was never provisioned",
                    code="missing_artifact",
                )
        if (task.program_sha256, task.shard_sha256) != (
            provision.program_sha256,
            provision.shard_sha256,
        ):
            raise ProtocolError(
                f"task {_show(task.task_id)} names artifacts other than job {_show(task.job_id)}'s provision",
                code="bad_message",
            )
        if task.task_id in self._tasks:
            raise ProtocolError(
                f"task {_show(task.task_id)} is already pending", code="bad_message"
            )
        self._tasks[task.task_id] = PendingTask(task.job_id, task.round, signature(task.weights))
