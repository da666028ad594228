"""The device registry: who is connected, what the coordinator knows of them, and their tasks in flight.

The remote side has three parts with one owner each, and this is the one in
the middle (Flower's ``ClientManager`` plays the same part)::

    server.py  (WebSocket, TLS, credentials, limits)  --join/leave/settle-->  registry
    fleet.py   (the engine's Fleet: tasks out, results in) --expect/abandon-->  registry

The server welcomes a device and registers it (``join``), settles the tasks
it answers (``settle``) and unregisters it when its connection ends
(``leave``). The remote fleet sends tasks over a registered device's
connection and waits for their answers through the registry (``expect``,
``abandon``). Neither reads the other; the registry imports neither.

A device is planned with the profile ``PlanningProfiles`` gives it
(``mjfl.profiling.planning``: measured, announced in its hello, or a neutral
default). Whoever needs to know when devices come and go subscribes
(``on_join``, ``on_leave``) or waits (``wait_for_devices``, ``wait_until``).

Decisions:

* Duplicate device ids: the newer connection replaces the older one, which
  gets ``bye going_away`` and loses its pending task. A phone whose Wi-Fi
  dropped reconnects before the old TCP connection is known to be dead
  (that takes up to the heartbeat timeout); refusing it would lock it out
  until then.
* A task the fleet gave up on (``abandon``: its deadline passed, or nobody
  needs it any more) is cancelled on the device, which then stays out of
  ``available()`` until it has answered it, so a device never trains two
  tasks at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from mjfl.coordinator.engine.fleet import DeviceProfileView
from mjfl.coordinator.storage.records import DeviceStatus
from mjfl.device import protocol
from mjfl.device.connection import Connection
from mjfl.errors import DeviceFailure, RunError
from mjfl.ids import DeviceId
from mjfl.profiling.planning import PlanningProfiles, ProfileSource

log = logging.getLogger(__name__)

Answer = tuple[protocol.Result, float]
"""A task's valid result and when it arrived (event-loop time)."""

ProgressCallback = Callable[[int, int], None]
JoinListener = Callable[[DeviceId], None]
LeaveListener = Callable[[DeviceId, str], None]
RefuseListener = Callable[[DeviceId | None, str, str], None]
Transfer = Literal["downloading", "uploading"]


@dataclass(frozen=True)
class ConnectedDevice:
    """What the coordinator knows of a connected device."""

    device: DeviceId
    hello: protocol.Hello
    profile: DeviceProfileView
    profile_source: ProfileSource
    connected_at: float  # event-loop time
    address: str = ""  # where it connected from (host:port)


@dataclass(eq=False)
class _Member:
    """One welcomed connection and the tasks sent over it that are not answered yet."""

    conn: Connection
    info: ConnectedDevice
    waiters: dict[str, tuple[asyncio.Future[Answer], float]] = field(default_factory=dict)  # task -> (future, sent at)
    abandoned: set[str] = field(default_factory=set)  # cancelled, answer not in yet
    idle: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.idle.set()

    def update_idle(self) -> None:
        if self.waiters or self.abandoned:
            self.idle.clear()
        else:
            self.idle.set()

    def settle(self, task_id: str, outcome: Answer | DeviceFailure) -> None:
        waiter = self.waiters.pop(task_id, None)
        self.abandoned.discard(task_id)
        if waiter is not None and not waiter[0].done():
            if isinstance(outcome, DeviceFailure):
                waiter[0].set_exception(outcome)
            else:
                waiter[0].set_result(outcome)
        self.update_idle()

    def fail_all(self, reason: str, status: DeviceStatus) -> None:
        """The connection is over: every task still waiting fails now, not at its deadline."""
        now = asyncio.get_running_loop().time()
        for task_id, (_, sent_at) in list(self.waiters.items()):
            self.settle(task_id, DeviceFailure(self.info.device, reason, status=status, after_s=now - sent_at))
        self.abandoned.clear()
        self.update_idle()


