"""The lab's dashboard, served by `mjfl serve` beside the researchers' API, on its host and port.

* ``/`` sends the browser on to ``/lab/`` (its token kept).
* ``/lab/`` is the lab's page (``dashboard/static/lab.html``, ``lab.js``);
  ``/lab/state`` and ``/lab/timeline`` its JSON (``view.py``), which the
  page asks for again every ``lab.js: REFRESH_MS``. Polling, not a stream:
  the lab's state is spread over its database and every running run's
  database, written by their engines, with no one event to follow; a poll
  reads a few small databases.
* ``/runs/`` is the run dashboard's page as `mjfl dashboard` serves it
  (``dashboard/server.py: make_app``), over the lab's runs (``LabCatalog``,
  a ``RunCatalog``), in any state: ``/runs/#<run>`` opens one, and the page
  reads a run that has not ended again every few seconds.

The token rule is the run dashboard's (docs/security.md, "The dashboard"):
with the API on a loopback address the pages are open to that machine's
users; on any other, they need the token made at the service's start and
printed in the pages' address (``dashboard_token``), never written to the
lab's log. The API (``/api/lab/...``) keeps its researchers' tokens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web

from mjfl.addresses import needs_token
from mjfl.coordinator.dashboard.catalog import Kept, encoded, timeline_of, view_of
from mjfl.coordinator.dashboard.device_logs import SharedLog, device_log
from mjfl.coordinator.dashboard.server import make_app, new_token, token_guard
from mjfl.coordinator.dashboard.state import RunView, round_devices, unrecorded_view
from mjfl.coordinator.lab.runlogs import LAB_LOG
from mjfl.coordinator.lab.runs import LabFleet
from mjfl.coordinator.lab.view import Connected, LabView, lab_line, serving
from mjfl.coordinator.results.wallclock import unix_time
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path

__all__ = ["LAB_LOG", "LabCatalog", "add_pages", "connected", "dashboard_token"]


_STATIC = resources.files("mjfl.coordinator.dashboard") / "static"
# The lab page's files; timeline.js draws the lab's timeline where it is installed (the page works without it).
_ASSETS = {
    "lab.js": "text/javascript", "dom.js": "text/javascript", "lab.css": "text/css", "style.css": "text/css",
    "timeline.js": "text/javascript",
}
_VIEW = web.AppKey("view", LabView)
_FLEET = web.AppKey("fleet", LabFleet)
_PAGE = web.AppKey("page", str)
# The devices connected when a run page's request came, read on the event loop (the registry's) and seen by the
# worker thread that builds the answer (asyncio.to_thread runs it in a copy of the request's context).
_CONNECTED: ContextVar[Sequence[Connected]] = ContextVar("mjfl_lab_connected", default=())


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
    catalog = LabCatalog(view, view.runs_dir.parent / LAB_LOG)
    app.add_subapp("/runs", make_app(catalog, token=token, middlewares=[_connected_now(fleet)]))
    return "/lab/" + query


def connected(fleet: LabFleet) -> list[Connected]:
    """Each connected device as ``LabFleet.devices`` gives it, with its hello's ``hardware`` (on the event loop)."""
    hellos = fleet.lobby.registry.connected()
    return [
        {**row, "hardware": dict(hellos[row["device"]].hello.hardware) if row["device"] in hellos else None}
        for row in fleet.devices()
    ]


