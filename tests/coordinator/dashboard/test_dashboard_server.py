"""The dashboard's server through a real HTTP client on a loopback port: pages, endpoints, the token rule."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from dashboard_runs import bars_of

from mjfl.coordinator.dashboard.catalog import Catalog
from mjfl.coordinator.dashboard.server import needs_token, serve
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.coordinator.storage.records import FleetEvent
from mjfl.errors import UserError
from mjfl.ids import DeviceId
from mjfl.logs import LOG_FILE, PHONE_LOGS, phone_log_name

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def served(folder: Path, *, token: str | None = None, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """The dashboard of ``folder`` on a free port, until the block ends; yields the URL it printed."""
    urls: asyncio.Queue[str] = asyncio.Queue()
    async with asyncio.TaskGroup() as group:
        server = group.create_task(serve(Catalog([folder]), host=host, port=0, token=token, ready=urls.put_nowait))
        yield await asyncio.wait_for(urls.get(), 10)
        server.cancel()  # as Ctrl-C does: serve closes its listener and ends


async def get(url: str, **kwargs: object) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(url, **kwargs) as response:  # type: ignore[arg-type]
        return response.status, await response.text(), dict(response.headers)


async def test_the_page_its_assets_and_the_endpoints(folder: Path) -> None:
    async with served(folder) as url:
        assert url.startswith("http://127.0.0.1:") and "token" not in url
        status, page, headers = await get(url)
        assert status == 200 and 'src="static/app.js"' in page and '<body data-live="no">' in page  # no live run to ask for
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        status, script, headers = await get(url + "static/app.js")
        assert status == 200 and "function chart(" in script and headers["Content-Type"].startswith("text/javascript")
        assert (await get(url + "static/../server.py"))[0] == 404
        assert (await get(url + "static/state.py"))[0] == 404
        status, body, _ = await get(url + "api/runs")
        assert status == 200 and [(r["id"], r["status"]) for r in json.loads(body)] == [
            ("0:mg-0", "finished"), ("0:mg-1", "interrupted")]
        status, body, _ = await get(url + "api/runs/0%3Amg-0")
        view = json.loads(body)
        assert status == 200 and [j["job"] for j in view["jobs"]] == ["cnn", "lenet"]
        assert len(view["devices"]) == 4 and len(view["choices"]) == 6
        status, body, _ = await get(url + "api/runs/0%3Amg-1")  # interrupted: shown, as such
        assert status == 200 and json.loads(body)["run"]["status"] == "interrupted"
        status, body, _ = await get(url + "api/runs/0%3Amg-7")
        assert status == 404 and "mg-7" in json.loads(body)["error"]
        status, body, _ = await get(url + "api/runs/0%3Amg-0/timeline?since=20")
        assert status == 200 and len(bars_of(json.loads(body))) == 4 and json.loads(body)["total"] == 24
        assert (await get(url + "api/runs/0%3Amg-7/timeline"))[0] == 404
        assert (await get(url + "api/live/timeline"))[0] == 404  # no live run here
        status, script, _ = await get(url + "static/timeline.js")
        assert status == 200 and "window.MjflTimeline" in script


async def test_with_a_token_every_request_must_carry_it(folder: Path) -> None:
    async with served(folder, token="s3cret/+") as url:
        assert url.endswith("/?token=s3cret%2F%2B")
        base = url.split("?")[0]
        for path in ("", "static/app.js", "api/runs", "api/runs/0%3Amg-0"):
            assert (await get(base + path))[0] == 401, path
            assert (await get(base + path, params={"token": "wrong"}))[0] == 401, path
            assert (await get(base + path, headers={"Authorization": "Bearer wrong"}))[0] == 401, path
            assert (await get(base + path, params={"token": "s3cret/+"}))[0] == 200, path
            assert (await get(base + path, headers={"Authorization": "Bearer s3cret/+"}))[0] == 200, path
        status, page, _ = await get(url)
        # The page's own assets carry the token, or the browser could not load them.
        assert status == 200 and 'src="static/app.js?token=s3cret%2F%2B"' in page


async def test_another_host_needs_a_token(folder: Path) -> None:
    with pytest.raises(UserError, match="--host 0.0.0.0"):
        await serve(Catalog([folder]), host="0.0.0.0", port=0)


def test_only_loopback_is_open() -> None:
    assert not needs_token("127.0.0.1") and not needs_token("::1") and not needs_token("localhost")
    assert needs_token("0.0.0.0") and needs_token("192.168.1.5") and needs_token("") and needs_token("lab-pc")


async def test_a_port_in_use_is_named(folder: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(UserError, match=f"port {port}"):
            await serve(Catalog([folder]), port=port)


async def test_a_thousand_devices(tmp_path: Path, run_writer: Callable[..., None]) -> None:
    run_writer(tmp_path / "big", devices=1000)
    async with served(tmp_path / "big") as url:
        status, body, _ = await get(url + "api/runs/0%3Amg-0")
    view = json.loads(body)
    assert status == 200 and len(view["devices"]) == 1000
    assert view["devices"][1]["failed"] == 6


async def test_a_finished_runs_fleet_events_and_device_kinds_are_served(folder: Path) -> None:
    with Storage(database_path(folder)) as storage:
        pixel = {"model": "Google Pixel 7", "os": "Android 14 (API 34)"}
        storage.record_fleet_event(FleetEvent("mg-1", 0.5, "joined", DeviceId("d0"), "from 10.0.0.7", pixel))
    async with served(folder) as url:
        # mg-1's events are its own: mg-0's view has the rounds' events only.
        view = json.loads((await get(url + "api/runs/0%3Amg-0"))[1])
        assert {e["kind"] for e in view["events"]} == {"failed", "rejected"}
        assert all(row["kind"] is None for row in view["devices"])
    with Storage(database_path(folder)) as storage:
        storage.record_fleet_event(FleetEvent("mg-0", 0.5, "joined", DeviceId("d0"), "from 10.0.0.7", pixel))
        storage.record_fleet_event(FleetEvent("mg-0", 0.7, "refused", None, "unauthorized: credentials refused"))
    async with served(folder) as url:
        view = json.loads((await get(url + "api/runs/0%3Amg-0"))[1])
        assert view["events"][:2] == [
            {"at_s": 0.5, "kind": "joined", "device": "d0", "job": None, "round": None, "detail": "from 10.0.0.7"},
            {"at_s": 0.7, "kind": "refused", "device": None, "job": None, "round": None,
             "detail": "unauthorized: credentials refused"},
        ]
        d0 = next(row for row in view["devices"] if row["device"] == "d0")
        assert (d0["kind"], d0["model"], d0["os"]) == ("phone", "Google Pixel 7", "Android 14 (API 34)")


async def test_a_devices_log_lines_come_from_its_phone_log_else_the_run_log(folder: Path) -> None:
    (folder / PHONE_LOGS).mkdir()
    (folder / PHONE_LOGS / phone_log_name("10.0.0.7:5555")).write_text(
        "".join(f"11-27 01:00:{k:02d} I mjfl: task {k}\n" for k in range(300)))
    (folder / LOG_FILE).write_text(
        "01:00:01 INFO device d1 connected from 127.0.0.1\n01:00:02 INFO device d10 connected\n"
        "01:00:03 WARNING closed device d1: heartbeat_timeout\n")
    async with served(folder) as url:
        status, body, _ = await get(url + "api/runs/0%3Amg-0/devices/10.0.0.7%3A5555/log")
        log = json.loads(body)
        assert status == 200 and log["source"] == "phones/10.0.0.7_5555.logcat"
        assert len(log["lines"]) == 200 and log["lines"][-1].endswith("task 299")
        log = json.loads((await get(url + "api/runs/0%3Amg-0/devices/d1/log"))[1])
        assert log["source"] == "mjfl.log" and [line[:8] for line in log["lines"]] == ["01:00:01", "01:00:03"]
        log = json.loads((await get(url + "api/runs/0%3Amg-0/devices/..%2F..%2Fetc%2Fpasswd/log"))[1])
        assert log["lines"] == []  # a made-up id names no file outside the folder
        assert (await get(url + "api/runs/7%3Amg-0/devices/d1/log"))[0] == 404
        assert (await get(url + "api/live/devices/d1/log"))[0] == 404  # no live run here


async def test_a_rounds_planned_devices_and_their_answers_are_served(folder: Path) -> None:
    async with served(folder) as url:
        status, body, _ = await get(url + "api/runs/0%3Amg-0/rounds/cnn/2")
        round_ = json.loads(body)
        assert status == 200 and (round_["job"], round_["round"], round_["winner"]) == ("cnn", 2, "genetic")
        assert [(d["device"], d["status"], d["error"]) for d in round_["devices"]] == [
            ("d0", "ok", None), ("d1", "failed", "timeout in round 2"), ("d2", "rejected", "NaN weights"), ("d3", "ok", None)]
        assert round_["devices"][0]["energy_j"] == 2.0 and round_["devices"][0]["time_s"] == 4.0
        for missing in ("0%3Amg-0/rounds/cnn/9", "0%3Amg-0/rounds/nojob/1", "0%3Amg-0/rounds/cnn/x",
                        "0%3Amg-7/rounds/cnn/1"):  # no run mg-7
            assert (await get(url + "api/runs/" + missing))[0] == 404
