"""The remote fleet on real loopback sockets: tasks out and results in through the registry, the engine over remote devices.

Good devices are EmulatedDevices (in-process, or in worker processes for the
engine run); bad ones are raw websockets clients writing hand-made frames
(tests/loopback.py).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json

import numpy as np
import pytest
from loopback import (
    FAST,
    SPEC,
    WEIGHTS,
    artifacts,
    coordinator_with_a_good_device,
    device,
    fleet_of,
    outcome,
    raw_client,
    received_task,
    result_for,
    task,
)
from waiting import PATIENCE_S, eventually_async

from mjfl.coordinator.config import JobConfig
from mjfl.coordinator.engine.clock import RealClock
from mjfl.coordinator.engine.engine import Engine, EngineJob
from mjfl.coordinator.engine.events import RoundLog
from mjfl.coordinator.engine.fedavg import fedavg
from mjfl.coordinator.engine.fleet import JobArtifacts
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.device import protocol
from mjfl.device.emulated.emulator.device import devices_running
from mjfl.device.emulated.emulator.fleet import run_emulated_fleet
from mjfl.errors import DeviceFailure
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining
from mjfl.jobs.models import build_model, initial_weights, load_weights
from mjfl.profiling.profiles import DeviceProfile
from mjfl.schedulers.registry import make_scheduler

pytestmark = pytest.mark.timeout(60)

# -- the engine over remote devices -------------------------------------------------


def evaluate(spec, weights, x, y):
    import torch
    import torch.nn.functional as F

    net = build_model(spec)
    load_weights(net, weights)
    net.eval()
    with torch.no_grad():
        logits = net(torch.tensor(x))
        loss = float(F.cross_entropy(logits, torch.tensor(y)))
        accuracy = float((logits.argmax(1).numpy() == y).mean())
    return accuracy, loss


class RecordingFleet:
    """The server's fleet, keeping every result by (job, round)."""

    def __init__(self, fleet):
        self.fleet = fleet
        self.results = {}

    def profiles(self):
        return self.fleet.profiles()

    def prepare(self, jobs):
        self.fleet.prepare(jobs)

    async def run_task(self, device, task):
        result = await self.fleet.run_task(device, task)
        self.results.setdefault((task.job, task.round), []).append(result)
        return result


def overlaps(intervals):
    """Pairs of overlapping (start, end, what) intervals, per key."""
    bad = []
    for key, spans in intervals.items():
        spans = sorted(spans)
        for (_, e1, w1), (s2, _, w2) in itertools.pairwise(spans):
            if s2 < e1:
                bad.append((key, w1, w2))
    return bad


# Devices that train for real in worker processes: on a busy machine a worker's event loop
# waits seconds at a time for its training thread (the GIL), longest while that thread imports
# torch for the first task, so its heartbeats answer late. Nothing here is about heartbeats:
# they take the server's own defaults, not the fault tests' 2 s timeout.
REAL_TRAINING = {name: value for name, value in FAST.items() if not name.startswith("heartbeat_")}


