"""The lab's dashboard, served by `mjfl serve` beside the researchers' API, on its host and port.

* ``/`` sends the browser on to ``/lab/`` (its token kept).
* ``/lab/`` is the lab's page (``dashboard/static/lab.html``, ``lab.js``);
  ``/lab/state`` and ``/lab/timeline`` its JSON (``view.py``), which the
  page asks for again every ``lab.js: REFRESH_MS``. Polling, not a stream:
  the lab's state is spread over its database and every running run's
  database, written by their engines, with no one event to follow; a poll
  reads a few small databases.
* ``/runs/`` is the run dashboard's page as `mjfl dashboard` serves it
  (``dashboard/server.py: make_app``), over the lab's runs (``LabCatalog``),
  finished or not: ``/runs/#<run>`` opens one, and the page reads a run
  that has not finished again every few seconds.

The token rule is the run dashboard's (docs/security.md, "The dashboard"):
with the API on a loopback address the pages are open to that machine's
users; on any other, they need the token made at the service's start and
printed in the pages' address (``dashboard_token``), never written to the
lab's log. The API (``/api/lab/...``) keeps its researchers' tokens.
"""

from __future__ import annotations

import asyncio
import json
from importlib import resources
from pathlib import Path
from typing import Any, cast
from urllib.parse import quote

from aiohttp import web

from mjfl.coordinator.dashboard.catalog import Catalog, timeline_of, view_of
from mjfl.coordinator.dashboard.server import make_app, needs_token, new_token, token_guard
from mjfl.coordinator.dashboard.state import RunView, round_devices
from mjfl.coordinator.lab.runs import LabFleet
from mjfl.coordinator.lab.view import Connected, LabView
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path

__all__ = ["LabCatalog", "add_pages", "connected", "dashboard_token"]

_STATIC = resources.files("mjfl.coordinator.dashboard") / "static"
# The lab page's files; timeline.js draws the lab's timeline where it is installed (the page works without it).
_ASSETS = {
    "lab.js": "text/javascript", "dom.js": "text/javascript", "lab.css": "text/css", "style.css": "text/css",
    "timeline.js": "text/javascript",
}
_VIEW = web.AppKey("view", LabView)
_FLEET = web.AppKey("fleet", LabFleet)
_PAGE = web.AppKey("page", str)


def dashboard_token(host: str) -> str | None:
    """The pages' token on ``host``: None on a loopback address, else a fresh one (``needs_token``)."""
    return new_token() if needs_token(host) else None


def add_pages(app: web.Application, view: LabView, fleet: LabFleet, token: str | None) -> str:
    """The lab's pages on ``app`` (the API's); returns the path to open, with its query (the token)."""
    query = "" if token is None else f"?token={quote(token, safe='')}"
    pages = web.Application(middlewares=[token_guard(token)])
    pages[_VIEW], pages[_FLEET] = view, fleet
    pages[_PAGE] = (_STATIC / "lab.html").read_text(encoding="utf-8").replace("{{query}}", query)
    pages.router.add_get("/", _page)
    pages.router.add_get("/static/{name}", _asset)
    pages.router.add_get("/state", _state)
    pages.router.add_get("/timeline", _timeline)
    app.router.add_get("/", _to_lab)
    app.add_subapp("/lab", pages)
    # LabCatalog answers what a Catalog does, for the lab's runs in any state.
    app.add_subapp("/runs", make_app(cast(Catalog, LabCatalog(view)), token=token))
    return "/lab/" + query


def connected(fleet: LabFleet) -> list[Connected]:
    """Each connected device as ``LabFleet.devices`` gives it, with its hello's ``hardware`` (on the event loop)."""
    hellos = fleet.lobby.registry.connected()
    return [
        {**row, "hardware": dict(hellos[row["device"]].hello.hardware) if row["device"] in hellos else None}
        for row in fleet.devices()
    ]


async def _to_lab(request: web.Request) -> web.StreamResponse:
    # Answered, not raised: the API's middleware turns a raised HTTP error into its JSON refusal.
    where = "/lab/" + (f"?{request.query_string}" if request.query_string else "")
    return web.Response(status=302, headers={"Location": where})


async def _page(request: web.Request) -> web.Response:
    return web.Response(text=request.app[_PAGE], content_type="text/html", charset="utf-8")


async def _asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    path = _STATIC / name if name in _ASSETS else None  # a fixed list: no path from the request reaches the disk
    if path is None or not path.is_file():
        raise web.HTTPNotFound()
    return web.Response(body=path.read_bytes(), content_type=_ASSETS[name], charset="utf-8")


async def _state(request: web.Request) -> web.Response:
    devices = connected(request.app[_FLEET])  # the registry, on the event loop; the databases in a thread
    return _json(await asyncio.to_thread(request.app[_VIEW].state, devices))


async def _timeline(request: web.Request) -> web.Response:
    devices = connected(request.app[_FLEET])
    return _json(await asyncio.to_thread(request.app[_VIEW].timeline, devices))


def _json(data: Any) -> web.Response:
    return web.Response(text=json.dumps(data, allow_nan=False, separators=(",", ":")), content_type="application/json")


class LabCatalog:
    """The lab's runs as the run dashboard's catalog (``Catalog``'s methods), a run named by its lab id.

    Unlike `mjfl dashboard`'s catalog it lists runs still running (their
    status ``running``), read afresh; a run that has recorded nothing yet
    is not listed.
    """

    def __init__(self, view: LabView) -> None:
        self.view = view

    def runs(self) -> list[dict[str, Any]]:
        return [entry for run in self.view.store.runs() if (entry := self.view.entry(run)) is not None]

    def run(self, key: str) -> RunView | None:
        folder = self.folder(key)
        if folder is None or not database_path(folder).is_file():
            return None
        with Storage.read_only(database_path(folder)) as storage:
            found = next(((info, status) for info, status in storage.runs() if info.run_id == key), None)
            return None if found is None else view_of(storage, key, folder, *found)

    def timeline(self, key: str, since: int = 0) -> dict[str, Any] | None:
        """The device timeline of the lab's run ``key``, running or ended (``Catalog.timeline``)."""
        folder = self.folder(key)
        if folder is None or not database_path(folder).is_file():
            return None
        with Storage.read_only(database_path(folder)) as storage:
            return timeline_of(storage, key, since)

    def round_devices(self, key: str, job: str, number: int) -> dict[str, Any] | None:
        folder = self.folder(key)
        if folder is None or not database_path(folder).is_file():
            return None
        with Storage.read_only(database_path(folder)) as storage:
            rounds = [r for r in storage.rounds(key, job) if r.round == number]
        return round_devices(rounds[0]) if rounds else None

    def folder(self, key: str) -> Path | None:
        """The run's folder, for a run of the lab only (no path from the request reaches the disk otherwise)."""
        return self.view.folder(key) if self.view.store.run(key) is not None else None
