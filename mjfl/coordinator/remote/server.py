"""The coordinator's WebSocket server and the real-time fleet (docs/testbed.md).

Phones and emulated devices connect here and speak protocol v1
(docs/protocol.md); ``RemoteFleet`` turns them into the engine's ``Fleet``.

One connection, one device session, served by the connection runner
(``mjfl.android_bridge.connection``: reader, writer, heartbeats, close; the
same runner serves emulated devices), whose task is owned by websockets'
``Server``, which ``CoordinatorServer`` closes and awaits. This module
answers the hello (credentials, welcome, the device registry), settles the
tasks ``RemoteFleet`` waits on (results, errors, a session's end) and records
heartbeat round trips.

The protocol lives in the sans-I/O session; this module maps its outcomes
onto the engine's vocabulary: a task answered with a valid update is a
``TaskResult``; anything else is a
``DeviceFailure`` ("rejected" when the device broke the protocol or sent an
invalid update, "failed" when it disconnected, said bye, reported an error
or missed its deadline), raised as soon as it is known.

A device misbehaving closes *its* session (bye with the error code, then the
WebSocket close code of protocol.md section 8). Nothing a device sends can
raise out of its connection, so other devices and jobs never notice.

Decisions:

* Duplicate device ids: the newer connection replaces the older one, which
  gets ``bye going_away`` and loses its pending task. A phone whose Wi-Fi
  dropped reconnects before the old TCP connection is known to be dead
  (that takes up to ``heartbeat_timeout``); refusing it would lock it out
  until then.
* Shutdown says ``bye going_away`` ("coordinator shutdown") to every device,
  the protocol's code for a voluntary end (a "shutdown" code would be an
  error code and close with 1002). Emulated devices stop on it; devices of a
  coordinator that crashed see no bye and reconnect.
* Credentials (docs/security.md): every handshake response carries a fresh
  nonce (``MJFL-Nonce``); an enrolled device proves its secret with an HMAC
  of it in the hello (checked against ``settings.keys`` or ``run_secrets``).
  The shared ``settings.token`` is the lab shortcut; with neither keys nor
  token, any device is welcome.
* A task whose deadline passes is cancelled; its device stays out of
  ``profiles()`` until it has answered the cancelled task, and ``run_task``
  waits for that answer before sending it anything new, so a device never
  trains two tasks at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import math
import ssl
import statistics
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve

from mjfl.android_bridge.connection import Connection
from mjfl.android_bridge.protocol import (
    DEFAULT_MAX_CONTROL_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    Closed,
    CoordinatorSession,
    Error,
    HeartbeatAck,
    Hello,
    Program,
    Result,
    Shard,
    State,
    TensorPack,
)
from mjfl.android_bridge.protocol import ModelSpec as WireModelSpec
from mjfl.android_bridge.protocol.credentials import (
    NONCE_HEADER,
    new_nonce,
    proof_matches,
    token_matches,
)
from mjfl.coordinator.engine.fleet import DeviceProfileView, JobArtifacts, Task, TaskResult, Timing
from mjfl.coordinator.remote.keys import KeyStore
from mjfl.errors import ConfigError, DeviceFailure, EncodeError, RunError, SessionClosed, UserError
from mjfl.ids import DeviceId, JobId
from mjfl.profiling.profiles import DeviceProfile

log = logging.getLogger(__name__)

DEFAULT_A = 0.005
DEFAULT_MU = 500.0
"""The neutral profile of a device nobody profiled (when no profile is known at all).

