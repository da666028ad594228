"""The dashboard's web server (aiohttp): the page, its JSON endpoints, and the token rule.

``/`` is the page (``static/index.html``), ``/static/...`` its script and
style, ``/api/runs`` the runs list, ``/api/runs/{id}`` one run and
``/api/runs/{id}/timeline?since=N`` its device timeline, its bars from the
N-th on (``state.py``'s and ``timeline.py``'s shapes; the timeline is apart
from the run's view so that a live run's pushes stay small: a page fetches
only the bars it lacks), built and encoded in a worker thread. With a live
run (``live.py``, during ``mjfl testbed run``), ``/api/live`` is its
snapshot (the same shapes, each device with its ``state``) and
``/api/live/events`` a Server-Sent-Events stream that pushes the snapshot
after each change, at most every ``PUSH_INTERVAL_S`` (a burst of events is
one push). The page says whether there is a live run (its ``<body
data-live>``), so a page without one asks for none.

The token rule (docs/security.md, "The dashboard"): bound to a loopback
address the dashboard is open to that machine's users; on any other address
it needs a token, and every request must carry it, as ``?token=T`` or the
header ``Authorization: Bearer T``, compared in constant time.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import quote

from aiohttp import web
from aiohttp.typedefs import Middleware

from mjfl.addresses import DASHBOARD_PORT, LIVE_DASHBOARD_PORT, LOOPBACK, needs_token
from mjfl.coordinator.dashboard.catalog import RunCatalog, encoded
from mjfl.coordinator.dashboard.live import POLL_INTERVAL_S, LiveRun, Transfer
from mjfl.coordinator.dashboard.sources import NO_LIVE_RUN, LiveSource, NotHere, Runs, RunSource
from mjfl.coordinator.dashboard.state import RunView
from mjfl.errors import UserError

__all__ = ["DEFAULT_HOST", "PUSH_INTERVAL_S", "live_dashboard", "make_app", "new_token", "serve", "token_guard"]

DEFAULT_HOST = LOOPBACK
PUSH_INTERVAL_S = 0.25  # the live stream's shortest gap between two pushes
KEEPALIVE_S = 15.0  # an SSE comment when nothing changed, so idle proxies keep the stream
_STATIC = resources.files("mjfl.coordinator.dashboard") / "static"
_ASSETS = {"app.js": "text/javascript", "dom.js": "text/javascript", "timeline.js": "text/javascript",
           "style.css": "text/css"}
_HEADERS = {
    # The page loads nothing from elsewhere and runs no inline script.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the token in the URL goes nowhere else
    "Cache-Control": "no-store",
}
_PAGE = web.AppKey("page", str)  # index.html, its assets' URLs carrying the token
_RUNS = web.AppKey("runs", Runs)
_Ask = Callable[[RunSource, web.Request], Awaitable[Any]]  # one resource of a run, from its source


def new_token() -> str:
    """A fresh random token (32 bytes from the operating system, base64url)."""
    return secrets.token_urlsafe(32)


def make_app(
    catalog: RunCatalog | None, *, token: str | None = None, live: LiveRun | None = None, live_folder: Path | None = None,
    middlewares: Sequence[Middleware] = (),
) -> web.Application:
    """The dashboard's app over ``catalog`` (and ``live``, the run going on, writing to ``live_folder``); with ``token``, every request must carry it.

    ``middlewares`` wrap every request outside the token rule (``mjfl bench
    coordinator`` times the handlers with one).
    """
    app = web.Application(middlewares=[*middlewares, token_guard(token)])
    page = (_STATIC / "index.html").read_text(encoding="utf-8").replace("{{query}}", _query(token))
    app[_PAGE] = page.replace("{{live}}", "yes" if live is not None else "no")
    app[_RUNS] = Runs(catalog, LiveSource(live, live_folder))
    stream = _LiveStream(live)
    app.on_shutdown.append(stream.close)
    app.router.add_get("/", _index)
    app.router.add_get("/static/{name}", _asset)
    app.router.add_get("/api/runs", _runs_list)
    app.router.add_get("/api/live/events", stream.answer)
    # Each resource of a run once, under the live run's path and under a finished run's.
    for run in ("/api/live", "/api/runs/{id}"):
        app.router.add_get(run, _answer(_view))
        app.router.add_get(run + "/devices/{device}/log", _answer(_log))
        app.router.add_get(run + "/rounds/{job}/{round}", _answer(_round))
        app.router.add_get(run + "/timeline", _answer(_timeline))
    return app


async def _index(request: web.Request) -> web.Response:
    return web.Response(text=request.app[_PAGE], content_type="text/html", charset="utf-8")


async def _asset(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name not in _ASSETS:  # a fixed list: no path from the request reaches the file system
        raise web.HTTPNotFound()
    body = (_STATIC / name).read_bytes()
    return web.Response(body=body, content_type=_ASSETS[name], charset="utf-8")


async def _runs_list(request: web.Request) -> web.Response:
    return _json(await request.app[_RUNS].listed())


def _answer(ask: _Ask) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler of one resource of a run: ``ask`` the run the path names (``Runs.source``); 404 when it is not there."""

    async def handler(request: web.Request) -> web.Response:
        source = request.app[_RUNS].source(request.match_info.get("id"))
        try:
            return _json(await ask(source, request))
        except NotHere as missing:
            return _json({"error": str(missing)}, status=404)

    return handler


