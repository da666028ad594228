"""The live run: LiveRun's shapes from the engine's events, and the server's /api/live and its event stream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from dashboard_runs import CONFIG, MEMBERS, aggregated, bars_of, device_rounds, new_live, records
from run_records import CNN, LENET, jobs_of

from mjfl.coordinator.dashboard.catalog import Catalog
from mjfl.coordinator.dashboard.live import LiveRun
from mjfl.coordinator.dashboard.server import live_dashboard
from mjfl.coordinator.dashboard.state import (
    choices_table,
    devices_table,
    epochs_of,
    events_table,
    jobs_view,
    round_devices,
)
from mjfl.coordinator.dashboard.timeline import timeline
from mjfl.coordinator.engine.events import (
    DeviceJoined,
    DeviceLeft,
    DeviceResult,
    JobStopped,
    RunFinished,
    RunStarted,
    TaskSent,
)
from mjfl.coordinator.storage.records import FleetEvent, RunInfo, SchedulerChoice
from mjfl.errors import UserError
from mjfl.ids import DeviceId

pytestmark = pytest.mark.timeout(60)


def test_the_live_shapes_are_state_pys_shapes_of_the_same_rounds() -> None:
    live = new_live()
    live(RunStarted("live-0", (CNN, LENET), tuple(DeviceId(f"d{k}") for k in range(4)), 0.0))
    rounds = records()
    for record in rounds:
        live(aggregated(record))
    view = live.snapshot()
    choices = [SchedulerChoice("live-0", r.job, r.round, m, c, m == "genetic") for r in rounds for m, c in MEMBERS.items()]
    assert [j.pop("stopped") for j in view["jobs"]] == [None, None]  # the one key a finished run's view lacks
    assert view["jobs"] == jobs_view(jobs_of("live-0"), rounds)
    assert [{k: v for k, v in row.items() if k != "state"} for row in view["devices"]] == devices_table(
        rounds, {}, epochs_of(CONFIG))
    assert view["choices"] == choices_table(rounds, choices)
    assert view["events"] == events_table([], rounds)
    # The timeline's bars are counted in every push and served apart, the finished run's shape.
    assert view["timeline_bars"] == 24 and live.timeline() == timeline(["cnn", "lenet"], rounds, ["d0", "d1", "d2", "d3"])
    assert bars_of(live.timeline(since=20)) == bars_of(live.timeline())[20:]
    assert live.round_devices(str(CNN), 2) == round_devices(rounds[1])
    assert live.round_devices(str(CNN), 4) is None and live.round_devices("nojob", 1) is None
    assert view["run"]["status"] == "running" and view["run"]["id"] == "live"
    live(RunFinished("live-0", {}, 40.0))
    assert live.snapshot()["run"]["status"] == "finished"


def test_a_resumed_run_starts_from_its_recorded_rounds() -> None:
    rounds = records()
    choices = [SchedulerChoice("live-0", r.job, r.round, m, c, m == "genetic") for r in rounds for m, c in MEMBERS.items()]
    resumed = new_live()
    resumed.recorded(rounds[:2], choices)
    for record in rounds[2:]:
        resumed(aggregated(record))
    whole = new_live()
    for record in rounds:
        whole(aggregated(record))
    assert resumed.snapshot() | {"version": 0} == whole.snapshot() | {"version": 0}
    assert {row["state"] for row in resumed.snapshot()["devices"]} == {"idle"}  # every row has one
    resumed.fleet(FleetEvent("live-0", 50.0, "joined", DeviceId("d0"), ""))  # and a join after a resume reads it
    assert len(resumed.snapshot()["jobs"][0]["series"]["round"]) == 3


def test_each_device_is_idle_training_or_offline() -> None:
    live = new_live()
    seen: list[int] = []
    live.on_change(lambda: seen.append(live.version))
    live(RunStarted("live-0", (CNN, LENET), (DeviceId("d0"), DeviceId("d1")), 0.0))
    live(TaskSent(CNN, 1, DeviceId("d0"), 0.1))

    def states() -> dict[str, str]:
        return {row["device"]: row["state"] for row in live.snapshot()["devices"]}

    assert states() == {"d0": f"training {CNN}", "d1": "idle"}
    live(DeviceResult(CNN, 1, device_rounds(1, 1)[0], 2.0))
    live(DeviceJoined(DeviceId("d7"), 2.5))
    assert states() == {"d0": "idle", "d1": "idle", "d7": "idle"}
    live(TaskSent(LENET, 1, DeviceId("d1"), 3.0))
    live(DeviceLeft(DeviceId("d1"), "closed", 3.5))
    live.fleet(FleetEvent("live-0", 3.6, "left", DeviceId("d7"), "connection lost"))  # the registry's word
    assert states() == {"d0": "idle", "d1": "offline", "d7": "offline"}
    live(JobStopped(CNN, "target", 1, 4.0))
    live.fleet(FleetEvent("live-0", 4.5, "joined", DeviceId("d7"), "from 10.0.0.7", {"model": "Pixel 7", "os": "Android 14"}))
    assert states()["d7"] == "idle"
    assert seen == list(range(1, len(seen) + 1)) and len(seen) == 9


def test_fleet_events_name_each_device_and_list_what_happened() -> None:
    live = new_live()
    pixel = {"model": "Google Pixel 7", "os": "Android 14 (API 34)", "cores": 8,
             "device_state": {"battery_pct": 77, "charging": False, "thermal_status": 0}}
    live.fleet(FleetEvent("live-0", 1.0, "joined", DeviceId("p1"), "from 10.0.0.7", pixel))
    live.fleet(FleetEvent("live-0", 1.5, "joined", DeviceId("e1"), "from 127.0.0.1", {"model": "emulated", "emulated": True}))
    live.fleet(FleetEvent("live-0", 2.0, "joined", DeviceId("j1"), "", {"model": "jvm", "java": "17.0.15", "os": "Linux 6"}))
    live.fleet(FleetEvent("live-0", 2.5, "refused", None, "unauthorized: credentials refused (from 10.0.0.9)"))
    live(aggregated(records()[1]))  # round 2 of cnn, from 10 s to 20 s: d1 failed, d2's update refused
    live.fleet(FleetEvent("live-0", 25.0, "left", DeviceId("p1"), "connection lost (close code 1006)"))
    view = live.snapshot()
    rows = {row["device"]: row for row in view["devices"]}
    assert [(rows[d]["kind"], rows[d]["model"], rows[d]["os"]) for d in ("p1", "e1", "j1")] == [
        ("phone", "Google Pixel 7", "Android 14 (API 34)"), ("emulated", "emulated", None), ("jvm", "jvm", "Linux 6")]
    assert rows["d0"]["kind"] is None  # never seen connecting
    # The state a phone's hello told shows before its first round.
    assert (rows["p1"]["battery_pct"], rows["p1"]["charging"], rows["p1"]["thermal_status"]) == (77, False, 0)
    assert [(e["at_s"], e["kind"], e["device"]) for e in view["events"]] == [
        (1.0, "joined", "p1"), (1.5, "joined", "e1"), (2.0, "joined", "j1"), (2.5, "refused", None),
        (14.0, "rejected", "d2"), (19.0, "failed", "d1"), (25.0, "left", "p1")]
    failed = next(e for e in view["events"] if e["kind"] == "failed")
    assert (failed["job"], failed["round"], failed["detail"]) == (str(CNN), 2, "timeout in round 2")
    assert rows["p1"]["state"] == "offline"


def test_a_poll_shows_what_moves_on_the_connections_of_devices_with_a_task() -> None:
    live = new_live()
    live(RunStarted("live-0", (CNN,), (DeviceId("d0"), DeviceId("d1")), 0.0))
    live(TaskSent(CNN, 1, DeviceId("d0"), 0.1))
    asked: list[str] = []
    moving = {"d0": "downloading"}

    def transfer(device: str) -> str | None:
        asked.append(device)
        return moving.get(device)

    def state(device: str) -> str:
        return next(row["state"] for row in live.snapshot()["devices"] if row["device"] == device)

    version = live.version
    live.poll(transfer)
    assert asked == ["d0"] and state("d0") == f"downloading {CNN}" and live.version == version + 1
    live.poll(transfer)
    assert live.version == version + 1  # nothing changed: no push
    moving["d0"] = None
    live.poll(transfer)
    assert state("d0") == f"training {CNN}"
    moving["d0"] = "uploading"
    live.poll(transfer)
    assert state("d0") == f"uploading {CNN}"
    live(DeviceResult(CNN, 1, device_rounds(1, 1)[0], 2.0))
    asked.clear()
    live.poll(transfer)
    assert asked == [] and state("d0") == "idle"  # no task: not asked


def test_a_profiling_session_counts_its_calibration_tasks() -> None:
    live = LiveRun(RunInfo("p-0", "profiling session", "real", 0, "{}", "t"), [])
    live(DeviceJoined(DeviceId("d0"), 0.0))
    live(TaskSent(CNN, 1, DeviceId("d0"), 0.0))
    live.task_done("d0", str(CNN), 1.25)
    live(TaskSent(CNN, 2, DeviceId("d0"), 0.0))
    live.task_done("d0", None, None, "device error: out of memory")
    (row,) = live.snapshot()["devices"]
    assert (row["rounds"], row["ok"], row["failed"], row["last_round_s"], row["last_failure"], row["state"]) == (
        2, 1, 1, 1.25, "device error: out of memory", "idle")
    assert [e["kind"] for e in live.snapshot()["events"]] == ["failed"]


async def events(response: aiohttp.ClientResponse) -> AsyncIterator[dict]:
    """The ``run`` events of an SSE stream, parsed."""
    data = []
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if line.startswith("data: "):
            data.append(line.removeprefix("data: "))
        elif not line and data:
            yield json.loads("\n".join(data))
            data = []


async def test_the_server_sends_the_snapshot_and_pushes_changes_coalesced(folder: Path) -> None:
    live = new_live()
    live(RunStarted("live-0", (CNN, LENET), tuple(DeviceId(f"d{k}") for k in range(4)), 0.0))
    rounds = records()
    async with live_dashboard(Catalog([folder]), live, port=0) as url:
        assert url is not None and url.startswith("http://127.0.0.1:")
        async with aiohttp.ClientSession() as session:
            async with session.get(url + "api/live") as response:
                assert response.status == 200
                assert len((await response.json())["devices"]) == 4
            async with session.get(url + "api/runs") as response:  # the ended runs are still there
                assert [r["id"] for r in await response.json()] == ["0:mg-0", "0:mg-1"]  # finished, interrupted
            async with session.get(url) as response:  # the page asks for the live run: the server says it has one
                assert '<body data-live="yes">' in await response.text()
            async with session.get(url + "api/live/events") as response:
                assert response.headers["Content-Type"].startswith("text/event-stream")
                stream = events(response)
                first = await asyncio.wait_for(anext(stream), 10)
                assert all(len(j["series"]["round"]) == 0 for j in first["jobs"])
                # A burst: every round and 100 task events at once is one or two pushes, not 106.
                for record in rounds:
                    live(aggregated(record))
                for k in range(100):
                    live(TaskSent(CNN, 4, DeviceId(f"d{k % 4}"), 40.0))
                live(DeviceLeft(DeviceId("d3"), "closed", 41.0))
                pushes = 0
                while True:
                    view = await asyncio.wait_for(anext(stream), 10)
                    pushes += 1
                    if view["version"] == live.version:
                        break
                assert pushes <= 2
                assert [len(j["series"]["accuracy"]) for j in view["jobs"]] == [3, 3]
                assert {d["device"]: d["state"] for d in view["devices"]}["d3"] == "offline"
    # Leaving the block closed the stream and the listener.
    with pytest.raises(aiohttp.ClientConnectionError):
        async with aiohttp.ClientSession() as session, session.get(url + "api/live"):
            pass


async def test_a_busy_port_warns_once_and_serves_nothing() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        warnings: list[str] = []
        async with live_dashboard(None, new_live(), port=port, warn=warnings.append) as url:
            assert url is None
        assert len(warnings) == 1 and str(port) in warnings[0] and "goes on without it" in warnings[0]


async def test_without_a_live_run_there_is_no_live_endpoint(folder: Path) -> None:
    from mjfl.coordinator.dashboard.server import serve

    urls: asyncio.Queue[str] = asyncio.Queue()
    async with asyncio.TaskGroup() as group:
        server = group.create_task(serve(Catalog([folder]), port=0, ready=urls.put_nowait))
        url = await asyncio.wait_for(urls.get(), 10)
        async with aiohttp.ClientSession() as session:
            for path in ("api/live", "api/live/events"):
                async with session.get(url + path) as response:
                    assert response.status == 404
        server.cancel()


async def test_the_last_change_reaches_open_pages_as_the_dashboard_closes() -> None:
    live = new_live()
    live(RunStarted("live-0", (CNN, LENET), (DeviceId("d0"),), 0.0))
    seen: list[dict] = []

    async def read_to_the_end(stream: AsyncIterator[dict]) -> None:
        with contextlib.suppress(aiohttp.ClientError):
            async for view in stream:
                seen.append(view)

    async with aiohttp.ClientSession() as session:
        async with live_dashboard(None, live, port=0) as url:
            assert url is not None
            response = await session.get(url + "api/live/events")
            stream = events(response)
            seen.append(await asyncio.wait_for(anext(stream), 10))
            live(TaskSent(CNN, 1, DeviceId("d0"), 0.1))
            seen.append(await asyncio.wait_for(anext(stream), 10))  # the server now waits out its gap between pushes
            live(RunFinished("live-0", {}, 1.0))
            reader = asyncio.create_task(read_to_the_end(stream))
        # The run ended at once (the block left within the gap): the page still got it.
        await asyncio.wait_for(reader, 10)
        response.release()
    assert seen[-1]["run"]["status"] == "finished" and seen[-1]["version"] == live.version


async def test_the_live_dashboard_on_an_address_others_reach_needs_its_token() -> None:
    live = new_live()
    with pytest.raises(UserError, match="--dashboard-host 0.0.0.0"):
        async with live_dashboard(None, live, host="0.0.0.0", port=0):
            pass
    async with live_dashboard(None, live, host="0.0.0.0", port=0, token="s3cret") as url:
        assert url is not None and url.startswith("http://0.0.0.0:") and url.endswith("/?token=s3cret")
        base = url.split("?")[0].replace("0.0.0.0", "127.0.0.1")
        async with aiohttp.ClientSession() as session:
            async with session.get(base + "api/live") as response:
                assert response.status == 401
            async with session.get(base + "api/live", headers={"Authorization": "Bearer s3cret"}) as response:
                assert response.status == 200 and (await response.json())["run"]["id"] == "live"
            async with session.get(base + "api/live/events?token=s3cret") as response:
                assert response.status == 200 and (await anext(events(response)))["version"] == live.version