a = 5 ms per sample and epoch with a mean fluctuation of 2 ms (1/mu): the
middle of the synthetic fleet's ranges (mjfl/schedulers/synthetic.py), so an
unknown device is planned as an average phone, neither favoured nor shunned.
When some profiles are known, unknown devices get their median instead.
"""

# Codes with which *we* close a session because of what the device sent: its
# pending task is "rejected". Any other end (bye, lost connection, heartbeat
# timeout, shutdown, replacement) leaves it "failed".
_FAILED_CODES = frozenset({"normal", "going_away", "heartbeat_timeout", "internal_error"})

ProgressCallback = Callable[[int, int], None]
Authorize = Callable[[Hello], bool]


@dataclass(frozen=True)
class ServerSettings:
    """Limits and timers of the coordinator's server; ``None`` turns one off.

    ``max_message_bytes``/``max_control_bytes``/``max_part_bytes`` are the
    sessions' limits (protocol.md section 9); the WebSocket library's own
    message limit follows ``max_message_bytes`` (or the part size when parts
    are on). ``heartbeat_timeout`` must exceed the transfer time of the
    largest single WebSocket message. ``handshake_timeout`` bounds the
    opening handshake plus the hello (the session has no clock before its
    welcome). ``task_timeout`` bounds every task on top of its own
    ``deadline_s``. ``close_timeout`` bounds one connection's closing
    handshake, ``shutdown_timeout`` the whole server's. ``token``: the
    shared lab token a device may present instead of a proof; ``keys``: the
    enrolled devices' key store (``mjfl.coordinator.remote.keys``); with neither,
    any device is accepted. ``tls_cert``/``tls_key`` (PEM): serve ``wss://``.

    Limits against a stranger or a broken device (docs/faults.md):
    ``max_connections_per_address`` connections open at once from one IP
    address (the next gets ``bye too_many_connections``, close 1013; an
    emulated fleet on one host needs one per device);
    ``max_queued_messages`` WebSocket messages read ahead of the session per
    device, so one device holds at most that many times the WebSocket
    message limit in the coordinator's memory before TCP pushes back (a split
    result is bounded by its task's size, see ``CoordinatorSession``);
    ``max_tasks_in_flight`` tasks sent and not yet answered across the
    fleet, so results held at once stay bounded (a task waits for a slot
    within its deadline).
    """

    coordinator_id: str = "mjfl-coordinator"
    max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES
    max_control_bytes: int | None = DEFAULT_MAX_CONTROL_BYTES
    max_part_bytes: int | None = None
    heartbeat_interval: float | None = 10.0
    heartbeat_timeout: float | None = 60.0
    handshake_timeout: float | None = 10.0
    task_timeout: float | None = None
    close_timeout: float = 5.0
    shutdown_timeout: float = 10.0
    token: str | None = None
    keys: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    backlog: int = 1024
    heartbeat_samples: int = 100_000
    max_connections_per_address: int | None = 1024
    max_queued_messages: int | None = 4
    max_tasks_in_flight: int | None = 1024

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "heartbeat_timeout", "handshake_timeout", "task_timeout"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(name, f"must be a positive number of seconds or None, got {value!r}")
        for name in ("close_timeout", "shutdown_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(name, f"must be a positive number of seconds, got {value!r}")
        if (
            self.heartbeat_interval is not None
            and self.heartbeat_timeout is not None
            and self.heartbeat_timeout <= self.heartbeat_interval
        ):
            raise ConfigError("heartbeat_timeout", "must exceed heartbeat_interval")
        for name in ("max_message_bytes", "max_control_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(name, f"must be >= 1 or None, got {value!r}")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("tls_key" if self.tls_key is None else "tls_cert", "tls_cert and tls_key go together")
        if self.backlog < 1 or self.heartbeat_samples < 1:
            raise ConfigError("backlog", "backlog and heartbeat_samples must be >= 1")
        for name in ("max_connections_per_address", "max_queued_messages", "max_tasks_in_flight"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(name, f"must be >= 1 or None, got {value!r}")

    def websocket_max_size(self) -> int | None:
        """The largest WebSocket message to accept: a whole protocol message, or one part."""
        if self.max_message_bytes is None:
            return None
        if self.max_part_bytes is not None:
            # Parts arrive as separate WebSocket messages; the session checks the total.
            return min(self.max_message_bytes, max(self.max_part_bytes, self.max_control_bytes or 0))
        return self.max_message_bytes


@dataclass(frozen=True)
class ConnectedDevice:
    """What the server knows of a connected device."""

    device: DeviceId
    hello: Hello
    profile: DeviceProfileView
    profile_source: str  # "profiles", "hello" or "default"
    connected_at: float  # event-loop time


@dataclass(eq=False)
class _Waiter:
    """A task run_task is waiting on: its future and when it was handed to the writer."""

    future: asyncio.Future[tuple[Result, float]]
    sent_at: float


@dataclass(eq=False)
class DeviceLink:
    """One device's live session as the coordinator keeps it: its connection and tasks in flight.

    ``RemoteFleet`` sends through it and waits on it; the server settles it
    as the device answers (or goes away).
    """

    conn: Connection
    nonce: str = ""  # sent in the handshake response; the hello's proof covers it
    info: ConnectedDevice | None = None
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    waiters: dict[str, _Waiter] = field(default_factory=dict)
    abandoned: set[str] = field(default_factory=set)  # cancelled, answer not in yet
    provisioned: set[JobId] = field(default_factory=set)
    end_reason: str | None = None
    end_status: str = "failed"

    def __post_init__(self) -> None:
        self.idle.set()

    @property
    def session(self) -> CoordinatorSession:
        assert isinstance(self.conn.session, CoordinatorSession)
        return self.conn.session

    @property
    def open(self) -> bool:
        """Neither closed by the protocol nor lost (it may still be unwinding)."""
        return self.conn.open

    @property
    def device(self) -> DeviceId:
        assert self.info is not None
        return self.info.device

    def update_idle(self) -> None:
        if self.waiters or self.abandoned:
            self.idle.clear()
        else:
            self.idle.set()

    def settle(self, task_id: str, outcome: tuple[Result, float] | BaseException) -> None:
        """Deliver a task's answer to its waiting run_task, or retire an abandoned task."""
        waiter = self.waiters.pop(task_id, None)
        self.abandoned.discard(task_id)
        if waiter is not None and not waiter.future.done():
            if isinstance(outcome, BaseException):
                waiter.future.set_exception(outcome)
            else:
                waiter.future.set_result(outcome)
        self.update_idle()

    def fail_all(self, reason: str, status: str) -> None:
        """The session is over: every task still waiting fails now, not at its deadline."""
        now = asyncio.get_running_loop().time()
        for task_id, waiter in list(self.waiters.items()):
            failure = DeviceFailure(self.device, reason, status=status, after_s=now - waiter.sent_at)
            self.settle(task_id, failure)
        self.abandoned.clear()
        self.update_idle()


