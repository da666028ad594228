"""`mjfl bench serve`: the lab service (`mjfl serve`) against the ways a lab runs without it, in one run.

Three figures, from real processes on this machine: `mjfl serve` and `mjfl
testbed run` started as a lab starts them, emulated devices, the
researchers' API asked over HTTP as any client asks it.

makespan
    ``runs`` short runs (two small jobs each on the digits, LeNet-5 to 0.9
    and the paper's CNN to 0.85, at most ``rounds`` rounds; seeds, sizes
    and methods, random and meta-greedy, in turn) submitted back to back in
    a fixed order by ``researchers`` researchers in turn, over ``devices``
    emulated devices, three ways, each timed from the first submission to
    the last run's end:

    ``equal``: `mjfl serve` with ``limits.share = "equal"``: every running
    run's jobs are planned round by round over every device, a device
    serving one job at a time, each run its equal part while others are
    short. ``reserved``: the same LAB.toml with ``share = "reserved"``:
    each run holds devices of its own, as many as its ``fleet.size``, for
    its life, as other FL systems reserve sites. ``sequential``: the same
    runs as `mjfl testbed run --emulate DEVICES`, one after another, each
    starting its own emulated devices (no live view, no dashboard), as a
    lab without the service works today. Their devices impersonate the
    labs' phones: a lab's ``--emulate`` devices impersonate the fleet its
    seed draws, a testbed run's the fleet its own run's seed draws, so each
    testbed run is given the labs' fleet as a profile file
    (``fleet.profiles``); else run n would run on other phones than in the
    labs, and the ways would differ by more than how they share.

    A run ends completed, failed or cancelled; whether every job of it
    reached its target is reported with it (the lab's ``targets_reached``,
    a testbed run's summary.json), and a run that misses stays in the
    figure. The ratios are equal/reserved and equal/sequential (below 1:
    sharing was faster).

    Why these settings. The sizes (default 8, 6, 4 devices in turn) are
    runs much smaller than the fleet, as a lab's everyday runs are: under
    reservation 8 + 6 + 4 = 18 of 20 devices are held and the next run
    waits although two are idle, and a device whose job has finished its
    round idles until that run's next round; sharing gives every device to
    whichever job wants one. ``max_running`` is the lab's default, 4, in
    both labs, so that the policy is the only difference between them
    (under reservation the devices, not the limit, bound the runs going at
    once: at most 3 with these sizes). A lab cuts a run's data for the
    devices connected when it starts, at least its ``fleet.size``
    (``coordinator/lab/admission.py``): 20 shards under ``equal``, as in
    `testbed run` with 20 devices, and ``fleet.size`` shards under
    ``reserved``. A round planned in full trains the same share of the data
    either way (``fraction``), on more, smaller shards or on fewer, larger
    ones; an emulated device takes its impersonated phone's Formula 4 time
    for the shard it trains, so what a round costs in device time is alike,
    and what the figure compares is how the fleet is kept busy. Under
    ``equal`` a run's round is planned smaller (its share of the devices, at
    least ``min_plan``) while the other runs are short, so it trains less of
    the data that round: a run may then take more rounds, or miss its target
    within ``rounds``, and that is in the figure too.

submit latency
    ``connections`` emulated devices connected to a lab (the service's own
    ``--emulate``: idle connections, heartbeating every 5 s), and
    ``submits`` runs submitted one after another over HTTP (researchers in
    turn, a new connection each, as `mjfl submit` does); p50 and p99 of
    ``POST /api/lab/runs`` as the client sees it, after
    ``_WARM_UP`` submits not counted. The runs must not run: the lab's
    ``fleet.size`` is one device more than are connected and each run is
    made for that many, so the lab takes each (it could run once one more
    device connects) and queues it, "waiting for devices"; the queue grows
    to ``submits`` runs meanwhile, and the service is stopped after.

memory
    The service's resident memory (RSS, of the `mjfl serve` process
    itself: its emulated devices are in worker processes of their own)
    once ``memory_runs`` (default 10, then 100) of the smallest runs that
    still train (one LeNet-5 job, 2 devices a round, 2 rounds) have ended
    in a lab of ``_MEMORY_DEVICES`` devices running two at a time. The
    growth is the last reading over the first, minus 1.

The phones every lab and testbed run impersonates are the synthetic fleet
of ``seed``, or drawn from ``--profiles FILE`` (a profile file,
docs/profiles.md: the bench's test gives fast phones, to run every part in
little time).

Every service and testbed run is started in a session of its own and
stopped when its part ends, fails or the bench is stopped (Ctrl-C,
SIGTERM): SIGTERM, then SIGKILL to its whole process group.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from mjfl.bench import labs, output, serve_load
from mjfl.bench.coordinator import _raise_open_files_limit
from mjfl.coordinator.run.preparation import PROGRAM_CACHE
from mjfl.errors import UserError
from mjfl.schedulers.registry import METHODS

Figures = dict[str, Any]

GOALS = {
    "makespan_ratio_reserved": ("<", 1.0),
    "makespan_ratio_sequential": ("<", 1.0),
    "submit_p99_ms": ("<", 100.0),
    "rss_growth": ("<=", 0.10),
    "capacity_completed_share": (">=", 1.0),
    "capacity_over_holds": ("<=", 0.0),
    "capacity_idle_over_round": ("<=", 1.0),
    "loop_lag_p99_ms": ("<", 20.0),
    "heartbeats_missed": ("<=", 0.0),
}
PARTS = ("makespan", "submit", "memory", "capacity", "loop")
POLICIES = ("equal", "reserved")

_WARM_UP = 5  # submits before the measured ones (the service's first requests load code)
_MEMORY_DEVICES = 4

@dataclasses.dataclass(frozen=True)
class Settings:
    """What the bench measures with (module docstring); written with the figures."""

    devices: int = 20
    runs: int = 10
    researchers: int = 3
    sizes: tuple[int, ...] = (8, 6, 4)
    methods: tuple[str, ...] = ("random", "meta-greedy")
    max_running: int = 4
    rounds: int = 40
    connections: int = 1000
    submits: int = 200
    memory_runs: tuple[int, ...] = (10, 100)
    seed: int = 0
    profiles: str | None = None  # the phones impersonated, drawn from this file (None: the synthetic fleet of seed)
    timeout_s: float = 1800.0
    parts: tuple[str, ...] = PARTS
    capacity_devices: int = 8
    capacity_min_plan: int = 3
    capacity_runs: int = 5
    loop_runs: int = 4
    baseline: str | None = None  # another mjfl checkout whose service the loop part measures too

    def check(self) -> None:
        """A UserError naming the option that is out of range."""
        if min(self.devices, self.runs, self.researchers, self.max_running, self.rounds, self.connections, self.submits) < 1:
            raise UserError("--devices, --runs, --researchers, --max-running, --rounds, --connections and --submits must be >= 1")
        if not self.sizes or min(self.sizes) < 1 or max(self.sizes) > self.devices:
            raise UserError(f"--sizes: each run's size must be 1 to --devices ({self.devices})")
        unknown = [m for m in self.methods if m not in METHODS]
        if not self.methods or unknown:
            raise UserError(f"--methods: unknown {unknown}; choose from {list(METHODS)}")
        if not self.memory_runs or min(self.memory_runs) < 1 or list(self.memory_runs) != sorted(set(self.memory_runs)):
            raise UserError("--memory-runs: run counts >= 1, increasing (e.g. 10,100)")
        if self.timeout_s <= 0:
            raise UserError("--timeout-s must be > 0")
        if self.profiles is not None and not Path(self.profiles).is_file():
            raise UserError(f"--profiles: no file {self.profiles}")
        if min(self.capacity_devices, self.capacity_min_plan, self.capacity_runs, self.loop_runs) < 1:
            raise UserError("--capacity-devices, --capacity-min-plan, --capacity-runs and --loop-runs must be >= 1")
        if self.capacity_min_plan > self.capacity_devices:
            raise UserError(f"--capacity-min-plan: at most --capacity-devices ({self.capacity_devices})")
        if not self.parts or set(self.parts) - set(PARTS):
            raise UserError(f"--parts: choose from {', '.join(PARTS)}")
        if self.baseline is not None and not (Path(self.baseline) / "mjfl" / "__init__.py").is_file():
            raise UserError(f"--baseline: {self.baseline} is not an mjfl checkout (no mjfl/__init__.py)")


@dataclasses.dataclass(frozen=True)
class BenchRun:
    """One run of the makespan figure: the TOML every way runs, and what it is made of."""

    name: str
    size: int
    method: str
    toml: str

    def impersonating(self, profiles: Path) -> str:
        """The TOML with ``profiles`` as its fleet: what a testbed run's emulated devices impersonate."""
        return self.toml.replace("[fleet]\n", f"[fleet]\nprofiles = {json.dumps(str(profiles))}\n", 1)


