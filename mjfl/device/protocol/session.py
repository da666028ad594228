"""Session state machines of protocol v1, sans I/O (docs/protocol.md, "Sessions").

    device                                coordinator
    START --send_hello()--> HELLO         START --hello--> HELLO
    HELLO --welcome-------> OPEN          HELLO --send_welcome()--> OPEN
    any state --bye sent or received, or a protocol violation--> CLOSED

As in python-websockets' protocol objects, a session turns received messages
into events and method calls into outgoing messages, and does nothing else:
the caller moves whole WebSocket messages in with receive_text()/receive_bytes()
and out with data_to_send(), and passes ``now`` (seconds on its own monotonic
clock) where time matters. A message that breaks the protocol closes the
session: a bye with the error's code and reason is queued for the peer, the
error is kept in ``failure`` and a Closed event is emitted; receive methods
never raise for anything the peer sends.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from mjfl.device.protocol.codec import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    DEFAULT_MAX_CONTROL_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    MAX_REASON_CHARS,
    PROTOCOL_VERSIONS,
    Assembly,
    begin_binary,
    decode_text,
    encode,
    split_message,
)
from mjfl.device.protocol.messages import (
    Bye,
    Cancel,
    Error,
    Heartbeat,
    HeartbeatAck,
    Hello,
    Message,
    ModelSpec,
    Program,
    Provision,
    Result,
    Runtime,
    Settings,
    Shard,
    Task,
    TaskId,
    Timing,
    Welcome,
)
from mjfl.device.protocol.tensors import (
    DTYPES,
    Buffer,
    Signature,
    TensorPack,
    _show,
    align,
    signature,
)
from mjfl.errors import EncodeError, ProtocolError, SessionClosed
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining

logger = logging.getLogger(__name__)

WEBSOCKET_CLOSE_CODES: Mapping[str, int] = {
    "normal": 1000,
    "going_away": 1001,
    "unauthorized": 1008,
    "message_too_big": 1009,
    "internal_error": 1011,
    "heartbeat_timeout": 1011,
    "too_many_connections": 1013,
}
"""RFC 6455 section 7.4.1 close codes for bye codes; any other code closes with 1002."""


class State(enum.Enum):
    START = "start"
    HELLO = "hello"
    OPEN = "open"
    CLOSED = "closed"


@dataclass(frozen=True)
class Closed:
    """Event: the session ended while receiving, by the peer's bye or by its violation."""

    code: str
    reason: str
    by_peer: bool


Event = Message | Closed


@dataclass
class _Pending:
    """A task sent (coordinator) or received (device) and not answered yet."""

    job_id: JobId
    round: int
    signature: Signature
    cancelled: bool = False  # coordinator side: a cancel was sent


