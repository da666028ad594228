"""`mjfl serve`: one long-running coordinator for a lab, whose devices stay connected between runs.

The service, in the order it starts (docs/lab.md):

1. ``LAB_DIR/lab.db`` (``store.py``): the researchers, the runs and their
   states. On the first start the lab's admin is made and its token written
   to ``LAB_DIR/admin.token`` (mode 0600), shown once.
2. Reconcile, before any device is answered: queued runs stay queued; runs
   admitted or running resume from their checkpoints (``runs.py``).
3. The device server (the lab's ``[server]``, a run's ``[testbed]`` keys)
   and its registry, the lobby where devices wait between runs; emulated
   devices (``--emulate N``) and attached phones (``--phones``) join it.
   The phones are prepared once (``device/phones/attached.py``:
   the app installed with ``--apk``, pointed at the server over ``adb
   reverse``, given its secret and the certificate's pin) and followed for
   the service's whole life: one unplugged and back, or rebooted, is
   pointed again and its app relaunched; one plugged in later is prepared
   and joins. Each phone's log is copied to ``LAB_DIR/phones/`` all along,
   and to ``runs/<run>/phones/`` while that run runs (``device/
   phones/logcat.py``). When the service ends, after the server's bye, the
   app is force-stopped on every phone and the port forwards are taken back.
4. The researchers' API (``api.py``, docs/lab-api.yaml) on ``[api]``, and
   beside it the lab's dashboard (``pages.py``, ``view.py``).
5. Runs are admitted, run side by side, end; until the service is stopped
   (Ctrl-C or SIGTERM: running runs stay ``running`` and resume at the next
   start) or drained (``--drain`` or an admin's call: no run is admitted
   any more, and once the running runs end the service exits).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import functools
import itertools
import multiprocessing
import os
from collections.abc import AsyncIterator, Callable, Iterator
from multiprocessing import resource_tracker
from pathlib import Path

from rich.console import Console

from mjfl import logs
from mjfl.coordinator.dashboard.server import listening
from mjfl.coordinator.engine.occupancy import Occupancy
from mjfl.coordinator.lab.api import LabApi, lab_app
from mjfl.coordinator.lab.config import LabConfig
from mjfl.coordinator.lab.fleet import LabFleet, Lobby
from mjfl.coordinator.lab.loop import RECENT, LoopWatch, summary_ms
from mjfl.coordinator.lab.memory import settle
from mjfl.coordinator.lab.pages import add_pages, dashboard_token
from mjfl.coordinator.lab.runlogs import LAB_LOG, RunLogs
from mjfl.coordinator.lab.runs import RUNS, LabRuns
from mjfl.coordinator.lab.sandbox import Sandbox
from mjfl.coordinator.lab.sharing import FairShare
from mjfl.coordinator.lab.store import LabRun, LabStore
from mjfl.coordinator.lab.view import LabView
from mjfl.coordinator.run.host import DeviceHost, HostOptions, check_emulate, where_to_connect
from mjfl.coordinator.run.preparation import warm
from mjfl.device.emulated.ray_cluster import RayOptions
from mjfl.device.phones.attached import Phones
from mjfl.errors import UserError
from mjfl.jobs.custom import forbid_imports

ADMIN = "admin"  # the researcher made on a lab's first start
ADMIN_TOKEN = "admin.token"


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """What `mjfl serve` starts beside the lab's server."""

    emulate: int = 0  # emulated devices on this machine (or, with ``ray``, on that cluster)
    phones: Phones | None = None  # the phones attached over adb (checked: Phones.attached), for the service's life
    ray: RayOptions | None = None
    drain: bool = False  # finish the runs admitted or running, admit none, exit
    verbose: bool = False

    def __post_init__(self) -> None:
        check_emulate(self.emulate)


async def serve_lab(lab: LabConfig, out_dir: Path, console: Console, options: ServeOptions = ServeOptions()) -> None:
    """Run the lab's service until it is stopped, or drained (see the module docstring)."""
    forbid_imports("the lab's service process")  # a researcher's model runs in its own bounded child only
    out_dir.mkdir(parents=True, exist_ok=True)
    logs.setup(out_dir / LAB_LOG, verbose=options.verbose, stream=None)
    run_logs = RunLogs()
    logs.add_handler(run_logs)
    store = await asyncio.to_thread(LabStore, out_dir / "lab.db")
    with store, _child_work(out_dir / LAB_LOG, options.verbose) as work:
        _first_admin(store, out_dir, console)
        host = DeviceHost(
            lab.server, lab.fleet, seed=lab.seed, section="server",
            options=HostOptions(options.emulate, options.phones, options.ray, out_dir / LAB_LOG, options.verbose),
        )
        async with asyncio.TaskGroup() as group:
            runs = _runs(lab, out_dir, store, host, run_logs, group, console, options, work)
            resumed = await runs.reconcile()  # before any device is answered
            if resumed:
                console.print(f"resuming {', '.join(r.run_id for r in resumed)}", highlight=False)
            if options.drain:
                runs.drain()
            async with host.serving(console):
                console.print(f"lab {out_dir}: {where_to_connect(host.server)}", highlight=False, soft_wrap=True)
                api = LabApi(
                    store, runs, runs.fleet.devices, lambda: list(host.remote.task_log),
                    max_request_kb=lab.limits.max_request_kb,
                )
                view = LabView(store, out_dir / RUNS, lab.limits, draining=lambda: runs.draining)
                async with _api(api, lab, console, view), LoopWatch.watching() as loop:
                    server = host.server
                    api.loop = loop.figures
                    api.heartbeats = lambda: {
                        "rtt": summary_ms(itertools.islice(reversed(server.heartbeat_rtts), RECENT)),
                        "missed": server.heartbeats_missed,
                    }
                    settle()  # up: what the service holds now stays for its life (``memory.py``)
                    keeper = group.create_task(runs.keep(), name="lab admission")
                    await runs.drained()
                    keeper.cancel()
    console.print("drained: no run is left going", highlight=False)


