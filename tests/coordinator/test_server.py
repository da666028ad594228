"""The coordinator's server and RemoteFleet on real loopback sockets.

Good devices are EmulatedDevices (in-process, or in worker processes for the
engine run); bad ones are raw websockets clients writing hand-made frames.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import itertools
import json
import math
import time

import numpy as np
import pytest
from loopback import (
    FAST,
    SPEC,
    WEIGHTS,
    artifacts,
    coordinator_with_a_good_device,
    device,
    expect_bye,
    fleet_of,
    hello,
    outcome,
    raw_client,
    received_task,
    result_for,
    task,
)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from mjfl.android_bridge import protocol
from mjfl.android_bridge.devices.emulator import (
    devices_running,
    run_emulated_fleet,
)
from mjfl.bench.echo import echo_trainer
from mjfl.coordinator.config import JobConfig
from mjfl.coordinator.engine.clock import RealClock
from mjfl.coordinator.engine.engine import Engine, EngineJob
from mjfl.coordinator.engine.events import RoundLog
from mjfl.coordinator.engine.fedavg import fedavg
from mjfl.coordinator.engine.fleet import JobArtifacts
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.registry import DeviceRegistry
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.errors import ConfigError, DeviceFailure, RunError
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining
from mjfl.jobs.models import build_model, initial_weights, load_weights
from mjfl.profiling.planning import DEFAULT_A, DEFAULT_MU, PlanningProfiles
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
        CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server,
        run_emulated_fleet(server.url, 8, runtime="torch", workers=2, id_prefix="mp"),
    ):
        await server.registry.wait_for_devices(8, timeout=60)
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


async def test_a_device_killed_mid_round_fails_fast_and_the_round_completes():
    slow_profile = DeviceProfile("slow-phone", a=1.0, mu=1e6)  # 6 samples -> a 6 s round
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        devices = [device(server, "d0"), device(server, "d1"), device(server, "slow", profile=slow_profile)]
        async with devices_running(*devices):
            await server.registry.wait_for_devices(3, 5)
            fleet_of(server).prepare([artifacts(["d0", "d1", "slow"])])
            job = EngineJob(
                JobConfig(JobId("j"), "lenet5", fraction=1.0, max_rounds=1), spec=SPEC,
                scheduler=make_scheduler("random", seed=0),
                samples={DeviceId(d): 6 for d in ("d0", "d1", "slow")}, test_x=np.zeros((1, 1, 16, 16), np.float32),
                test_y=np.zeros(1, np.int64), weights=dict(WEIGHTS),
            )

            async def kill_when_training():
                while not devices[2].history:
                    await asyncio.sleep(0.01)
                devices[2].kill()

            sink = RoundLog()
            started = time.monotonic()
            async with asyncio.TaskGroup() as group:
                group.create_task(kill_when_training())
                group.create_task(Engine([job], fleet_of(server), RealClock(), lambda *a: (0.5, 1.0), run_id="k", observers=[sink]).run())
            assert time.monotonic() - started < 3.0  # not the 6 s the slow device would take
    (record,) = sink.records
    status = {dr.device: dr for dr in record.devices}
    assert status["slow"].status == "failed" and status["slow"].duration_s < 2.0
    assert "connection lost" in status["slow"].error
    assert status["d0"].status == status["d1"].status == "ok"
    assert record.aggregated and job.weights["b"].tolist() == [2.0] * 4


# -- deadlines and exclusivity --------------------------------------------------------


async def test_a_missed_deadline_cancels_the_task_and_the_device_waits_before_its_next_task():
    # The trainer blocks for 0.6 s (a thread cannot be interrupted), the deadline is 0.2 s.
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        slow = device(server, "d", make_trainer=functools.partial(echo_trainer, work_s=0.6, delta=1.0))
        async with devices_running(slow):
            await server.registry.wait_for_devices(1, 5)
            fleet_of(server).prepare([artifacts(["d"])])
            started = time.monotonic()
            with pytest.raises(DeviceFailure) as failure:
                await fleet_of(server).run_task(DeviceId("d"), task(deadline_s=0.2))
            assert failure.value.status == "failed" and "deadline" in failure.value.reason
            assert 0.2 <= time.monotonic() - started < 0.5
            assert fleet_of(server).profiles() == []  # busy with the cancelled task
            result = await fleet_of(server).run_task(DeviceId("d"), task(round_=2))
            assert [p.device for p in fleet_of(server).profiles()] == ["d"]
    first, second = slow.history
    assert first.outcome == "cancelled" and second.outcome == "result"
    assert second.received_at >= first.answered_at  # never two tasks at once
    assert result.duration_s >= 0.6


async def test_task_timeout_bounds_a_task_without_a_deadline():
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST)) as server:
        fleet_of(server, task_timeout=0.2)
        d = device(server, "d", profile=DeviceProfile("p", a=1.0, mu=1e6))  # a 6 s round
        async with devices_running(d):
            await server.registry.wait_for_devices(1, 5)
            fleet_of(server).prepare([artifacts(["d"])])
            with pytest.raises(DeviceFailure, match="0.2 s deadline"):
                await fleet_of(server).run_task(DeviceId("d"), task())
            # The stretch is interrupted by the cancel: the device is free again at once.
            async with asyncio.timeout(2):
                while not fleet_of(server).profiles():
                    await asyncio.sleep(0.01)
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


# -- a bad device is closed, nobody else notices ---------------------------------------------


@pytest.mark.parametrize(
    "first, code, close_code",
    [
        ("{not json", "bad_message", 1002),
        (json.dumps({"type": "bogus"}), "unknown_type", 1002),
        (json.dumps({"type": "heartbeat", "seq": 1, "sent_at": 0.0}), "unexpected_message", 1002),
        ("x" * 5000, "message_too_big", 1009),
        (b"MJFL" + bytes(60), "unexpected_message", 1002),  # a binary message (e.g. a result) before hello
        (hello("raw", versions=(7,)), "unsupported_version", 1002),
        (hello("raw", token="wrong"), "unauthorized", 1008),
    ],
    ids=["malformed-json", "unknown-type", "heartbeat-before-hello", "oversized-text", "result-before-hello",
         "no-common-version", "unauthorized"],
)
async def test_bad_first_messages_close_that_session_only(first, code, close_code):
    async with coordinator_with_a_good_device(max_control_bytes=4096, token="") as (server, _good):
        ws = await connect(server.url, compression=None, ping_interval=None, proxy=None)
        await ws.send(first)
        await expect_bye(ws, code, close_code)
        assert list(server.registry.connected()) == ["good"]


@pytest.mark.parametrize(
    "message, code, close_code",
    [
        ("{not json", "bad_message", 1002),
        (json.dumps({"type": "teleport", "where": "mars"}), "unknown_type", 1002),
        ("y" * 5000, "message_too_big", 1009),
        (hello("raw"), "unexpected_message", 1002),  # a second hello
        (json.dumps({"type": "heartbeat_ack", "seq": 99, "echo": 0.0}), "bad_message", 1002),
        (result_for(protocol.Task("t-none", "j", 1, WEIGHTS, 1, 1, 0.1, 0, 0, None, "a" * 64, "b" * 64), WEIGHTS),
         "unknown_task", 1002),
        (b"JUNK" + bytes(60), "bad_frame", 1002),
    ],
    ids=["malformed-json", "unknown-type", "oversized-text", "second-hello", "unsolicited-ack",
         "result-for-unknown-task", "bad-magic"],
)
async def test_bad_messages_after_the_welcome_close_that_session_only(message, code, close_code):
    async with coordinator_with_a_good_device(max_control_bytes=4096) as (server, _good):
        ws = await raw_client(server)
        assert list(server.registry.connected()) == ["good", "raw"]
        await ws.send(message)
        await expect_bye(ws, code, close_code)
        async with asyncio.timeout(2):
            while "raw" in server.registry.connected():
                await asyncio.sleep(0.01)


async def test_a_binary_message_over_the_size_limit_is_refused():
    async with coordinator_with_a_good_device(max_message_bytes=2**20) as (server, _good):
        ws = await raw_client(server)
        await ws.send(b"MJFL" + bytes(2**20 + 100))
        with pytest.raises(ConnectionClosed):
            async with asyncio.timeout(5):
                while True:
                    await ws.recv()
        assert ws.close_code == 1009


@pytest.mark.parametrize(
    "corrupt, reason",
    [
        (lambda w: {"w": np.zeros((2, 3), np.float32), "b": w["b"]}, "'w' is float32 [2, 3], expected float32 [3, 2]"),
        (lambda w: {"w": w["w"].astype(np.float64), "b": w["b"]}, "'w' is float64"),
        (lambda w: {"w": w["w"], "b": np.full(4, np.nan, np.float32)}, "NaN"),
        (lambda w: {"b": w["b"], "w": w["w"]}, "different order"),
        (lambda w: {"w": w["w"]}, "missing"),
    ],
    ids=["wrong-shape", "wrong-dtype", "nan", "wrong-order", "missing-tensor"],
)
async def test_an_invalid_update_is_rejected_and_closes_that_session(corrupt, reason):
    async with coordinator_with_a_good_device() as (server, _good):
        ws = await raw_client(server)
        async with asyncio.TaskGroup() as group:
            run = group.create_task(outcome(fleet_of(server).run_task(DeviceId("raw"), task())))
            # Meanwhile the good device trains for another job round, undisturbed.
            other = group.create_task(outcome(fleet_of(server).run_task(DeviceId("good"), task(round_=5))))
            t = await received_task(ws)
            weights = {k: np.asarray(v) for k, v in t.weights.items()}
            await ws.send(result_for(t, corrupt(weights)))
            await expect_bye(ws, "bad_weights", 1002)
        failure = run.result()
        assert isinstance(failure, DeviceFailure) and failure.status == "rejected"
        assert "bad_weights" in failure.reason and reason in failure.reason
        assert other.result().weights["w"].tolist() == [[1.0, 1.0]] * 3


async def test_a_silent_device_is_closed_after_the_heartbeat_timeout():
    async with coordinator_with_a_good_device(heartbeat_interval=0.1, heartbeat_timeout=0.4) as (server, _good):
        ws = await raw_client(server)
        started = time.monotonic()
        beats = 0
        with pytest.raises(ConnectionClosed):
            async with asyncio.timeout(5):
                while True:
                    message = json.loads(await ws.recv())
                    beats += message["type"] == "heartbeat"
                    if message["type"] == "bye":
                        assert message["code"] == "heartbeat_timeout"
        assert ws.close_code == 1011
        assert 0.4 <= time.monotonic() - started < 2.0 and beats >= 2
        assert len(server.heartbeat_rtts) > 0  # the good device answers its heartbeats
        assert all(0 <= rtt < 0.5 for rtt in server.heartbeat_rtts)


async def test_a_silent_handshake_is_closed():
    async with coordinator_with_a_good_device(handshake_timeout=0.3) as (server, _good):
        ws = await connect(server.url, compression=None, ping_interval=None, proxy=None)
        await expect_bye(ws, "heartbeat_timeout", 1011)


async def test_a_device_disconnecting_mid_task_fails_it_at_once():
    async with coordinator_with_a_good_device() as (server, _good):
        ws = await raw_client(server)
        async with asyncio.TaskGroup() as group:
            run = group.create_task(outcome(fleet_of(server).run_task(DeviceId("raw"), task(deadline_s=30))))
            await received_task(ws)
            started = time.monotonic()
            ws.transport.abort()
        failure = run.result()
        assert failure.status == "failed" and "connection lost" in failure.reason
        assert time.monotonic() - started < 1.0


async def test_a_device_saying_bye_mid_task_fails_it_with_its_reason():
    async with coordinator_with_a_good_device() as (server, _good):
        ws = await raw_client(server)
        async with asyncio.TaskGroup() as group:
            run = group.create_task(outcome(fleet_of(server).run_task(DeviceId("raw"), task())))
            await received_task(ws)
            await ws.send(json.dumps({"type": "bye", "code": "going_away", "reason": "battery low"}))
        failure = run.result()
        assert failure.status == "failed" and "battery low" in failure.reason


# -- registry, profiles, provisioning, shutdown ----------------------------------------------


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
            await server.registry.wait_for_devices(3, 5, progress=lambda k, n: seen.append((k, n)))
            with pytest.raises(RunError, match="3 of 4 devices"):
                await server.registry.wait_for_devices(4, 0.2)
    assert seen[0][1] == 3 and seen[-1] == (3, 3)
    assert [k for k, _ in seen] == sorted(k for k, _ in seen)


async def test_shutdown_says_bye_going_away_to_every_device_and_fails_pending_tasks():
    server = CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST))
    await server.start()
    devices = [device(server, f"d{i}", profile=DeviceProfile("p", a=1.0, mu=1e6)) for i in range(3)]
    async with asyncio.TaskGroup() as group:
        for d in devices:
            group.create_task(d.run())
        await server.registry.wait_for_devices(3, 5)
        fleet_of(server).prepare([artifacts([d.device_id for d in devices])])
        pending = group.create_task(outcome(fleet_of(server).run_task(DeviceId("d0"), task())))
        while not devices[0].history:
            await asyncio.sleep(0.01)
        started = time.monotonic()
        await server.close()
        assert time.monotonic() - started < 2.0
    assert [d.stopped_by for d in devices] == ["bye going_away: coordinator shutdown"] * 3
    assert isinstance(pending.result(), DeviceFailure) and "shutdown" in pending.result().reason


def test_settings_are_checked():
    with pytest.raises(ConfigError, match="heartbeat_timeout"):
        ServerSettings(heartbeat_interval=10, heartbeat_timeout=5)
    with pytest.raises(ConfigError, match="task_timeout"):
        RemoteFleet(DeviceRegistry(), task_timeout=-1)
    assert ServerSettings(max_message_bytes=None).websocket_max_size() is None
    assert math.isclose(ServerSettings().heartbeat_timeout, 60.0)


async def test_a_device_that_ignores_the_bye_is_dropped_without_waiting_for_its_close():
    # A raw TCP peer that keeps sending after the coordinator's bye (protocol.md
    # 5.9 says nothing may follow a bye); the coordinator must not wait its whole
    # close_timeout (30 s here) for a close frame that never comes.
    import base64
    import os

    def text_frame(text: str) -> bytes:  # RFC 6455 5.2: a masked text frame of < 64 KiB
        data, mask = text.encode(), os.urandom(4)
        size = bytes([0x80 | len(data)]) if len(data) < 126 else bytes([0x80 | 126]) + len(data).to_bytes(2, "big")
        return bytes([0x81]) + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**(FAST | {"close_timeout": 30.0}))) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET / HTTP/1.1\r\nHost: mjfl\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        await reader.readuntil(b"\r\n\r\n")
        writer.write(text_frame(hello("stubborn")))
        await server.registry.wait_for_devices(1, 5)
        writer.write(text_frame('{"type":"gossip"}'))  # -> bye unknown_type
        started = time.monotonic()
        with contextlib.suppress(ConnectionError):
            for seq in itertools.count(1):
                if server.registry.connection(DeviceId("stubborn")) is None:  # its handler has ended
                    break
                writer.write(text_frame(json.dumps({"type": "heartbeat", "seq": seq, "sent_at": 0.0})))
                await writer.drain()
                await asyncio.sleep(0.05)
                assert time.monotonic() - started < 10, "the coordinator waited for a close that never came"
        writer.close()