@pytest.mark.timeout(180)
async def test_two_jobs_on_eight_devices_in_worker_processes_train_through_the_engine():
    from mjfl.jobs.datasets import load_dataset
    from mjfl.jobs.partition import partition

    data = load_dataset("digits", image_size=16)
    ids = [DeviceId(f"mp-{i}") for i in range(8)]
    jobs, prepared = [], []
    for m, name in enumerate(["a", "b"]):
        parts = partition(data.train_y, len(ids), "iid", np.random.default_rng(m))
        shards = {d: (np.ascontiguousarray(data.train_x[p]), np.ascontiguousarray(data.train_y[p])) for d, p in zip(ids, parts)}
        prepared.append(JobArtifacts(JobId(name), SPEC, b"torch runtime: no program", shards))
        jobs.append(EngineJob(
            JobConfig(JobId(name), "lenet5", training=LocalTraining(epochs=2, batch_size=16, lr=0.05, momentum=0.5), fraction=0.5, max_rounds=3),
            spec=SPEC, scheduler=make_scheduler("random", seed=m),
            samples={d: len(y) for d, (_, y) in shards.items()}, test_x=data.test_x, test_y=data.test_y,
            weights=initial_weights(SPEC, m),
        ))
    before = [evaluate(SPEC, job.weights, data.test_x, data.test_y) for job in jobs]
    sink = RoundLog()
    async with (
        CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**REAL_TRAINING)) as server,
        run_emulated_fleet(server.url, 8, runtime="torch", workers=2, id_prefix="mp"),
    ):
        await server.registry.wait_for_devices(8, timeout=60)  # worker processes importing torch
        order = [p.device for p in fleet_of(server).profiles()]
        assert sorted(order) == sorted(ids) and order == list(server.registry.connected())
        fleet_of(server).prepare(prepared)
        fleet = RecordingFleet(fleet_of(server))
        await Engine(jobs, fleet, RealClock(), evaluate, run_id="t", observers=[sink]).run()

    assert sorted((r.job, r.round) for r in sink.records) == [(j, r) for j in ("a", "b") for r in (1, 2, 3)]
    for record in sink.records:
        assert record.aggregated and len(record.devices) == 4
        for dr in record.devices:
            assert dr.status == "ok", dr
            assert dr.samples == jobs[0 if record.job == "a" else 1].samples[dr.device]
            assert dr.duration_s <= record.duration_s + 1e-6
            assert dr.compute_s > 0
    # Each global model is the FedAvg of its last round's remote updates, and it learned.
    for job, (acc0, loss0) in zip(jobs, before):
        last = fleet.results[(job.name, 3)]
        assert len(last) == 4 and all(r.weights.keys() == job.weights.keys() for r in last)
        expected = fedavg([(r.weights, r.samples) for r in last])
        assert all(np.allclose(expected[k], job.weights[k], rtol=1e-6, atol=1e-7) for k in expected)
        acc, loss = evaluate(SPEC, job.weights, data.test_x, data.test_y)
        assert loss < loss0 and acc > max(acc0, 0.6)  # measured 0.88-0.92
    # Never two tasks on one device: the server's own log and the round records agree.
    spans = {}
    for dev, job, round_, sent, ended, _ in fleet_of(server).task_log:
        spans.setdefault(dev, []).append((sent, ended, (job, round_)))
    assert not overlaps(spans)
    starts = {}
    for record in sink.records:
        for dr in record.devices:
            # A task starts no earlier than its round and lasts at least its measured duration.
            starts.setdefault(dr.device, []).append((record.started_s, record.started_s + dr.duration_s, (record.job, record.round)))
    assert not overlaps(starts)
    assert sum(len(v) for v in spans.values()) == 2 * 3 * 4


async def test_a_device_killed_mid_round_fails_at_once_and_the_round_completes():
    # 6 samples -> a round of 60,000 s: the slow device's task can only end by the kill, never by its work.
    slow_profile = DeviceProfile("slow-phone", a=1e4, mu=1e6)
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        devices = [device(server, "d0"), device(server, "d1"), device(server, "slow", profile=slow_profile)]
        async with devices_running(*devices):
            await server.registry.wait_for_devices(3, PATIENCE_S)
            fleet_of(server).prepare([artifacts(["d0", "d1", "slow"])])
            job = EngineJob(
                JobConfig(JobId("j"), "lenet5", fraction=1.0, max_rounds=1), spec=SPEC,
                scheduler=make_scheduler("random", seed=0),
                samples={DeviceId(d): 6 for d in ("d0", "d1", "slow")}, test_x=np.zeros((1, 1, 16, 16), np.float32),
                test_y=np.zeros(1, np.int64), weights=dict(WEIGHTS),
            )

            async def kill_when_training():
                await eventually_async(lambda: devices[2].history, what="the slow device to get its task")
                devices[2].kill()

            sink = RoundLog()
            async with asyncio.TaskGroup() as group:
                group.create_task(kill_when_training())
                group.create_task(Engine([job], fleet_of(server), RealClock(), lambda *a: (0.5, 1.0), run_id="k", observers=[sink]).run())
    (record,) = sink.records
    status = {dr.device: dr for dr in record.devices}
    assert status["slow"].status == "failed" and "connection lost" in status["slow"].error
    assert devices[2].history[0].outcome == "lost"  # it never answered: the kill, not its work, ended the task
    assert status["d0"].status == status["d1"].status == "ok"
    assert record.aggregated and job.weights["b"].tolist() == [2.0] * 4