def _runs(
    lab: LabConfig, out_dir: Path, store: LabStore, host: DeviceHost, run_logs: RunLogs, group: asyncio.TaskGroup,
    console: Console, options: ServeOptions, work: concurrent.futures.Executor,
) -> LabRuns:
    """The lab's runs over its one fleet, sharing it by ``limits.share``, saying each change of state;
    with phones, each run's folder gets their log lines while it runs."""
    phones = options.phones
    registry = host.registry
    share = FairShare(devices=lambda: len(registry.connected())) if lab.limits.share == "equal" else None
    occupancy = Occupancy(share)  # reserved devices are never shared
    fleet = LabFleet(
        Lobby(registry), host.remote, occupancy, device_wait_s=lab.server.wait_timeout_s, policy=lab.limits.share,
        share=share, apps=phones.apps if phones is not None else {},
    )
    runs = LabRuns(
        store, lab, out_dir, fleet, run_logs, spawn=group.create_task, said=lambda run: _say(console, run),
        keeps=_phone_lines(phones), work=work, program_cache=lab.programs(out_dir),
        sandbox=lambda limits, what: Sandbox(limits, what=what, log_file=out_dir / LAB_LOG, verbose=options.verbose),
    )
    registry.on_join(lambda device: runs.changed())
    registry.on_leave(lambda device, reason: runs.changed())
    return runs


@contextlib.contextmanager
def _child_work(log_file: Path, verbose: bool) -> Iterator[concurrent.futures.Executor]:
    """The child process where runs prepare (data, partitions, program exports) and write their reports: the
    torch work away from the process whose loop carries every run, and killed at once when the service stops
    (a run's export does not hold up its exit). Its log lines and the libraries' chatter go to ``log_file``."""
    # The processes it spawns share multiprocessing's resource tracker, which speaks of what a killed child left
    # (its semaphores) at the service's end: started here, what it says goes to the log, as third-party lines do.
    with logs.native_output():
        resource_tracker.ensure_running()
    work = concurrent.futures.ProcessPoolExecutor(
        1, mp_context=multiprocessing.get_context("spawn"),
        initializer=functools.partial(_shared_child, log_file, verbose),
    )
    work.submit(warm)  # its imports done before the first run needs it
    try:
        yield work
    finally:
        for process in list(getattr(work, "_processes", {}).values()):
            process.kill()
        work.shutdown(wait=True, cancel_futures=True)  # the killed child reaped, its queue's semaphores let go


def _shared_child(log_file: Path, verbose: bool) -> None:
    """The shared child's start: its log, and never a researcher's model (each has a child of its own)."""
    logs.setup_worker(log_file, verbose=verbose)
    forbid_imports("the lab's shared child process")


def _phone_lines(phones: Phones | None) -> Callable[[Path], contextlib.AbstractContextManager[object]]:
    """What a run's folder gets while the run runs: each phone's log lines, in its ``phones/``."""
    if phones is None:
        return lambda folder: contextlib.nullcontext()
    return lambda folder: phones.logs.cut(folder / logs.PHONE_LOGS)


def _say(console: Console, run: LabRun) -> None:
    reason = f": {run.reason}" if run.reason else ""
    console.print(f"run {run.run_id} ({run.owner}, {run.method}) {run.state}{reason}", highlight=False, soft_wrap=True)


def _first_admin(store: LabStore, out_dir: Path, console: Console) -> None:
    """On a lab's first start, its admin and the admin's token, in a file only its owner reads."""
    if store.researchers():
        return
    token = store.add_researcher(ADMIN, admin=True)
    path = out_dir / ADMIN_TOKEN
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    console.print(
        f"a new lab: its admin's token is in {path} (add researchers with mjfl lab researcher add NAME)",
        highlight=False, soft_wrap=True,
    )


@contextlib.asynccontextmanager
async def _api(api: LabApi, lab: LabConfig, console: Console, view: LabView) -> AsyncIterator[None]:
    """The researchers' API and, beside it, the lab's dashboard (``pages.py``), on ``[api]``'s host and port."""
    app = lab_app(api)
    page = add_pages(app, view, api.runs.fleet, dashboard_token(lab.api.host))
    async with listening(app, lab.api.host, lab.api.port, None) as url:
        if isinstance(url, OSError):
            raise UserError(f"api.port: cannot listen on {lab.api.host} port {lab.api.port}: {url.strerror or url}")
        console.print(f"researchers' API: {url}api/lab (mjfl submit --lab {url.rstrip('/')})", highlight=False, soft_wrap=True)
        # On the terminal only: the address carries the pages' token off a loopback address.
        console.print(f"lab's dashboard: {url.rstrip('/')}{page}", highlight=False, soft_wrap=True)
        if lab.custom_code != "off":
            whose = "its admins'" if lab.custom_code == "admins" else "every researcher's"
            limits = lab.limits
            console.print(
                f"custom_code = {lab.custom_code!r}: the lab runs {whose} own models, each in a process of its own"
                f" ({limits.code_memory_mb} MB, {limits.code_cpu_s:g} CPU s and {limits.code_wall_s:g} s a call;"
                f" its check {limits.code_check_s:g} s), as the service's user: docs/security.md, section 8",
                highlight=False, soft_wrap=True,
            )
        yield
