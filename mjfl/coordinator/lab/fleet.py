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

A device serves one job at a time across runs because every run's engine
shares the lab's ``Occupancy`` (``engine/occupancy.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence

from mjfl.coordinator.engine.fleet import DeviceProfileView, JobArtifacts, Task, TaskResult
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.registry import ConnectedDevice, DeviceRegistry, Transfer
from mjfl.ids import DeviceId, JobId


class RunFleet:
    """One run's view of the lab's fleet (see the module docstring)."""

    def __init__(self, fleet: RemoteFleet, run_id: str, devices: Collection[DeviceId] | None = None) -> None:
        self.fleet = fleet
        self.run_id = run_id
        self.devices = None if devices is None else frozenset(devices)  # a reservation: only these are offered
        self._jobs: set[JobId] = set()

    def wire_id(self, job: JobId) -> JobId:
        """The job's id on the wire, where every run's jobs meet."""
        return JobId(f"{self.run_id}/{job}")

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
