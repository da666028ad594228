"""A coordinator and devices on loopback: what the remote side's tests share.

Good devices are EmulatedDevices (in-process) with echo trainers; bad ones
are raw websockets clients writing hand-made frames (``raw_client``,
``result_for``). ``fleet_of(server)`` is the engine's fleet over a server's
registry, one per server. A ``HeldTrainer`` keeps its device training until
the test lets it go: a device that is certainly busy, however slow the
machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import threading
import weakref

import numpy as np
import pytest
from waiting import PATIENCE_S
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from mjfl.coordinator.engine.fleet import JobArtifacts, Task
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.device import protocol
from mjfl.device.emulated.emulator.device import EmulatedDevice, devices_running
from mjfl.errors import DeviceFailure
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining
from mjfl.jobs.models import ModelSpec
from mjfl.testkit.echo import EchoTrainer, echo_trainer

_FLEETS: weakref.WeakKeyDictionary[CoordinatorServer, RemoteFleet] = weakref.WeakKeyDictionary()


def fleet_of(server: CoordinatorServer, **options) -> RemoteFleet:
    """The remote fleet over ``server``'s registry (made on first use, with ``options``)."""
    fleet = _FLEETS.get(server)
    if fleet is None:
        fleet = _FLEETS[server] = RemoteFleet(server.registry, **options)
    return fleet


SPEC = ModelSpec("lenet5", (1, 16, 16), 10)
WEIGHTS = {"w": np.zeros((3, 2), np.float32), "b": np.ones(4, np.float32)}
FAST = {"heartbeat_interval": 0.2, "heartbeat_timeout": 2.0, "handshake_timeout": 2.0, "close_timeout": 1.0, "shutdown_timeout": 3.0}


def shard(n=6):
    return np.zeros((n, *SPEC.input_shape), np.float32), np.arange(n, dtype=np.int64) % 10


def artifacts(devices, job="j"):
    return JobArtifacts(JobId(job), SPEC, b"placeholder program", {DeviceId(d): shard() for d in devices})


def task(round_=1, job="j", weights=WEIGHTS, **kw):
    return Task(JobId(job), round_, weights, LocalTraining(epochs=1, batch_size=4, lr=0.1), **kw)


def device(server, device_id, **kw):
    kw.setdefault("make_trainer", functools.partial(echo_trainer, delta=1.0))
    return EmulatedDevice(server.url, device_id, runtime="torch", **kw)


class HeldTrainer(EchoTrainer):
    """An echo trainer (``delta`` added) whose trainings wait while it is held; also its own factory.

    Held from the start unless ``held`` is False; ``release()`` lets every
    training waiting and to come go on, ``hold()`` holds the next ones again.
    ``training`` is set once a training has begun. A wait is bounded by
    ``PATIENCE_S`` so that a test that fails before releasing it leaves no
    thread behind for ever.
    """

    def __init__(self, delta: float = 1.0, *, held: bool = True) -> None:
        super().__init__(delta=delta)
        self.training = threading.Event()
        self._released = threading.Event()
        if not held:
            self._released.set()

    def __call__(self, runtime, model, program):
        return self

    def train(self, weights, x, y, training, *, seed=0):
        self.training.set()
        self._released.wait(PATIENCE_S)
        return super().train(weights, x, y, training, seed=seed)

    def hold(self) -> None:
        self.training.clear()
        self._released.clear()

    def release(self) -> None:
        self._released.set()


async def outcome(run):
    """A run_task's TaskResult, or its DeviceFailure as a value (so a TaskGroup keeps going)."""
    try:
        return await run
    except DeviceFailure as failure:
        return failure


def hello(device_id="raw", *, token="", versions=(1,), cached=(), hardware=None):
    return json.dumps({
        "type": "hello", "device_id": device_id, "token": token, "runtime": "torch",
        "versions": list(versions), "hardware": hardware or {}, "cached": list(cached), "max_message_bytes": None,
    })


async def raw_client(server, device_id="raw", **kw):
    """A websockets client that has said hello and got its welcome."""
    ws = await connect(server.url, compression=None, ping_interval=None, proxy=None, max_size=None)
    await ws.send(hello(device_id, **kw))
    assert json.loads(await ws.recv())["type"] == "welcome"
    return ws


async def expect_bye(ws, code, close_code):
    """Read until the coordinator's bye; then the WebSocket closes with ``close_code``."""
    async with asyncio.timeout(PATIENCE_S):
        while True:
            message = await ws.recv()
            if isinstance(message, str) and json.loads(message)["type"] == "bye":
                break
        assert json.loads(message)["code"] == code, message
        with pytest.raises(ConnectionClosed):
            while True:
                await ws.recv()
    assert ws.close_code == close_code


async def received_task(ws):
    """Skip text messages and the provision; the decoded task."""
    async with asyncio.timeout(PATIENCE_S):
        while True:
            message = await ws.recv()
            if isinstance(message, bytes):
                decoded = protocol.decode_bytes(message)
                if isinstance(decoded, protocol.Task):
                    return decoded


def result_for(t, weights):
    return protocol.encode(protocol.Result(t.task_id, t.job_id, t.round, weights, 6, 0.5, protocol.Timing(0.0, 0.0, None)))


@contextlib.asynccontextmanager
async def coordinator_with_a_good_device(**settings):
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(**(FAST | settings))) as server:
        good = device(server, "good")
        async with devices_running(good):
            await server.registry.wait_for_devices(1, PATIENCE_S)
            fleet_of(server).prepare([artifacts(["good", "raw"])])
            yield server, good
            # The run went on: the good device still trains, on its first session.
            result = await fleet_of(server).run_task(DeviceId("good"), task(round_=99))
            assert result.weights["b"].tolist() == [2.0] * 4
            assert good.sessions == 1


