"""The dashboard's web server (aiohttp): the page, its JSON endpoints, and the token rule.

``/`` is the page (``static/index.html``), ``/static/...`` its script and
style, ``/api/runs`` the runs list and ``/api/runs/{id}`` one run
(``state.py``'s shapes). The page draws only what the endpoints send, so a
later Server-Sent-Events endpoint can push the same shapes during a run.

The token rule (docs/security.md, "The dashboard"): bound to a loopback
address the dashboard is open to that machine's users; on any other address
it needs a token, and every request must carry it, as ``?token=T`` or the
header ``Authorization: Bearer T``, compared in constant time.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import secrets
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import quote

from aiohttp import web

from mjfl.coordinator.dashboard.catalog import Catalog
from mjfl.errors import UserError

__all__ = ["DEFAULT_HOST", "make_app", "needs_token", "new_token", "serve"]

DEFAULT_HOST = "127.0.0.1"
_STATIC = resources.files("mjfl.coordinator.dashboard") / "static"
_ASSETS = {"app.js": "text/javascript", "style.css": "text/css"}
_HEADERS = {
    # The page loads nothing from elsewhere and runs no inline script.
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # the token in the URL goes nowhere else
    "Cache-Control": "no-store",
}


def needs_token(host: str) -> bool:
    """Whether ``host`` is reachable from other machines (anything but a loopback address or localhost)."""
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True  # a name, or all interfaces ("", "0.0.0.0" parse; a host name may resolve anywhere)


def new_token() -> str:
    """A fresh random token (32 bytes from the operating system, base64url)."""
    return secrets.token_urlsafe(32)


def make_app(catalog: Catalog, *, token: str | None = None) -> web.Application:
    """The dashboard's app over ``catalog``; with ``token``, every request must carry it."""
    app = web.Application(middlewares=[_guard(token)])
    query = "" if token is None else f"?token={quote(token, safe='')}"
    page = (_STATIC / "index.html").read_text(encoding="utf-8").replace("{{query}}", query)

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html", charset="utf-8")

    async def asset(request: web.Request) -> web.Response:
        name = request.match_info["name"]
        if name not in _ASSETS:  # a fixed list: no path from the request reaches the file system
            raise web.HTTPNotFound()
        body = (_STATIC / name).read_bytes()
        return web.Response(body=body, content_type=_ASSETS[name], charset="utf-8")

    async def runs(request: web.Request) -> web.Response:
        return _json(await asyncio.to_thread(catalog.runs))

    async def run(request: web.Request) -> web.Response:
        key = request.match_info["id"]
        view = await asyncio.to_thread(catalog.run, key)
        if view is None:
            return _json({"error": f"no finished run {key!r}"}, status=404)
        return _json(view)

    app.router.add_get("/", index)
    app.router.add_get("/static/{name}", asset)
    app.router.add_get("/api/runs", runs)
    app.router.add_get("/api/runs/{id}", run)
    return app


def _guard(token: str | None) -> Callable[..., Awaitable[web.StreamResponse]]:
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


def _json(data: Any, *, status: int = 200) -> web.Response:
    # allow_nan=False: state.py turns every NaN into None; a NaN here is our bug.
    return web.Response(text=json.dumps(data, allow_nan=False, separators=(",", ":")),
                        status=status, content_type="application/json")


async def serve(
    catalog: Catalog, *, host: str = DEFAULT_HOST, port: int = 8080, token: str | None = None,
    ready: Callable[[str], None] = lambda url: None,
) -> None:
    """Serve the dashboard until cancelled; ``ready(url)`` once it listens (the URL carries the token).

    A port in use, or an address that cannot be bound, is the user's error
    (``UserError`` naming it). Cancelling (Ctrl-C) closes the listener and
    the open connections.
    """
    if needs_token(host) and token is None:
        raise UserError(f"--host {host}: reachable from other machines; give --token (docs/dashboard.md)")
    runner = web.AppRunner(make_app(catalog, token=token), handle_signals=False, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as exc:
            raise UserError(f"cannot listen on {host} port {port}: {exc.strerror or exc}") from None
        bound = runner.addresses[0][1] if runner.addresses else port
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{bound}/" + ("" if token is None else f"?token={quote(token, safe='')}")
        ready(url)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