async def test_a_missed_deadline_cancels_the_task_and_the_device_waits_before_its_next_task():
    # A raw device that answers only when the test says: the deadline is the only thing that can end its task.
    async with coordinator_with_a_good_device() as (server, _good):
        fleet, ws = fleet_of(server), await raw_client(server)
        async with asyncio.TaskGroup() as group:
            first = group.create_task(outcome(fleet.run_task(DeviceId("raw"), task(deadline_s=0.2))))
            cancelled = await received_task(ws)
            # The next task for the device, asked for while the first is out: it must wait for the first's answer.
            second = group.create_task(fleet.run_task(DeviceId("raw"), task(round_=2)))
            failure = await first
            assert isinstance(failure, DeviceFailure) and failure.status == "failed"
            assert "no result within the 0.2 s deadline" in failure.reason
            assert "raw" not in [p.device for p in fleet.profiles()]  # busy with the cancelled task
            cancel = await received_cancel(ws)
            assert cancel["task_id"] == cancelled.task_id
            # Nothing new was sent while the cancelled task was unanswered.
            assert server.registry.in_flight(DeviceId("raw")) == {cancelled.task_id}
            await ws.send(json.dumps({"type": "error", "code": "cancelled", "reason": "cancelled by the coordinator",
                                      "task_id": cancelled.task_id}))
            t = await received_task(ws)
            assert t.round == 2
            await ws.send(result_for(t, {k: np.asarray(v) + 1 for k, v in t.weights.items()}))
        assert second.result().weights["b"].tolist() == [2.0] * 4
        assert "raw" in [p.device for p in fleet.profiles()]  # free again
        await ws.close()


async def received_cancel(ws):
    """Skip other messages; the coordinator's cancel, as JSON."""
    async with asyncio.timeout(PATIENCE_S):
        while True:
            message = await ws.recv()
            if isinstance(message, str) and json.loads(message)["type"] == "cancel":
                return json.loads(message)


async def test_task_timeout_bounds_a_task_without_a_deadline():
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        fleet_of(server, task_timeout=0.2)
        d = device(server, "d", profile=DeviceProfile("p", a=1e4, mu=1e6))  # a 60,000 s round
        async with devices_running(d):
            await server.registry.wait_for_devices(1, PATIENCE_S)
            fleet_of(server).prepare([artifacts(["d"])])
            with pytest.raises(DeviceFailure, match="0.2 s deadline"):
                await fleet_of(server).run_task(DeviceId("d"), task())
            # Only the cancel can end the stretch: the device is free again once it has answered it.
            await eventually_async(fleet_of(server).profiles, what="the device free again after the cancel")
    assert d.history[0].outcome == "cancelled"


async def test_a_device_that_is_not_connected_fails_at_once():
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        fleet_of(server).prepare([artifacts(["ghost"])])
        with pytest.raises(DeviceFailure, match="not connected"):
            await fleet_of(server).run_task(DeviceId("ghost"), task())


async def test_an_error_reply_fails_the_task_and_keeps_the_session():
    async with coordinator_with_a_good_device() as (server, _good):
        ws = await raw_client(server)
        async with asyncio.TaskGroup() as group:
            run = group.create_task(outcome(fleet_of(server).run_task(DeviceId("raw"), task())))
            t = await received_task(ws)
            await ws.send(json.dumps({"type": "error", "code": "task_failed", "reason": "out of memory", "task_id": t.task_id}))
        failure = run.result()
        assert failure.status == "failed" and "out of memory" in failure.reason
        assert "raw" in server.registry.connected()
        await ws.close()


