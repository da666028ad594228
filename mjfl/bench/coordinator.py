"""`mjfl bench coordinator`: what the real-time coordinator costs, on loopback.

Four figures (docs/testbed.md, "Benchmark"), devices always in other
processes than the coordinator so that the coordinator's event loop is
measured honestly:

overhead_fraction
    100 emulated devices (``run_emulated_fleet``, ``mjfl.testkit.echo``: no real
    training, so they fit on two cores) impersonate a steady phone whose
    Formula 4 time is ``round_s`` (``mu`` so large that the exponential part
    vanishes). The real Engine runs a job with C = 1 (every device, every
    round) on a LeNet-5 (28x28) model. For round r, overhead = (round wall
    time - the slowest device's own download + compute + upload) / round wall
    time, where the upload of round r's result is the ``upload_s`` the device
    reports with round r+1 (protocol.md 5.5). Round 1 (provisioning) is a
    warm-up and the last round only supplies uploads; the figure is the mean
    over the rounds in between. What is left is what the coordinator adds:
    encoding and sending every task, receiving and checking every result,
    the event loop, plus the loopback itself and the emulator processes'
    own scheduling (both on the same two cores: an upper bound).
dashboard_cpu_fraction
    The same run again (same fleet, seed and rounds) with the live dashboard
    as ``mjfl testbed run`` serves it (run/driver.py): a ``LiveRun``
    observes the engine and, through a ``FleetRecorder``, the registry's
    joins, leaves and refusals; ``live_dashboard`` serves it on the
    coordinator's event loop and polls the registry for what moves on the
    connections. A page in
    another process (``_page``) holds ``/api/live/events`` open, reading
    every push, and loads ``/api/live`` every second, as pages being opened
    would. The figure is the CPU time the dashboard's own code takes on the
    event loop's thread during ``engine.run``, over its wall time (a
    fraction of one core). ``_Meter`` counts it with ``time.thread_time``
    around every call of the LiveRun (the engine's events, the fleet events,
    the transfer polls, each with the ``Event.set`` that tells the stream)
    and around every step of the web handlers (an aiohttp middleware given
    to ``live_dashboard``: a push's snapshot, JSON and socket write run in
    those steps), never while a handler waits and others run. Not counted: the
    plumbing around those steps (the stream's wake-up through
    ``asyncio.wait`` and its timers; for each ``/api/live`` load aiohttp's
    connection set-up, request parsing, the body's write once the handler
    returned, the close) and garbage collections the snapshots cause
    elsewhere: so the figure is a lower bound. How far below was measured
    once, the dashboard alone on a quiet loop (loop-thread CPU with a page
    minus without, against what the meter counted): the meter sees about
    70% of a push and 30% of a load, missing about 0.25 ms a push and 0.6
    ms a load on the development VM (docs/testbed.md). Why counting rather
    than comparing two runs: on two shared cores the coordinator's CPU over
    a run moves by more than 1% of a core from one run to the next with the
    same settings, so the difference of two runs cannot resolve a 2% goal.
    ``dashboard_cpu_fraction_ab`` is that difference all the same
    (``time.process_time`` per wall second with the dashboard minus without,
    the run of ``overhead_fraction`` being the one without), a cross-check
    with no goal; ``dashboard_pushes`` and ``dashboard_pushed_bytes`` are
    what the page read on the stream (the snapshot before the run included).
broadcast_mb_s
    One task carrying a model of ``broadcast_mb`` MiB to ``broadcast_devices``
    devices at once through ``RemoteFleet.run_task``. Each device stamps the
    moment the whole message has arrived (``time.monotonic``, the same clock
    in every process on Linux); throughput = model bytes x devices / (last
    arrival - first send). The devices answer only after 3 s, so their
    uploads do not share the link with the broadcast. Median of 3 rounds.
heartbeat_p99_ms / connections
    ``connections`` idle devices in two worker processes hold a session
    each; both sides heartbeat every ``heartbeat_s`` (default: the interval
    every run uses, the protocol's default, 5 s; ``--heartbeat-s 0.5`` is a
    stress test at ten times the rate), and the coordinator records the round trip of every heartbeat it
    sends (its send to the ack's arrival, on its own clock) over ``hold_s``
    seconds; p99 of those. ``connections`` is how many sessions were still
    open at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import itertools
import logging
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from rich.console import Console

from mjfl.bench import output
from mjfl.device.protocol.codec import (
    DEFAULT_HEARTBEAT_INTERVAL_S,
    DEFAULT_HEARTBEAT_TIMEOUT_S,
)
from mjfl.errors import UserError

if TYPE_CHECKING:
    from aiohttp.typedefs import Handler, Middleware

    from mjfl.coordinator.config import JobConfig
    from mjfl.coordinator.engine.events import RunEvent
    from mjfl.coordinator.remote.registry import DeviceRegistry
    from mjfl.coordinator.storage.records import RoundRecord

log = logging.getLogger(__name__)

_LOAD_EVERY_S = 1.0  # how often the dashboard's page loads /api/live, as pages opening would

GOALS = {
    "overhead_fraction": ("<=", 0.05),
    "dashboard_cpu_fraction": ("<=", 0.02),
    "broadcast_mb_s": (">=", 200.0),
    "connections": (">=", 1000),
    "heartbeat_p99_ms": ("<", 100.0),
}


def run_coordinator_bench(
    *,
    devices: int = 100,
    rounds: int = 3,
    round_s: float = 3.0,
    broadcast_mb: float = 10.0,
    broadcast_devices: int = 20,
    connections: int = 1000,
    heartbeat_s: float | None = None,
    hold_s: float = 30.0,
    workers: int | None = None,
    json_path: Path | None = None,
    console: Console | None = None,
) -> dict[str, float]:
    """Measure the four figures (module docstring); print a table, write ``json_path``."""
    heartbeat_s = DEFAULT_HEARTBEAT_INTERVAL_S if heartbeat_s is None else heartbeat_s
    if min(devices, rounds, broadcast_devices, connections) < 1 or min(round_s, broadcast_mb, heartbeat_s) <= 0:
        raise UserError(
            "--devices, --rounds, --broadcast-devices and --connections must be >= 1;"
            " --round-s, --broadcast-mb and --heartbeat-s > 0"
        )
    if hold_s <= heartbeat_s:
        raise UserError(f"--hold-s must be longer than --heartbeat-s ({heartbeat_s:g} s): no heartbeat would be measured")
    console = console or Console(stderr=True)
    workers = workers or min(2, os.cpu_count() or 1)
    _raise_open_files_limit()
    figures: dict[str, float] = {}
    details: dict[str, str] = {}
    with output.step(console, f"round overhead with {devices} devices ..."):
        plain = asyncio.run(_engine_run(devices, rounds, round_s, workers))
        figures["overhead_fraction"], details["overhead_fraction"] = _overhead(plain, devices)
    with output.step(console, "the same run with the live dashboard open ..."):
        watched = asyncio.run(_engine_run(devices, rounds, round_s, workers, dashboard=True))
        shares, details["dashboard_cpu_fraction"] = _dashboard_share(plain, watched)
        figures.update(shares)
    with output.step(console, f"broadcast of {broadcast_mb:g} MiB to {broadcast_devices} devices ..."):
        figures["broadcast_mb_s"], details["broadcast_mb_s"] = asyncio.run(
            _broadcast(broadcast_mb, broadcast_devices, workers)
        )
    with output.step(console, f"{connections} idle connections for {hold_s:g} s ..."):
        held, p99, details["connections"] = asyncio.run(_connections(connections, heartbeat_s, hold_s, workers))
    figures["connections"] = held
    figures["heartbeat_p99_ms"] = p99
    details["heartbeat_p99_ms"] = f"heartbeat every {heartbeat_s:g} s"
    console.print(output.table(
        f"coordinator benchmark (loopback, {output.machine()})",
        ("figure", "measured", "goal", "met", "how"),
        (_row(name, figures[name], details.get(name, "")) for name in GOALS),
        left=("how",),
    ))
    output.write(figures, json_path, console)
    return figures


def _row(name: str, value: float, how: str) -> tuple[str, ...]:
    op, goal = GOALS[name]
    met = value <= goal if op == "<=" else value >= goal if op == ">=" else value < goal
    shown = f"{value:.4f}" if name.endswith("_fraction") else f"{value:,.1f}" if isinstance(value, float) else f"{value:,}"
    return name, shown, f"{op} {goal:g}", "yes" if met else "[red]no[/]", how


# -- (a) overhead per round, and the live dashboard's share of the coordinator -------------


@dataclasses.dataclass
class _Page:
    """A page kept open on the live dashboard (``_page``, another process), and what the dashboard cost meanwhile."""

    observer: Callable[[RunEvent], None]  # the LiveRun, metered
    meter: _Meter
    cpu_s: float = 0.0  # the dashboard's CPU time during engine.run (the meter's, on the event loop's thread)
    pushes: int = 0  # events the page read from /api/live/events (the one before the run included)
    pushed_bytes: int = 0
    loads: int = 0  # times it loaded /api/live


@dataclasses.dataclass
class _Run:
    """One engine run over the emulated fleet: its rounds, and the coordinator's time during ``engine.run``."""

    records: list[RoundRecord]
    wall_s: float
    cpu_s: float  # the coordinator process's CPU time (time.process_time: all its threads)
    page: _Page | None


