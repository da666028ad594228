"""The coordinator's WebSocket server on real loopback sockets: handshakes, bad input, timeouts, shutdown.

A device misbehaving closes its own session and nobody else's: good devices
are EmulatedDevices, bad ones raw websockets clients or TCP sockets writing
hand-made frames (tests/loopback.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import math

import numpy as np
import pytest
from loopback import (
    FAST,
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
from waiting import PATIENCE_S, eventually_async
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.registry import DeviceRegistry
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.device import protocol
from mjfl.errors import ConfigError, DeviceFailure
from mjfl.ids import DeviceId
from mjfl.profiling.profiles import DeviceProfile

pytestmark = pytest.mark.timeout(60)


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
        refused: list[tuple[str | None, str, str]] = []
        server.registry.on_refuse(lambda device, address, reason: refused.append((device, address, reason)))
        ws = await connect(server.url, compression=None, ping_interval=None, proxy=None)
        await ws.send(first)
        await expect_bye(ws, code, close_code)
        assert list(server.registry.connected()) == ["good"]
        # The registry's listeners hear of it once (the dashboard's events), before the bye goes out.
        assert len(refused) == 1, refused
        device, address, reason = refused[0]
        assert address == "127.0.0.1" and reason.startswith(code + ": ")
        assert device == ("raw" if code == "unauthorized" else None)  # a hello the session refused tells no id


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
        await eventually_async(lambda: "raw" not in server.registry.connected(), what="the bad device to leave")


async def test_a_binary_message_over_the_size_limit_is_refused():
    async with coordinator_with_a_good_device(max_message_bytes=2**20) as (server, _good):
        ws = await raw_client(server)
        await ws.send(b"MJFL" + bytes(2**20 + 100))
        with pytest.raises(ConnectionClosed):
            async with asyncio.timeout(PATIENCE_S):
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
        seen = []
        with pytest.raises(ConnectionClosed):
            async with asyncio.timeout(PATIENCE_S):  # a device left open would fail here
                while True:
                    seen.append(json.loads(await ws.recv()))
        assert ws.close_code == 1011
        # The coordinator asked before it gave up: heartbeats, numbered from 1, then the bye.
        beats = [m["seq"] for m in seen if m["type"] == "heartbeat"]
        assert beats and beats == list(range(1, len(beats) + 1)), seen
        assert seen[-1]["type"] == "bye" and seen[-1]["code"] == "heartbeat_timeout", seen
        # The good device, which answers its heartbeats, stays (coordinator_with_a_good_device checks its session).
        await eventually_async(lambda: server.heartbeat_rtts, what="a heartbeat round trip of the good device")
        assert all(rtt >= 0 for rtt in server.heartbeat_rtts)


async def test_a_silent_handshake_is_closed():
    async with coordinator_with_a_good_device(handshake_timeout=0.3) as (server, _good):
        ws = await connect(server.url, compression=None, ping_interval=None, proxy=None)
        await expect_bye(ws, "heartbeat_timeout", 1011)


async def test_shutdown_says_bye_going_away_to_every_device_and_fails_pending_tasks(caplog):
    # A pending task whose round (60,000 s) outlasts the test, and a shutdown_timeout long enough that
    # the connections end by their closing handshakes, never by the fallback that drops them.
    server = CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**(FAST | {"shutdown_timeout": PATIENCE_S})))
    await server.start()
    devices = [device(server, f"d{i}", profile=DeviceProfile("p", a=1e4, mu=1e6)) for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="mjfl.coordinator.remote.server"):
        async with asyncio.TaskGroup() as group:
            for d in devices:
                group.create_task(d.run())
            await server.registry.wait_for_devices(3, PATIENCE_S)
            fleet_of(server).prepare([artifacts([d.device_id for d in devices])])
            pending = group.create_task(outcome(fleet_of(server).run_task(DeviceId("d0"), task())))
            await eventually_async(lambda: devices[0].history, what="d0 to get its task")
            await server.close()
    assert [d.stopped_by for d in devices] == ["bye going_away: coordinator shutdown"] * 3
    assert isinstance(pending.result(), DeviceFailure) and "shutdown" in pending.result().reason
    assert "did not close in time" not in caplog.text  # closed, not dropped at the shutdown_timeout


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
    # close_timeout (an hour here) for a close frame that never comes.
    import base64
    import os

    def text_frame(text: str) -> bytes:  # RFC 6455 5.2: a masked text frame of < 64 KiB
        data, mask = text.encode(), os.urandom(4)
        size = bytes([0x80 | len(data)]) if len(data) < 126 else bytes([0x80 | 126]) + len(data).to_bytes(2, "big")
        return bytes([0x81]) + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**(FAST | {"close_timeout": 3600.0}))) as server:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write(
            f"GET / HTTP/1.1\r\nHost: mjfl\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        await reader.readuntil(b"\r\n\r\n")
        writer.write(text_frame(hello("stubborn")))
        await server.registry.wait_for_devices(1, PATIENCE_S)
        writer.write(text_frame('{"type":"gossip"}'))  # -> bye unknown_type

        async def keep_talking():
            with contextlib.suppress(ConnectionError):
                for seq in itertools.count(1):
                    writer.write(text_frame(json.dumps({"type": "heartbeat", "seq": seq, "sent_at": 0.0})))
                    await writer.drain()
                    await asyncio.sleep(0.05)  # the stubborn peer's pace, not a wait for anything

        talking = asyncio.ensure_future(keep_talking())
        try:
            await eventually_async(
                lambda: server.registry.connection(DeviceId("stubborn")) is None,  # its handler has ended
                what="the coordinator to drop the device that ignores its bye (its close_timeout is an hour)",
            )
        finally:
            talking.cancel()
        writer.close()


async def test_a_lost_connections_reason_is_explained_before_its_device_leaves_and_a_bye_is_not():
    """``explain_loss`` (the phones' bridge reads the phone's log) adds why a connection was lost; a bye says why itself."""
    server = CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**FAST))
    left: dict[str, str] = {}
    asked: list[str] = []

    async def explain(device: str, reason: str) -> str:
        asked.append(device)
        return f"{reason}; the app ended: native crash (SIGSEGV)"

    server.explain_loss = explain
    server.registry.on_leave(lambda device, reason: left.__setitem__(str(device), reason))
    await server.start()
    try:
        crashed = await raw_client(server, "crashed")
        crashed.transport.abort()  # the process died: no bye, no close frame
        polite = await raw_client(server, "polite")
        await polite.send(json.dumps({"type": "bye", "code": "going_away", "reason": "the app stops"}))
        await eventually_async(lambda: len(left) == 2, what="both devices to leave")
    finally:
        await server.close()
    assert left["crashed"] == "connection lost (close code 1006); the app ended: native crash (SIGSEGV)"
    assert asked == ["crashed"] and "the app stops" in left["polite"]
