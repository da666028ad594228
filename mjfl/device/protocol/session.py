"""What both roles of a protocol v1 session share, sans I/O (docs/protocol.md, "Sessions").

    device (device.py)                    coordinator (coordinator.py)
    START --send_hello()--> HELLO         START --hello--> HELLO
    HELLO --welcome-------> OPEN          HELLO --send_welcome()--> OPEN
    any state --bye sent or received, or a protocol violation--> CLOSED

As in python-websockets' protocol objects (``protocol.py``, with its roles in
``server.py`` and ``client.py``), a session turns received messages into
events and method calls into outgoing messages, and does nothing else: the
caller moves whole WebSocket messages in with receive_text()/receive_bytes()
and out with data_to_send(), and passes ``now`` (seconds on its own monotonic
clock) where time matters. A message that breaks the protocol closes the
session: a bye with the error's code and reason is queued for the peer, the
error is kept in ``failure`` and a Closed event is emitted; receive methods
never raise for anything the peer sends.

Here: the receive path, closing, heartbeats, errors and the size limits.
What each role may receive and send, and what it checks (section 7.2), is in
its own module: ``CoordinatorSession`` (coordinator.py) and ``DeviceSession``
(device.py).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TypedDict

from mjfl.device.protocol.codec import (
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
from mjfl.device.protocol.messages import Bye, Error, Heartbeat, HeartbeatAck, Message, TaskId
from mjfl.device.protocol.tensors import Buffer, Signature
from mjfl.errors import EncodeError, ProtocolError, SessionClosed
from mjfl.ids import JobId

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
class PendingTask:
    """A task sent (coordinator) or received (device) and not answered yet."""

    job_id: JobId
    round: int
    signature: Signature
    cancelled: bool = False  # coordinator side: a cancel was sent


class SessionOptions(TypedDict, total=False):
    """The keyword-only settings both roles take; a limit of None is off (defaults: Session)."""

    versions: Collection[int]
    max_message_bytes: int | None
    max_control_bytes: int | None
    max_part_bytes: int | None


class Session:
    """What both roles share: the receive path, closing, heartbeats and errors.

    A role says what it does with a message (``_handle``) and may refuse a
    split message on its first part (``_check_assembly``). Its settings, on by
    default: ``versions`` it speaks, ``max_message_bytes`` (largest binary
    message accepted, parts reassembled), ``max_control_bytes`` (largest text
    message or JSON header), ``max_part_bytes`` (split outgoing binary
    messages into WebSocket messages of at most this size; off by default).
    """

    def __init__(
        self,
        *,
        versions: Collection[int] = PROTOCOL_VERSIONS,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
        max_control_bytes: int | None = DEFAULT_MAX_CONTROL_BYTES,
        max_part_bytes: int | None = None,
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
        self._tasks: dict[TaskId, PendingTask] = {}
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
    def pending_tasks(self) -> frozenset[TaskId]:
        """Tasks sent (coordinator) or received (device) and not answered yet; a cancelled one
        stays pending until it is answered."""
        return frozenset(self._tasks)

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
                raise unexpected(
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
            if message is not None:
                self._dispatch(message)
        except ProtocolError as exc:
            self.failure = exc
            self._fail(exc.code, exc.reason)
        except Exception:
            # Our bug: the details go to the log, never to the peer.
            logger.exception("internal error in %s while receiving", type(self).__name__)
            self._fail("internal_error", "internal error")
            raise

    def _dispatch(self, message: Message) -> None:
        """A bye and, once open, heartbeats are both roles' (sections 5.7, 5.9); the rest is the role's."""
        if isinstance(message, Bye):
            self._close(message.code, message.reason)
            self._events.append(Closed(message.code, message.reason, by_peer=True))
        elif self.state is State.OPEN and isinstance(message, Heartbeat):
            self._on_heartbeat(message)
            self._events.append(message)
        elif self.state is State.OPEN and isinstance(message, HeartbeatAck):
            self._on_heartbeat_ack(message)
            self._events.append(message)
        else:
            self._handle(message)

    def _handle(self, message: Message) -> None:
        """What the role does with a message it may receive; ProtocolError for one it may not."""
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
                f"a {len(data)}-byte {message.type} exceeds the peer's limit of {limit}"
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


def unexpected(reason: str) -> ProtocolError:
    """A message the session's state or role does not allow (section 7.1)."""
    return ProtocolError(reason, code="unexpected_message")