def bench_runs(settings: Settings) -> list[BenchRun]:
    """The makespan figure's runs: seeds, sizes and methods in turn."""
    out = []
    for n in range(settings.runs):
        size, method = settings.sizes[n % len(settings.sizes)], settings.methods[n % len(settings.methods)]
        toml = labs.RUN.format(seed=settings.seed + n, size=size, method=method) + "".join((
            labs.JOB.format(name="lenet", model="lenet5", image_size=12, fraction=0.5, target=0.9, rounds=settings.rounds),
            labs.JOB.format(name="cnn", model="cnn-a-noniid", image_size=8, fraction=0.5, target=0.85, rounds=settings.rounds),
        ))
        out.append(BenchRun(f"run{n + 1:02d}", size, method, toml))
    return out


def run_serve_bench(
    settings: Settings = Settings(), *, out: Path | None = None, json_path: Path | None = None,
    console: Console | None = None,
) -> Figures:
    """Measure the three figures (module docstring); print a table, write ``json_path``.

    ``out`` keeps the labs' and runs' folders (default: a temporary folder, removed at the end).
    """
    settings.check()
    console = console or Console(stderr=True)
    _raise_open_files_limit()  # the services the bench starts inherit it: a thousand sockets
    runs = bench_runs(settings)
    with contextlib.ExitStack() as stack:
        folder = out if out is not None else Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mjfl-serve-")))
        folder.mkdir(parents=True, exist_ok=True)
        with output.step(console, "preparing the runs' data and programs (exported once per machine) ..."):
            _warm_up(runs[0])
        parts = _parts(settings, runs, folder, console)
    figures = _summary(settings, parts)
    console.print(output.table(
        f"lab service benchmark ({output.machine()})", ("figure", "measured", "goal", "met", "how"),
        (_row(name, figures[name], how) for name, how in _hows(figures).items()), left=("how",),
    ))
    output.write(figures, json_path, console)
    return figures


