"""Faults between devices and the coordinator (docs/faults.md): a bad network, lost devices.

Emulated devices reach a real loopback server through the user-space fault
proxy (mjfl.testkit.faultproxy), and the engine runs real rounds over
them. The small, fast versions of what `mjfl bench faults` runs bigger.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from loopback import FAST, SPEC, WEIGHTS, HeldTrainer, artifacts, device, fleet_of
from waiting import PATIENCE_S, eventually_async

from mjfl.coordinator.config import JobConfig
from mjfl.coordinator.engine.clock import RealClock
from mjfl.coordinator.engine.engine import Engine, EngineJob, EngineSettings
from mjfl.coordinator.engine.events import RoundLog
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.device.emulated.emulator.backoff import Backoff
from mjfl.device.emulated.emulator.device import devices_running
from mjfl.ids import DeviceId, JobId
from mjfl.schedulers.registry import make_scheduler
from mjfl.testkit.faultproxy import FaultProxy, Faults

pytestmark = pytest.mark.timeout(60)

QUICK = Backoff(initial=0.05, maximum=0.2)


def job(names, rounds, deadline_s=None):
    return EngineJob(
        JobConfig(JobId("j"), "lenet5", fraction=1.0, max_rounds=rounds, deadline_s=deadline_s), spec=SPEC,
        scheduler=make_scheduler("random", seed=0), samples={DeviceId(d): 6 for d in names},
        test_x=np.zeros((1, 1, 16, 16), np.float32), test_y=np.zeros(1, np.int64), weights=dict(WEIGHTS),
    )


async def run_rounds(server, names, faults, rounds, *, seed=0, deadline_s=None, **device_kw):
    """``rounds`` engine rounds over devices behind a fault proxy; the job, its records, the proxy."""
    async with FaultProxy("127.0.0.1", server.port, faults, seed=seed) as proxy:
        devices = [device(server, d, backoff=QUICK, **device_kw) for d in names]
        for d in devices:
            d.url = proxy.url
        async with devices_running(*devices):
            await server.registry.wait_for_devices(len(names), PATIENCE_S)
            fleet_of(server).prepare([artifacts(names)])
            the_job, sink = job(names, rounds, deadline_s), RoundLog()
            # Devices cut or dropped by the proxy reconnect: the job waits for them, on a busy machine too.
            settings = EngineSettings(device_wait_s=PATIENCE_S)
            engine = Engine([the_job], fleet_of(server), RealClock(), lambda *a: (0.5, 1.0), run_id="f", settings=settings, observers=[sink])
            server.registry.on_join(engine.returned)  # as the run driver tells it: a device that reconnects is offered again
            await engine.run()
    return the_job, sink.records, proxy


async def test_delay_and_a_bandwidth_cap_slow_rounds_down_and_lose_nothing():
    names = ["d0", "d1", "d2"]
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        faults = Faults(delay_s=0.05, bandwidth_bps=200_000)
        the_job, records, proxy = await run_rounds(server, names, faults, rounds=2)
    assert [r.round for r in records] == [1, 2] and all(r.aggregated for r in records)
    for record in records:
        assert all(dr.status == "ok" for dr in record.devices)
        # A task crosses the proxy down and its result up: two one-way delays at least.
        assert all(dr.duration_s >= 2 * 0.05 for dr in record.devices)
    # The first round also carries each device's shard (~6 KB at 200 kB/s).
    assert min(dr.duration_s for dr in records[0].devices) >= 0.03 + 2 * 0.05
    assert the_job.weights["b"].tolist() == [3.0] * 4  # two rounds of +1
    assert proxy.counts["bytes_down"] > 3 * 6 * 16 * 16 * 4


async def test_connections_cut_mid_download_are_failures_of_the_round_and_the_job_goes_on():
    names = ["d0", "d1", "d2", "d3"]
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        # Half of all connections are cut within their first provision (hello + welcome < 1 KB, the shard 6 KB).
        faults = Faults(cut=0.5, cut_after_bytes=(2_000, 5_000))
        the_job, records, proxy = await run_rounds(server, names, faults, rounds=4, seed=3)
    assert proxy.counts["cut"] >= 1
    assert the_job.rounds_done == 4 and [r.round for r in records] == [1, 2, 3, 4]
    failed = [dr for r in records for dr in r.devices if dr.status == "failed"]
    assert failed and all("connection lost" in dr.error or "not connected" in dr.error for dr in failed)
    assert any(r.aggregated for r in records)


async def test_dropped_connections_are_retried_by_the_devices():
    names = ["d0", "d1"]
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        _, records, proxy = await run_rounds(server, names, Faults(drop=0.75), rounds=1, seed=1)
    assert proxy.counts["dropped"] >= 1 and proxy.counts["connections"] > proxy.counts["dropped"]
    assert records[0].aggregated and all(dr.status == "ok" for dr in records[0].devices)


async def test_reordered_parts_close_that_session_and_the_round_completes_without_it():
    names = ["d0", "d1", "d2"]
    big = {"w": np.zeros(40_000, np.float32), "b": np.ones(4, np.float32)}  # a 160 KB result: three parts
    async with (
        CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server,
        FaultProxy("127.0.0.1", server.port, Faults(reorder=0.5), seed=2) as proxy,
    ):
        devices = [device(server, d, backoff=QUICK, max_part_bytes=2**16 + 64) for d in names]
        for d in devices:
            d.url = proxy.url
        async with devices_running(*devices):
            await server.registry.wait_for_devices(3, PATIENCE_S)
            fleet_of(server).prepare([artifacts(names)])
            the_job, sink = job(names, 1), RoundLog()
            the_job.weights = dict(big)
            await Engine([the_job], fleet_of(server), RealClock(), lambda *a: (0.5, 1.0), run_id="r", observers=[sink]).run()
    assert proxy.counts["reordered"] >= 1
    (record,) = sink.records
    status = {dr.device: dr for dr in record.devices}
    # Parts out of order are a protocol error of that session; a frame cut in two breaks its stream.
    hit = [dr for dr in status.values() if dr.status != "ok"]
    assert len(hit) == proxy.counts["reordered"]
    assert all(("bad_frame" in dr.error and dr.status == "rejected") or "connection lost" in dr.error for dr in hit)
    assert any(dr.status == "ok" for dr in status.values()) and record.aggregated
    assert the_job.weights["b"].tolist() == [2.0] * 4


async def test_a_fifth_of_the_devices_killed_at_random_moments_fail_their_rounds_and_the_job_reaches_its_budget():
    names = [f"d{k}" for k in range(5)]
    rng = np.random.default_rng(4)
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        chosen = int(rng.integers(5))
        # The victim's training is held until it is killed, so it is certainly still training
        # then (an instant echo could already have answered, and a dead device is not planned again).
        held = HeldTrainer()
        devices = [device(server, d, backoff=QUICK, **({"make_trainer": held} if k == chosen else {})) for k, d in enumerate(names)]
        async with devices_running(*devices):
            await server.registry.wait_for_devices(5, PATIENCE_S)
            fleet_of(server).prepare([artifacts(names)])
            the_job, sink = job(names, 4), RoundLog()
            victim = devices[chosen]

            async def kill_mid_round():
                await eventually_async(held.training.is_set, what="the victim to train its first task")
                victim.kill()
                held.release()  # its training thread ends; the answer has no connection to go to

            async with asyncio.TaskGroup() as group:
                group.create_task(kill_mid_round())
                settings = EngineSettings(device_wait_s=PATIENCE_S)
                group.create_task(Engine([the_job], fleet_of(server), RealClock(), lambda *a: (0.5, 1.0), run_id="k", settings=settings, observers=[sink]).run())
    assert the_job.rounds_done == 4
    recorded = [dr for r in sink.records for dr in r.devices if dr.device == victim.device_id and dr.status == "failed"]
    assert recorded, "the kill is recorded as a failure of the victim's round"
    assert all(r.aggregated for r in sink.records)
