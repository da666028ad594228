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
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from rich.console import Console

from mjfl import logs
from mjfl.coordinator.config import RunConfig
from mjfl.coordinator.dashboard.server import listening
from mjfl.coordinator.engine.occupancy import FairShare, Occupancy
from mjfl.coordinator.lab.api import LabApi, lab_app
from mjfl.coordinator.lab.config import LabConfig
from mjfl.coordinator.lab.fleet import Lobby
from mjfl.coordinator.lab.pages import add_pages, dashboard_token
from mjfl.coordinator.lab.runlogs import RunLogs
from mjfl.coordinator.lab.runs import RUNS, LabFleet, LabRuns
from mjfl.coordinator.lab.store import LabRun, LabStore
from mjfl.coordinator.lab.view import LabView
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.registry import DeviceRegistry
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.coordinator.run.preparation import fleet_profiles
from mjfl.coordinator.run.testbed import (
    RemoteDevices,
    admission,
    hand_credentials,
    where_to_connect,
)
from mjfl.device.emulated.emulator.fleet import (
    EmulatedFleet,
    default_id_prefix,
    run_emulated_fleet,
)
from mjfl.device.phones.attached import Phones
from mjfl.device.protocol.credentials import new_secret
from mjfl.errors import UserError
from mjfl.profiling.planning import PlanningProfiles
from mjfl.profiling.profiles import load_profiles

ADMIN = "admin"  # the researcher made on a lab's first start
ADMIN_TOKEN = "admin.token"


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """What `mjfl serve` starts beside the lab's server."""

    emulate: int = 0  # emulated devices on this machine
    phones: Phones | None = None  # the phones attached over adb (checked: Phones.attached), for the service's life
    drain: bool = False  # finish the runs admitted or running, admit none, exit
    verbose: bool = False


async def serve_lab(lab: LabConfig, out_dir: Path, console: Console, options: ServeOptions = ServeOptions()) -> None:
    """Run the lab's service until it is stopped, or drained (see the module docstring)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    logs.setup(out_dir / "lab.log", verbose=options.verbose, stream=None)
    run_logs = RunLogs()
    logs.add_handler(run_logs)
    with LabStore(out_dir / "lab.db") as store:
        _first_admin(store, out_dir, console)
        profiles = load_profiles(lab.fleet.profiles) if lab.fleet.profiles is not None else []
        registry = DeviceRegistry(PlanningProfiles(profiles))
        settings, limits = RemoteDevices.limits(lab.server)
        async with asyncio.TaskGroup() as group, contextlib.AsyncExitStack() as phones_served:
            remote = RemoteFleet(registry, **limits)
            runs = _runs(lab, out_dir, store, registry, remote, run_logs, group, console, options.phones)
            resumed = runs.reconcile()  # before any device is answered
            if resumed:
                console.print(f"resuming {', '.join(r.run_id for r in resumed)}", highlight=False)
            if options.drain:
                runs.drain()
            async with CoordinatorServer(lab.server.host, lab.server.port, registry=registry, settings=settings,
                                         run_secrets=(own := _own_secrets(settings, options)), port_setting="server.port") as server:
                console.print(f"lab {out_dir}: {where_to_connect(server)}", highlight=False, soft_wrap=True)
                if settings.keys is not None or settings.token is not None:
                    console.print(admission(server), highlight=False, soft_wrap=True)
                if options.phones is not None:  # left after the server's bye, so that the apps hear it first
                    await _serve_phones(options.phones, server, registry, lab, phones_served)
                api = LabApi(
                    store, runs, runs.fleet.devices, lambda: list(remote.task_log), max_request_kb=lab.limits.max_request_kb
                )
                view = LabView(store, out_dir / RUNS, lab.limits, draining=lambda: runs.draining)
                async with _api(api, lab, console, view), _emulated(lab, out_dir, server, own, options, console):
                    keeper = group.create_task(runs.keep(), name="lab admission")
                    await runs.drained()
                    keeper.cancel()
        console.print("drained: no run is left going", highlight=False)


def _runs(
    lab: LabConfig, out_dir: Path, store: LabStore, registry: DeviceRegistry, remote: RemoteFleet, run_logs: RunLogs,
    group: asyncio.TaskGroup, console: Console, phones: Phones | None,
) -> LabRuns:
    """The lab's runs over its one fleet, sharing it by ``limits.share``, saying each change of state;
    with ``phones``, each run's folder gets their log lines while it runs."""
    lobby = Lobby(registry)
    holder: list[LabRuns] = []
    share = FairShare(devices=lambda: len(registry.connected()), runs=lambda: holder[0].running())
    occupancy = Occupancy(share if lab.limits.share == "equal" else None)  # reserved devices are never shared
    fleet = LabFleet(
        lobby, remote, occupancy, device_wait_s=lab.server.wait_timeout_s, policy=lab.limits.share,
        apps=phones.apps if phones is not None else {},
    )
    runs = LabRuns(
        store, lab, out_dir, fleet, run_logs, spawn=group.create_task, said=lambda run: _say(console, run),
        keeps=_phone_lines(phones),
    )
    holder.append(runs)
    registry.on_join(lambda device: runs.changed())
    registry.on_leave(lambda device, reason: runs.changed())
    return runs