async def test_an_unmeasured_upload_stays_unmeasured():
    # protocol.md 5.5: upload_s is null for a session's first result; it must not become 0.
    async with coordinator_with_a_good_device() as (server, _good):
        ws = await raw_client(server)
        timings = []
        for round_, upload in ((1, None), (2, 0.25)):
            async with asyncio.TaskGroup() as group:
                run = group.create_task(fleet_of(server).run_task(DeviceId("raw"), task(round_=round_)))
                t = await received_task(ws)
                weights = {k: np.array(v) for k, v in t.weights.items()}
                await ws.send(protocol.encode(protocol.Result(t.task_id, t.job_id, t.round, weights, 6, 0.5, protocol.Timing(0.1, 0.2, upload))))
            timings.append(run.result().timing)
        assert [(t.download_s, t.compute_s, t.upload_s) for t in timings] == [(0.1, 0.2, None), (0.1, 0.2, 0.25)]
        await ws.close()


async def test_a_device_disconnecting_mid_task_fails_it_at_once():
    async with coordinator_with_a_good_device() as (server, _good):
        ws = await raw_client(server)
        async with asyncio.TaskGroup() as group:
            # A deadline the test never reaches: the failure can only come from the lost connection.
            run = group.create_task(outcome(fleet_of(server).run_task(DeviceId("raw"), task(deadline_s=3600))))
            await received_task(ws)
            ws.transport.abort()
        failure = run.result()
        assert failure.status == "failed" and "connection lost" in failure.reason


async def test_a_device_saying_bye_mid_task_fails_it_with_its_reason():
    async with coordinator_with_a_good_device() as (server, _good):
        ws = await raw_client(server)
        async with asyncio.TaskGroup() as group:
            run = group.create_task(outcome(fleet_of(server).run_task(DeviceId("raw"), task())))
            await received_task(ws)
            await ws.send(json.dumps({"type": "bye", "code": "going_away", "reason": "battery low"}))
        failure = run.result()
        assert failure.status == "failed" and "battery low" in failure.reason


async def test_provision_is_sent_once_per_device_and_job_and_omits_cached_artifacts():
    async with coordinator_with_a_good_device() as (server, _good):
        job = artifacts(["good", "raw"])
        fleet_of(server).prepare([job, artifacts(["raw"], job="k")])
        program_sha = hashlib.sha256(job.program).hexdigest()
        ws = await raw_client(server, cached=[program_sha])
        seen = []

        async def answer(n):
            for _ in range(n):
                while True:
                    message = await ws.recv()
                    if isinstance(message, bytes):
                        decoded = protocol.decode_bytes(message)
                        seen.append(decoded)
                        if isinstance(decoded, protocol.Task):
                            await ws.send(result_for(decoded, {k: np.asarray(v) for k, v in decoded.weights.items()}))
                            break

        async with asyncio.TaskGroup() as group:
            group.create_task(answer(3))
            for r, j in [(1, "j"), (2, "j"), (1, "k")]:
                await fleet_of(server).run_task(DeviceId("raw"), task(round_=r, job=j))
        kinds = [(type(m).__name__, getattr(m, "job_id", None)) for m in seen]
        assert kinds == [("Provision", "j"), ("Task", "j"), ("Task", "j"), ("Provision", "k"), ("Task", "k")]
        assert seen[0].program is None and seen[0].shard is not None  # the device holds the program
        assert seen[3].program is None  # sent once: the same program bytes for job k
        await ws.close()


async def test_a_forgotten_job_leaves_no_binding_on_the_connections_that_stay():
    # The lab service's devices stay connected between runs: a connection must not keep every ended run's jobs.
    async with coordinator_with_a_good_device() as (server, _good):
        fleet = fleet_of(server)
        fleet.prepare([artifacts(["good"], job="ended")])
        await fleet.run_task(DeviceId("good"), task(job="ended"))
        session = server.registry.connection(DeviceId("good")).session
        assert session.binding("ended") is not None
        fleet.forget([JobId("ended")])
        assert session.binding("ended") is None
