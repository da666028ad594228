"""The coordinator's limits (docs/faults.md, "Limits"), each crossed on a real loopback server.

Good devices are EmulatedDevices; bad ones are raw websockets clients or raw
TCP sockets, as in test_server.py (whose helpers these tests share).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json

import numpy as np
import pytest
from loopback import (
    FAST,
    SPEC,
    WEIGHTS,
    HeldTrainer,
    artifacts,
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
from waiting import PATIENCE_S, eventually_async
from websockets.asyncio.client import connect

from mjfl.coordinator.config import JobConfig
from mjfl.coordinator.engine.clock import RealClock
from mjfl.coordinator.engine.engine import Engine, EngineJob
from mjfl.coordinator.engine.events import RoundLog
from mjfl.coordinator.engine.fedavg import fedavg, norm_outliers, update_sizes
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.registry import DeviceRegistry
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.device.emulated.emulator.device import devices_running
from mjfl.device.protocol import Result, Timing, encode, split_message
from mjfl.errors import ConfigError, DeviceFailure
from mjfl.ids import DeviceId, JobId
from mjfl.profiling.profiles import DeviceProfile
from mjfl.schedulers.registry import make_scheduler
from mjfl.testkit.echo import echo_trainer

pytestmark = pytest.mark.timeout(60)


def server(**settings):
    return CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**(FAST | settings)))


async def test_connections_past_the_per_address_limit_get_bye_too_many_connections():
    async with server(max_connections_per_address=2) as srv:
        refused: list[tuple[str | None, str]] = []
        srv.registry.on_refuse(lambda device, address, reason: refused.append((device, reason)))
        first = await raw_client(srv, "a")
        second = await connect(srv.url, compression=None, ping_interval=None, proxy=None)  # no hello yet: counts too
        third = await connect(srv.url, compression=None, ping_interval=None, proxy=None)
        await expect_bye(third, "too_many_connections", 1013)
        assert refused == [(None, "too_many_connections: at most 2 connections per address")]
        # The two within the limit are served; once one leaves, a newcomer is welcome.
        await second.send(hello("b"))
        assert json.loads(await second.recv())["type"] == "welcome"
        await first.close()
        await eventually_async(lambda: len(srv.registry.connected()) == 1, what="the first device to leave")
        fourth = await raw_client(srv, "c")
        assert set(srv.registry.connected()) == {"b", "c"}
        await second.close()
        await fourth.close()


async def test_messages_read_ahead_per_device_are_bounded_by_max_queued_messages():
    # What the limit holds: once a device's unread messages pass it, the
    # coordinator stops reading that device's socket (TCP pushes back). The
    # coordinator reads as fast as messages come, so the queue cannot be
    # filled from outside; this checks the bound each device's connection gets.
    async with server(max_queued_messages=3) as srv:
        client = await raw_client(srv, "a")
        queue = srv.registry.connection(DeviceId("a")).ws.recv_messages
        assert (queue.high, queue.low) == (3, 0)
        await client.close()
    async with server(max_queued_messages=None) as srv:
        client = await raw_client(srv, "b")
        assert srv.registry.connection(DeviceId("b")).ws.recv_messages.high is None  # None turns the bound off
        await client.close()


async def test_a_slow_loris_dribbling_its_handshake_is_dropped_after_the_handshake_timeout():
    async with server(handshake_timeout=0.3) as srv:
        reader, writer = await asyncio.open_connection("127.0.0.1", srv.port)
        # A valid request whose last header never ends: only the handshake's timeout can end the connection
        # (a complete or a malformed request would be answered; a header line would take minutes to grow too long).
        writer.write(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{srv.port}\r\nUpgrade: websocket\r\nX-Slow: ".encode())
        dropped = asyncio.ensure_future(reader.read())  # b"" once the server gives up
        async with asyncio.timeout(PATIENCE_S):  # without the limit, bytes would keep it open until this fails the test
            with contextlib.suppress(ConnectionError):
                while not dropped.done():  # one byte every 20 ms: the connection is never idle for long
                    writer.write(b"a")
                    await writer.drain()
                    await asyncio.sleep(0.02)  # the slow loris's pace, not a wait for anything
            try:
                answer = await dropped
            except ConnectionError:
                answer = b""  # reset rather than closed: dropped all the same
        assert answer == b"", answer  # dropped without an answer: the request was still coming, never refused
        writer.close()


async def test_a_device_may_not_announce_a_split_result_larger_than_its_task():
    async with server() as srv:
        good = device(srv, "good")
        async with devices_running(good):
            await srv.registry.wait_for_devices(1, PATIENCE_S)
            fleet_of(srv).prepare([artifacts(["good", "raw"])])
            ws = await raw_client(srv)
            run = asyncio.ensure_future(outcome(fleet_of(srv).run_task(DeviceId("raw"), task())))
            t = await received_task(ws)
            huge = {"w": np.zeros((3, 2), np.float32), "b": np.zeros(2_000_000, np.float32)}  # 8 MB, not 16 bytes
            parts = split_message(encode(Result(t.task_id, t.job_id, t.round, huge, 6, 0.5, Timing(0, 0, None))), 2**16 + 64)
            await ws.send(parts[0])
            await expect_bye(ws, "message_too_big", 1009)
            failure = await run
            assert isinstance(failure, DeviceFailure) and failure.status == "rejected"
            assert "message_too_big" in failure.reason
            # The good device trains on.
            assert (await fleet_of(srv).run_task(DeviceId("good"), task())).weights["b"].tolist() == [2.0] * 4


async def test_tasks_in_flight_are_bounded_across_the_fleet():
    # Each device takes ~0.3 s (6 samples x a = 0.05); one slot: the tasks run one after the other.
    profile = DeviceProfile("p", a=0.05, mu=1e6)
    d0_trainer = HeldTrainer(held=False)
    async with server() as srv:
        fleet_of(srv, max_tasks_in_flight=1)
        devices = [device(srv, "d0", profile=profile, make_trainer=d0_trainer), device(srv, "d1", profile=profile)]
        async with devices_running(*devices):
            await srv.registry.wait_for_devices(2, PATIENCE_S)
            fleet_of(srv).prepare([artifacts(["d0", "d1"])])
            results = await asyncio.gather(*(fleet_of(srv).run_task(DeviceId(d), task()) for d in ("d0", "d1")))
            assert [r.weights["b"].tolist() for r in results] == [[2.0] * 4] * 2
            (*_, e0, o0), (*_, s1, _, o1) = sorted(fleet_of(srv).task_log, key=lambda x: x[3])
            assert o0 == o1 == "ok" and s1 >= e0  # never two tasks out at once
            # A task whose deadline passes while it waits for a slot fails without being sent:
            # d0's next task holds the only slot until the test lets its training end.
            d0_trainer.hold()
            slow = asyncio.ensure_future(fleet_of(srv).run_task(DeviceId("d0"), task(round_=2)))
            await eventually_async(lambda: srv.registry.in_flight(DeviceId("d0")), what="d0's task to hold the slot")
            waiting = await outcome(fleet_of(srv).run_task(DeviceId("d1"), task(round_=2, deadline_s=0.1)))
            assert isinstance(waiting, DeviceFailure) and "no task slot" in waiting.reason
            d0_trainer.release()
            assert (await slow).weights["b"].tolist() == [2.0] * 4
            assert len(devices[1].history) == 1  # d1 never got the second task


def test_new_limits_are_checked():
    for name in ("max_connections_per_address", "max_queued_messages"):
        with pytest.raises(ConfigError, match=name):
            ServerSettings(**{name: 0})
        ServerSettings(**{name: None})  # None turns it off
    with pytest.raises(ConfigError, match="max_tasks_in_flight"):
        RemoteFleet(DeviceRegistry(), max_tasks_in_flight=0)
    RemoteFleet(DeviceRegistry(), max_tasks_in_flight=None)


# -- update checks before FedAvg ---------------------------------------------------------


def test_norm_outliers_need_three_updates_and_measure_from_the_global_model():
    ref = {"w": np.ones(4, np.float32)}
    honest = [{"w": ref["w"] + d} for d in (0.1, -0.2, 0.15)]
    huge = {"w": ref["w"] + 50.0}

    def outliers(reference, updates, **kw):
        return norm_outliers(update_sizes(reference, updates), **kw)

    assert outliers(ref, [*honest, huge], max_ratio=10) == [3]
    assert outliers(ref, [honest[0], huge], max_ratio=10) == []  # no majority to judge by
    assert outliers(ref, [*honest, huge], max_ratio=None) == []
    assert outliers(ref, honest, max_ratio=1.0) == [1]  # 0.4 > 1 x median 0.3
    assert outliers({"w": ref["w"] + 50.0}, [*honest, huge], max_ratio=10) == []  # all are far from it


def test_updates_that_barely_move_the_model_are_neither_outliers_nor_typical():
    """Stand-in devices (no learning) in the majority would make the round's median
    tiny and the learners outliers; below ``still`` they do not count."""
    ref = {"w": np.ones(4, np.float32)}
    stand_ins = [{"w": ref["w"] * np.float32(1 - 1e-5)} for _ in range(3)]
    honest = [{"w": ref["w"] + d} for d in (0.1, -0.2)]
    sizes = update_sizes(ref, [*stand_ins, *honest])
    assert norm_outliers(sizes, max_ratio=10) == [3, 4]  # the round alone rejects the learners
    assert norm_outliers(sizes, max_ratio=10, still=1e-3) == []
    # The job's typical update judges a huge one even among fewer than three that moved.
    huge = {"w": ref["w"] + 50.0}
    sizes = update_sizes(ref, [*stand_ins, honest[0], huge])
    assert norm_outliers(sizes, max_ratio=10, still=1e-3) == []
    assert norm_outliers(sizes, max_ratio=10, still=1e-3, typical=0.3) == [4]
    assert norm_outliers(sizes, max_ratio=10, still=1e-3, typical=0.002) == [3, 4]


async def test_a_round_rejects_a_huge_and_a_nan_update_and_averages_only_the_honest_ones():
    honest = {"h0": 0.5, "h1": 1.0, "h2": 1.5}
    async with server() as srv:
        devices = [device(srv, d, make_trainer=functools.partial(echo_trainer, delta=x)) for d, x in honest.items()]
        devices.append(device(srv, "huge", make_trainer=functools.partial(echo_trainer, delta=1e4)))
        async with devices_running(*devices):
            await srv.registry.wait_for_devices(4, PATIENCE_S)
            ws = await raw_client(srv, "nan")
            names = [*honest, "huge", "nan"]
            fleet_of(srv).prepare([artifacts(names)])
            job = EngineJob(
                JobConfig(JobId("j"), "lenet5", fraction=1.0, max_rounds=1), spec=SPEC,
                scheduler=make_scheduler("random", seed=0), samples={DeviceId(d): 6 for d in names},
                test_x=np.zeros((1, 1, 16, 16), np.float32), test_y=np.zeros(1, np.int64), weights=dict(WEIGHTS),
            )

            async def answer_with_nan():
                t = await received_task(ws)
                # The codec refuses to write NaN; a broken device writes it anyway:
                # a valid result whose first weight is then overwritten with NaN.
                data = bytearray(result_for(t, {k: np.asarray(v) for k, v in t.weights.items()}))
                payload_offset = int.from_bytes(data[12:16], "little")
                data[payload_offset:payload_offset + 4] = np.float32(np.nan).tobytes()
                await ws.send(bytes(data))
                await expect_bye(ws, "bad_weights", 1002)

            sink = RoundLog()
            async with asyncio.TaskGroup() as group:
                group.create_task(answer_with_nan())
                group.create_task(Engine([job], fleet_of(srv), RealClock(), lambda *a: (0.5, 1.0), run_id="n", observers=[sink]).run())
    (record,) = sink.records
    status = {dr.device: dr for dr in record.devices}
    assert status["huge"].status == "rejected" and "norm" in status["huge"].error
    assert status["nan"].status == "rejected" and "bad_weights" in status["nan"].error
    assert all(status[d].status == "ok" for d in honest)
    expected = fedavg([({k: v + np.float32(x) for k, v in WEIGHTS.items()}, 6) for x in honest.values()])
    assert record.aggregated
    for name in WEIGHTS:
        np.testing.assert_array_equal(job.weights[name], expected[name])


async def test_the_engine_judges_a_round_of_stand_ins_by_the_jobs_typical_update():
    """Three devices that barely move the model, one that learns and one huge update:
    the stand-ins and the learner are averaged, the huge one is refused by the job's
    typical update from earlier rounds (only two of the round moved the model, too
    few for a median), and the accepted learner joins that history."""
    moves = {"still0": 1e-6, "still1": 1e-6, "still2": 1e-6, "learn": 0.5, "huge": 1e4}

    def moved(x):
        return {k: v + np.float32(x) for k, v in WEIGHTS.items()}

    async with server() as srv:
        devices = [device(srv, d, make_trainer=functools.partial(echo_trainer, delta=x)) for d, x in moves.items()]
        async with devices_running(*devices):
            await srv.registry.wait_for_devices(len(moves), PATIENCE_S)
            fleet_of(srv).prepare([artifacts(list(moves))])
            job = EngineJob(
                JobConfig(JobId("j"), "lenet5", fraction=1.0, max_rounds=1), spec=SPEC,
                scheduler=make_scheduler("random", seed=0), samples={DeviceId(d): 6 for d in moves},
                test_x=np.zeros((1, 1, 16, 16), np.float32), test_y=np.zeros(1, np.int64), weights=dict(WEIGHTS),
            )
            job.accepted_sizes.extend(update_sizes(WEIGHTS, [moved(0.75)]))  # an earlier round's honest update
            sink = RoundLog()
            await Engine([job], fleet_of(srv), RealClock(), lambda *a: (0.5, 1.0), run_id="s", observers=[sink]).run()
    (record,) = sink.records
    assert {dr.device: dr.status for dr in record.devices} == {**dict.fromkeys(moves, "ok"), "huge": "rejected"}
    assert record.aggregated
    assert list(job.accepted_sizes) == pytest.approx([float(x) for x in update_sizes(WEIGHTS, [moved(0.75), moved(0.5)])])