def _connected_now(fleet: LabFleet) -> Callable[..., Awaitable[web.StreamResponse]]:
    """A middleware: the devices connected now (``connected``, on the loop) in ``_CONNECTED`` while a request runs."""

    @web.middleware
    async def now(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        token = _CONNECTED.set(connected(fleet))
        try:
            return await handler(request)
        finally:
            _CONNECTED.reset(token)

    return now


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
    return await _built(lambda: request.app[_VIEW].state(devices))


async def _timeline(request: web.Request) -> web.Response:
    devices = connected(request.app[_FLEET])
    return await _built(lambda: request.app[_VIEW].timeline(devices))


async def _built(build: Callable[[], Any]) -> web.Response:
    """``build()``'s answer as JSON, built and encoded in a worker thread (off the loop that runs the rounds)."""
    body = await asyncio.to_thread(lambda: encoded(build()))
    return web.Response(body=body, content_type="application/json")


class LabCatalog:
    """The lab's runs as the run dashboard's catalog (``RunCatalog``), a run named by its lab id.

    Unlike `mjfl dashboard`'s catalog it serves the lab's runs in any state,
    read afresh: one that recorded nothing yet (queued, or its fleet
    gathering) as ``state.unrecorded_view``, its runs list those that
    recorded something. Every run's line says where it stands in the lab
    (``run.lab``: ``view.lab_line``, its state and why); a run's devices say
    whom they serve now (``view.serving``, from the devices connected when
    the request came: ``_CONNECTED``); its timeline's busy fractions count a
    device busy on any of the lab's runs' jobs (``timeline.shared_busy``),
    and a device's log has the lines of ``lab_log`` naming it while the run
    ran (the lab's device server and emulated devices write there). An
    ended run's timeline is kept (``catalog.Kept``) once every run it ran
    beside has ended too.
    """

    def __init__(self, view: LabView, lab_log: Path | None = None) -> None:
        self.view = view
        self.lab_log = lab_log
        self._timelines = Kept()

    def runs(self) -> list[dict[str, Any]]:
        return [{**entry, "lab": lab_line(run)} for run in self.view.store.runs() if (entry := self.view.entry(run)) is not None]

    def run(self, key: str) -> RunView | None:
        run = self.view.store.run(key)
        if run is None:
            return None
        with self._storage(key) as storage:
            found = next(((info, status) for info, status in storage.runs() if info.run_id == key), None)
            shown = (unrecorded_view(key, str(self.view.folder(key)), run.method, run.state) if found is None
                     else view_of(storage, key, self.view.folder(key), *found))
        shown["run"]["lab"] = lab_line(run)
        states = serving(_CONNECTED.get(), key)
        for row in shown["devices"]:
            row["state"] = states.get(row["device"], "offline")
        return shown

    def timeline(self, key: str, since: int = 0) -> bytes | None:
        """The device timeline of the lab's run ``key``, running or ended (``catalog.timeline_of``), its busy fractions
        over every run's jobs."""
        run = self.view.store.run(key)
        if run is None:
            return None

        def build() -> tuple[bytes | None, bool]:
            others, ended = self.view.neighbours(run)
            with self._storage(key) as storage:
                if not any(info.run_id == key for info, _ in storage.runs()):
                    return None, False
                return encoded(timeline_of(storage, key, since, others=others)), run.final and ended and since == 0

        return self._timelines.get(key, build) if run.final and since == 0 else build()[0]

    def round_devices(self, key: str, job: str, number: int) -> dict[str, Any] | None:
        if self.view.store.run(key) is None:
            return None
        with self._storage(key) as storage:
            rounds = [r for r in storage.rounds(key, job) if r.round == number]
        return round_devices(rounds[0]) if rounds else None

    def device_log(self, key: str, device: str) -> dict[str, Any] | None:
        """``device``'s lines in the run's folder and, while the run ran, in the lab's log (``SharedLog``)."""
        run = self.view.store.run(key)
        if run is None:
            return None
        shared = None
        if self.lab_log is not None and run.started_at is not None:
            until = None if run.ended_at is None else unix_time(run.ended_at)
            shared = SharedLog(self.lab_log, unix_time(run.started_at), until)
        return device_log(self.view.folder(key), device, shared=shared)

    def folder(self, key: str) -> Path | None:
        """The run's folder, for a run of the lab only (no path from the request reaches the disk otherwise)."""
        return self.view.folder(key) if self.view.store.run(key) is not None else None

    @contextmanager
    def _storage(self, key: str) -> Iterator[Storage]:
        """The run's database, read-only (an empty one where the run recorded nothing)."""
        with Storage.read_only(database_path(self.view.folder(key))) as storage:
            yield storage