async def _engine_run(devices: int, rounds: int, round_s: float, workers: int, *, dashboard: bool = False) -> _Run:
    """The real Engine over ``devices`` emulated steady phones (module docstring); with ``dashboard``, the live dashboard watched by a page."""
    from mjfl.coordinator.config import JobConfig
    from mjfl.coordinator.engine.clock import RealClock
    from mjfl.coordinator.engine.engine import Engine, EngineJob
    from mjfl.coordinator.engine.events import RoundLog
    from mjfl.coordinator.engine.fleet import JobArtifacts
    from mjfl.coordinator.remote.fleet import RemoteFleet
    from mjfl.coordinator.remote.server import CoordinatorServer
    from mjfl.device.emulated.emulator.fleet import run_emulated_fleet
    from mjfl.ids import DeviceId, JobId
    from mjfl.jobs.base import LocalTraining
    from mjfl.jobs.models import ModelSpec, initial_weights
    from mjfl.profiling.profiles import DeviceProfile
    from mjfl.schedulers.registry import make_scheduler
    from mjfl.testkit.echo import echo_trainer

    spec = ModelSpec("lenet5", (1, 28, 28), 10)
    samples, epochs = 20, 1
    steady = DeviceProfile(DeviceId("bench-steady"), a=round_s / (epochs * samples), mu=1e9)
    rng = np.random.default_rng(0)
    rounds_log = RoundLog()
    async with (
        CoordinatorServer("127.0.0.1", 0) as server,
        run_emulated_fleet(
            server.url, devices, runtime="torch", profiles=[steady], workers=workers,
            id_prefix="bench", make_trainer=echo_trainer,
        ) as fleet,
    ):
        await server.registry.wait_for_devices(devices, timeout=120)
        shards = {
            DeviceId(d): (rng.normal(size=(samples, *spec.input_shape)).astype(np.float32), rng.integers(0, 10, samples))
            for d in fleet.device_ids
        }
        # EchoTrainer never runs a program: a placeholder stands in for the .pte.
        remote = RemoteFleet(server.registry)
        remote.prepare([JobArtifacts(JobId("bench"), spec, b"\0" * 4096, shards)])
        job = EngineJob(
            JobConfig(JobId("bench"), "lenet5", training=LocalTraining(epochs=epochs), fraction=1.0, max_rounds=rounds + 2),
            spec=spec, scheduler=make_scheduler("random", seed=0),
            samples={d: samples for d in shards}, test_x=np.zeros((1, *spec.input_shape), np.float32),
            test_y=np.zeros(1, np.int64), weights=initial_weights(spec, 0),
        )
        watching = _watched_dashboard(server.registry, job.config) if dashboard else contextlib.nullcontext(None)
        async with watching as page:
            observers = [rounds_log] if page is None else [rounds_log, page.observer]
            engine = Engine([job], remote, RealClock(), lambda *a: (0.0, 1.0), run_id="bench", observers=observers)
            counted = 0.0 if page is None else page.meter.cpu_s  # the page's first push: before the run
            cpu, started = time.process_time(), time.monotonic()
            await engine.run()
            wall_s, cpu_s = time.monotonic() - started, time.process_time() - cpu
            if page is not None:
                page.cpu_s = page.meter.cpu_s - counted
    return _Run(sorted(rounds_log.records, key=lambda r: r.round), wall_s, cpu_s, page)


