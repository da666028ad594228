"""The lab's one fleet as each of its runs sees it.

Every device connects to the lab's server once and stays in its registry
(the lobby) between runs. A running run plans over all of them through its
own views, which close when the run ends:

* ``RunFleet``: the engine's ``Fleet`` over the lab's ``RemoteFleet``. A
  run's jobs travel under ids that carry the run's (``0003-alice/lenet``),
  so two runs that both have a job ``lenet`` never share its program or
  shards; when the run ends its jobs' artifacts are dropped. Under the
  ``reserved`` policy it offers the run's own devices only.
* ``RunMembers``: the registry's comings and goings (``Membership``), told
  to the run while it goes; the ``Lobby`` listens to the registry once for
  every run.
* ``LabDevices``: one run's devices, the run driver's ``Devices``, made of
  both; ``LabFleet``: what every run shares (the lobby, the remote fleet, the
  occupancy, the policy between runs).

A device serves one job at a time across runs because every run's engine
shares the lab's ``Occupancy`` (``engine/occupancy.py``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mjfl.coordinator.engine.clock import RealClock, wall_offset
from mjfl.coordinator.engine.events import Observer
from mjfl.coordinator.engine.fleet import DeviceProfileView, JobArtifacts, Task, TaskResult
from mjfl.coordinator.engine.occupancy import Occupancy
from mjfl.coordinator.lab.sharing import FairShare
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.registry import ConnectedDevice, DeviceRegistry, Transfer
from mjfl.coordinator.run.driver import ReadyFleet
from mjfl.coordinator.storage.records import RunMode
from mjfl.ids import DeviceId, JobId, wire_job


class RunFleet:
    """One run's view of the lab's fleet (see the module docstring)."""

    def __init__(self, fleet: RemoteFleet, run_id: str, devices: Collection[DeviceId] | None = None) -> None:
        self.fleet = fleet
        self.run_id = run_id
        self.devices = None if devices is None else frozenset(devices)  # a reservation: only these are offered
        self._jobs: set[JobId] = set()

    def wire_id(self, job: JobId) -> JobId:
        """The job's id on the wire, where every run's jobs meet."""
        return wire_job(self.run_id, job)

    def profiles(self) -> list[DeviceProfileView]:
        offered = self.fleet.profiles()
        return offered if self.devices is None else [p for p in offered if p.device in self.devices]

    def prepare(self, jobs: Sequence[JobArtifacts]) -> None:
        renamed = [dataclasses.replace(job, job=self.wire_id(job.job)) for job in jobs]
        self._jobs.update(job.job for job in renamed)
        self.fleet.prepare(renamed)

    async def run_task(self, device: DeviceId, task: Task) -> TaskResult:
        return await self.fleet.run_task(device, dataclasses.replace(task, job=self.wire_id(task.job)))

    def close(self) -> None:
        """The run is over: its jobs' programs, shards and weights are let go."""
        self.fleet.forget(sorted(self._jobs))
        self._jobs.clear()


JoinListener = Callable[[DeviceId], None]
LeaveListener = Callable[[DeviceId, str], None]
RefuseListener = Callable[[DeviceId | None, str, str], None]


class Lobby:
    """The registry's events, listened to once and told to every run going (``RunMembers``)."""

    def __init__(self, registry: DeviceRegistry) -> None:
        self.registry = registry
        self._runs: list[RunMembers] = []
        registry.on_join(lambda device: self._tell("joined", device))
        registry.on_leave(lambda device, reason: self._tell("left", device, reason))
        registry.on_refuse(lambda device, address, reason: self._tell("refused", device, address, reason))

    def members(self) -> RunMembers:
        """A new run's view of the comings and goings; ``close`` it when the run ends."""
        members = RunMembers(self)
        self._runs.append(members)
        return members

    def _tell(self, what: str, *args: object) -> None:
        for members in list(self._runs):
            members.tell(what, *args)

    def _gone(self, members: RunMembers) -> None:
        if members in self._runs:
            self._runs.remove(members)


class RunMembers:
    """``Membership`` for one run: the lobby's comings and goings while the run goes."""

    def __init__(self, lobby: Lobby) -> None:
        self._lobby = lobby
        self._listeners: dict[str, list[Callable[..., None]]] = {"joined": [], "left": [], "refused": []}

    def on_join(self, listener: JoinListener) -> None:
        self._listeners["joined"].append(listener)

    def on_leave(self, listener: LeaveListener) -> None:
        self._listeners["left"].append(listener)

    def on_refuse(self, listener: RefuseListener) -> None:
        self._listeners["refused"].append(listener)

    def connected(self) -> Mapping[DeviceId, ConnectedDevice]:
        return self._lobby.registry.connected()

    def transfer(self, device: DeviceId) -> Transfer | None:
        return self._lobby.registry.transfer(device)

    def tell(self, what: str, *args: object) -> None:
        for listener in list(self._listeners[what]):
            listener(*args)

    def close(self) -> None:
        """The run is over: it hears of no more devices."""
        self._lobby._gone(self)
        for listeners in self._listeners.values():
            listeners.clear()


