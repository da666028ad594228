"""The one asyncio connection runner: a WebSocket driven by a sans-I/O session.

Both ends of protocol v1 use it: the coordinator's server for every device
that connects, and every emulated device for its link to the coordinator.
What differs between them (answering a hello, training a task) is the
caller's ``on_event``; reading, writing, heartbeats and closing are here::

    reader      ws messages -> session.receive -> on_event(event, arrived, ready)
                (until the session is open, at most ``open_timeout`` seconds)
    writer      the only task that writes: drains session.data_to_send() in
                order, then closes the WebSocket once the session is closed
    heartbeats  once open, per the session's interval (at a phase fixed by the
                connection's name); a silent peer gets bye heartbeat_timeout

Every task has an owner (the TaskGroup of ``run``). When the reader ends, the
writer is given ``close_timeout`` to say bye and close, then the TCP
connection is dropped: a peer that no longer reads cannot hold a connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import zlib
from collections.abc import Callable

from websockets.asyncio.connection import Connection as WebSocket
from websockets.exceptions import ConnectionClosed

from mjfl.device.protocol import CoordinatorSession, DeviceSession, Event, State

log = logging.getLogger(__name__)

BYE_GRACE_S = 0.5
"""How long after the session's end messages that crossed the bye may still arrive."""

EventHandler = Callable[[Event, float, float], None]
"""``on_event(event, arrived, ready)``: ``arrived`` when the message that carried it
arrived, ``ready`` when it was decoded (event-loop time). Runs on the event loop;
it may queue messages on the session, which the runner then sends."""


def heartbeat_phase(name: str, interval: float) -> float:
    """A delay in [0, interval) fixed by ``name``: where in the interval its heartbeats fall.

    Peers that connected together would heartbeat in step, and each round trip
    would then measure the queue of all the others (with 1,000 devices that took
    the p99 from 5 ms to 200 ms): a phase per name spreads them.
    """
    return zlib.crc32(name.encode("utf-8")) / 2**32 * interval