class CoordinatorServer:
    """The coordinator's WebSocket server; ``fleet`` is the engine's view of its devices.

    ::

        async with CoordinatorServer("0.0.0.0", 8765, profiles=profiles) as server:
            await server.wait_for_devices(20, timeout=300, progress=show)
            await Engine(jobs, server.fleet, RealClock(), evaluate, run_id=...).run()

    Port 0 picks a free port (read ``server.url``). Leaving the block shuts
    down cleanly and within ``shutdown_timeout``: every device gets ``bye
    going_away``, tasks still waiting fail, the listening socket closes.

    ``profiles`` (by device id) are the lab's measured Formula 4 parameters;
    a device not in it is planned with the ``a``/``mu`` of its hello's
    hardware (emulated devices impersonating a profile send theirs), else
    with a neutral profile: the median of ``profiles``, or ``DEFAULT_A`` /
    ``DEFAULT_MU`` when none is given. ``authorize(hello)`` may refuse a
    device (``bye unauthorized``); by default only ``settings.token`` is checked.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 8765,
        *,
        settings: ServerSettings | None = None,
        profiles: Mapping[str, DeviceProfile] | Sequence[DeviceProfile] | None = None,
        authorize: Authorize | None = None,
        run_secrets: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.settings = settings or ServerSettings()
        if profiles is None:
            profiles = {}
        elif not isinstance(profiles, Mapping):
            profiles = {p.device_id: p for p in profiles}
        self.profiles: Mapping[str, DeviceProfile] = dict(profiles)
        if self.profiles:
            self.default_profile = (
                float(statistics.median(p.a for p in self.profiles.values())),
                float(statistics.median(p.mu for p in self.profiles.values())),
            )
        else:
            self.default_profile = (DEFAULT_A, DEFAULT_MU)
        self.authorize = authorize
        self.keys = KeyStore(self.settings.keys) if self.settings.keys is not None else None
        self.run_secrets = dict(run_secrets or {})
        """Secrets of devices this run started itself (its own emulated devices), kept in memory only."""
        self._ssl = _server_tls(self.settings)
        self._nonces: weakref.WeakKeyDictionary[ServerConnection, str] = weakref.WeakKeyDictionary()
        self.fleet = RemoteFleet(self)
        self.heartbeat_rtts: deque[float] = deque(maxlen=self.settings.heartbeat_samples)
        """Round-trip times (seconds) of the coordinator's heartbeats, newest last."""
        self._links: dict[DeviceId, DeviceLink] = {}  # the welcomed session of each device
        self._handlers: set[DeviceLink] = set()  # every connection being served
        self._order: dict[DeviceId, int] = {}  # first-seen order: profiles() stays stable
        self._changed = asyncio.Event()  # replaced by a fresh one on every change
        self._listeners: list[Callable[[DeviceId], None]] = []
        self._server: Server | None = None
        self._closing = False

    # -- lifecycle ------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Listen; ``url`` is known afterwards."""
        if self._server is not None:
            raise RuntimeError("the server is already started")
        self._closing = False
        try:
            self._server = await self._listen()
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UserError(
                    f"cannot listen on {self.host}:{self.port}: the port is in use; stop what holds it,"
                    " or pick another with --port (0 picks a free one)"
                ) from None
            raise UserError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from None
        sockets = list(self._server.sockets)
        self.port = sockets[0].getsockname()[1]

    async def _listen(self) -> Server:
        return await serve(
            self._handle,
            self.host,
            self.port,
            # Tensors do not compress, and deflating 10 MB costs more than sending it.
            compression=None,
            max_size=self.settings.websocket_max_size(),
            # Liveness is the protocol's heartbeats; WebSocket pings would double it.
            ping_interval=None,
            open_timeout=self.settings.handshake_timeout,
            close_timeout=self.settings.close_timeout,
            backlog=self.settings.backlog,
            ssl=self._ssl,
            process_response=self._issue_nonce,
            max_queue=self.settings.max_queued_messages,
        )

    def _issue_nonce(self, ws: ServerConnection, request: Any, response: Any) -> None:
        """Every handshake response carries a fresh nonce (protocol.md 5.1.1)."""
        nonce = self._nonces[ws] = new_nonce()
        response.headers[NONCE_HEADER] = nonce

    @property
    def url(self) -> str:
        host = self.host
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        elif ":" in host:
            host = f"[{host}]"
        return f"{'wss' if self._ssl is not None else 'ws'}://{host}:{self.port}"

    async def close(self, *, graceful: bool = True) -> None:
        """Stop serving, within ``shutdown_timeout``.

        Graceful: every device gets ``bye going_away`` ("coordinator
        shutdown") and the connections close with 1001. Not graceful: every
        connection is dropped without a word, as a crash would (devices
        reconnect to whoever listens next: a restarted coordinator).
        """
        if self._server is None or self._closing:
            return
        self._closing = True
        server = self._server
        server.close(close_connections=False)  # stop accepting; we close connections ourselves
        for link in list(self._handlers):
            if graceful:
                link.end_reason = link.end_reason or "coordinator shutdown"
                link.conn.close("going_away", "coordinator shutdown")
            else:
                link.end_reason = link.end_reason or "coordinator dropped the connection"
                link.conn.abort()
        try:
            async with asyncio.timeout(self.settings.shutdown_timeout):
                await server.wait_closed()
        except TimeoutError:
            log.warning("%d connections did not close in time; dropping them", len(self._handlers))
            for link in list(self._handlers):
                link.conn.abort()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.close_timeout):
                    await server.wait_closed()
        self._server = None
        if self.keys is not None:
            self.keys.close()

    # -- the registry ---------------------------------------------------------

    def connected(self) -> dict[DeviceId, ConnectedDevice]:
        """Devices with an open session (welcomed), by id, in first-seen order."""
        return {link.device: link.info for link in self.links() if link.info is not None}

    def available(self) -> list[ConnectedDevice]:
        """Connected devices that can take a task: not still answering a cancelled one."""
        return [link.info for link in self.links() if link.info is not None and not link.abandoned]

    def links(self) -> list[DeviceLink]:
        """The open sessions of welcomed devices, in first-seen order."""
        links = sorted(self._links.values(), key=lambda link: self._order[link.device])
        return [link for link in links if link.open]

    def link(self, device: DeviceId) -> DeviceLink | None:
        """The latest session of ``device``, open or unwinding; None if it never connected or left."""
        return self._links.get(device)

    async def wait_for_devices(
        self, n: int, timeout: float | None = None, *, progress: ProgressCallback | None = None
    ) -> None:
        """Wait until ``n`` devices are connected; ``progress(connected, n)`` on every change.

        Raises RunError when ``timeout`` seconds pass first.
        """
        await self.wait_until(lambda connected: len(connected) >= n, timeout, progress=progress, needed=n)

    async def wait_until(
        self,
        ready: Callable[[dict[DeviceId, ConnectedDevice]], bool],
        timeout: float | None = None,
        *,
        progress: ProgressCallback | None = None,
        needed: int = 0,
    ) -> None:
        """Wait until ``ready(connected())`` holds; ``progress(len(connected), needed)`` on every change.

        Raises RunError when ``timeout`` seconds pass first.
        """
        last = -1
        try:
            async with asyncio.timeout(timeout):
                while True:
                    changed = self._changed
                    connected = self.connected()
                    if progress is not None and len(connected) != last:
                        progress(len(connected), needed)
                    last = len(connected)
                    if ready(connected):
                        return
                    await changed.wait()
        except TimeoutError:
            raise RunError(
                f"only {len(self.connected())} of {needed} devices connected within {timeout:g} s"
            ) from None

    def on_connect(self, listener: Callable[[DeviceId], None]) -> None:
        """Call ``listener(device)`` whenever a device is welcomed (on the event loop; it must not block)."""
        self._listeners.append(listener)

    def _notify(self) -> None:
        """Wake everyone waiting for the registry to change."""
        self._changed.set()
        self._changed = asyncio.Event()

    def _profile(self, hello: Hello) -> tuple[DeviceProfileView, str]:
        device = hello.device_id
        known = self.profiles.get(device)
        if known is not None:
            return DeviceProfileView(device, known.a, known.mu), "profiles"
        a, mu = _number(hello.hardware.get("a")), _number(hello.hardware.get("mu"))
        if a is not None and mu is not None and a >= 0 and mu > 0:
            return DeviceProfileView(device, a, mu), "hello"
        return DeviceProfileView(device, *self.default_profile), "default"

    # -- one connection -------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        s = self.settings
        session = CoordinatorSession(
            s.coordinator_id,
            max_message_bytes=s.max_message_bytes,
            max_control_bytes=s.max_control_bytes,
            max_part_bytes=s.max_part_bytes,
            heartbeat_interval=s.heartbeat_interval,
            heartbeat_timeout=s.heartbeat_timeout,
        )
        link: DeviceLink
        conn = Connection(
            ws, session, name=str(ws.remote_address), on_event=lambda event, arrived, _: self._on_event(link, event, arrived),
            # The session has no clock before its welcome: the hello must come in time.
            open_timeout=s.handshake_timeout, open_timeout_reason="no hello in time", close_timeout=s.close_timeout,
        )
        link = DeviceLink(conn, nonce=self._nonces.pop(ws, ""))
        limit, address = s.max_connections_per_address, _address(ws)
        if limit is not None and sum(_address(other.conn.ws) == address for other in self._handlers) >= limit:
            log.info("refused a connection from %s: %d connections are open from it", address, limit)
            conn.close("too_many_connections", f"at most {limit} connections per address")
        self._handlers.add(link)
        try:
            await conn.run()
        except Exception:
            # Our bug (the peer's faults never raise): log it, end only this device.
            log.exception("connection handler failed for %s", link.info and link.device)
            conn.abort()
        finally:
            self._handlers.discard(link)
            self._unregister(link)

    def _on_event(self, link: DeviceLink, event: Any, arrived: float) -> None:
        if isinstance(event, Hello):
            self._answer_hello(link, event)
        elif isinstance(event, Result):
            link.settle(event.task_id, (event, arrived))
        elif isinstance(event, HeartbeatAck):
            self.heartbeat_rtts.append(arrived - event.echo)
        elif isinstance(event, Error):
            if event.task_id is not None:
                failure = DeviceFailure(link.device, f"device error {event.code}: {event.reason}", status="failed")
                link.settle(event.task_id, failure)
            else:
                log.info("device %s reports %s: %s", link.device, event.code, event.reason)
        elif isinstance(event, Closed):
            if link.info is None:
                log.info("refused %s before its hello: %s (%s)", link.conn.ws.remote_address, event.code, event.reason)
            elif event.by_peer:
                link.end_reason = f"device said bye {event.code}: {event.reason}"
            else:
                link.end_reason = f"{event.code}: {event.reason}"
                log.warning("closed device %s: %s (%s)", link.device, event.code, event.reason)
                if event.code not in _FAILED_CODES:
                    link.end_status = "rejected"

    def _answer_hello(self, link: DeviceLink, hello: Hello) -> None:
        """Welcome the device (replacing an older session of its id), or refuse it with a bye."""
        session = link.session
        if session.state is not State.HELLO:
            return  # the session refused the hello itself (e.g. no common version)
        if self._closing:
            link.conn.close("going_away", "coordinator shutdown")
            return
        if not self._credentials_ok(hello, link.nonce) or (self.authorize is not None and not self.authorize(hello)):
            log.warning("refused device %s from %s: bad credentials", hello.device_id, link.conn.ws.remote_address)
            link.conn.close("unauthorized", "credentials refused")
            return
        session.send_welcome()
        link.conn.name = hello.device_id  # fixes its heartbeat phase
        profile, source = self._profile(hello)
        link.info = ConnectedDevice(hello.device_id, hello, profile, source, asyncio.get_running_loop().time())
        older = self._links.get(hello.device_id)
        if older is not None:
            log.info("device %s reconnected: replacing its older connection", hello.device_id)
            older.end_reason = "replaced by a newer connection of the same device"
            older.fail_all(older.end_reason, "failed")
            older.conn.close("going_away", "replaced by a newer connection of the same device id")
        self._links[hello.device_id] = link
        self._order.setdefault(hello.device_id, len(self._order))
        log.info(
            "device %s connected from %s (runtime %s, profile from %s)",
            hello.device_id, link.conn.ws.remote_address, hello.runtime, source,
        )
        self._notify()
        for listener in self._listeners:
            listener(hello.device_id)

    def _credentials_ok(self, hello: Hello, nonce: str) -> bool:
        """An enrolled device's proof of this connection's nonce, or the shared lab token (docs/security.md)."""
        token = self.settings.token
        if token is None and self.keys is None and not self.run_secrets:
            return True  # an open lab: nothing to check
        if token is not None and token_matches(hello.token, token):
            return True
        if hello.proof is None or not nonce:
            return False
        own = self.run_secrets.get(hello.device_id)
        if own is not None:
            return proof_matches(own, nonce, hello.device_id, hello.proof)
        return self.keys is not None and self.keys.verify(hello.device_id, nonce, hello.proof)

    def _unregister(self, link: DeviceLink) -> None:
        session = link.session
        if link.end_reason is None:
            if session.closed:
                link.end_reason = f"{session.close_code}: {session.close_reason}"
            else:
                link.end_reason = f"connection lost (close code {link.conn.ws.close_code})"
        link.fail_all(link.end_reason, link.end_status)
        if link.info is not None and self._links.get(link.device) is link:
            del self._links[link.device]
            log.info("device %s disconnected: %s", link.device, link.end_reason)
            self._notify()


