"""The coordinator's WebSocket server: handshake, TLS, credentials and limits (docs/testbed.md).

Phones and emulated devices connect here and speak protocol v1
(docs/protocol.md). One connection, one device session, served by the
connection runner (``mjfl.device.connection``: reader, writer,
heartbeats, close; the same runner serves emulated devices), whose task is
owned by websockets' ``Server``, which ``CoordinatorServer`` closes and awaits.

The server answers the hello: it checks the device's credentials, welcomes
it and registers it in the device registry (``registry.py``); it hands the
registry what the device answers (results, task errors) and unregisters the
device when its connection ends, with the reason. What happens to tasks is
the remote fleet's business (``fleet.py``), through the registry.

A device misbehaving closes *its* session (bye with the error code, then the
WebSocket close code of protocol.md section 8). Nothing a device sends can
raise out of its connection, so other devices and jobs never notice.

Decisions:

* Shutdown says ``bye going_away`` ("coordinator shutdown") to every device,
  the protocol's code for a voluntary end (a "shutdown" code would be an
  error code and close with 1002). Emulated devices stop on it; devices of a
  coordinator that crashed see no bye and reconnect.
* Credentials (docs/security.md): every handshake response carries a fresh
  nonce (``MJFL-Nonce``); an enrolled device proves its secret with an HMAC
  of it in the hello (checked against ``settings.keys`` or ``run_secrets``).
  The shared ``settings.token`` is the lab shortcut; with neither keys nor
  token, any device is welcome.
* A connection the device's own misbehaviour ended (a protocol error, a bad
  update) leaves its pending task "rejected"; any other end (bye, lost
  connection, heartbeat timeout, shutdown, replacement) leaves it "failed".
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import math
import ssl
import weakref
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from websockets.asyncio.server import Server, ServerConnection, serve

from mjfl.addresses import DEVICE_PORT, reached_here
from mjfl.coordinator.config import TestbedConfig, check_server_pairs
from mjfl.coordinator.remote.keys import KeyStore
from mjfl.coordinator.remote.registry import DeviceRegistry
from mjfl.coordinator.storage.records import DeviceStatus
from mjfl.device import protocol
from mjfl.device.connection import Connection
from mjfl.device.protocol.credentials import (
    NONCE_HEADER,
    new_nonce,
    proof_matches,
    token_matches,
)
from mjfl.errors import ConfigError, DataError, DeviceFailure, UserError

log = logging.getLogger(__name__)

# Codes with which *we* close a session because of what the device sent: its
# pending task is "rejected". Any other end leaves it "failed".
_FAILED_CODES = frozenset({"normal", "going_away", "heartbeat_timeout", "internal_error"})

Authorize = Callable[[protocol.Hello], bool]


@dataclass(frozen=True)
class ServerSettings:
    """Limits and timers of the coordinator's server; ``None`` turns one off.

    ``max_message_bytes``/``max_control_bytes``/``max_part_bytes`` are the
    sessions' limits (protocol.md section 9); the WebSocket library's own
    message limit follows ``max_message_bytes`` (or the part size when parts
    are on). ``heartbeat_timeout`` must exceed the transfer time of the
    largest single WebSocket message. ``handshake_timeout`` bounds the
    opening handshake plus the hello (the session has no clock before its
    welcome). ``close_timeout`` bounds one connection's closing
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
    result is bounded by its task's size, see ``CoordinatorSession``). The
    limits on tasks (a timeout, how many in flight) are the remote fleet's
    (``fleet.py``).
    """

    coordinator_id: str = "mjfl-coordinator"
    max_message_bytes: int | None = protocol.DEFAULT_MAX_MESSAGE_BYTES
    max_control_bytes: int | None = protocol.DEFAULT_MAX_CONTROL_BYTES
    max_part_bytes: int | None = None
    heartbeat_interval: float | None = protocol.DEFAULT_HEARTBEAT_INTERVAL_S
    heartbeat_timeout: float | None = protocol.DEFAULT_HEARTBEAT_TIMEOUT_S
    handshake_timeout: float | None = protocol.DEFAULT_HANDSHAKE_TIMEOUT_S
    close_timeout: float = 5.0
    shutdown_timeout: float = 10.0
    token: str | None = None
    keys: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    backlog: int = 1024
    heartbeat_samples: int = 100_000
    max_connections_per_address: int | None = TestbedConfig.max_connections_per_address
    max_queued_messages: int | None = 4

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval", "heartbeat_timeout", "handshake_timeout"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigError(name, f"must be a positive number of seconds or None, got {value!r}")
        for name in ("close_timeout", "shutdown_timeout"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ConfigError(name, f"must be a positive number of seconds, got {value!r}")
        for name in ("max_message_bytes", "max_control_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(name, f"must be >= 1 or None, got {value!r}")
        check_server_pairs(
            self.tls_cert, self.tls_key, self.heartbeat_interval, self.heartbeat_timeout,
            names=("tls_cert", "tls_key", "heartbeat_interval", "heartbeat_timeout"),
        )
        if self.backlog < 1 or self.heartbeat_samples < 1:
            raise ConfigError("backlog", "backlog and heartbeat_samples must be >= 1")
        for name in ("max_connections_per_address", "max_queued_messages"):
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



@dataclass(eq=False)
class _Served:
    """One connection being served, welcomed or not, and how it ended."""

    conn: Connection
    nonce: str  # sent in the handshake response; the hello's proof covers it
    device: str | None = None  # set once welcomed
    hello_id: str | None = None  # the id its hello gave, welcomed or not
    refused: bool = False  # the registry was told that it was refused
    end_reason: str | None = None
    end_status: DeviceStatus = "failed"
    tasks: asyncio.TaskGroup | None = None  # what serving it awaits beside its connection
    checking: asyncio.Task[None] | None = None  # its hello, checked against the key store


class CoordinatorServer:
    """The coordinator's WebSocket server; the devices it welcomes go into ``registry``.

    ::

        registry = DeviceRegistry(PlanningProfiles(lab_profiles))
        async with CoordinatorServer("0.0.0.0", 8765, registry=registry) as server:
            await registry.wait_for_devices(20, timeout=300)
            await Engine(jobs, RemoteFleet(registry), RealClock(), evaluate, run_id=...).run()

    Port 0 picks a free port (read ``server.url``). Leaving the block shuts
    down cleanly and within ``shutdown_timeout``: every device gets ``bye
    going_away``, its tasks still waiting fail, the listening socket closes.

    ``authorize(hello)`` may refuse a device (``bye unauthorized``) after its
    credentials passed; ``run_secrets`` are the secrets of the devices this
    run started itself (its own emulated devices), kept in memory only.

    ``explain_loss(device, reason)``, when set, may add to a lost connection's
    reason (no bye from either side) what is known of why it was lost (the
    phones' bridge reads the phone's log: ``Phones.explain``) before the
    device leaves; it bounds its own wait.

    ``port_setting`` names the setting the port came from in the error for a
    port in use: a run's ``testbed.port``, a lab's ``server.port``.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEVICE_PORT,
        *,
        registry: DeviceRegistry | None = None,
        settings: ServerSettings | None = None,
        authorize: Authorize | None = None,
        run_secrets: Mapping[str, str] | None = None,
        port_setting: str = "testbed.port",
    ) -> None:
        self.host = host
        self.port = port
        self.port_setting = port_setting
        self.registry = registry or DeviceRegistry()
        self.settings = settings or ServerSettings()
        self.authorize = authorize
        self.keys = KeyStore(self.settings.keys) if self.settings.keys is not None else None
        self.run_secrets = dict(run_secrets or {})
        self.explain_loss: Callable[[str, str], Awaitable[str]] | None = None
        self.heartbeat_rtts: deque[float] = deque(maxlen=self.settings.heartbeat_samples)
        """Round-trip times (seconds) of the coordinator's heartbeats, newest last."""
        self.heartbeats_missed = 0
        """Connections this server closed because a heartbeat went unanswered for ``heartbeat_timeout``."""
        self._ssl = _server_tls(self.settings)
        self._nonces: weakref.WeakKeyDictionary[ServerConnection, str] = weakref.WeakKeyDictionary()
        self._served: set[_Served] = set()  # every connection being served
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
                raise ConfigError(
                    self.port_setting, f"cannot listen on {self.host}:{self.port}: the port is in use; stop what"
                    " holds it, or pick another (0 picks a free one)"
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
        return f"{'wss' if self._ssl is not None else 'ws'}://{reached_here(self.host)}:{self.port}"

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
        for served in list(self._served):
            if graceful:
                served.end_reason = served.end_reason or "coordinator shutdown"
                served.conn.close("going_away", "coordinator shutdown")
            else:
                served.end_reason = served.end_reason or "coordinator dropped the connection"
                served.conn.abort()
        try:
            async with asyncio.timeout(self.settings.shutdown_timeout):
                await server.wait_closed()
        except TimeoutError:
            log.warning("%d connections did not close in time; dropping them", len(self._served))
            for served in list(self._served):
                served.conn.abort()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settings.close_timeout):
                    await server.wait_closed()
        self._server = None
        if self.keys is not None:
            self.keys.close()

    # -- one connection -------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        s = self.settings
        session = protocol.CoordinatorSession(
            s.coordinator_id,
            max_message_bytes=s.max_message_bytes,
            max_control_bytes=s.max_control_bytes,
            max_part_bytes=s.max_part_bytes,
            heartbeat_interval=s.heartbeat_interval,
            heartbeat_timeout=s.heartbeat_timeout,
        )
        served: _Served
        conn = Connection(
            ws, session, name=str(ws.remote_address), on_event=lambda event, arrived, _: self._on_event(served, event, arrived),
            # The session has no clock before its welcome: the hello must come in time.
            open_timeout=s.handshake_timeout, open_timeout_reason="no hello in time", close_timeout=s.close_timeout,
        )
        served = _Served(conn, nonce=self._nonces.pop(ws, ""))
        limit, address = s.max_connections_per_address, _address(ws)
        if limit is not None and sum(_address(other.conn.ws) == address for other in self._served) >= limit:
            log.info("refused a connection from %s: %d connections are open from it", address, limit)
            served.refused = True
            self.registry.refused(None, address, f"too_many_connections: at most {limit} connections per address")
            conn.close("too_many_connections", f"at most {limit} connections per address")
        self._served.add(served)
        try:
            async with asyncio.TaskGroup() as served.tasks:
                try:
                    await conn.run()
                finally:
                    if served.checking is not None:
                        served.checking.cancel()
        except Exception:
            # Our bug (the peer's faults never raise): log it, end only this device.
            log.exception("connection handler failed for %s", served.device)
            conn.abort()
        finally:
            self._served.discard(served)
            try:
                await self._explain(served)
            finally:
                self._end(served)

    async def _explain(self, served: _Served) -> None:
        """A welcomed device's lost connection: its reason, with why when ``explain_loss`` knows (not at shutdown)."""
        if self.explain_loss is None or served.device is None or served.end_reason is not None or self._closing:
            return
        if served.conn.session.closed:
            return  # ended by a bye: meant, nothing to explain
        reason = _lost(served)
        try:
            served.end_reason = await self.explain_loss(served.device, reason)
        except Exception:  # our bug, in the explainer: the device still leaves, with the plain reason
            log.exception("explaining the lost connection of %s failed", served.device)
            served.end_reason = reason

    def _on_event(self, served: _Served, event: Any, arrived: float) -> None:
        if isinstance(event, protocol.Hello):
            self._answer_hello(served, event)
        elif isinstance(event, protocol.Result):
            self.registry.settle(served.conn, event.task_id, (event, arrived))
        elif isinstance(event, protocol.HeartbeatAck):
            self.heartbeat_rtts.append(arrived - event.echo)
        elif isinstance(event, protocol.Error):
            if event.task_id is not None:
                failure = DeviceFailure(str(served.device), f"device error {event.code}: {event.reason}", status="failed")
                self.registry.settle(served.conn, event.task_id, failure)
            else:
                log.info("device %s reports %s: %s", served.device, event.code, event.reason)
        elif isinstance(event, protocol.Closed):
            if served.device is None:
                log.info("refused %s before its hello: %s (%s)", served.conn.ws.remote_address, event.code, event.reason)
                if not served.refused and not event.by_peer:  # a peer that leaves was not refused
                    served.refused = True
                    self.registry.refused(served.hello_id, _address(served.conn.ws), f"{event.code}: {event.reason}")
            elif event.by_peer:
                served.end_reason = f"device said bye {event.code}: {event.reason}"
            else:
                served.end_reason = f"{event.code}: {event.reason}"
                log.warning("closed device %s: %s (%s)", served.device, event.code, event.reason)
                self.heartbeats_missed += event.code == "heartbeat_timeout"
                if event.code not in _FAILED_CODES:
                    served.end_status = "rejected"

    def _answer_hello(self, served: _Served, hello: protocol.Hello) -> None:
        """Welcome the device and register it, or refuse it with a bye."""
        conn = served.conn
        served.hello_id = hello.device_id
        if conn.session.state is not protocol.State.HELLO:
            return  # the session refused the hello itself (e.g. no common version)
        if self._closing:
            conn.close("going_away", "coordinator shutdown")
            return
        checked = self._credentials_ok(hello, served.nonce)
        if checked is None and self.keys is not None and served.tasks is not None:
            # The key store is a file (SQLite): read on a thread, so that no hello waits on the loop for it.
            served.checking = served.tasks.create_task(self._check_enrolled(served, hello), name="hello check")
            return
        self._welcome(served, hello, bool(checked))

    async def _check_enrolled(self, served: _Served, hello: protocol.Hello) -> None:
        """An enrolled device's proof, checked against the key store off the loop; then welcomed or refused."""
        assert self.keys is not None and hello.proof is not None
        keys, nonce, proof = self.keys, served.nonce, hello.proof
        try:
            ok = await asyncio.to_thread(keys.verify, hello.device_id, nonce, proof)
        except DataError as exc:
            log.warning("the key store could not check %s: %s", hello.device_id, exc)
            ok = False
        if served.conn.session.state is protocol.State.HELLO and not self._closing:
            self._welcome(served, hello, ok)

    def _welcome(self, served: _Served, hello: protocol.Hello, credentials: bool) -> None:
        conn = served.conn
        if not credentials or (self.authorize is not None and not self.authorize(hello)):
            log.warning("refused device %s from %s: bad credentials", hello.device_id, conn.ws.remote_address)
            served.refused = True
            self.registry.refused(hello.device_id, _address(conn.ws), "unauthorized: credentials refused")
            conn.close("unauthorized", "credentials refused")
            return
        assert isinstance(conn.session, protocol.CoordinatorSession)
        conn.session.send_welcome()
        conn.name = served.device = hello.device_id  # the name fixes its heartbeat phase
        info = self.registry.join(conn, hello, address=_address(conn.ws))
        log.info(
            "device %s connected from %s (runtime %s, profile from %s)",
            hello.device_id, conn.ws.remote_address, hello.runtime, info.profile_source,
        )

    def _credentials_ok(self, hello: protocol.Hello, nonce: str) -> bool | None:
        """The shared lab token, or a proof of this connection's nonce by a device this process started
        (docs/security.md); None: only the key store can tell (``_check_enrolled``)."""
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
        return None if self.keys is not None else False

    def _end(self, served: _Served) -> None:
        """The connection is over: the registry lets its device go, with the reason."""
        session = served.conn.session
        if served.end_reason is None:
            if session.closed:
                served.end_reason = f"{session.close_code}: {session.close_reason}"
            else:
                served.end_reason = _lost(served)
        self.registry.leave(served.conn, served.end_reason, status=served.end_status)


def _lost(served: _Served) -> str:
    """The reason of a connection that ended with no bye."""
    return f"connection lost (close code {served.conn.ws.close_code})"


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


__all__ = ["CoordinatorServer", "ServerSettings"]
