"""`mjfl dashboard RUN_DIR...`: the finished runs of these folders in a browser, read-only.

Checks the arguments, applies the token rule (a non-loopback ``--host`` without
``--token`` gets a fresh one), and serves ``mjfl.coordinator.dashboard`` until
Ctrl-C.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from mjfl.addresses import needs_token
from mjfl.coordinator.dashboard.catalog import Catalog
from mjfl.coordinator.dashboard.server import new_token, serve
from mjfl.errors import UserError


def dashboard(
    run_dirs: Sequence[Path], *, host: str, port: int, token: str | None, console: Console
) -> None:
    """Serve the dashboard of ``run_dirs`` on ``host:port`` until Ctrl-C; prints the URL to open."""
    if not 0 <= port <= 65535:
        raise UserError(f"--port {port}: must be 0 to 65535 (0: any free port)")
    if token is not None and not token:
        raise UserError("--token: must not be empty")
    catalog = Catalog(run_dirs)
    if token is None and needs_token(host):
        token = new_token()
        console.print(f"--host {host} is reachable from other machines: a token was made for this session")

    def ready(url: str) -> None:
        console.print(f"mjfl dashboard: open {url}  (Ctrl-C to stop)", highlight=False, soft_wrap=True)

    try:
        asyncio.run(serve(catalog, host=host, port=port, token=token, ready=ready))
    except KeyboardInterrupt:
        console.print("dashboard stopped")