class DeviceRegistry:
    """The connected devices, by id, in the order they first connected (see the module docstring)."""

    def __init__(self, profiles: PlanningProfiles | None = None) -> None:
        self.profiles = profiles or PlanningProfiles()
        self._current: dict[DeviceId, _Member] = {}  # the latest welcomed connection of each device
        self._members: dict[Connection, _Member] = {}  # every welcomed connection not yet left
        self._order: dict[DeviceId, int] = {}  # first-seen order: profiles stay in a stable order
        self._changed = asyncio.Event()  # replaced by a fresh one on every change
        self._on_join: list[JoinListener] = []
        self._on_leave: list[LeaveListener] = []
        self._on_refuse: list[RefuseListener] = []

    # -- membership: the server's calls --------------------------------------

    def join(self, conn: Connection, hello: protocol.Hello, *, address: str = "") -> ConnectedDevice:
        """Register the device that said ``hello`` on ``conn`` (from ``address``), replacing an older connection of its id."""
        device = hello.device_id
        a, mu, source = self.profiles.for_device(device, hello.hardware)
        info = ConnectedDevice(
            device, hello, DeviceProfileView(device, a, mu), source, asyncio.get_running_loop().time(), address
        )
        older = self._current.get(device)
        if older is not None:
            log.info("device %s reconnected: replacing its older connection", device)
            older.fail_all("replaced by a newer connection of the same device", "failed")
            older.conn.close("going_away", "replaced by a newer connection of the same device id")
        member = self._current[device] = self._members[conn] = _Member(conn, info)
        self._order.setdefault(device, len(self._order))
        self._notify()
        for listener in self._on_join:
            listener(device)
        return member.info

    def leave(self, conn: Connection, reason: str, *, status: DeviceStatus = "failed") -> None:
        """``conn`` ended: its tasks fail now with ``reason``; its device leaves unless a newer connection replaced it."""
        member = self._members.pop(conn, None)
        if member is None:
            return  # never welcomed
        member.fail_all(reason, status)
        device = member.info.device
        if self._current.get(device) is member:
            del self._current[device]
            log.info("device %s disconnected: %s", device, reason)
            self._notify()
            for listener in self._on_leave:
                listener(device, reason)

    def refused(self, device: DeviceId | None, address: str, reason: str) -> None:
        """The server refused a connection from ``address`` (of ``device``, if its hello said): tell the listeners."""
        for listener in self._on_refuse:
            listener(device, address, reason)

    def settle(self, conn: Connection, task_id: str, outcome: Answer | DeviceFailure) -> None:
        """The device on ``conn`` answered ``task_id``: deliver it to whoever waits, or retire an abandoned task."""
        member = self._members.get(conn)
        if member is not None:
            member.settle(task_id, outcome)

    # -- tasks: the remote fleet's calls --------------------------------------

    def connection(self, device: DeviceId) -> Connection | None:
        """The latest connection of ``device``, open or unwinding; None if it never connected or left."""
        member = self._current.get(device)
        return None if member is None else member.conn

    def expect(self, device: DeviceId, task_id: str) -> asyncio.Future[Answer]:
        """Wait for ``task_id``, just sent to ``device``: the future settles with its answer or its failure."""
        member = self._current[device]
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Answer] = loop.create_future()
        member.waiters[task_id] = (future, loop.time())
        member.update_idle()
        return future

    def abandon(self, device: DeviceId, task_id: str, reason: str) -> None:
        """Stop waiting for ``task_id``; it is cancelled on the device, which stays busy until it answers."""
        member = self._current.get(device)
        if member is None or member.waiters.pop(task_id, None) is None:
            return
        session = member.conn.session
        if not session.closed and task_id in session.pending_tasks:
            member.abandoned.add(task_id)
            session.send_cancel(task_id, reason)
            member.conn.flush()
        member.update_idle()

    async def wait_idle(self, device: DeviceId) -> None:
        """Until ``device`` has no task in flight (answered, or its connection ended)."""
        member = self._current.get(device)
        if member is not None:
            await member.idle.wait()

    def in_flight(self, device: DeviceId) -> frozenset[str]:
        """The tasks sent to ``device`` and not answered yet (those given up on included)."""
        member = self._current.get(device)
        return frozenset() if member is None else frozenset(member.waiters) | frozenset(member.abandoned)

    # -- who is there: anyone's -------------------------------------------------

    def connected(self) -> dict[DeviceId, ConnectedDevice]:
        """Devices with an open connection, by id, in first-seen order."""
        return {member.info.device: member.info for member in self._open()}

    def transfer(self, device: DeviceId) -> Transfer | None:
        """What moves on ``device``'s connection while it has a task, as the coordinator sees it.

        ``downloading``: the coordinator is writing a provision or task to it
        (until the bytes are in the operating system's send buffer);
        ``uploading``: the parts of a split result are arriving (protocol.md
        section 4; a result in one message arrives at once). None otherwise.
        """
        member = self._current.get(device)
        if member is None or not member.waiters:
            return None
        if member.conn.sending_binary:
            return "downloading"
        return "uploading" if member.conn.session.receiving_parts else None

    def available(self) -> list[ConnectedDevice]:
        """Connected devices that can take a task: not still answering one the fleet gave up on."""
        return [member.info for member in self._open() if not member.abandoned]

    def on_join(self, listener: JoinListener) -> None:
        """Call ``listener(device)`` whenever a device is registered (on the event loop; it must not block)."""
        self._on_join.append(listener)

    def on_leave(self, listener: LeaveListener) -> None:
        """Call ``listener(device, reason)`` whenever a device leaves (on the event loop; it must not block)."""
        self._on_leave.append(listener)

    def on_refuse(self, listener: RefuseListener) -> None:
        """Call ``listener(device or None, address, reason)`` whenever the server refuses a connection."""
        self._on_refuse.append(listener)

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

    def _open(self) -> list[_Member]:
        members = sorted(self._current.values(), key=lambda member: self._order[member.info.device])
        return [member for member in members if member.conn.open]

    def _notify(self) -> None:
        """Wake everyone waiting for the registry to change."""
        self._changed.set()
        self._changed = asyncio.Event()


__all__ = ["Answer", "ConnectedDevice", "DeviceRegistry", "JoinListener", "LeaveListener"]