def _overhead(run: _Run, devices: int) -> tuple[float, str]:
    """The mean round overhead over the rounds between the first and the last (module docstring)."""
    fractions = []
    for record, following in itertools.pairwise(run.records[1:]):
        upload = {d.device: d.upload_s or 0.0 for d in following.devices}
        if any(d.status != "ok" for d in record.devices):
            raise RuntimeError(f"round {record.round}: not every device answered")
        own = max((d.download_s or 0.0) + (d.compute_s or 0.0) + upload.get(d.device, 0.0) for d in record.devices)
        fractions.append((record.duration_s - own) / record.duration_s)
        log.info("round %d: wall %.3f s, slowest device %.3f s", record.round, record.duration_s, own)
    walls = [r.duration_s for r in run.records[1:-1]]
    return float(np.mean(fractions)), (
        f"{devices} devices, rounds of {np.mean(walls):.2f} s wall, max {max(fractions):.4f}"
    )


def _dashboard_share(plain: _Run, watched: _Run) -> tuple[dict[str, float], str]:
    """``dashboard_cpu_fraction`` (accounted), its A/B cross-check, and what the page got (module docstring)."""
    page = watched.page
    assert page is not None
    if watched.records[-1].round != plain.records[-1].round:
        raise RuntimeError("the runs with and without the dashboard differ in rounds: no A/B")
    share = page.cpu_s / watched.wall_s
    ab = watched.cpu_s / watched.wall_s - plain.cpu_s / plain.wall_s
    figures = {
        "dashboard_cpu_fraction": share, "dashboard_cpu_fraction_ab": ab,
        "dashboard_pushes": page.pushes, "dashboard_pushed_bytes": page.pushed_bytes,
    }
    return figures, (
        f"{page.pushes} pushes ({page.pushed_bytes / 2**10:,.0f} KiB), {page.loads} loads of /api/live in"
        f" {watched.wall_s:.1f} s; A/B: coordinator CPU {plain.cpu_s / plain.wall_s:.1%} -> {watched.cpu_s / watched.wall_s:.1%}"
        f" of a core ({ab:+.4f})"
    )


