"""`mjfl bench dashboard`: how long the dashboard's page takes to draw a finished run of 1,000 devices.

A run database is written with the real storage API (``write_run_database``:
two jobs, tens of rounds, 60 devices a round, every one of the 1,000
devices in some round, each with a profile); `mjfl dashboard`'s server
(``server.serve``) serves it on loopback, and a headless Chromium (Debian's
``/usr/bin/chromium`` driven by Playwright; never a downloaded browser)
loads the page, clicks the run's row and waits for its devices table. Each
load is a fresh tab; the figures are medians over the loads:

page_load_s
    From the navigation's start (the page's ``performance.now()`` origin)
    to the moment ``#devices tbody`` holds every device: the runs list
    fetched and drawn, the click, ``/api/runs/{id}`` fetched and the whole
    run (charts, devices, scheduler choices) drawn. Goal: <= 1 s.
api_run_s
    The server's time for ``/api/runs/{id}`` as the page saw it (Resource
    Timing: request sent to the first byte of the answer): reading the
    database and building the JSON.
json_bytes
    The size of that JSON (no compression).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from mjfl.bench import output
from mjfl.errors import UserError

__all__ = ["CHROMIUM", "browser_missing", "launch_options", "run_dashboard_bench", "write_run_database"]

CHROMIUM = Path("/usr/bin/chromium")  # Debian's package (make browser-setup); Playwright drives it as is
CHROMIUM_ARGS = (
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run",
)
VIEWPORT = {"width": 1280, "height": 800}
GOALS = {"page_load_s": ("<=", 1.0)}
RUN_ID = "bench-0"
MEMBERS = {"random": 3.0, "genetic": 1.5, "bods": 2.0}
# When the devices table holds every device: the page's clock then (ms since the navigation started).
DRAWN = "n => document.querySelectorAll('#devices tbody tr').length >= n && performance.now()"
API_TIMING = """() => {
  const e = performance.getEntriesByType("resource").find((r) => r.name.includes("/api/runs/"));
  return [e.responseStart - e.requestStart, e.encodedBodySize];
}"""


def browser_missing() -> str | None:
    """What is missing to drive Debian's Chromium, as a sentence naming the fix; None when nothing is."""
    try:
        import playwright.async_api  # noqa: F401 - only whether it is there
    except ImportError:
        return "the Python package playwright is not installed (the dev extra: pip install -e '.[dev]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"{CHROMIUM} is missing (Debian's chromium: `make browser-setup` or `apt-get install chromium`)"
    return None


def launch_options(profile: Path) -> dict[str, Any]:
    """Keyword arguments of Playwright's ``launch_persistent_context``: headless Debian Chromium, profile in ``profile``.

    A fresh profile folder per launch: nothing from an earlier browser (cache,
    cookies) changes what is measured or tested.
    """
    return {"user_data_dir": str(profile), "executable_path": str(CHROMIUM), "headless": True,
            "args": list(CHROMIUM_ARGS), "viewport": VIEWPORT}


def run_dashboard_bench(
    *,
    devices: int = 1000,
    jobs: int = 2,
    rounds: int = 30,
    per_round: int = 60,
    loads: int = 5,
    json_path: Path | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Measure the page's load (module docstring); print a table, write ``json_path``."""
    if min(devices, jobs, rounds, per_round, loads) < 1 or per_round > devices:
        raise UserError("--devices, --jobs, --rounds, --per-round and --loads must be >= 1; --per-round <= --devices")
    if jobs * rounds * per_round < devices:
        raise UserError(f"--jobs x --rounds x --per-round must be >= --devices ({devices}): every device trains once")
    missing = browser_missing()
    if missing is not None:
        raise UserError(f"mjfl bench dashboard drives a real browser: {missing}")
    console = console or Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="mjfl-bench-dashboard-") as tmp:
        folder = Path(tmp) / "out"
        write_run_database(folder, devices=devices, jobs=jobs, rounds=rounds, per_round=per_round)
        with output.step(console, f"{loads} loads of a run of {devices} devices in headless Chromium ..."):
            samples = asyncio.run(_measure(folder, Path(tmp) / "profile", devices, loads))
    figures = {
        "devices": devices, "device_rounds": jobs * rounds * per_round, "loads": loads,
        "page_load_s": round(statistics.median(s[0] for s in samples), 4),
        "page_load_max_s": round(max(s[0] for s in samples), 4),
        "api_run_s": round(statistics.median(s[1] for s in samples), 4),
        "json_bytes": samples[0][2],
        "goals": {name: f"{op} {goal:g}" for name, (op, goal) in GOALS.items()},
    }
    console.print(output.table(
        f"dashboard page load ({devices} devices, {jobs} jobs x {rounds} rounds; {output.machine()})",
        ("figure", "measured", "goal", "met"),
        _rows(figures),
    ))
    output.write(figures, json_path, console)
    return figures


def _rows(figures: dict[str, Any]) -> list[tuple[str, ...]]:
    op, goal = GOALS["page_load_s"]
    met = "yes" if figures["page_load_s"] <= goal else "[red]no[/]"
    return [
        ("page_load_s (median)", f"{figures['page_load_s']:.3f}", f"{op} {goal:g}", met),
        ("page_load_max_s", f"{figures['page_load_max_s']:.3f}", "", ""),
        ("api_run_s (median)", f"{figures['api_run_s']:.3f}", "", ""),
        ("json_bytes", f"{figures['json_bytes']:,}", "", ""),
    ]


async def _measure(folder: Path, profile: Path, devices: int, loads: int) -> list[tuple[float, float, int]]:
    """(page load s, server s for the run's JSON, its bytes) of each load, the server on this event loop."""
    from playwright.async_api import async_playwright

    from mjfl.coordinator.dashboard.catalog import Catalog
    from mjfl.coordinator.dashboard.server import serve

    urls: asyncio.Queue[str] = asyncio.Queue()
    server = asyncio.create_task(serve(Catalog([folder]), port=0, ready=urls.put_nowait))
    try:
        url = await asyncio.wait_for(urls.get(), 30)
        async with async_playwright() as playwright:
            context = await playwright.chromium.launch_persistent_context(**launch_options(profile))
            try:
                return [await _load(context, url, devices) for _ in range(loads)]
            finally:
                await context.close()
    finally:
        server.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await server


async def _load(context: Any, url: str, devices: int) -> tuple[float, float, int]:
    page = await context.new_page()
    try:
        await page.goto(url)
        await page.click(f'#runs tbody tr[data-id="0:{RUN_ID}"]', timeout=60_000)  # waits for the runs list
        drawn = await page.wait_for_function(DRAWN, arg=devices, timeout=60_000)
        server_ms, size = await page.evaluate(API_TIMING)
        return await drawn.json_value() / 1000, server_ms / 1000, int(size)
    finally:
        await page.close()


def write_run_database(folder: Path, *, devices: int, jobs: int, rounds: int, per_round: int, seed: int = 0) -> str:
    """A finished synthetic run in ``folder``'s run database, written with the storage API; its dashboard key.

    Round r of job j trains ``per_round`` consecutive devices of a window
    that moves on by ``per_round`` each round, so every device trains when
    ``jobs x rounds x per_round >= devices``; about 5% of device rounds fail.
    Accuracies rise towards 0.9; every device has a profile.
    """
    from mjfl.coordinator.storage.database import Storage
    from mjfl.coordinator.storage.layout import database_path
    from mjfl.coordinator.storage.records import JobInfo, RoundRecord, RunInfo
    from mjfl.ids import DeviceId, JobId
    from mjfl.profiling.profiles import DeviceProfile

    rng = np.random.default_rng(seed)
    names = [JobId(f"job{j}") for j in range(jobs)]
    ids = [DeviceId(f"phone-{k:04d}") for k in range(devices)]
    config = {"scheduler": {"method": "meta-greedy"}, "jobs": [{"name": n, "training": {"epochs": 1}} for n in names]}
    folder.mkdir(parents=True, exist_ok=True)
    with Storage(database_path(folder)) as storage:
        storage.start_run(
            RunInfo(RUN_ID, "meta-greedy", "real", seed, json.dumps(config), "2026-11-27T01:00:00"),
            [JobInfo(RUN_ID, n, "lenet5", "emnist-digits", 0.85, None, rounds, f"lenet5/{n}") for n in names],
        )
        window = 0
        for j, job in enumerate(names):
            ended = 0.0
            for number in range(1, rounds + 1):
                members = [ids[(window + i) % devices] for i in range(per_round)]
                window += per_round
                parts = tuple(_device_round(device, number, rng) for device in members)
                started, ended = ended, ended + max(p.duration_s for p in parts)
                accuracy = 0.9 * (1 - math.exp(-number / (5 + j)))
                record = RoundRecord(RUN_ID, job, number, started, ended, parts, accuracy, 1 - accuracy, True,
                                     ended - started, 2.0, "genetic")
                storage.record_round(record, MEMBERS)
        storage.save_profiles([DeviceProfile(d, a=float(rng.uniform(0.001, 0.01)), mu=50.0) for d in ids])
        storage.finish_run(RUN_ID, "finished", "2026-11-27T02:00:00")
    return f"0:{RUN_ID}"


def _device_round(device: Any, number: int, rng: np.random.Generator) -> Any:
    from mjfl.coordinator.storage.records import DeviceRound

    seconds = float(rng.uniform(2.0, 12.0))
    if rng.random() < 0.05:
        return DeviceRound(device, "failed", 0, None, seconds, error=f"timeout in round {number}")
    state = {"battery_pct": int(rng.integers(20, 100)), "charging": bool(rng.random() < 0.3), "thermal_status": 1}
    return DeviceRound(device, "ok", 100, float(rng.uniform(0.1, 1.0)), seconds, device_state=state,
                       energy_j=float(rng.uniform(5, 20)))