async def _serve_phones(
    phones: Phones, server: CoordinatorServer, registry: DeviceRegistry, lab: LabConfig, served: contextlib.AsyncExitStack
) -> None:
    """The attached phones pointed at ``server`` until ``served`` closes; an app whose connection was lost
    (not ended by a bye from either side) is started again if it no longer runs (``Phones.lost``), and the
    leaving's reason says how the app ended, when the phone's log says (``Phones.explain``)."""
    hand_credentials(phones, server, lab.server.tls_cert)
    await served.enter_async_context(phones.serving(server.port))
    # A phone's device id is its serial (Phones._launch). A crash or a kill ends the connection
    # with no bye: the server says "connection lost"; a bye (the app's, or the server's at its
    # shutdown) is meant and is not undone.
    registry.on_leave(lambda device, reason: phones.lost(device) if reason.startswith("connection lost") else None)
    server.explain_loss = phones.explain  # the leaving's event says how the app ended, when its log says


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


def _own_secrets(settings: ServerSettings, options: ServeOptions) -> dict[str, str]:
    """Secrets for the emulated devices the service starts itself, where the server checks credentials."""
    checked = settings.keys is not None or settings.token is not None
    prefix = default_id_prefix()
    return {f"{prefix}-{i}": new_secret() for i in range(options.emulate)} if checked else {}


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
        yield


@contextlib.asynccontextmanager
async def _emulated(
    lab: LabConfig, out_dir: Path, server: CoordinatorServer, secrets: dict[str, str], options: ServeOptions,
    console: Console,
) -> AsyncIterator[EmulatedFleet | None]:
    """``--emulate N`` emulated devices that impersonate the lab's fleet, for the service's whole life."""
    if not options.emulate:
        yield None
        return
    fleet = dataclasses.replace(lab.fleet, size=options.emulate)
    profiles = fleet_profiles(RunConfig(jobs=(), fleet=fleet, seed=lab.seed))
    emulated = run_emulated_fleet(
        server.url, options.emulate, runtime=lab.fleet.runtime, profiles=profiles, dropout=lab.fleet.dropout,
        workers=lab.fleet.workers, seed=lab.seed, log_file=out_dir / "lab.log", verbose=options.verbose,
        id_prefix=default_id_prefix(), secrets=secrets, ca=lab.server.tls_cert,
    )
    console.print(f"started {emulated.describe()} ({lab.fleet.runtime}) for {server.url}", highlight=False)
    try:
        yield emulated
    finally:
        await emulated.aclose()