def _parts(settings: Settings, runs: Sequence[BenchRun], folder: Path, console: Console) -> dict[str, Figures]:
    """Each part asked for, in order (module docstring; the capacity and loop parts: ``serve_load.py``)."""
    parts: dict[str, Figures] = {}
    if "makespan" in settings.parts:
        parts["makespan"] = {policy: _shared(policy, runs, settings, folder / policy, console) for policy in POLICIES}
        parts["makespan"]["sequential"] = _sequential(runs, settings, folder / "sequential", console)
    if "submit" in settings.parts:
        parts["submit"] = _submit_latency(settings, folder / "submit", console)
    if "memory" in settings.parts:
        parts["memory"] = _memory(settings, folder / "memory", console)
    if "capacity" in settings.parts:
        count = settings.capacity_runs
        lab_toml = _lab_toml(settings, size=settings.capacity_devices, max_running=settings.max_running, queued=count)
        parts["capacity"] = serve_load.capacity(settings, lab_toml, folder / "capacity", console)
    if "loop" in settings.parts:
        chosen = runs[: settings.loop_runs]
        lab_toml = _lab_toml(settings, size=settings.devices, max_running=len(chosen), queued=len(chosen))
        parts["loop"] = serve_load.loop(settings, chosen, lab_toml, folder / "loop", console)
    return parts


def _warm_up(run: BenchRun) -> None:
    """The runs' programs exported and data cut once, here, so that no way pays for it in its makespan."""
    from mjfl.coordinator.config import parse_config
    from mjfl.coordinator.run.preparation import prepare_jobs

    prepare_jobs(parse_config(tomllib.loads(run.toml)), 2)


def _lab_toml(settings: Settings, *, size: int, share: str = "equal", max_running: int, queued: int) -> str:
    return labs.LAB.format(seed=settings.seed, size=size, max_running=max_running, queued=queued, share=share,
                           profiles=_profiles_key(settings), programs=PROGRAM_CACHE.resolve())


def _profiles_key(settings: Settings) -> str:
    """LAB.toml's ``fleet.profiles`` line for ``--profiles``, else nothing (the synthetic fleet of the seed)."""
    return "" if settings.profiles is None else f"profiles = {json.dumps(str(Path(settings.profiles).resolve()))}"



# -- makespan -----------------------------------------------------------------------------------


