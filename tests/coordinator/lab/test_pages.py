"""The lab's pages beside its API on one real loopback port: where each path goes and the token rule (docs/security.md 7)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import aiohttp
import pytest
from dashboard_runs import write_run

from mjfl.coordinator.dashboard.server import listening
from mjfl.coordinator.engine.occupancy import Occupancy
from mjfl.coordinator.lab.api import LabApi, lab_app
from mjfl.coordinator.lab.config import parse_lab_config
from mjfl.coordinator.lab.fleet import Lobby
from mjfl.coordinator.lab.pages import add_pages, dashboard_token
from mjfl.coordinator.lab.runlogs import RunLogs
from mjfl.coordinator.lab.runs import RUNS, LabFleet, LabRuns
from mjfl.coordinator.lab.store import LabStore
from mjfl.coordinator.lab.view import LabView
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.registry import DeviceRegistry

pytestmark = pytest.mark.timeout(60)
TOKEN = "s3cret/+"
PAGES = ("/lab/", "/lab/state", "/lab/timeline", "/lab/static/lab.js", "/runs/", "/runs/api/runs", "/runs/api/runs/0001-admin")


@asynccontextmanager
async def served(out: Path, token: str | None) -> AsyncIterator[tuple[str, str]]:
    """The lab's API and pages over ``out`` (one run of the admin's recorded) on a free port: (its URL, the admin's token)."""
    lab = parse_lab_config({"fleet": {"size": 2}})
    with LabStore(out / "lab.db") as store:
        admin = store.add_researcher("admin", admin=True)
        run, _ = store.submit("admin", method="meta-greedy", needs=2, config_toml="", key=None)
        write_run(out / RUNS / run.run_id, run.run_id)
        registry = DeviceRegistry()
        fleet = LabFleet(Lobby(registry), RemoteFleet(registry), Occupancy(), device_wait_s=1.0)
        runs = LabRuns(store, lab, out, fleet, RunLogs(), spawn=asyncio.create_task)
        app = lab_app(LabApi(store, runs, fleet.devices, list, max_request_kb=64))
        page = add_pages(app, LabView(store, out / RUNS, lab.limits), fleet, token)
        assert page == "/lab/" + ("" if token is None else "?token=s3cret%2F%2B")
        async with listening(app, "127.0.0.1", 0, None) as url:
            assert isinstance(url, str)
            yield url.rstrip("/"), admin


async def get(url: str, **kwargs: object) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(url, allow_redirects=False, **kwargs) as response:  # type: ignore[arg-type]
        return response.status, await response.text(), dict(response.headers)


async def test_on_a_loopback_address_the_pages_are_open_and_the_api_keeps_its_tokens(tmp_path: Path) -> None:
    assert dashboard_token("127.0.0.1") is None and dashboard_token("::1") is None
    async with served(tmp_path, None) as (url, admin):
        status, _, headers = await get(url + "/")
        assert (status, headers["Location"]) == (302, "/lab/")
        for path in PAGES:
            status, body, headers = await get(url + path)
            assert status == 200, (path, body)
            assert "default-src 'self'" in headers["Content-Security-Policy"], path
        status, page, _ = await get(url + "/lab/")
        assert 'src="static/lab.js"' in page and 'id="lab-timeline"' in page
        state = json.loads((await get(url + "/lab/state"))[1])
        assert [r["id"] for r in state["queue"]] == ["0001-admin"] and state["devices"] == []
        assert json.loads((await get(url + "/runs/api/runs"))[1])[0]["id"] == "0001-admin"
        # A run's page says where it stands in the lab, and whom its devices serve: none is connected here.
        shown = json.loads((await get(url + "/runs/api/runs/0001-admin"))[1])
        assert (shown["run"]["lab"]["state"], shown["run"]["lab"]["owner"]) == ("queued", "admin")
        assert {row["state"] for row in shown["devices"]} == {"offline"}
        assert json.loads((await get(url + "/runs/api/runs/0001-admin/timeline"))[1])["utilisation"]["runs"] == 1
        assert (await get(url + "/runs/api/live"))[0] == 404  # no live run here, and the page asks for none:
        assert '<body data-live="no">' in (await get(url + "/runs/"))[1]
        for stranger in ("/lab/static/../pages.py", "/lab/static/app.py", "/runs/api/runs/..%2Flab.db"):
            assert (await get(url + stranger))[0] == 404, stranger
        assert (await get(url + "/api/lab/runs"))[0] == 401  # the API: a researcher's token, as before
        assert (await get(url + "/api/lab/runs", headers={"Authorization": f"Bearer {admin}"}))[0] == 200


async def test_on_another_address_every_page_needs_the_token_made_at_the_start(tmp_path: Path) -> None:
    made = dashboard_token("0.0.0.0")
    assert made is not None and len(made) >= 40 and made != dashboard_token("0.0.0.0")
    async with served(tmp_path, TOKEN) as (url, admin):
        status, _, headers = await get(url + "/", params={"token": TOKEN})
        where = urlsplit(headers["Location"])
        assert (status, where.path, parse_qs(where.query)) == (302, "/lab/", {"token": [TOKEN]})
        for path in PAGES:
            assert (await get(url + path))[0] == 401, path
            assert (await get(url + path, params={"token": "wrong"}))[0] == 401, path
            assert (await get(url + path, headers={"Authorization": f"Bearer {admin}"}))[0] == 401, path
            assert (await get(url + path, params={"token": TOKEN}))[0] == 200, path
            assert (await get(url + path, headers={"Authorization": f"Bearer {TOKEN}"}))[0] == 200, path
        # The pages' token is not a researcher's: the API refuses it.
        assert (await get(url + "/api/lab/runs", headers={"Authorization": f"Bearer {TOKEN}"}))[0] == 401
        assert (await get(url + "/api/lab/health"))[0] == 200
