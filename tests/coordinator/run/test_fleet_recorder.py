"""The fleet recorder: the registry's joins, leaves and refusals, from a real server on loopback, kept in SQLite and shown."""

from __future__ import annotations

import asyncio
import logging

import pytest
from loopback import expect_bye, hello, raw_client
from websockets.asyncio.client import connect

from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.coordinator.run.database import RunDatabase
from mjfl.coordinator.run.recorder import FleetRecorder
from mjfl.coordinator.storage.records import FleetEvent, RunInfo
from mjfl.ids import DeviceId

pytestmark = pytest.mark.timeout(60)

PIXEL = {"model": "Google Pixel 7", "os": "Android 14 (API 34)"}


class Shown:
    """What the recorder handed on, and a way to wait for a device's leave (the registry tells it when the connection ends)."""

    def __init__(self, fail: bool = False) -> None:
        self.events: list[tuple[FleetEvent, object]] = []
        self.fail = fail
        self._left: dict[str, asyncio.Event] = {}

    def __call__(self, event: FleetEvent, profile: object) -> None:
        self.events.append((event, profile))
        if event.kind == "left":
            self.left(str(event.device)).set()
        if self.fail:
            raise KeyError("state")

    def left(self, device: str) -> asyncio.Event:
        return self._left.setdefault(device, asyncio.Event())


async def test_joins_leaves_and_refusals_are_kept_and_handed_on(tmp_path) -> None:
    database = await RunDatabase.open(tmp_path / "mjfl.db")
    await database.call(lambda s: s.start_run(RunInfo("r1", "random", "real", 0, "{}", "t"), []))
    shown = Shown()
    clock = iter(range(100))
    async with CoordinatorServer("127.0.0.1", 0, settings=ServerSettings(token="lab")) as server:
        early = await raw_client(server, "early", token="lab", hardware=PIXEL)
        recorder = FleetRecorder("r1", lambda: float(next(clock)), server.registry, database=database,
                                 also=shown)
        recorder.present()  # the device there before the recorder listened
        late = await raw_client(server, "late", token="lab", hardware={"model": "emulated", "emulated": True})
        intruder = await connect(server.url, compression=None, ping_interval=None, proxy=None)
        await intruder.send(hello("intruder", token="wrong"))
        await expect_bye(intruder, "unauthorized", 1008)
        await late.close()
        await asyncio.wait_for(shown.left("late").wait(), 10)
        await early.close()
        await asyncio.wait_for(shown.left("early").wait(), 10)
    await database.drain()
    events = await database.call(lambda s: s.fleet_events("r1"))
    database.close()
    assert [(e.at_s, e.kind, e.device) for e in events] == [
        (0.0, "joined", "early"), (1.0, "joined", "late"), (2.0, "refused", "intruder"), (3.0, "left", "late"),
        (4.0, "left", "early")]
    assert events[0].hardware == PIXEL and events[0].detail == "from 127.0.0.1"
    assert events[2].detail == "unauthorized: credentials refused (from 127.0.0.1)" and events[2].hardware is None
    assert events[3].detail.startswith("device said bye") or "close code" in events[3].detail
    # The live view got the same events, joins with the profile the device is planned with.
    assert [event for event, _ in shown.events] == events
    assert [profile.device for event, profile in shown.events if event.kind == "joined"] == ["early", "late"]


async def test_a_view_that_fails_or_a_database_that_cannot_keep_an_event_stops_nothing(tmp_path, caplog) -> None:
    database = await RunDatabase.open(tmp_path / "mjfl.db")  # no run r1: every event is refused by the database
    broken = Shown(fail=True)
    async with CoordinatorServer("127.0.0.1", 0) as server:
        FleetRecorder("r1", lambda: 0.0, server.registry, database=database, also=broken)
        with caplog.at_level(logging.WARNING):
            device = await raw_client(server, "d1")
            assert list(server.registry.connected()) == [DeviceId("d1")]  # welcomed all the same
            await device.close()
            await asyncio.wait_for(broken.left("d1").wait(), 10)
            await database.drain()  # a fleet event that cannot be kept only warns: the database goes on
    database.close()
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("joined event of d1 not saved") for m in messages)
    assert any(m == "the live view failed on a joined event of d1" for m in messages)
    assert any(m == "the live view failed on a left event of d1" for m in messages)