def _shared(policy: str, runs: Sequence[BenchRun], settings: Settings, folder: Path, console: Console) -> Figures:
    """The runs submitted at once to a lab sharing its devices by ``policy``, until every one has ended."""
    started = time.monotonic()
    deadline = started + settings.timeout_s
    lab_toml = _lab_toml(settings, size=settings.devices, share=policy, max_running=settings.max_running, queued=len(runs))
    with output.step(console, f"{policy}: {len(runs)} runs on a lab of {settings.devices} devices ...") as update, \
            labs.lab(folder, lab_toml, settings.devices, deadline) as lab:
        tokens = lab.researchers(settings.researchers)
        ids = [lab.submit(run.toml, tokens[n % len(tokens)]) for n, run in enumerate(runs)]
        views = labs.until_ended(lab, ids, deadline, update)
    rows = [_lab_row(run, views[run_id]) for run, run_id in zip(runs, ids, strict=True)]
    ended = [views[i] for i in ids if views[i]["ended_at"] is not None]
    last = max((labs.wall(v["ended_at"]) for v in ended), default=time.time())
    figures = _makespan(last - min(labs.wall(views[i]["submitted_at"]) for i in ids), rows, time.monotonic() - started)
    console.print(f"{policy}: {_said(figures)}", highlight=False)
    return figures


def _lab_row(run: BenchRun, view: dict[str, Any]) -> Figures:
    admitted, ended = view["admitted_at"], view["ended_at"]
    return {
        "run": run.name, "id": view["id"], "owner": view["owner"], "size": run.size, "method": run.method,
        "state": view["state"], "reached": bool(view["targets_reached"]),
        "waited_s": None if admitted is None else round(labs.wall(admitted) - labs.wall(view["submitted_at"]), 2),
        "ran_s": None if admitted is None or ended is None else round(labs.wall(ended) - labs.wall(admitted), 2),
    }


def _sequential(runs: Sequence[BenchRun], settings: Settings, folder: Path, console: Console) -> Figures:
    """The runs as `mjfl testbed run --emulate DEVICES`, one after another."""
    deadline = time.monotonic() + settings.timeout_s
    folder.mkdir(parents=True, exist_ok=True)
    profiles = _labs_fleet(settings, folder / "fleet.json")
    rows = []
    started = time.monotonic()
    with output.step(console, f"sequential: {len(runs)} testbed runs of {settings.devices} devices each ...") as update:
        for n, run in enumerate(runs):
            update(f"{n}/{len(runs)} runs ended")
            rows.append(_testbed_run(run, profiles, settings.devices, folder, deadline))
    figures = _makespan(time.monotonic() - started, rows, time.monotonic() - started)
    console.print(f"sequential: {_said(figures)}", highlight=False)
    return figures


