"""`mjfl bench dashboard`: how long the dashboard's page takes to draw a finished run of 1,000 devices, and its timeline.

A run database is written with the real storage API (``write_run_database``:
two jobs, tens of rounds, 60 devices a round, every one of the 1,000
devices in some round, each with a profile); `mjfl dashboard`'s server
(``server.serve``) serves it on loopback from a process of its own (as
`mjfl dashboard` does: the bench's driving of the browser shares nothing
with it), and a headless Chromium (Debian's ``/usr/bin/chromium`` driven
by Playwright; never a downloaded browser) loads the page, clicks the run's
row and waits for its devices table. Each load is a fresh tab; the figures
are medians over the loads:

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

The device timeline is measured on a second synthetic run of its own (its
server apart, so neither run's figures pay for the other's): ``devices``
devices each in ``timeline_rounds`` device rounds (two jobs), opened as above
until the timeline (``static/timeline.js``) has drawn every bar:

timeline_render_s
    The component's own time to draw the fetched bars (``update(data)``:
    indexing them and painting the canvas; its ``data-render-ms``). Goal:
    < 1 s at 1,000 devices x 100 rounds.
timeline_load_s
    From the navigation's start to the timeline drawn: the page as above,
    then ``/api/runs/{id}/timeline`` fetched, parsed and drawn. Goal: < 1 s.
    A finished run's view and timeline are kept by the server once read
    (``catalog.Kept``), so this median is of a run opened before;
    ``timeline_first_load_s`` is the first load's, which reads the run's
    database (the runs list, the view, the timeline: 100,000 device rounds
    read three times).
timeline_api_s, timeline_json_bytes
    The server's time for the timeline's JSON (median; ``timeline_first_api_s``
    the first load's), and its size.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing
import multiprocessing.queues
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
GOALS = {"page_load_s": ("<=", 1.0), "timeline_render_s": ("<", 1.0), "timeline_load_s": ("<", 1.0)}
RUN_ID = "bench-0"
MEMBERS = {"random": 3.0, "genetic": 1.5, "bods": 2.0}
# When the devices table holds every device: the page's clock then (ms since the navigation started).
DRAWN = "n => document.querySelectorAll('#devices tbody tr').length >= n && performance.now()"
# The timeline has drawn n bars: [its draw's ms, the page's clock then].
TIMELINE_DRAWN = "n => Number(document.getElementById('timeline').dataset.bars) >= n && [Number(document.getElementById('timeline').dataset.renderMs), performance.now()]"
# The server's ms and the bytes of the first answer whose URL has `part`, and is not the timeline's unless asked.
API_TIMING = """part => {
  const e = performance.getEntriesByType("resource").find((r) => r.name.includes(part) && (part.includes("/timeline?") || !r.name.includes("/timeline?")));
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
    timeline_rounds: int = 100,
    loads: int = 5,
    json_path: Path | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Measure the page's load and the timeline's render (module docstring); print a table, write ``json_path``."""
    if min(devices, jobs, rounds, per_round, timeline_rounds, loads) < 1 or per_round > devices:
        raise UserError("--devices, --jobs, --rounds, --per-round, --timeline-rounds and --loads must be >= 1;"
                        " --per-round <= --devices")
    if jobs * rounds * per_round < devices:
        raise UserError(f"--jobs x --rounds x --per-round must be >= --devices ({devices}): every device trains once")
    missing = browser_missing()
    if missing is not None:
        raise UserError(f"mjfl bench dashboard drives a real browser: {missing}")
    console = console or Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="mjfl-bench-dashboard-") as tmp:
        folder, wide = Path(tmp) / "out", Path(tmp) / "timeline"
        write_run_database(folder, devices=devices, jobs=jobs, rounds=rounds, per_round=per_round)
        # Two jobs, each round half the fleet: every device in `timeline_rounds` device rounds.
        half = (devices + 1) // 2
        write_run_database(wide, devices=devices, jobs=2, rounds=timeline_rounds, per_round=half)
        with output.step(console, f"{loads} loads of a run of {devices} devices and of its timeline in headless Chromium ..."):
            samples, drawn = asyncio.run(_measure(folder, wide, Path(tmp) / "profile", devices, 2 * timeline_rounds * half, loads))
    figures = {
        "devices": devices, "device_rounds": jobs * rounds * per_round, "loads": loads,
        "page_load_s": round(statistics.median(s[0] for s in samples), 4),
        "page_load_max_s": round(max(s[0] for s in samples), 4),
        "api_run_s": round(statistics.median(s[1] for s in samples), 4),
        "json_bytes": samples[0][2],
        "timeline_bars": 2 * timeline_rounds * half,
        "timeline_render_s": round(statistics.median(d[0] for d in drawn), 4),
        "timeline_render_max_s": round(max(d[0] for d in drawn), 4),
        "timeline_load_s": round(statistics.median(d[1] for d in drawn), 4),
        "timeline_first_load_s": round(drawn[0][1], 4),
        "timeline_api_s": round(statistics.median(d[2] for d in drawn), 4),
        "timeline_first_api_s": round(drawn[0][2], 4),
        "timeline_json_bytes": drawn[0][3],
        "goals": {name: f"{op} {goal:g}" for name, (op, goal) in GOALS.items()},
    }
    console.print(output.table(
        f"dashboard page load ({devices} devices, {jobs} jobs x {rounds} rounds) and timeline"
        f" ({figures['timeline_bars']:,} bars; {output.machine()})",
        ("figure", "measured", "goal", "met"),
        _rows(figures),
    ))
    output.write(figures, json_path, console)
    return figures


def _rows(figures: dict[str, Any]) -> list[tuple[str, ...]]:
    def goal(name: str) -> tuple[str, str]:
        op, limit = GOALS[name]
        met = figures[name] <= limit if op == "<=" else figures[name] < limit
        return f"{op} {limit:g}", "yes" if met else "[red]no[/]"

    return [
        ("page_load_s (median)", f"{figures['page_load_s']:.3f}", *goal("page_load_s")),
        ("page_load_max_s", f"{figures['page_load_max_s']:.3f}", "", ""),
        ("api_run_s (median)", f"{figures['api_run_s']:.3f}", "", ""),
        ("json_bytes", f"{figures['json_bytes']:,}", "", ""),
        ("timeline_render_s (median)", f"{figures['timeline_render_s']:.3f}", *goal("timeline_render_s")),
        ("timeline_render_max_s", f"{figures['timeline_render_max_s']:.3f}", "", ""),
        ("timeline_load_s (median)", f"{figures['timeline_load_s']:.3f}", *goal("timeline_load_s")),
        ("timeline_first_load_s", f"{figures['timeline_first_load_s']:.3f}", "", ""),
        ("timeline_api_s (median)", f"{figures['timeline_api_s']:.3f}", "", ""),
        ("timeline_first_api_s", f"{figures['timeline_first_api_s']:.3f}", "", ""),
        ("timeline_json_bytes", f"{figures['timeline_json_bytes']:,}", "", ""),
    ]


async def _measure(
    folder: Path, wide: Path, profile: Path, devices: int, bars: int, loads: int
) -> tuple[list[tuple[float, float, int]], list[tuple[float, float, float, int]]]:
    """Each load's figures, of the page (``_load``) and of the timeline (``_load_timeline``), the servers on this loop."""
    from playwright.async_api import async_playwright

    async with _serving(folder) as url, _serving(wide) as timeline_url, async_playwright() as playwright:
        context = await playwright.chromium.launch_persistent_context(**launch_options(profile))
        try:
            pages = [await _load(context, url, devices) for _ in range(loads)]
            return pages, [await _load_timeline(context, timeline_url, bars) for _ in range(loads)]
        finally:
            await context.close()


@contextlib.asynccontextmanager
async def _serving(folder: Path) -> Any:
    """`mjfl dashboard`'s server of ``folder`` on loopback, in a process of its own, while the block runs; yields its URL."""
    ctx = multiprocessing.get_context("spawn")
    urls: multiprocessing.queues.Queue[str] = ctx.Queue()
    server = ctx.Process(target=_serve, args=(folder, urls), daemon=True, name="dashboard server")
    server.start()
    try:
        yield await asyncio.to_thread(urls.get, True, 60)
    finally:
        server.terminate()  # SIGTERM: the server holds nothing to flush (it reads its databases read-only)
        await asyncio.to_thread(server.join, 10)


def _serve(folder: Path, urls: multiprocessing.queues.Queue[str]) -> None:
    """The server process: `mjfl dashboard`'s server of ``folder`` on a free loopback port, its URL put in ``urls``."""
    from mjfl.coordinator.dashboard.catalog import Catalog
    from mjfl.coordinator.dashboard.server import serve

    asyncio.run(serve(Catalog([folder]), port=0, ready=urls.put))


async def _open_run(context: Any, url: str) -> Any:
    """A fresh tab on ``url`` with the synthetic run opened (its row clicked once the runs list is there)."""
    page = await context.new_page()
    await page.goto(url)
    await page.click(f'#runs tbody tr[data-id="0:{RUN_ID}"]', timeout=60_000)
    return page


async def _load(context: Any, url: str, devices: int) -> tuple[float, float, int]:
    page = await _open_run(context, url)
    try:
        drawn = await page.wait_for_function(DRAWN, arg=devices, timeout=60_000)
        server_ms, size = await page.evaluate(API_TIMING, "/api/runs/")
        return await drawn.json_value() / 1000, server_ms / 1000, int(size)
    finally:
        await page.close()


async def _load_timeline(context: Any, url: str, bars: int) -> tuple[float, float, float, int]:
    """(the timeline's draw s, navigation start to drawn s, the server's s for its JSON, its bytes) of one load."""
    page = await _open_run(context, url)
    try:
        drawn = await page.wait_for_function(TIMELINE_DRAWN, arg=bars, timeout=120_000)
        render_ms, at_ms = await drawn.json_value()
        server_ms, size = await page.evaluate(API_TIMING, "/timeline?")
        return render_ms / 1000, at_ms / 1000, server_ms / 1000, int(size)
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