class _Session:
    """What both roles share: the receive path, closing, heartbeats and errors."""

    def __init__(
        self,
        *,
        versions: Collection[int],
        max_message_bytes: int | None,
        max_control_bytes: int | None,
        max_part_bytes: int | None,
    ) -> None:
        if not versions or not set(versions) <= set(PROTOCOL_VERSIONS):
            raise ValueError(f"versions must be a non-empty subset of {PROTOCOL_VERSIONS}")
        for name, limit, low in (
            ("max_message_bytes", max_message_bytes, 1),
            ("max_control_bytes", max_control_bytes, 1),
            ("max_part_bytes", max_part_bytes, 2**16 + 64),  # a part holds a whole JSON header
        ):
            if limit is not None and limit < low:
                raise ValueError(f"{name} must be >= {low} or None")
        self.versions = tuple(sorted(set(versions)))
        self.max_message_bytes = max_message_bytes
        self.max_control_bytes = max_control_bytes
        self.max_part_bytes = max_part_bytes
        self.heartbeat_interval: float | None = None
        self.heartbeat_timeout: float | None = None
        self.state = State.START
        self.version: int | None = None
        self.failure: ProtocolError | None = None
        self.close_code: str | None = None
        self.close_reason: str | None = None
        self._peer_max_message_bytes: int | None = None
        self._events: list[Event] = []
        self._out: list[str | bytes] = []
        self._tasks: dict[TaskId, _Pending] = {}
        self._inventory: set[str] = set()
        self._assembly: Assembly | None = None  # a split binary message being received
        self._seq = 0  # last heartbeat seq sent
        self._acked = 0  # last seq the peer acknowledged
        self._peer_seq = 0  # last seq the peer sent
        self._last_heartbeat_at: float | None = None
        self._unanswered_since: float | None = None

    # -- the I/O side ---------------------------------------------------------

    def receive(self, message: str | Buffer) -> None:
        """Feed one whole WebSocket message: str for text, bytes-like for binary."""
        if isinstance(message, str):
            self.receive_text(message)
        else:
            self.receive_bytes(message)

    def receive_text(self, text: str) -> None:
        if not isinstance(text, str):
            raise TypeError(f"receive_text takes str, not {type(text).__name__}")
        self._receive(text)

    def receive_bytes(self, data: Buffer) -> None:
        """Feed a binary message. Tensors of the events are views of ``data``: keep it unchanged."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"receive_bytes takes a bytes-like object, not {type(data).__name__}")
        self._receive(data)

    def events_received(self) -> list[Event]:
        """Events since the last call, in order."""
        events, self._events = self._events, []
        return events

    def data_to_send(self) -> list[str | bytes]:
        """Messages to write to the WebSocket since the last call, in order.

        Once ``closed`` is true and this list is drained, close the WebSocket
        with :meth:`websocket_close`.
        """
        out, self._out = self._out, []
        return out

    @property
    def closed(self) -> bool:
        return self.state is State.CLOSED

    def websocket_close(self) -> tuple[int, str]:
        """The WebSocket close code and reason (at most 123 UTF-8 bytes) of a closed session."""
        if self.close_code is None or self.close_reason is None:
            raise RuntimeError("the session is not closed")
        code = WEBSOCKET_CLOSE_CODES.get(self.close_code, 1002)
        reason = self.close_reason.encode("utf-8")[:123].decode("utf-8", errors="ignore")
        return code, reason

    # -- sending --------------------------------------------------------------

    def send_bye(self, code: str = "normal", reason: str = "") -> None:
        """End the session; ``code`` is "normal", "going_away" or an error code."""
        self._require(State.START, State.HELLO, State.OPEN)
        self._queue(Bye(code, reason))
        self._close(code, reason)

    def send_error(self, code: str, reason: str, *, task_id: str | None = None) -> None:
        """Report a failure that does not end the session."""
        self._require(State.OPEN)
        self._queue(Error(code, reason, None if task_id is None else TaskId(task_id)))

    def heartbeat_due(self, now: float) -> bool:
        """True when ``heartbeat_interval`` seconds have passed since the last heartbeat sent."""
        if self.state is not State.OPEN or self.heartbeat_interval is None:
            return False
        last = self._last_heartbeat_at
        return last is None or now - last >= self.heartbeat_interval

    def send_heartbeat(self, now: float) -> None:
        """Queue a heartbeat stamped ``now``; the peer echoes the stamp in its ack."""
        self._require(State.OPEN)
        self._queue(Heartbeat(self._seq + 1, now))
        self._seq += 1
        self._last_heartbeat_at = now
        if self._unanswered_since is None:
            self._unanswered_since = now

    def is_expired(self, now: float) -> bool:
        """True when a heartbeat has gone ``heartbeat_timeout`` seconds without any message back.

        Any message from the peer, not only an ack, proves it is alive: a peer
        busy uploading a large result answers once the upload is through.
        """
        if self.state is not State.OPEN or self.heartbeat_timeout is None:
            return False
        since = self._unanswered_since
        return since is not None and now - since >= self.heartbeat_timeout

    @property
    def receiving_parts(self) -> bool:
        """Whether a split binary message is arriving: some of its parts are in, not all (docs/protocol.md section 4)."""
        return self._assembly is not None

    # -- internals ------------------------------------------------------------

    def _receive(self, data: str | Buffer) -> None:
        if self.state is State.CLOSED:
            return  # like a closing WebSocket: whatever still arrives is dropped
        try:
            message: Message | Assembly | None
            if isinstance(data, str):
                message = decode_text(data, max_size=self.max_control_bytes)
            elif self.state is not State.OPEN or self.version is None:
                raise _unexpected(
                    f"a binary message before the session is open ({self.state.value})"
                )
            elif self._assembly is not None:
                # Text messages may come between the parts of a split message,
                # binary ones may not (docs/protocol.md, "Parts").
                message = self._assembly.add(data)
                if message is not None:
                    self._assembly = None
            else:
                message = begin_binary(
                    data,
                    version=self.version,
                    max_size=self.max_message_bytes,
                    max_header_size=self.max_control_bytes,
                )
                if isinstance(message, Assembly):
                    self._check_assembly(message)
                    self._assembly, message = message, None
            self._unanswered_since = None
            if message is None:
                return
            if isinstance(message, Bye):
                self._close(message.code, message.reason)
                self._events.append(Closed(message.code, message.reason, by_peer=True))
            else:
                self._handle(message)
        except ProtocolError as exc:
            self.failure = exc
            self._fail(exc.code, exc.reason)
        except Exception:
            # Our bug: the details go to the log, never to the peer.
            logger.exception("internal error in %s while receiving", type(self).__name__)
            self._fail("internal_error", "internal error")
            raise

    def _handle(self, message: Message) -> None:
        raise NotImplementedError

    def _check_assembly(self, assembly: Assembly) -> None:
        """Refuse a split message before its parts arrive (a role may bound what it expects)."""

    def _fail(self, code: str, reason: str) -> None:
        reason = reason[:MAX_REASON_CHARS]
        self._queue(Bye(code, reason))
        self._close(code, reason)
        self._events.append(Closed(code, reason, by_peer=False))

    def _close(self, code: str, reason: str) -> None:
        self.state = State.CLOSED
        self.close_code, self.close_reason = code, reason

    def _require(self, *states: State) -> None:
        if self.state is State.CLOSED:
            assert self.close_code is not None and self.close_reason is not None
            raise SessionClosed(self.close_code, self.close_reason)
        if self.state not in states:
            raise RuntimeError(f"not allowed in state {self.state.value}")

    def _queue(self, message: Message) -> None:
        data = encode(message, version=self.version or self.versions[-1])
        limit = self._peer_max_message_bytes  # binary messages only (docs/protocol.md, section 9)
        if isinstance(data, bytes) and limit is not None and len(data) > limit:
            raise EncodeError(
                f"a {len(data)}-byte {type(message).__name__} exceeds the peer's limit of {limit}"
            )
        if isinstance(data, bytes) and self.max_part_bytes is not None:
            self._out.extend(split_message(data, self.max_part_bytes))
        else:
            self._out.append(data)

    def _on_heartbeat(self, message: Heartbeat) -> None:
        if message.seq <= self._peer_seq:
            raise ProtocolError(
                f"heartbeat seq {message.seq} after {self._peer_seq}", code="bad_message"
            )
        self._peer_seq = message.seq
        self._queue(HeartbeatAck(message.seq, message.sent_at))

    def _on_heartbeat_ack(self, message: HeartbeatAck) -> None:
        if not self._acked < message.seq <= self._seq:
            raise ProtocolError(
                f"heartbeat_ack for seq {message.seq}; sent up to {self._seq}, acked up to {self._acked}",
                code="bad_message",
            )
        self._acked = message.seq


class CoordinatorSession(_Session):
    """The coordinator's end of one device's session.

    Receives hello, result, heartbeat(_ack), error and bye; sends welcome,
    provision, task, cancel, heartbeat(_ack), error and bye. It checks every
    result against the task it answers and remembers which artifacts the
    device holds, so a program or shard crosses the wire once per device.

    Keyword-only settings, None turns one off: ``max_message_bytes`` (largest
    binary message accepted, parts reassembled), ``max_control_bytes``
    (largest text message or JSON header), ``max_part_bytes`` (split outgoing
    binary messages into WebSocket messages of at most this size; off by
    default), ``heartbeat_interval`` and ``heartbeat_timeout`` in seconds. The
    welcome announces all but the part size to the device.
    """

    def __init__(
        self,
        coordinator_id: str,
        *,
        versions: Collection[int] = PROTOCOL_VERSIONS,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
        max_control_bytes: int | None = DEFAULT_MAX_CONTROL_BYTES,
        max_part_bytes: int | None = None,
        heartbeat_interval: float | None = DEFAULT_HEARTBEAT_INTERVAL_S,
        heartbeat_timeout: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S,
    ) -> None:
        super().__init__(
            versions=versions,
            max_message_bytes=max_message_bytes,
            max_control_bytes=max_control_bytes,
            max_part_bytes=max_part_bytes,
        )
        for name, value in (
            ("heartbeat_interval", heartbeat_interval),
            ("heartbeat_timeout", heartbeat_timeout),
        ):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be > 0 or None")
        self.coordinator_id = coordinator_id
        self.heartbeat_interval = heartbeat_interval
        self.heartbeat_timeout = heartbeat_timeout
        self.hello: Hello | None = None
        self._jobs: dict[JobId, tuple[str, str]] = {}

    @property
    def pending_tasks(self) -> frozenset[TaskId]:
        """Tasks sent and not answered yet (cancelled ones included until answered)."""
        return frozenset(self._tasks)

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
        settings = Settings(
            heartbeat_interval_s=self.heartbeat_interval,
            heartbeat_timeout_s=self.heartbeat_timeout,
            max_message_bytes=self.max_message_bytes,
            max_control_bytes=self.max_control_bytes,
        )
        assert self.version is not None
        self._queue(Welcome(self.version, self.coordinator_id, settings))
        self.state = State.OPEN

    def send_provision(self, job_id: str, model: ModelSpec, program: Program, shard: Shard) -> None:
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
            Provision(
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
        arrays = _arrays(weights)
        if not _all_finite(arrays):
            raise EncodeError("the weights hold NaN or infinite values")
        self._queue(
            Task(
                TaskId(task_id),
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
        self._tasks[TaskId(task_id)] = _Pending(JobId(job_id), round, signature(weights))

    def send_cancel(self, task_id: str, reason: str = "") -> None:
        """Ask the device to stop a pending task; it still answers with a result or an error."""
        self._require(State.OPEN)
        pending = self._tasks.get(TaskId(task_id))
        if pending is None or pending.cancelled:
            raise ValueError(f"task {task_id!r} is not pending or already cancelled")
        self._queue(Cancel(TaskId(task_id), reason))
        pending.cancelled = True

    def _handle(self, message: Message) -> None:
        kind = _kind(message)
        if self.state is State.START:
            if not isinstance(message, Hello):
                raise _unexpected(f"expected hello, got {kind}")
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
        elif self.state is State.HELLO:
            raise _unexpected(f"{kind} before the welcome")
        elif isinstance(message, Result):
            self._on_result(message)
        elif isinstance(message, Heartbeat):
            self._on_heartbeat(message)
        elif isinstance(message, HeartbeatAck):
            self._on_heartbeat_ack(message)
        elif isinstance(message, Error):
            if message.task_id is not None and self._tasks.pop(message.task_id, None) is None:
                raise ProtocolError(
                    f"error for unknown task {_show(message.task_id)}", code="unknown_task"
                )
        else:
            raise _unexpected(f"a device may not send {kind}")
        self._events.append(message)

    def _check_assembly(self, assembly: Assembly) -> None:
        """A device sends binary messages only to answer tasks: none larger than an answer.

        A result carries its task's tensors (protocol.md 7.2), so its payload
        length is known before the parts arrive. Refusing a longer one on the
        first part (``message_too_big``) bounds what one device can make the
        coordinator allocate to what it asked for, not ``max_message_bytes``.
        """
        expected = max((_payload_bytes(p.signature) for p in self._tasks.values()), default=0)
        if assembly.payload_len > expected:
            raise ProtocolError(
                f"a split message announces {assembly.payload_len} payload bytes; the pending"
                f" tasks' results hold at most {expected}",
                code="message_too_big",
            )

    def _on_result(self, result: Result) -> None:
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
        assert isinstance(result.weights, TensorPack)
        problem = _mismatch(result.weights.signature, pending.signature)
        if problem:
            raise ProtocolError(
                f"result weights differ from the task's: {problem}", code="bad_weights"
            )
        del self._tasks[result.task_id]


class DeviceSession(_Session):
    """A device's end of its session with the coordinator.

    Sends hello, result, heartbeat(_ack), error and bye; receives welcome,
    provision, task, cancel, heartbeat(_ack), error and bye. Heartbeat settings
    and the coordinator's size limit come from the welcome.

    Keyword-only settings, None turns one off: ``max_message_bytes`` (largest
    binary message accepted; announced in the hello), ``max_control_bytes``
    (largest text message or JSON header) and ``max_part_bytes`` (split
    outgoing binary messages; off by default, an OkHttp client needs it).
    """

    def __init__(
        self,
        *,
        versions: Collection[int] = PROTOCOL_VERSIONS,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
        max_control_bytes: int | None = DEFAULT_MAX_CONTROL_BYTES,
        max_part_bytes: int | None = None,
    ) -> None:
        super().__init__(
            versions=versions,
            max_message_bytes=max_message_bytes,
            max_control_bytes=max_control_bytes,
            max_part_bytes=max_part_bytes,
        )
        self.welcome: Welcome | None = None
        self._jobs: dict[JobId, Provision] = {}

    @property
    def pending_tasks(self) -> frozenset[TaskId]:
        """Tasks received and not answered yet."""
        return frozenset(self._tasks)

    def job(self, job_id: str) -> Provision | None:
        """The latest provision of ``job_id`` in this session (artifacts None once stored)."""
        return self._jobs.get(JobId(job_id))

    def send_hello(
        self,
        device_id: str,
        *,
        runtime: Runtime = "executorch",
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
            Hello(
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
        timing: Timing,
        device_state: Mapping[str, Any] | None = None,
    ) -> None:
        """Answer a pending task with trained weights (same names, dtypes and shapes, in order).

        A task whose training diverged is answered with send_error(task_id=...)
        instead: weights holding NaN or infinities raise EncodeError here.
        ``device_state``: battery, charging, thermal status (protocol.md 5.5).
        """
        self._require(State.OPEN)
        pending = self._tasks.get(TaskId(task_id))
        if pending is None:
            raise ValueError(f"task {task_id!r} is not pending")
        arrays = _arrays(weights)
        problem = _mismatch(signature(arrays), pending.signature)
        if problem:
            raise EncodeError(f"weights differ from the task's: {problem}")
        if not _all_finite(arrays):
            raise EncodeError(
                "the weights hold NaN or infinite values; report send_error(..., task_id=)"
            )
        self._queue(
            Result(
                TaskId(task_id), pending.job_id, pending.round, arrays, samples, mean_loss, timing,
                device_state,
            )
        )
        del self._tasks[TaskId(task_id)]

    def send_error(self, code: str, reason: str, *, task_id: str | None = None) -> None:
        """Report a failure; with ``task_id`` it answers that pending task (e.g. "task_failed")."""
        if task_id is not None and self.state is State.OPEN and TaskId(task_id) not in self._tasks:
            raise ValueError(f"task {task_id!r} is not pending")
        super().send_error(code, reason, task_id=task_id)
        if task_id is not None:
            del self._tasks[TaskId(task_id)]

    def _handle(self, message: Message) -> None:
        kind = _kind(message)
        if self.state is State.START:
            raise _unexpected(f"{kind} before the device's hello")
        if self.state is State.HELLO:
            if not isinstance(message, Welcome):
                raise _unexpected(f"expected welcome, got {kind}")
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
        elif isinstance(message, Provision):
            self._on_provision(message)
        elif isinstance(message, Task):
            self._on_task(message)
        elif isinstance(message, Cancel):
            if message.task_id not in self._tasks:
                return  # it crossed the device's answer on the wire
        elif isinstance(message, Heartbeat):
            self._on_heartbeat(message)
        elif isinstance(message, HeartbeatAck):
            self._on_heartbeat_ack(message)
        elif not isinstance(message, Error):
            raise _unexpected(f"a coordinator may not send {kind}")
        self._events.append(message)

    def _on_provision(self, provision: Provision) -> None:
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

    def _on_task(self, task: Task) -> None:
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
        assert isinstance(task.weights, TensorPack)
        self._tasks[task.task_id] = _Pending(task.job_id, task.round, task.weights.signature)


def _kind(message: Message) -> str:
    return {
        Hello: "hello",
        Welcome: "welcome",
        Provision: "provision",
        Task: "task",
        Result: "result",
        Cancel: "cancel",
        Heartbeat: "heartbeat",
        HeartbeatAck: "heartbeat_ack",
        Error: "error",
        Bye: "bye",
    }[type(message)]


def _unexpected(reason: str) -> ProtocolError:
    return ProtocolError(reason, code="unexpected_message")


def _arrays(weights: Mapping[str, npt.ArrayLike]) -> Mapping[str, np.ndarray]:
    """The weights as arrays, without copying (a TensorPack is kept as is)."""
    if isinstance(weights, TensorPack):
        return weights
    return {name: np.asarray(value) for name, value in weights.items()}


def _all_finite(arrays: Mapping[str, np.ndarray]) -> bool:
    if isinstance(arrays, TensorPack):
        return arrays.all_finite()
    return all(a.dtype.kind != "f" or bool(np.isfinite(a).all()) for a in arrays.values())


def _mismatch(got: Signature, expected: Signature) -> str | None:
    """How two tensor signatures differ, or None when they are the same."""
    if got == expected:
        return None
    got_names, expected_names = [g[0] for g in got], [e[0] for e in expected]
    if got_names != expected_names:
        missing = [n for n in expected_names if n not in got_names]
        extra = [n for n in got_names if n not in expected_names]
        if missing or extra:
            return f"missing {_show(missing)}, unexpected {_show(extra)}"
        return "the tensors come in a different order"
    for (name, dtype, shape), (_, want_dtype, want_shape) in zip(got, expected):
        if (dtype, shape) != (want_dtype, want_shape):
            return (
                f"{_show(name)} is {dtype} {list(shape)}, expected {want_dtype} {list(want_shape)}"
            )
    raise AssertionError("signatures differ but no difference found")


def _payload_bytes(expected: Signature) -> int:
    """The canonical payload length of tensors with these names, dtypes and shapes (protocol.md 3)."""
    end = 0
    for _name, dtype, shape in expected:
        end = align(end) + math.prod(shape) * DTYPES[dtype].itemsize
    return end