def _labs_fleet(settings: Settings, path: Path) -> Path:
    """The phones a lab of ``settings.devices`` emulated devices impersonates, written as a profile file."""
    from mjfl.coordinator.config import FleetConfig, RunConfig
    from mjfl.coordinator.run.preparation import fleet_profiles
    from mjfl.profiling.profiles import save_profiles

    drawn = FleetConfig(size=settings.devices, profiles=Path(settings.profiles).resolve() if settings.profiles else None)
    fleet = fleet_profiles(RunConfig(jobs=(), fleet=drawn, seed=settings.seed))
    save_profiles(path, fleet, created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    return path


def _testbed_run(run: BenchRun, profiles: Path, devices: int, folder: Path, deadline: float) -> Figures:
    config, out = folder / f"{run.name}.toml", folder / run.name
    config.write_text(run.impersonating(profiles))
    args = ["testbed", "run", str(config), "--emulate", str(devices), "--out", str(out), "--no-live", "--no-dashboard"]
    started = time.monotonic()
    with labs.started(args, folder / f"{run.name}.out") as process:
        try:
            code: int | None = process.proc.wait(max(0.0, deadline - started))
        except subprocess.TimeoutExpired:
            code = None
    state = "timed out" if code is None else "completed" if code in (0, 1) and (out / "summary.json").exists() else "failed"
    return {
        "run": run.name, "size": run.size, "method": run.method, "state": state, "exit_code": code,
        "reached": _reached(out / "summary.json"), "ran_s": round(time.monotonic() - started, 2),
    }


def _reached(summary: Path) -> bool:
    """Whether every job of a testbed run reached its target (its summary.json; none: it did not)."""
    if not summary.exists():
        return False
    methods = json.loads(summary.read_text())["methods"]
    return all(job["time_to_target_s"] is not None for method in methods.values() for job in method["jobs"].values())


def _makespan(seconds: float, rows: list[Figures], part_s: float) -> Figures:
    """A way's makespan; ``part_s``: the whole part, a lab's start and stop included."""
    return {
        "seconds": round(seconds, 1), "runs": len(rows), "ended": sum(r["state"] in labs.FINAL for r in rows),
        "reached": sum(r["reached"] for r in rows), "each": rows, "part_s": round(part_s, 1),
    }


def _said(figures: Figures) -> str:
    return (f"{figures['runs']} runs in {figures['seconds']:.1f} s; {figures['ended']} ended,"
            f" {figures['reached']} reached every target ({figures['part_s']:.0f} s)")


# -- submit latency -------------------------------------------------------------------------------


def _submit_latency(settings: Settings, folder: Path, console: Console) -> Figures:
    """p50/p99 of POST /api/lab/runs with ``connections`` devices connected; the runs wait for one more device."""
    started = time.monotonic()
    deadline = started + settings.timeout_s
    size = settings.connections + 1
    count = _WARM_UP + settings.submits
    lab_toml = _lab_toml(settings, size=size, max_running=1, queued=count)
    run = labs.RUN.format(seed=settings.seed, size=size, method="random") + labs.JOB.format(
        name="lenet", model="lenet5", image_size=12, fraction=0.1, target=0.9, rounds=2)
    with output.step(console, f"submit latency: {settings.connections} devices connecting ...") as update, \
            labs.lab(folder, lab_toml, settings.connections, deadline) as lab:
        tokens = lab.researchers(settings.researchers)
        update(f"submit latency: {settings.submits} submits with {settings.connections} devices connected ...")
        took = []
        for n in range(count):
            begun = time.perf_counter()
            lab.submit(run, tokens[n % len(tokens)])
            took.append(time.perf_counter() - begun)
        connected = lab.call("GET", "/api/lab/health")["devices"]
        queued = sum(v["state"] == "queued" for v in lab.runs().values())
    ms = np.array(took[_WARM_UP:]) * 1000
    figures = {
        "connections": settings.connections, "connected": connected, "submits": settings.submits,
        "queued": queued, "p50_ms": round(float(np.percentile(ms, 50)), 2),
        "p99_ms": round(float(np.percentile(ms, 99)), 2), "max_ms": round(float(ms.max()), 2),
        "part_s": round(time.monotonic() - started, 1),
    }
    console.print(
        f"submit latency: p50 {figures['p50_ms']:.1f} ms, p99 {figures['p99_ms']:.1f} ms over {settings.submits} submits,"
        f" {connected} devices connected ({figures['part_s']:.0f} s)", highlight=False,
    )
    return figures


# -- memory ---------------------------------------------------------------------------------------


def _memory(settings: Settings, folder: Path, console: Console) -> Figures:
    """The service's RSS once each count of ``memory_runs`` tiny runs has ended."""
    started = time.monotonic()
    deadline = started + settings.timeout_s
    last = settings.memory_runs[-1]
    lab_toml = _lab_toml(settings, size=_MEMORY_DEVICES, max_running=2, queued=last)
    tiny = labs.RUN.format(seed=settings.seed, size=2, method="random") + labs.JOB.format(
        name="lenet", model="lenet5", image_size=12, fraction=0.5, target=0.99, rounds=2)
    rss: dict[str, float] = {}
    ids: list[str] = []
    with output.step(console, f"memory: {last} tiny runs on a lab of {_MEMORY_DEVICES} devices ...") as update, \
            labs.lab(folder, lab_toml, _MEMORY_DEVICES, deadline) as lab:
        rss["0"] = _rss_mb(lab.process.pid)
        for count in settings.memory_runs:
            ids += [lab.submit(tiny, lab.admin) for _ in range(count - len(ids))]
            views = labs.until_ended(lab, ids, deadline, update)
            rss[str(count)] = _rss_mb(lab.process.pid)
            console.print(f"memory: RSS {rss[str(count)]:.0f} MiB after {count} runs ({time.monotonic() - started:.0f} s)",
                          highlight=False)
        states = [views[i]["state"] for i in ids]
    first, final = rss[str(settings.memory_runs[0])], rss[str(last)]
    return {
        "devices": _MEMORY_DEVICES, "runs": len(ids), "completed": states.count("completed"),
        "rss_mb": rss, "growth": round(final / first - 1, 4), "part_s": round(time.monotonic() - started, 1),
    }


def _rss_mb(pid: int) -> float:
    """A process's resident memory, MiB (Linux: /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError(f"no VmRSS for process {pid}")


# -- the figures ----------------------------------------------------------------------------------


def _summary(settings: Settings, parts: dict[str, Figures]) -> Figures:
    """The figures of the parts that ran, their goals' names first."""
    figures: Figures = {}
    if "makespan" in parts:
        equal, reserved, sequential = (parts["makespan"][k]["seconds"] for k in ("equal", "reserved", "sequential"))
        figures |= {
            "makespan_equal_s": equal, "makespan_reserved_s": reserved, "makespan_sequential_s": sequential,
            "makespan_ratio_reserved": round(equal / reserved, 3), "makespan_ratio_sequential": round(equal / sequential, 3),
        }
    if "submit" in parts:
        submit = parts["submit"]
        figures |= {"submit_p50_ms": submit["p50_ms"], "submit_p99_ms": submit["p99_ms"], "submit_connections": submit["connected"]}
    if "memory" in parts:
        figures |= {"rss_mb": parts["memory"]["rss_mb"], "rss_growth": parts["memory"]["growth"]}
    if "capacity" in parts:
        c = parts["capacity"]
        figures |= {
            "capacity_completed_share": round(c["completed_with_targets"] / c["runs"], 3),
            "capacity_over_holds": c["most_at_once"] - c["holds"], "capacity_idle_over_round": c["idle_over_round"],
        }
    if "loop" in parts:
        this = parts["loop"]["this"]
        lag, beats = this["loop"] or {}, this["heartbeats"] or {}
        figures |= {
            "loop_lag_p50_ms": lag.get("p50_ms"), "loop_lag_p99_ms": lag.get("p99_ms"), "loop_lag_max_ms": lag.get("max_ms"),
            "heartbeat_rtt_p99_ms": (beats.get("rtt") or {}).get("p99_ms"), "heartbeats_missed": beats.get("missed"),
            "health_p99_ms": this["health"]["p99_ms"],
        }
        if "baseline" in parts["loop"]:
            base = parts["loop"]["baseline"]
            figures |= {"baseline_health_p99_ms": base["health"]["p99_ms"], "health_p99_ratio": parts["loop"]["health_p99_ratio"]}
    return figures | parts | {"settings": dataclasses.asdict(settings), "machine": output.machine()}


def _hows(figures: Figures) -> dict[str, str]:
    hows: dict[str, str] = {}
    if "makespan" in figures:
        ways = ", ".join(f"{k} {v['seconds']:.0f} s ({v['reached']}/{v['runs']} reached)" for k, v in figures["makespan"].items())
        hows["makespan_ratio_reserved"] = ways
        hows["makespan_ratio_sequential"] = f"equal over one testbed run after another ({figures['settings']['devices']} devices)"
    if "submit" in figures:
        submit = figures["submit"]
        hows["submit_p99_ms"] = f"{submit['submits']} submits, {submit['connected']} devices connected, p50 {submit['p50_ms']:.1f} ms"
    if "memory" in figures:
        hows["rss_growth"] = "RSS after runs " + ", ".join(f"{n}: {mb:.0f} MiB" for n, mb in figures["memory"]["rss_mb"].items())
    if "capacity" in figures:
        c = figures["capacity"]
        hows["capacity_completed_share"] = f"{c['runs']} runs of min_plan {c['min_plan']} on {c['devices']} devices"
        hows["capacity_over_holds"] = f"at most {c['most_at_once']} at once; the fleet holds {c['holds']}"
        hows["capacity_idle_over_round"] = "a device's longest idle between tasks, over the longest round"
    if "loop" in figures:
        this = figures["loop"]["this"]
        hows["loop_lag_p99_ms"] = f"{this['runs']} runs on {figures['settings']['devices']} devices; max {figures['loop_lag_max_ms']} ms"
        hows["heartbeats_missed"] = f"heartbeat round trip p99 {figures['heartbeat_rtt_p99_ms']} ms"
    return {name: how for name, how in hows.items() if isinstance(figures.get(name), int | float)}


def _row(name: str, value: float, how: str) -> tuple[str, ...]:
    op, goal = GOALS[name]
    met = {"<": value < goal, "<=": value <= goal, ">=": value >= goal}[op]
    return name, f"{value:,.3f}" if abs(value) < 10 else f"{value:,.1f}", f"{op} {goal:g}", "yes" if met else "[red]no[/]", how
