"""Two parts of `mjfl bench serve`: the lab at capacity, and the lab's event loop under load.

capacity
    More runs than the fleet holds at their ``min_plan``, submitted at once:
    ``capacity_runs`` runs of two jobs that train at least ``capacity_min_plan``
    devices a round each, on a lab of ``capacity_devices`` devices whose
    ``max_running`` (4) would let in more than the devices hold (naive equal
    shares of 8 devices over 4 runs are 2, below a ``min_plan`` of 3). The
    figures: how many runs completed with their targets, the most that ran at
    once against what the fleet holds (``devices // min_plan``), whether the
    queued runs said why they waited, and the longest stretch during which a
    round's worth of devices (``min_plan``) sat idle while a job of some run
    waited for devices, over the longest round (at most 1: no device idles
    longer than a round while a run is short of devices). The waits are the
    runs' own word, their logs' lines (``run/progress.py``): from a job's
    "waits for devices" to the start of its next round.

loop
    ``loop_runs`` runs at once on ``devices`` emulated devices, and meanwhile
    the service's health asked every ``_PROBE_S`` seconds, as any client asks
    it. The figures: the event loop's lag as the service measures it
    (``lab/loop.py``: p50, p99, max), the heartbeats' round trips and the
    connections lost to a missed heartbeat (the server's), and the health
    request's own latency as the client sees it. With ``baseline`` (another
    mjfl checkout), the same part runs that checkout's service too, in the
    same bench, and the client-side figures are compared: the one instrument
    both have.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from rich.console import Console

from mjfl.bench import labs, output

Figures = dict[str, Any]


class Settings(Protocol):
    """What these parts read of `mjfl bench serve`'s settings (``serve.Settings``)."""

    seed: int
    rounds: int
    devices: int
    timeout_s: float
    capacity_devices: int
    capacity_min_plan: int
    capacity_runs: int
    baseline: str | None


class BenchRun(Protocol):
    """A run of the bench (``serve.BenchRun``): its TOML."""

    toml: str

_PROBE_S = 0.2
_CAPACITY_JOBS = ("lenet", "lenet5", 12, 0.5, 0.85), ("cnn", "cnn-a-noniid", 8, 0.5, 0.8)


def capacity(settings: Settings, lab_toml: str, folder: Path, console: Console) -> Figures:
    """The capacity part (module docstring), in a lab of ``lab_toml``."""
    started = time.monotonic()
    deadline = started + settings.timeout_s
    devices, min_plan, count = settings.capacity_devices, settings.capacity_min_plan, settings.capacity_runs
    run = labs.RUN.format(seed=settings.seed, size=devices, method="meta-greedy").replace(
        "min_plan = 2", f"min_plan = {min_plan}") + "".join(
        labs.JOB.format(name=n, model=m, image_size=s, fraction=f, target=t, rounds=settings.rounds)
        for n, m, s, f, t in _CAPACITY_JOBS)
    with output.step(console, f"capacity: {count} runs of min_plan {min_plan} on {devices} devices ...") as update, \
            labs.lab(folder, lab_toml, devices, deadline) as lab:
        ids = [lab.submit(run, lab.admin) for _ in range(count)]
        # Once the lab has looked at its queue, each run still queued says why.
        lab.until(lambda: all(v["state"] != "queued" or v["reason"] for v in lab.runs().values()), deadline, "the queue's reasons")
        reasons = [v["reason"] for v in lab.runs().values() if v["state"] == "queued"]
        views = labs.until_ended(lab, ids, deadline, update)
        tasks = lab.call("GET", "/api/lab/tasks")["tasks"]
    runs_dir = folder / "lab" / "runs"
    rounds = [r for i in ids for r in _rounds(runs_dir / i / "mjfl.db")]
    waits = [w for i in ids for w in waits_in_log((runs_dir / i / "mjfl.log").read_text(errors="replace"))]
    idle = idle_while_waiting(tasks, waits, devices, min_plan)
    figures = {
        "devices": devices, "min_plan": min_plan, "runs": count, "holds": devices // min_plan,
        "completed": sum(views[i]["state"] == "completed" for i in ids),
        "completed_with_targets": sum(views[i]["state"] == "completed" and bool(views[i]["targets_reached"]) for i in ids),
        "most_at_once": _most_at_once([(labs.wall(views[i]["admitted_at"]), labs.wall(views[i]["ended_at"]))
                                       for i in ids if views[i]["admitted_at"] and views[i]["ended_at"]]),
        "queued": len(reasons), "queued_said_why": all("devices" in (r or "") for r in reasons),
        "idle_over_round": round(idle / max(rounds, default=1.0), 3),
        "part_s": round(time.monotonic() - started, 1),
    }
    console.print(
        f"capacity: {figures['completed_with_targets']}/{count} completed with their targets, at most"
        f" {figures['most_at_once']} at once (the fleet holds {figures['holds']}); longest idle"
        f" {figures['idle_over_round']:.2f} rounds ({figures['part_s']:.0f} s)", highlight=False,
    )
    return figures


