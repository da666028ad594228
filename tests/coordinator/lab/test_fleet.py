"""Each lab run's views of the one fleet: its jobs under ids that carry the run's, its devices' comings and goings.

The fleet and the registry under them are small stand-ins recording what reaches them (the real ones are
exercised by tests/coordinator/lab/test_serve.py against a real service).
"""

from __future__ import annotations

import asyncio

import numpy as np

from mjfl.coordinator.engine.fleet import DeviceProfileView, JobArtifacts, Task, TaskResult
from mjfl.coordinator.lab.fleet import Lobby, RunFleet
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining, ModelSpec


class Recording:
    """Stands in for the lab's RemoteFleet: keeps what it is asked."""

    def __init__(self) -> None:
        self.prepared: list[JobId] = []
        self.sent: list[tuple[DeviceId, JobId]] = []
        self.forgotten: list[JobId] = []

    def profiles(self):
        return [DeviceProfileView(DeviceId(f"d{k}"), 0.01, 10.0) for k in range(4)]

    def prepare(self, jobs):
        self.prepared += [job.job for job in jobs]

    async def run_task(self, device, task):
        self.sent.append((device, task.job))
        return TaskResult(device, task.weights, 10, 0.5, 1.0)

    def forget(self, jobs):
        self.forgotten += list(jobs)


def artifacts(job: str) -> JobArtifacts:
    return JobArtifacts(JobId(job), ModelSpec("lenet5", (1, 12, 12), 10), b"program", {})


def test_two_runs_jobs_of_one_name_travel_apart_and_are_forgotten_with_their_run() -> None:
    fleet = Recording()
    first, second = RunFleet(fleet, "0001-alice"), RunFleet(fleet, "0002-bob")  # type: ignore[arg-type]
    first.prepare([artifacts("lenet"), artifacts("cnn")])
    second.prepare([artifacts("lenet")])
    assert fleet.prepared == ["0001-alice/lenet", "0001-alice/cnn", "0002-bob/lenet"]
    task = Task(JobId("lenet"), 1, {"w": np.zeros(1, np.float32)}, LocalTraining())
    result = asyncio.run(second.run_task(DeviceId("d1"), task))
    assert fleet.sent == [("d1", "0002-bob/lenet")] and result.samples == 10
    assert task.job == "lenet"  # the engine's task is left as it was
    first.close()
    assert fleet.forgotten == ["0001-alice/cnn", "0001-alice/lenet"]


def test_a_reserved_run_is_offered_its_own_devices_only() -> None:
    fleet = Recording()
    shared, reserved = RunFleet(fleet, "r1"), RunFleet(fleet, "r2", [DeviceId("d1"), DeviceId("d3")])  # type: ignore[arg-type]
    assert [p.device for p in shared.profiles()] == ["d0", "d1", "d2", "d3"]
    assert [p.device for p in reserved.profiles()] == ["d1", "d3"]


class Registry:
    """Stands in for the device registry: only its listeners matter here."""

    def __init__(self) -> None:
        self.join, self.leave, self.refuse = [], [], []

    def on_join(self, listener):
        self.join.append(listener)

    def on_leave(self, listener):
        self.leave.append(listener)

    def on_refuse(self, listener):
        self.refuse.append(listener)


def test_the_lobby_tells_each_running_run_and_forgets_ended_ones() -> None:
    registry = Registry()
    lobby = Lobby(registry)  # type: ignore[arg-type]
    assert (len(registry.join), len(registry.leave), len(registry.refuse)) == (1, 1, 1)  # once, for every run
    heard: dict[str, list[object]] = {"a": [], "b": []}
    a, b = lobby.members(), lobby.members()
    a.on_join(heard["a"].append)
    b.on_join(heard["b"].append)
    b.on_leave(lambda device, reason: heard["b"].append((device, reason)))
    registry.join[0](DeviceId("d7"))
    a.close()
    registry.join[0](DeviceId("d8"))
    registry.leave[0](DeviceId("d7"), "connection lost")
    assert heard == {"a": ["d7"], "b": ["d7", "d8", ("d7", "connection lost")]}
    for _ in range(50):  # runs come and go; the registry's listeners do not grow
        lobby.members().close()
    assert (len(registry.join), len(lobby._runs)) == (1, 1)
