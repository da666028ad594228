"""The coordinator's end of a protocol v1 session, sans I/O (docs/protocol.md, "Sessions").

``CoordinatorSession``: what the coordinator sends and receives, what the
device holds, and the checks it makes of the device's results (section 7.2).
The receive path, closing, heartbeats and limits are the shared ``Session``'s
(session.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Unpack

import numpy.typing as npt

from mjfl.device.protocol import messages as wire
from mjfl.device.protocol.codec import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    Assembly,
)
from mjfl.device.protocol.session import PendingTask, Session, SessionOptions, State, unexpected
from mjfl.device.protocol.tensors import (
    _show,
    all_finite,
    as_arrays,
    mismatch,
    payload_bytes,
    signature,
)
from mjfl.errors import EncodeError, ProtocolError
from mjfl.ids import JobId
from mjfl.jobs.base import LocalTraining


class CoordinatorSession(Session):
    """The coordinator's end of one device's session.

    Receives hello, result, heartbeat(_ack), error and bye; sends welcome,
    provision, task, cancel, heartbeat(_ack), error and bye. It checks every
    result against the task it answers and remembers which artifacts the
    device holds, so a program or shard crosses the wire once per device.

    Keyword-only settings, None turns one off: ``heartbeat_interval`` and
    ``heartbeat_timeout`` in seconds, and the limits every session takes
    (``Session``). The welcome announces all but the part size to the device.
    """

    def __init__(
        self,
        coordinator_id: str,
        *,
        heartbeat_interval: float | None = DEFAULT_HEARTBEAT_INTERVAL_S,
        heartbeat_timeout: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S,
        **options: Unpack[SessionOptions],
    ) -> None:
        super().__init__(**options)
        self.coordinator_id = coordinator_id
        self.heartbeat_interval = _seconds("heartbeat_interval", heartbeat_interval)
        self.heartbeat_timeout = _seconds("heartbeat_timeout", heartbeat_timeout)
        self.hello: wire.Hello | None = None
        self._jobs: dict[JobId, tuple[str, str]] = {}

    def device_has(self, sha256: str) -> bool:
        """Whether the device holds this artifact (listed in its hello or provisioned since)."""
        return sha256 in self._inventory

    def binding(self, job_id: str) -> tuple[str, str] | None:
        """The (program, shard) sha256 ``job_id`` was provisioned with in this session; None if it was not."""
        return self._jobs.get(JobId(job_id))

    def forget(self, job_id: str) -> None:
        """Drop ``job_id``'s binding: the job is over, and a task for it would need a new provision.

        A connection outlives runs (the lab service's devices stay connected
        between them); without this it keeps a binding for every job it ever served.
        """
        self._jobs.pop(JobId(job_id), None)

    def send_welcome(self) -> None:
        """Accept the device after its hello (to refuse it, send_bye("unauthorized", ...))."""
        self._require(State.HELLO)
        settings = wire.Settings(
            heartbeat_interval_s=self.heartbeat_interval,
            heartbeat_timeout_s=self.heartbeat_timeout,
            max_message_bytes=self.max_message_bytes,
            max_control_bytes=self.max_control_bytes,
        )
        assert self.version is not None
        self._queue(wire.Welcome(self.version, self.coordinator_id, settings))
        self.state = State.OPEN

    def send_provision(
        self, job_id: str, model: wire.ModelSpec, program: wire.Program, shard: wire.Shard
    ) -> None:
        """Bind ``job_id`` to its program, shard and model; artifacts the device holds are not resent."""
        self._require(State.OPEN)
        if shard.x.shape[1:] != tuple(model.input_shape):
            raise EncodeError(
                f"shard x {shard.x.shape} does not match input shape {model.input_shape}"
            )
        send_program = program.sha256 not in self._inventory
        send_shard = shard.sha256 not in self._inventory
        if (
            send_shard
            and shard.samples
            and (shard.y.min() < 0 or shard.y.max() >= model.num_classes)
        ):
            raise EncodeError(f"shard labels must lie in [0, {model.num_classes})")
        self._queue(
            wire.Provision(
                JobId(job_id),
                model,
                program.sha256,
                shard.sha256,
                program if send_program else None,
                shard if send_shard else None,
            )
        )
        self._inventory |= {program.sha256, shard.sha256}
        self._jobs[JobId(job_id)] = (program.sha256, shard.sha256)

    def send_task(
        self,
        *,
        task_id: str,
        job_id: str,
        round: int,
        weights: Mapping[str, npt.ArrayLike],
        training: LocalTraining,
        deadline_s: float | None = None,
        seed: int | None = None,
    ) -> None:
        """Send a training task for a job provisioned in this session: train from ``weights`` as ``training`` says.

        ``seed`` (0 to 2**63 - 1) fixes the device's batch order and dropout
        noise (docs/models.md, "The task generator"); None leaves them to it.

        To broadcast one model, pass the same ``TensorPack.from_arrays(weights)``
        to every session: it is laid out and checked for NaN once.
        """
        self._require(State.OPEN)
        if task_id in self._tasks:
            raise ValueError(f"task {task_id!r} is already pending")
        binding = self._jobs.get(JobId(job_id))
        if binding is None:
            raise ValueError(f"job {job_id!r} has not been provisioned in this session")
        arrays = as_arrays(weights)
        if not all_finite(arrays):
            raise EncodeError("the weights hold NaN or infinite values")
        self._queue(
            wire.Task(
                wire.TaskId(task_id),
                JobId(job_id),
                round,
                arrays,
                training.epochs,
                training.batch_size,
                training.lr,
                training.momentum,
                training.weight_decay,
                deadline_s,
                *binding,
                seed,
            )
        )
        self._tasks[wire.TaskId(task_id)] = PendingTask(JobId(job_id), round, signature(weights))

    def send_cancel(self, task_id: str, reason: str = "") -> None:
        """Ask the device to stop a pending task; it still answers with a result or an error."""
        self._require(State.OPEN)
        pending = self._tasks.get(wire.TaskId(task_id))
        if pending is None or pending.cancelled:
            raise ValueError(f"task {task_id!r} is not pending or already cancelled")
        self._queue(wire.Cancel(wire.TaskId(task_id), reason))
        pending.cancelled = True

    def _handle(self, message: wire.Message) -> None:
        if self.state is State.START:
            self._on_hello(message)
        elif self.state is State.HELLO:
            raise unexpected(f"{message.type} before the welcome")
        elif isinstance(message, wire.Result):
            self._on_result(message)
        elif isinstance(message, wire.Error):
            if message.task_id is not None and self._tasks.pop(message.task_id, None) is None:
                raise ProtocolError(
                    f"error for unknown task {_show(message.task_id)}", code="unknown_task"
                )
        else:
            raise unexpected(f"a device may not send {message.type}")
        self._events.append(message)

    def _on_hello(self, message: wire.Message) -> None:
        """The device's first message: negotiate the version, note what it holds."""
        if not isinstance(message, wire.Hello):
            raise unexpected(f"expected {wire.Hello.type}, got {message.type}")
        common = set(message.versions) & set(self.versions)
        if not common:
            raise ProtocolError(
                f"no common protocol version: the device offers {sorted(message.versions)[:16]},"
                f" the coordinator speaks {list(self.versions)}",
                code="unsupported_version",
            )
        self.version = max(common)
        self.hello = message
        self._inventory = set(message.cached)
        self._peer_max_message_bytes = message.max_message_bytes
        self.state = State.HELLO

    def _check_assembly(self, assembly: Assembly) -> None:
        """A device sends binary messages only to answer tasks: none larger than an answer.

        A result carries its task's tensors (protocol.md 7.2), so its payload
        length is known before the parts arrive. Refusing a longer one on the
        first part (``message_too_big``) bounds what one device can make the
        coordinator allocate to what it asked for, not ``max_message_bytes``.
        """
        expected = max((payload_bytes(p.signature) for p in self._tasks.values()), default=0)
        if assembly.payload_len > expected:
            raise ProtocolError(
                f"a split message announces {assembly.payload_len} payload bytes; the pending"
                f" tasks' results hold at most {expected}",
                code="message_too_big",
            )

    def _on_result(self, result: wire.Result) -> None:
        pending = self._tasks.get(result.task_id)
        if pending is None:
            raise ProtocolError(
                f"result for unknown task {_show(result.task_id)}", code="unknown_task"
            )
        if (result.job_id, result.round) != (pending.job_id, pending.round):
            raise ProtocolError(
                f"result for task {_show(result.task_id)} names job {_show(result.job_id)} round"
                f" {result.round}, the task was job {_show(pending.job_id)} round {pending.round}",
                code="bad_message",
            )
        problem = mismatch(signature(result.weights), pending.signature)
        if problem:
            raise ProtocolError(
                f"result weights differ from the task's: {problem}", code="bad_weights"
            )
        del self._tasks[result.task_id]


def _seconds(name: str, value: float | None) -> float | None:
    """``value`` if it is None (off) or a finite number of seconds > 0; else ValueError naming it."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be > 0 or None")
    return value