async def _view(source: RunSource, request: web.Request) -> RunView:
    return await source.view()


async def _log(source: RunSource, request: web.Request) -> dict[str, Any]:
    return await source.device_log(request.match_info["device"])


async def _round(source: RunSource, request: web.Request) -> dict[str, Any]:
    job, number = request.match_info["job"], request.match_info["round"]
    found = await source.round_devices(job, int(number)) if number.isdigit() else None
    if found is None:
        raise NotHere(f"no round {number} of job {job!r} in {source.name}")
    return found


async def _timeline(source: RunSource, request: web.Request) -> bytes:
    since = request.query.get("since", "0")
    found = await source.timeline(int(since) if since.isdigit() else 0)
    # A live run's first answer may be 100,000 bars: encoded off the loop that runs the rounds.
    return found if isinstance(found, bytes) else await asyncio.to_thread(encoded, found)


class _LiveStream:
    """``/api/live/events``: the live run's snapshot after each change, as Server-Sent Events, until the app shuts down.

    Pages open together share one serialised snapshot per version. A burst
    of changes is one push (at most one every ``PUSH_INTERVAL_S``); nothing
    changing for ``KEEPALIVE_S`` sends a comment.
    """

    def __init__(self, live: LiveRun | None) -> None:
        self.live = live
        self.closing = asyncio.Event()  # set on shutdown: open streams end
        self._pushed: tuple[int, bytes] = (-1, b"")  # the version last serialised and its event

    async def close(self, app: web.Application) -> None:
        self.closing.set()

    async def answer(self, request: web.Request) -> web.StreamResponse:
        if self.live is None:
            return _json({"error": NO_LIVE_RUN}, status=404)
        changed = asyncio.Event()
        changed.set()  # the first push is the current snapshot
        stop = self.live.on_change(changed.set)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **_HEADERS})
        await response.prepare(request)
        ended = asyncio.ensure_future(self.closing.wait())  # owned here: cancelled in finally
        try:
            await self._push(response, changed, ended)
        except ConnectionResetError:
            pass  # the page went away
        finally:
            stop()
            ended.cancel()
        return response

    async def _push(self, response: web.StreamResponse, changed: asyncio.Event, ended: asyncio.Future[Any]) -> None:
        while not self.closing.is_set():
            await _first_of(changed, ended, timeout=KEEPALIVE_S)
            if not changed.is_set():
                if not self.closing.is_set():
                    await response.write(b": keep-alive\n\n")
                continue
            changed.clear()
            await response.write(self._event())
            # Coalesce: what comes meanwhile is one push, unless the dashboard is closing.
            await asyncio.wait({ended}, timeout=PUSH_INTERVAL_S)
        if changed.is_set():
            await response.write(self._event())  # the last change (the run finished) before the stream ends

    def _event(self) -> bytes:
        assert self.live is not None
        if self._pushed[0] != self.live.version:
            self._pushed = (self.live.version, b"event: run\ndata: " + encoded(self.live.snapshot()) + b"\n\n")
        return self._pushed[1]