class Connection:
    """One WebSocket and its session: reader, writer and heartbeats (see the module docstring).

    ``name`` names the connection in logs and fixes its heartbeat phase (the
    device id). ``open_timeout`` bounds the time to an open session (the
    hello and the welcome); a peer that takes longer is closed with
    ``heartbeat_timeout`` and ``open_timeout_reason``. ``close_timeout``
    bounds the closing handshake.
    """

    def __init__(
        self,
        ws: WebSocket,
        session: CoordinatorSession | DeviceSession,
        *,
        name: str,
        on_event: EventHandler,
        open_timeout: float | None = 10.0,
        open_timeout_reason: str = "the session did not open in time",
        close_timeout: float = 5.0,
    ) -> None:
        self.ws = ws
        self.session = session
        self.name = name
        self.on_event = on_event
        self.open_timeout = open_timeout
        self.open_timeout_reason = open_timeout_reason
        self.close_timeout = close_timeout
        self.opened = asyncio.Event()
        """Set once the session is open (welcome sent or received)."""
        self.closed = asyncio.Event()
        """Set when the reader has ended: no message will be received any more."""
        self.binary_send_s = 0.0
        """Seconds spent sending binary messages (results, tasks), for transfer timing."""
        self.sending_binary = False
        """Whether the writer is sending a binary message now (a provision, task or result)."""
        self._wake = asyncio.Event()

    @property
    def open(self) -> bool:
        """Neither closed by the protocol nor lost (it may still be unwinding)."""
        return not self.session.closed and not self.closed.is_set()

    def flush(self) -> None:
        """Hand what the session queued to the writer."""
        self._wake.set()

    def close(self, code: str, reason: str) -> None:
        """End the session with a bye (no-op once it is closed); the writer then closes."""
        if not self.session.closed:
            self.session.send_bye(code, reason)
        self.flush()

    def abort(self) -> None:
        """Drop the TCP connection at once, without a bye (a peer that no longer reads, a crash)."""
        transport = self.ws.transport
        if transport is not None:
            transport.abort()

    async def run(self) -> None:
        """Serve the connection until it ends; never raises for what the peer does."""
        async with asyncio.TaskGroup() as group:
            writer = group.create_task(self._write(), name=f"{self.name} writer")
            beats = group.create_task(self._heartbeats(), name=f"{self.name} heartbeats")
            try:
                await self._read()
            finally:
                self.closed.set()
                self._wake.set()
                beats.cancel()
                if not writer.done():
                    # Give the writer the time to say bye and close; then drop the peer.
                    ignored = group.create_task(self._drop_if_bye_ignored(), name=f"{self.name} after bye")
                    await asyncio.wait({writer, ignored}, timeout=self.close_timeout, return_when=asyncio.FIRST_COMPLETED)
                    ignored.cancel()
                    if not writer.done():
                        self.abort()

    async def _read(self) -> None:
        session, loop = self.session, asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.open_timeout) as opening:
                async for message in self.ws:
                    arrived = loop.time()
                    session.receive(message)
                    ready = loop.time()
                    for event in session.events_received():
                        self.on_event(event, arrived, ready)
                    if not self.opened.is_set() and session.state is State.OPEN:
                        self.opened.set()
                        opening.reschedule(None)
                    self.flush()
                    if session.closed:
                        return
        except ConnectionClosed:
            return
        except TimeoutError:
            log.info("%s: %s within %s s", self.name, self.open_timeout_reason, self.open_timeout)
            # A liveness timeout: the peer said nothing useful in time.
            self.close("heartbeat_timeout", self.open_timeout_reason)

    async def _drop_if_bye_ignored(self) -> None:
        """After the session's end the peer should only close (protocol.md 5.9).

        A message that crossed the bye on the wire is fine; one still coming
        ``BYE_GRACE_S`` later shows the peer ignores the bye, and waiting
        ``close_timeout`` for a close it will not send helps nobody: drop it.
        """
        started = asyncio.get_running_loop().time()
        with contextlib.suppress(ConnectionClosed):
            while True:
                await self.ws.recv()
                if asyncio.get_running_loop().time() - started >= BYE_GRACE_S:
                    log.info("%s: still sending after the bye; dropping the connection", self.name)
                    self.abort()
                    return

    async def _write(self) -> None:
        """Write what the session queued, in order; close the WebSocket after the session's bye."""
        session, ws = self.session, self.ws
        try:
            while True:
                for data in session.data_to_send():
                    if isinstance(data, bytes):
                        started = time.perf_counter()
                        self.sending_binary = True
                        try:
                            await ws.send(data)
                        finally:
                            self.sending_binary = False
                        self.binary_send_s += time.perf_counter() - started
                    else:
                        await ws.send(data)
                if session.closed:
                    await ws.close(*session.websocket_close())
                    return
                if self.closed.is_set():
                    return
                self._wake.clear()
                await self._wake.wait()
        except ConnectionClosed:
            return

    async def _heartbeats(self) -> None:
        session, loop = self.session, asyncio.get_running_loop()
        await self.opened.wait()  # the session's settings are known once it is open
        interval, timeout = session.heartbeat_interval, session.heartbeat_timeout
        if interval is None:
            return
        next_beat = loop.time() + heartbeat_phase(self.name, interval)
        while self.open:
            now = loop.time()
            if session.is_expired(now):
                log.info("%s: no answer for %g s; closing", self.name, timeout)
                self.close("heartbeat_timeout", f"no answer for {timeout:g} s")
                # The writer may be stuck sending to a peer that no longer reads.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.close_timeout):
                        await self.closed.wait()
                self.abort()
                return
            if now >= next_beat:
                session.send_heartbeat(now)
                self.flush()
                next_beat = max(next_beat + interval, now)
            # Wake for the next heartbeat, and at least four times per timeout
            # to notice expiry. A plain sleep is the cheapest wake-up; run()
            # cancels this task when the reader ends.
            wake = next_beat - now
            if timeout is not None:
                wake = min(wake, timeout / 4)
            await asyncio.sleep(wake)