@dataclass
class LabFleet:
    """The lab's devices, as every run shares them: the registry's lobby, the remote fleet, the occupancy.

    Under the ``equal`` policy (``limits.share``) every run plans over every
    device, held to its share while others wait (``share``, ``sharing.py``);
    under ``reserved`` a run holds its own devices, as many as it needs, for
    its life (``reserve``/``release``).
    """

    lobby: Lobby
    remote: RemoteFleet
    occupancy: Occupancy
    device_wait_s: float
    policy: str = "equal"
    share: FairShare | None = None
    reserved: dict[str, list[DeviceId]] = field(default_factory=dict)
    apps: Mapping[str, str | None] = field(default_factory=dict)  # the attached phones' app builds (``Phones.apps``)

    def connected(self) -> int:
        return len(self.lobby.registry.connected())

    def unreserved(self) -> list[DeviceId]:
        """Connected devices no run holds, in a stable order."""
        held = {d for devices in self.reserved.values() for d in devices}
        return sorted(d for d in self.lobby.registry.connected() if d not in held)

    def reserve(self, run_id: str, needs: int) -> list[DeviceId] | None:
        """``needs`` devices of its own for ``run_id`` (None: not enough are free); only under ``reserved``."""
        if self.policy != "reserved":
            return None
        free = self.unreserved()
        if len(free) < needs:
            return None
        self.reserved[run_id] = free[:needs]
        return self.reserved[run_id]

    def release(self, run_id: str) -> None:
        self.reserved.pop(run_id, None)

    def devices(self) -> list[dict[str, Any]]:
        """The lobby as the API shows it: each connected device, since when (wall clock), and what it serves."""
        to_wall = wall_offset()
        serving = self.occupancy.serving()
        rows = []
        for device, info in self.lobby.registry.connected().items():
            holder = serving.get(device)
            rows.append({
                "device": device, "connected_at": info.connected_at + to_wall, "address": info.address,
                "serving": None if holder is None else {"run": holder[0], "job": holder[1]},
            })
        return rows


class LabDevices:
    """One run's devices in the lab (the run driver's ``Devices``): every device of the lab, shared.

    ``observers`` follow the run's events beside the run's own (the lab's
    policy and its state of the run); ``waiting`` is told why the run waits
    before its fleet is ready (None once it is).
    """

    mode: RunMode = "real"
    kind = "lab"

    def __init__(
        self, fleet: LabFleet, run_id: str, needs: int, observers: Sequence[Observer] = (),
        waiting: Callable[[str | None], None] = lambda why: None,
    ) -> None:
        self.lab = fleet
        self.run_id = run_id
        self.needs = needs
        self.observers = tuple(observers)
        self.waiting = waiting

    @contextlib.asynccontextmanager
    async def fleet(self) -> AsyncIterator[ReadyFleet]:
        registry = self.lab.lobby.registry
        if len(registry.connected()) < self.needs:  # resumed after a restart, before its devices are back
            self.waiting(f"waiting for devices: needs {self.needs} connected, {len(registry.connected())} are")
            await registry.wait_until(lambda connected: len(connected) >= self.needs, None, needed=self.needs)
        if self.lab.policy == "reserved" and self.run_id not in self.lab.reserved:  # resumed after a restart
            self.waiting(f"waiting for devices: needs {self.needs} of its own (limits.share = \"reserved\")")
            await registry.wait_until(lambda _: self.lab.reserve(self.run_id, self.needs) is not None, None)
        self.waiting(None)
        reserved = self.lab.reserved.get(self.run_id) if self.lab.policy == "reserved" else None
        members, view = self.lab.lobby.members(), RunFleet(self.lab.remote, self.run_id, reserved)
        try:
            connected = registry.connected()
            present = sorted(connected) if reserved is None else sorted(d for d in reserved if d in connected)
            yield ReadyFleet(
                view, RealClock(), present, device_wait_s=self.lab.device_wait_s,
                hardware={d: dict(c.hello.hardware) for d, c in connected.items()},
                members=members, occupancy=self.lab.occupancy, apps=self.lab.apps, observers=self.observers,
            )
        finally:
            members.close()
            view.close()