def loop(
    settings: Settings, runs: Sequence[BenchRun], lab_toml: str, folder: Path, console: Console
) -> Figures:
    """The loop part (module docstring): ``runs`` at once in a lab of ``lab_toml``; with ``settings.baseline``,
    that checkout's service measured the same way."""
    figures: Figures = {"this": _loop_once(runs, lab_toml, settings, folder / "this", console, None)}
    if settings.baseline is not None:
        baseline = Path(settings.baseline)
        figures["baseline"] = _loop_once(runs, lab_toml, settings, folder / "baseline", console, baseline)
        this, base = figures["this"]["health"], figures["baseline"]["health"]
        figures["health_p99_ratio"] = round(this["p99_ms"] / base["p99_ms"], 3) if base["p99_ms"] else None
    return figures


def _loop_once(
    runs: Sequence[BenchRun], lab_toml: str, settings: Settings, folder: Path, console: Console, checkout: Path | None
) -> Figures:
    started = time.monotonic()
    deadline = started + settings.timeout_s
    which = "this checkout" if checkout is None else f"the baseline {checkout}"
    if checkout is not None:  # an older service may not know the program cache's key: it keeps the default one
        lab_toml = "\n".join(line for line in lab_toml.splitlines() if not line.startswith("program_cache ="))
    with output.step(console, f"loop: {len(runs)} runs on {settings.devices} devices, {which} ...") as update, \
            _pythonpath(checkout), labs.lab(folder, lab_toml, settings.devices, deadline) as lab, \
            _probing(lab) as probe:
        ids = [lab.submit(run.toml, lab.admin) for run in runs]
        views = labs.until_ended(lab, ids, deadline, update)
        health = lab.call("GET", "/api/lab/health")
    figures = {
        "runs": len(ids), "completed": sum(views[i]["state"] == "completed" for i in ids),
        "health": latency_ms(probe), "loop": health.get("loop"), "heartbeats": health.get("heartbeats"),
        "part_s": round(time.monotonic() - started, 1),
    }
    lag = figures["loop"]
    lagged = "its health reports no loop lag" if lag is None else f"lag p99 {lag['p99_ms']} ms, max {lag['max_ms']} ms"
    console.print(
        f"loop ({which}): {lagged}; health p99 {figures['health']['p99_ms']} ms ({figures['part_s']:.0f} s)",
        highlight=False,
    )
    return figures