async def _first_of(changed: asyncio.Event, ended: asyncio.Future[Any], *, timeout: float) -> None:
    """Wait until ``changed`` is set, ``ended`` is done or ``timeout`` passed, whichever comes first."""
    waiting = asyncio.ensure_future(changed.wait())
    try:
        await asyncio.wait({waiting, ended}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()


def token_guard(token: str | None) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The token rule as a middleware: with ``token``, a request without it gets 401; every answer gets ``_HEADERS``."""
    expected = None if token is None else token.encode()

    @web.middleware
    async def guard(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if expected is not None:
            given = request.query.get("token")
            header = request.headers.get("Authorization", "")
            if given is None and header.startswith("Bearer "):
                given = header.removeprefix("Bearer ")
            if given is None or not hmac.compare_digest(given.encode(), expected):
                return web.Response(status=401, text="a token is needed: open the URL mjfl dashboard printed\n",
                                    headers=_HEADERS)
        response = await handler(request)
        response.headers.update(_HEADERS)
        return response

    return guard


def _query(token: str | None) -> str:
    """What a URL of the dashboard ends with: ``?token=T`` when it needs one."""
    return "" if token is None else f"?token={quote(token, safe='')}"


def _url(runner: web.AppRunner, host: str, port: int, token: str | None) -> str:
    """The address to open: the port bound (port 0 picks one), an IPv6 host in brackets, the token."""
    bound = runner.addresses[0][1] if runner.addresses else port
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{bound}/" + _query(token)


def _json(data: Any, *, status: int = 200) -> web.Response:
    """``data`` as JSON (``catalog.encoded``: a NaN is our bug), or ``data`` itself when it is JSON already (bytes)."""
    body = data if isinstance(data, bytes) else encoded(data)
    return web.Response(body=body, status=status, content_type="application/json")


async def serve(
    catalog: RunCatalog, *, host: str = DEFAULT_HOST, port: int = DASHBOARD_PORT, token: str | None = None,
    ready: Callable[[str], None] = lambda url: None,
) -> None:
    """Serve the dashboard until cancelled; ``ready(url)`` once it listens (the URL carries the token).

    A port in use, or an address that cannot be bound, is the user's error
    (``UserError`` naming it). Cancelling (Ctrl-C) closes the listener and
    the open connections.
    """
    if needs_token(host) and token is None:
        raise UserError(f"--host {host}: reachable from other machines; give --token (docs/dashboard.md)")
    async with listening(make_app(catalog, token=token), host, port, token) as url:
        if isinstance(url, OSError):
            raise UserError(f"cannot listen on {host} port {port}: {url.strerror or url}") from None
        ready(url)
        await asyncio.Event().wait()


@asynccontextmanager
async def live_dashboard(
    catalog: RunCatalog | None, live: LiveRun, *, host: str = DEFAULT_HOST, port: int = LIVE_DASHBOARD_PORT, token: str | None = None,
    folder: Path | None = None, transfer: Transfer | None = None, warn: Callable[[str], None] = lambda line: None,
    middlewares: Sequence[Middleware] = (),
) -> AsyncIterator[str | None]:
    """Serve the dashboard with ``live`` (and ``catalog``'s finished runs, if any) on the running event loop while the block runs; yields its URL.

    ``folder`` is the live run's output folder (its devices' logs);
    ``transfer`` (``DeviceRegistry.transfer``) is asked every
    ``POLL_INTERVAL_S`` what moves on the connections of devices with a task
    (``LiveRun.poll``). A ``host`` other machines reach needs ``token``
    (a ``UserError`` otherwise: the caller checks it before the run). A port
    that cannot be bound must not fail the run it shows: ``warn`` gets one
    line and the block runs without a dashboard (yielding None). Leaving the
    block (the run's end, an error, Ctrl-C) ends open event streams and
    closes the listener. ``middlewares``: as ``make_app``'s.
    """
    if needs_token(host) and token is None:
        raise UserError(f"--dashboard-host {host}: reachable from other machines; give a token (docs/dashboard.md)")
    app = make_app(catalog, live=live, live_folder=folder, token=token, middlewares=middlewares)
    async with listening(app, host, port, token, shutdown_timeout=1.0) as url:
        if isinstance(url, OSError):
            warn(f"dashboard: cannot listen on {host} port {port} ({url.strerror or url}); the run goes on without it")
            yield None
            return
        polling = None if transfer is None else asyncio.create_task(_poll(live, transfer), name="dashboard transfers")
        try:
            yield url
        finally:
            if polling is not None:
                polling.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await polling


@asynccontextmanager
async def listening(
    app: web.Application, host: str, port: int, token: str | None, **options: Any
) -> AsyncIterator[str | OSError]:
    """``app`` listening on ``host:port`` while the block runs: yields its URL, or why it cannot listen.

    ``options``: the ``AppRunner``'s. Leaving the block closes the listener
    and the open connections.
    """
    runner = web.AppRunner(app, handle_signals=False, access_log=None, **options)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            yield exc
            return
        yield _url(runner, host, port, token)
    finally:
        await runner.cleanup()


async def _poll(live: LiveRun, transfer: Transfer) -> None:
    """What moves on the devices' connections, every ``POLL_INTERVAL_S`` (not an event: nobody else would tell)."""
    while True:
        await asyncio.sleep(POLL_INTERVAL_S)
        live.poll(transfer)
