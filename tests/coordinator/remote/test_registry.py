"""The device registry, on real loopback sockets: who is connected, with which profile, replaced, waited for, told."""

from __future__ import annotations

import asyncio

import pytest
from loopback import (
    FAST,
    artifacts,
    coordinator_with_a_good_device,
    device,
    expect_bye,
    fleet_of,
    outcome,
    raw_client,
    received_task,
    task,
)
from waiting import PATIENCE_S

from mjfl.coordinator.remote.registry import DeviceRegistry
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.device.emulated.emulator.device import devices_running
from mjfl.errors import DeviceFailure, RunError
from mjfl.ids import DeviceId
from mjfl.profiling.planning import DEFAULT_A, DEFAULT_MU, PlanningProfiles
from mjfl.profiling.profiles import DeviceProfile

pytestmark = pytest.mark.timeout(60)


async def test_a_newer_connection_with_the_same_id_replaces_the_older():
    async with coordinator_with_a_good_device() as (server, _good):
        old = await raw_client(server, "twin")
        fleet_of(server).prepare([artifacts(["good", "twin"])])
        async with asyncio.TaskGroup() as group:
            pending = group.create_task(outcome(fleet_of(server).run_task(DeviceId("twin"), task())))
            await received_task(old)
            new = await raw_client(server, "twin")
            await expect_bye(old, "going_away", 1001)
        assert "replaced" in pending.result().reason
        assert list(server.registry.connected()) == ["good", "twin"]
        assert server.registry.connected()[DeviceId("twin")].connected_at > 0
        async with asyncio.TaskGroup() as group:
            run = group.create_task(outcome(fleet_of(server).run_task(DeviceId("twin"), task(round_=2))))
            assert (await received_task(new)).round == 2  # tasks go to the newer connection
            await new.close()
        assert isinstance(run.result(), DeviceFailure)


async def test_profiles_come_from_the_lab_then_the_hello_then_a_neutral_default():
    lab = [DeviceProfile("known", a=0.02, mu=30.0), DeviceProfile("other", a=0.04, mu=10.0)]
    registry = DeviceRegistry(PlanningProfiles(lab))
    async with CoordinatorServer("127.0.0.1", 0, registry=registry, settings=ServerSettings(**FAST)) as server:
        a = await raw_client(server, "known", hardware={"a": 9.0, "mu": 9.0})
        b = await raw_client(server, "claims", hardware={"a": 0.1, "mu": 2.0})
        c = await raw_client(server, "unknown", hardware={"a": "fast", "mu": -1})
        got = {p.device: (p.a, p.mu) for p in fleet_of(server).profiles()}
        assert got == {"known": (0.02, 30.0), "claims": (0.1, 2.0), "unknown": (0.03, 20.0)}
        assert [p.device for p in fleet_of(server).profiles()] == ["known", "claims", "unknown"]
        assert server.registry.connected()[DeviceId("claims")].profile_source == "hello"
        for ws in (a, b, c):
            await ws.close()
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        ws = await raw_client(server, "x")
        assert [(p.a, p.mu) for p in fleet_of(server).profiles()] == [(DEFAULT_A, DEFAULT_MU)]
        await ws.close()


async def test_wait_for_devices_reports_progress_and_times_out():
    seen = []
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        devices = [device(server, f"d{i}") for i in range(3)]
        async with devices_running(*devices):
            await server.registry.wait_for_devices(3, PATIENCE_S, progress=lambda k, n: seen.append((k, n)))
            with pytest.raises(RunError, match="3 of 4 devices"):
                await server.registry.wait_for_devices(4, 0.2)
    assert seen[0][1] == 3 and seen[-1] == (3, 3)
    assert [k for k, _ in seen] == sorted(k for k, _ in seen)


async def test_the_registry_tells_who_joined_and_who_left_why_and_knows_their_tasks_in_flight():
    joined, left = [], []
    registry = DeviceRegistry()
    registry.on_join(joined.append)
    registry.on_leave(lambda device, reason: left.append((device, reason)))
    async with CoordinatorServer("127.0.0.1", 0, registry=registry, settings=ServerSettings(**FAST)) as server:
        async with devices_running(device(server, "good")):
            await registry.wait_for_devices(1, PATIENCE_S)
            ws = await raw_client(server, "raw")
            assert joined == ["good", "raw"] and list(registry.connected()) == ["good", "raw"]
            fleet_of(server).prepare([artifacts(["good", "raw"])])
            async with asyncio.TaskGroup() as group:
                pending = group.create_task(outcome(fleet_of(server).run_task(DeviceId("raw"), task())))
                sent = await received_task(ws)
                assert registry.in_flight(DeviceId("raw")) == {sent.task_id}
                await ws.close()  # the raw device goes away with its task
            assert isinstance(pending.result(), DeviceFailure)
            assert registry.in_flight(DeviceId("raw")) == frozenset() and "raw" not in registry.connected()
        assert registry.connected() == {}
    assert [device for device, _ in left] == ["raw", "good"]
    assert "bye" in left[0][1] or "connection lost" in left[0][1]
    assert left[1][1] == "device said bye going_away: device stopping"