@contextlib.contextmanager
def _pythonpath(checkout: Path | None) -> Iterator[None]:
    """The services started inside run ``checkout``'s mjfl (None: this one).

    ``PYTHONSAFEPATH`` too: ``python -m`` would otherwise put the folder it runs
    in first on the path, and the bench runs from this checkout.
    """
    if checkout is None:
        yield
        return
    before = {name: os.environ.get(name) for name in ("PYTHONPATH", "PYTHONSAFEPATH")}
    os.environ |= {"PYTHONPATH": str(checkout.resolve()), "PYTHONSAFEPATH": "1"}
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                del os.environ[name]
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _probing(lab: labs.Lab) -> Iterator[list[float]]:
    """``GET /api/lab/health`` every ``_PROBE_S`` seconds on a thread while the block runs: each latency, seconds."""
    took: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.wait(_PROBE_S):
            begun = time.perf_counter()
            with contextlib.suppress(OSError, RuntimeError):
                lab.call("GET", "/api/lab/health")
                took.append(time.perf_counter() - begun)

    thread = threading.Thread(target=probe, name="health probe", daemon=True)
    thread.start()
    try:
        yield took
    finally:
        stop.set()
        thread.join()


def latency_ms(seconds: Sequence[float]) -> Figures:
    values = np.array(seconds, dtype=float) * 1e3
    if values.size == 0:
        return {"p50_ms": None, "p99_ms": None, "max_ms": None, "samples": 0}
    return {
        "p50_ms": round(float(np.percentile(values, 50)), 2), "p99_ms": round(float(np.percentile(values, 99)), 2),
        "max_ms": round(float(values.max()), 2), "samples": int(values.size),
    }


def _rounds(database: Path) -> list[float]:
    """Each round's duration in a run database (none where it is missing)."""
    import sqlite3

    if not database.is_file():
        return []
    with contextlib.closing(sqlite3.connect(f"{database.absolute().as_uri()}?mode=ro", uri=True)) as conn:
        return [float(end - start) for start, end in conn.execute("SELECT started_s, ended_s FROM rounds")]


_STAMP = r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) "
_WAITS = re.compile(_STAMP + r".*?: job (\S+) round \d+ waits for devices")
_ROUND = re.compile(_STAMP + r".*?: job (\S+) round \d+: accuracy .*?, (-?[\d.]+)-(-?[\d.]+) s")


def waits_in_log(text: str) -> list[tuple[float, float]]:
    """Each wait for devices a run's log tells, on the wall clock (Unix s): from a job's "waits for devices" line
    to the start of its next round (the round's line, when it ended, less the round's length)."""
    began: dict[str, float] = {}
    spans = []
    for line in text.splitlines():
        if (m := _WAITS.match(line)) is not None:
            began.setdefault(m.group(3), _unix(m.group(1), m.group(2)))
        elif (m := _ROUND.match(line)) is not None and m.group(3) in began:
            start = _unix(m.group(1), m.group(2)) - (float(m.group(5)) - float(m.group(4)))
            spans.append((began.pop(m.group(3)), start))
    return spans


def idle_while_waiting(
    tasks: Sequence[dict[str, Any]], waits: Sequence[tuple[float, float]], devices: int, plan: int
) -> float:
    """The longest stretch (seconds) within one wait for devices during which at least ``plan`` of the ``devices``
    held no task: enough idle devices for a round, while a job waited for them. (Fewer idle devices, a slow one
    no plan chose or one left over by plans of ``plan``, are no round's worth.)"""
    spans = [(t["sent"], t["ended"] if t["ended"] is not None else math.inf) for t in tasks]
    longest = 0.0
    for start, end in waits:
        inside = [(max(sent, start), min(ended, end)) for sent, ended in spans if sent < end and ended > start]
        moments = sorted({start, end, *(a for a, _ in inside), *(b for _, b in inside)})
        stretch = 0.0
        for a, b in itertools.pairwise(moments):
            busy = sum(1 for sent, ended in inside if sent <= a and ended >= b)
            stretch = stretch + (b - a) if devices - busy >= plan else 0.0
            longest = max(longest, stretch)
    return longest


def _unix(stamp: str, ms: str) -> float:
    """A log line's local time, as Unix seconds."""
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000


def _most_at_once(spans: Sequence[tuple[float, float]]) -> int:
    moments = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    return max(itertools.accumulate(step for _, step in moments), default=0)