class RemoteFleet:
    """The engine's Fleet over the server's connected devices (see ``mjfl.coordinator.engine.fleet``)."""

    def __init__(self, server: CoordinatorServer) -> None:
        self._server = server
        self._jobs: dict[JobId, tuple[JobArtifacts, WireModelSpec, Program]] = {}
        self._shards: dict[tuple[JobId, DeviceId], Shard] = {}
        self._packs: dict[JobId, tuple[Mapping[str, Any], TensorPack]] = {}
        self._ids = itertools.count(1)
        slots = server.settings.max_tasks_in_flight
        self._slots = asyncio.Semaphore(slots) if slots is not None else None
        self.task_log: deque[tuple[DeviceId, JobId, int, float, float, str]] = deque(maxlen=100_000)
        """(device, job, round, sent_at, ended_at, outcome) of the latest tasks, event-loop time."""

    def profiles(self) -> list[DeviceProfileView]:
        """Connected, welcomed devices that can take a task, in first-connection order."""
        return [info.profile for info in self._server.available()]

    async def prepare(self, jobs: Sequence[JobArtifacts]) -> None:
        """Keep each job's program, model spec and shards; devices get them with their first task."""
        for job in jobs:
            spec = job.spec
            wire = WireModelSpec(
                spec.name, tuple(spec.input_shape), spec.num_classes, job.batch_norm_pixels, job.dropout_shapes
            )
            self._jobs[job.job] = (job, wire, Program(job.program))
            # A job prepared again (new program or shards) is provisioned again.
            for key in [k for k in self._shards if k[0] == job.job]:
                del self._shards[key]
            for link in self._server.links():
                link.provisioned.discard(job.job)

    async def run_task(self, device: DeviceId, task: Task) -> TaskResult:
        """Provision (once per device and job), send the task, wait for a valid update.

        Raises DeviceFailure as soon as the outcome is known: the device is
        not connected, disconnects, reports an error, breaks the protocol or
        sends an invalid update, or misses ``task.deadline_s`` /
        ``settings.task_timeout`` (the task is then cancelled).
        """
        loop = asyncio.get_running_loop()
        started = loop.time()
        limits = [x for x in (task.deadline_s, self._server.settings.task_timeout) if x is not None]
        limit = min(limits) if limits else None
        link = self._server.link(device)
        if link is None or not link.open:
            raise DeviceFailure(device, "not connected", status="failed")
        if not link.idle.is_set():
            # Still answering a cancelled task: never two tasks on one device.
            try:
                async with asyncio.timeout(limit):
                    await link.idle.wait()  # also set when the connection ends
            except TimeoutError:
                raise DeviceFailure(
                    device, "still busy with a cancelled task", status="failed", after_s=loop.time() - started
                ) from None
            if not link.open:
                raise DeviceFailure(device, link.end_reason or "disconnected", status="failed")
        async with self._slot(device, None if limit is None else limit - (loop.time() - started)):
            if not link.open:
                raise DeviceFailure(device, link.end_reason or "disconnected", status="failed")
            return await self._send_and_wait(link, device, task, limit, None if limit is None else started + limit)

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
                device, f"no task slot free in time ({self._server.settings.max_tasks_in_flight} tasks in flight)",
                status="failed", after_s=timeout or 0.0,
            ) from None
        try:
            yield
        finally:
            self._slots.release()

    async def _send_and_wait(
        self, link: DeviceLink, device: DeviceId, task: Task, limit: float | None, end: float | None
    ) -> TaskResult:
        """Provision if needed, send the task, wait for its valid update until ``end`` (loop time)."""
        loop = asyncio.get_running_loop()
        job, wire, program = self._job(task.job)
        task_id = f"{task.job}/{task.round}/{next(self._ids)}"
        try:
            if task.job not in link.provisioned:
                shard = self._shard(job, device)
                link.session.send_provision(task.job, wire, program, shard)
                link.provisioned.add(task.job)
            link.session.send_task(
                task_id=task_id, job_id=task.job, round=task.round, weights=self._pack(task),
                epochs=task.epochs, batch_size=task.batch_size, lr=task.lr, momentum=task.momentum,
                weight_decay=task.weight_decay, deadline_s=task.deadline_s,
            )
        except SessionClosed as exc:
            raise DeviceFailure(device, f"session closed: {exc.reason}", status="failed") from None
        except EncodeError as exc:
            # E.g. the message exceeds the device's announced size limit.
            raise DeviceFailure(device, f"cannot send the task: {exc}", status="failed") from None
        # No await since the checks above: the connection is still open here.
        sent_at = loop.time()
        waiter = _Waiter(loop.create_future(), sent_at)
        link.waiters[task_id] = waiter
        link.update_idle()
        link.conn.flush()
        outcome = "failed"
        try:
            async with asyncio.timeout_at(end):
                result, arrived = await waiter.future
            outcome = "ok"
        except TimeoutError:
            self._abandon(link, task_id, f"no result within {limit:g} s")
            raise DeviceFailure(
                device, f"no result within the {limit:g} s deadline", status="failed", after_s=loop.time() - sent_at
            ) from None
        except DeviceFailure as failure:
            outcome = failure.status
            raise
        except asyncio.CancelledError:
            self._abandon(link, task_id, "the coordinator no longer needs it")
            raise
        finally:
            self.task_log.append((device, task.job, task.round, sent_at, loop.time(), outcome))
        weights = {name: result.weights[name] for name in result.weights}
        t = result.timing
        return TaskResult(
            device, weights, result.samples, result.mean_loss, arrived - sent_at,
            Timing(t.download_s, t.compute_s, t.upload_s), result.device_state,
        )

    def _abandon(self, link: DeviceLink, task_id: str, reason: str) -> None:
        """Stop waiting for a task; cancel it on the device, which stays busy until it answers."""
        waiter = link.waiters.pop(task_id, None)
        if waiter is None:
            return
        if not link.session.closed and task_id in link.session.pending_tasks:
            link.abandoned.add(task_id)
            link.session.send_cancel(task_id, reason)
            link.conn.flush()
        link.update_idle()

    def _job(self, job_id: JobId) -> tuple[JobArtifacts, WireModelSpec, Program]:
        try:
            return self._jobs[job_id]
        except KeyError:
            raise RuntimeError(f"job {job_id!r} was not prepared") from None

    def _shard(self, job: JobArtifacts, device: DeviceId) -> Shard:
        key = (job.job, device)
        shard = self._shards.get(key)
        if shard is None:
            if device not in job.shards:
                raise RuntimeError(f"job {job.job!r} has no shard for device {device!r}")
            x, y = job.shards[device]
            shard = self._shards[key] = Shard(x, y)
        return shard

    def _pack(self, task: Task) -> TensorPack:
        """The task's weights laid out once per round: the engine hands every device the same dict."""
        cached = self._packs.get(task.job)
        if cached is not None and cached[0] is task.weights:
            return cached[1]
        pack = TensorPack.from_arrays({k: np.asarray(v) for k, v in task.weights.items()})
        self._packs[task.job] = (task.weights, pack)
        return pack


def _server_tls(settings: ServerSettings) -> ssl.SSLContext | None:
    """The TLS context of ``wss://`` (None: plain ``ws://``); ConfigError names a file that will not load."""
    if settings.tls_cert is None or settings.tls_key is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(settings.tls_cert, settings.tls_key)
    except FileNotFoundError as exc:
        raise ConfigError("tls_cert", f"{exc.filename}: no such file") from None
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError("tls_cert", f"{settings.tls_cert} / {settings.tls_key}: not a PEM certificate and its key ({exc})") from None
    return context


def _address(ws: ServerConnection) -> str:
    """The peer's IP address (without its port)."""
    remote = ws.remote_address
    return str(remote[0]) if isinstance(remote, tuple) and remote else str(remote)


def _number(value: object) -> float | None:
    """A finite JSON number as a float, else None (booleans are not numbers)."""
    if type(value) in (int, float) and math.isfinite(value):  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    return None


__all__ = [
    "DEFAULT_A",
    "DEFAULT_MU",
    "ConnectedDevice",
    "CoordinatorServer",
    "DeviceLink",
    "RemoteFleet",
    "ServerSettings",
]