class _Meter:
    """CPU time the dashboard takes on the event loop's thread (``time.thread_time``), counted only while its code runs.

    Engine and registry call the LiveRun directly (``calls``); the web
    handlers are coroutines that wait between pushes, so ``steps`` counts each
    of their steps, never the time others run while they wait.
    """

    def __init__(self) -> None:
        self.cpu_s = 0.0

    def calls(self, function: Callable[..., None]) -> Callable[..., None]:
        def metered(*args: Any) -> None:
            started = time.thread_time()
            try:
                function(*args)
            finally:
                self.cpu_s += time.thread_time() - started

        return metered

    def middleware(self) -> Middleware:
        from aiohttp import web

        @web.middleware
        async def metered(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await _Steps(handler(request), self)  # type: ignore[no-any-return]

        return metered


class _Steps:
    """Awaits ``coroutine``, adding the CPU time of each of its steps (from a resume to its next wait) to ``meter``."""

    def __init__(self, coroutine: Coroutine[Any, Any, Any], meter: _Meter) -> None:
        self._coroutine = coroutine
        self._meter = meter

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self._coroutine.__await__()
        step: Callable[[Any], Any] = inner.send
        value: Any = None
        while True:
            started = time.thread_time()
            try:
                waiting = step(value)
            except StopIteration as done:
                return done.value
            finally:
                self._meter.cpu_s += time.thread_time() - started
            try:
                value, step = (yield waiting), inner.send
            except GeneratorExit:
                inner.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - the task's cancellation, say: the coroutine's to handle
                value, step = exc, inner.throw


@contextlib.asynccontextmanager
async def _watched_dashboard(registry: DeviceRegistry, config: JobConfig) -> AsyncIterator[_Page]:
    """The live dashboard as ``mjfl testbed run`` serves it (driver.py), metered, with a page open on it in another process.

    Yields once the page has read the first push; when the block ends the
    page stops loading, the dashboard closes its stream, and the page's
    counts fill the ``_Page``.
    """
    from mjfl.coordinator.dashboard.live import LiveRun
    from mjfl.coordinator.dashboard.server import live_dashboard
    from mjfl.coordinator.run.recorder import FleetRecorder
    from mjfl.coordinator.storage.records import JobInfo, RunInfo

    meter = _Meter()
    info = RunInfo("bench", "random", "real", 0, "{}", datetime.datetime.now(datetime.UTC).isoformat())
    job = JobInfo("bench", config.name, config.model, config.dataset, None, None, config.max_rounds, "bench")
    live = LiveRun(info, [job], epochs={str(config.name): config.training.epochs})
    # The registry's word reaches it as in a run (FleetRecorder; no database here), and the
    # server's polls of what moves on the connections are metered like every other call.
    started = time.monotonic()
    FleetRecorder(info.run_id, lambda: time.monotonic() - started, registry, also=meter.calls(live.fleet)).present()
    live.poll = meter.calls(live.poll)  # type: ignore[method-assign]
    page = _Page(meter.calls(live), meter)
    ctx = multiprocessing.get_context("spawn")
    stop, ready = ctx.Event(), ctx.Event()
    counts: multiprocessing.queues.Queue[tuple[int, int, int]] = ctx.Queue()
    async with live_dashboard(
        None, live, port=0, transfer=registry.transfer, middlewares=[meter.middleware()]
    ) as url:
        if url is None:
            raise RuntimeError("the dashboard could not listen on loopback")
        reader = ctx.Process(target=_page, args=(url, _LOAD_EVERY_S, stop, ready, counts), daemon=True)
        reader.start()
        try:
            if not await asyncio.to_thread(ready.wait, 60):
                raise RuntimeError("the page never read the dashboard's first push")
            yield page
        finally:
            stop.set()
    page.pushes, page.pushed_bytes, page.loads = await asyncio.to_thread(counts.get, True, 30)
    await asyncio.to_thread(reader.join, 10)


def _page(
    url: str, load_every_s: float, stop: multiprocessing.synchronize.Event, ready: multiprocessing.synchronize.Event,
    out: multiprocessing.queues.Queue[tuple[int, int, int]],
) -> None:
    """A page open on the live dashboard: reads every push of its event stream until the stream ends, and loads ``/api/live`` every ``load_every_s`` until ``stop``."""
    import threading
    import urllib.request

    loads = [0]

    def load() -> None:
        while not stop.wait(load_every_s):
            try:
                with urllib.request.urlopen(url + "api/live", timeout=30) as response:
                    response.read()
            except OSError:
                return  # the dashboard closed meanwhile
            loads[0] += 1

    pushes = pushed = 0
    with urllib.request.urlopen(url + "api/live/events", timeout=60) as stream:
        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        for line in stream:  # until the dashboard closes the stream
            pushed += len(line)
            if line.startswith(b"data: "):
                pushes += 1
                ready.set()
    loader.join()
    out.put((pushes, pushed, loads[0]))


# -- (b) broadcast throughput -------------------------------------------------------------


async def _broadcast(megabytes: float, devices: int, workers: int) -> tuple[float, str]:
    from mjfl.coordinator.engine.fleet import JobArtifacts, Task
    from mjfl.coordinator.remote.fleet import RemoteFleet
    from mjfl.coordinator.remote.server import CoordinatorServer
    from mjfl.ids import DeviceId, JobId
    from mjfl.jobs.base import LocalTraining
    from mjfl.jobs.models import ModelSpec

    spec = ModelSpec("lenet5", (1, 16, 16), 10)
    total = int(megabytes * 2**20) // 4
    # A model-like set of tensors: one large, a few small, as in a CNN's state dict.
    sizes = [total - 3 * 1024, 1024, 1024, 1024]
    weights = {f"layer{k}.weight": np.ones(n, np.float32) for k, n in enumerate(sizes)}
    model_bytes = sum(w.nbytes for w in weights.values())
    ids = [f"bcast-{k}" for k in range(devices)]
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    arrivals: multiprocessing.queues.Queue[list[tuple[str, int, float]]] = ctx.Queue()
    rng = np.random.default_rng(0)
    rates = []
    async with CoordinatorServer("127.0.0.1", 0) as server:
        processes = [
            ctx.Process(target=_arrival_worker, args=(server.url, ids[w::workers], stop, arrivals), daemon=True)
            for w in range(workers)
        ]
        for p in processes:
            p.start()
        try:
            await server.registry.wait_for_devices(devices, timeout=120)
            shards = {DeviceId(d): (rng.normal(size=(4, *spec.input_shape)).astype(np.float32), rng.integers(0, 10, 4)) for d in ids}
            remote = RemoteFleet(server.registry)
            remote.prepare([JobArtifacts(JobId("bcast"), spec, b"\0" * 4096, shards)])
            starts = {}
            for round_ in range(1, 4):
                task = Task(JobId("bcast"), round_, weights, LocalTraining(epochs=1, batch_size=4, lr=0.0))
                starts[round_] = time.monotonic()
                await asyncio.gather(*(remote.run_task(DeviceId(d), task) for d in ids))
        finally:
            stop.set()
            seen = []
            for _ in processes:
                seen.extend(await asyncio.to_thread(arrivals.get, True, 30))
            for p in processes:
                await asyncio.to_thread(p.join, 10)
    for round_, started in starts.items():
        last = max(at for _, r, at in seen if r == round_)
        rates.append(model_bytes * devices / (last - started) / 2**20)
    return float(np.median(rates)), f"{model_bytes / 2**20:.1f} MiB x {devices} devices, rounds {', '.join(f'{r:.0f}' for r in rates)} MiB/s"


def _arrival_worker(
    url: str, ids: list[str], stop: multiprocessing.synchronize.Event,
    out: multiprocessing.queues.Queue[list[tuple[str, int, float]]],
) -> None:
    """Emulated devices that report when each task arrived (``time.monotonic``)."""
    from mjfl.device.emulated.emulator.device import EmulatedDevice
    from mjfl.device.emulated.emulator.lane import TrainingLane
    from mjfl.ids import DeviceId
    from mjfl.profiling.profiles import DeviceProfile
    from mjfl.testkit.echo import echo_trainer

    # Answer 3 s after the task arrived: after every device has its copy.
    wait = DeviceProfile(DeviceId("bench-wait"), a=3.0 / 4, mu=1e9)

    async def main() -> list[tuple[str, int, float]]:
        lane = TrainingLane(echo_trainer)
        devices = [EmulatedDevice(url, d, runtime="torch", profile=wait, lane=lane) for d in ids]

        async def watch() -> None:
            while not stop.is_set():
                await asyncio.sleep(0.05)
            for d in devices:
                d.stop()

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(watch())
                for d in devices:
                    group.create_task(d.run())
        finally:
            lane.close()
        return [(d.device_id, r.round, r.received_at) for d in devices for r in d.history]

    # asyncio's loop.time() is time.monotonic(): comparable with the coordinator's.
    out.put(asyncio.run(main()))


# -- (c) idle connections and heartbeats ----------------------------------------------------


async def _connections(count: int, heartbeat_s: float, hold_s: float, workers: int) -> tuple[int, float, str]:
    from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
    from mjfl.device.emulated.emulator.backoff import Backoff
    from mjfl.device.emulated.emulator.fleet import run_emulated_fleet
    from mjfl.testkit.echo import echo_trainer

    timeout = max(DEFAULT_HEARTBEAT_TIMEOUT_S, 6 * heartbeat_s)
    settings = ServerSettings(heartbeat_interval=heartbeat_s, heartbeat_timeout=timeout)
    async with (
        CoordinatorServer("127.0.0.1", 0, settings=settings) as server,
        run_emulated_fleet(
            server.url, count, runtime="torch", workers=workers, id_prefix="idle",
            make_trainer=echo_trainer, backoff=Backoff(initial=0.5, maximum=5.0),
        ),
    ):
        started = time.monotonic()
        await server.registry.wait_for_devices(count, timeout=180)
        connect_s = time.monotonic() - started
        await asyncio.sleep(2.0)  # let the connection storm settle
        server.heartbeat_rtts.clear()
        cpu = time.process_time()
        await asyncio.sleep(hold_s)
        cpu = time.process_time() - cpu
        rtts = np.array(server.heartbeat_rtts) * 1000
        held = len(server.registry.connected())
    if len(rtts) == 0:
        raise RuntimeError("no heartbeat came back")
    p99 = float(np.percentile(rtts, 99))
    return held, p99, (
        f"{len(rtts)} heartbeats, median {np.median(rtts):.1f} ms; coordinator CPU"
        f" {cpu / hold_s:.0%} of a core; all connected in {connect_s:.1f} s"
    )


def _raise_open_files_limit() -> None:
    """A thousand sockets need a thousand descriptors, and the worker processes inherit the limit."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = 4096 if hard == resource.RLIM_INFINITY else min(hard, max(soft, 4096))
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    except (ImportError, ValueError, OSError) as exc:
        log.warning("could not raise the open-files limit: %s", exc)
