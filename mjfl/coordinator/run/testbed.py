"""The testbed's devices: whatever connects to the coordinator's server, on the wall clock.

`mjfl testbed run` and `mjfl profile` train on these: phones and emulated
devices elsewhere connect to the server (``coordinator/remote/server.py``,
protocol v1), attached phones this command points at it over adb join them
(``phones``, ``device/phones/attached.py``), and so do ``emulate``
emulated devices it starts itself (the embedded default: no phone needed).
The server registers them in a device registry (``remote/registry.py``),
over which ``RemoteFleet`` (``remote/fleet.py``) is the engine's fleet; the
registry also tells the run driver when devices come and go. The fleet is
ready once enough devices are there; leaving it (done, an error or Ctrl-C)
stops the emulated devices, shuts the server down, saying bye to every
device, then force-stops the app on the phones and takes their port
forwards back.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import socket
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console

from mjfl.coordinator.config import RunConfig, TestbedConfig
from mjfl.coordinator.engine.clock import RealClock
from mjfl.coordinator.remote.certs import certificate_sha256
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.keys import default_key_store
from mjfl.coordinator.remote.registry import DeviceRegistry
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.coordinator.run.driver import Output, ReadyFleet
from mjfl.coordinator.run.preparation import fleet_profiles
from mjfl.coordinator.storage.records import RunMode
from mjfl.device.emulated.emulator.fleet import (
    counted,
    default_id_prefix,
    run_emulated_fleet,
)
from mjfl.device.emulated.ray_cluster import (
    RayOptions,
    connect,
    emulator_workers,
    node_count,
    this_node_address,
)
from mjfl.device.phones.attached import Phones
from mjfl.device.protocol.credentials import new_secret
from mjfl.errors import ConfigError, RunError, UserError
from mjfl.ids import DeviceId
from mjfl.profiling.planning import PlanningProfiles
from mjfl.profiling.profiles import DeviceProfile, load_profiles

T = TypeVar("T")


class RemoteDevices:
    """Devices over the network, attached ``phones``, and ``emulate`` emulated ones started here, in real time.

    With ``ray``, the ``emulate`` devices run as Ray actors of that cluster
    (one CPU per worker and its training lane) instead of local processes.

    The fleet is ready when ``wanted`` devices are connected (default: the
    config's ``testbed.min_devices``, else the phones prepared plus
    ``emulate``, else the fleet size), or, with ``only``, when exactly those
    device ids are.
    """

    mode: RunMode = "real"
    kind = "testbed"

    def __init__(
        self,
        config: RunConfig,
        output: Output,
        *,
        emulate: int = 0,
        wanted: int | None = None,
        only: Sequence[str] = (),
        phones: Phones | None = None,
        ray: RayOptions | None = None,
    ) -> None:
        if emulate < 0:
            raise UserError("--emulate must be >= 0")
        if config.fleet.stand_ins > 0:
            raise ConfigError(
                "fleet.stand_ins",
                "stand-ins exist in simulated fleets only (mjfl simulate): a testbed's devices, phones or"
                " emulated, train every task they are given",
            )
        self.config = config
        self.output = output
        self.emulate = emulate
        self.phones = phones
        self.ray = ray
        self.only = [DeviceId(d) for d in only]
        self._wanted = wanted
        self._phones_ready: list[str] = []
        self.wanted = self._count(len(phones.serials) if phones is not None else 0)

    def _count(self, phones: int) -> int:
        tb, fleet = self.config.testbed, self.config.fleet
        return len(self.only) or self._wanted or tb.min_devices or (self.emulate + phones) or fleet.size or 1

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(main)

    @staticmethod
    def limits(tb: TestbedConfig) -> tuple[ServerSettings, dict[str, Any]]:
        """The server's settings and the remote fleet's limits, as the config's ``[testbed]`` gives them."""
        settings = ServerSettings(
            heartbeat_interval=tb.heartbeat_interval_s, heartbeat_timeout=tb.heartbeat_timeout_s,
            max_message_bytes=None if tb.max_message_mb is None else int(tb.max_message_mb * 2**20),
            keys=key_store(tb), token=tb.token, tls_cert=tb.tls_cert, tls_key=tb.tls_key,
            handshake_timeout=tb.handshake_timeout_s,
            max_connections_per_address=tb.max_connections_per_address,
        )
        return settings, {"task_timeout": tb.task_timeout_s, "max_tasks_in_flight": tb.max_tasks_in_flight}

    @contextlib.asynccontextmanager
    async def fleet(self) -> AsyncIterator[ReadyFleet]:
        config, tb, console = self.config, self.config.testbed, self.output.console
        settings, limits = self.limits(tb)
        lab = load_profiles(config.fleet.profiles) if config.fleet.profiles is not None else []
        registry = DeviceRegistry(PlanningProfiles(lab))
        remote = RemoteFleet(registry, **limits)
        # Devices this run starts itself prove secrets it draws for them, kept in memory only.
        checked = settings.keys is not None or settings.token is not None
        prefix = default_id_prefix()
        own = {f"{prefix}-{i}": new_secret() for i in range(self.emulate)} if checked else {}
        # The phones' serving ends after the server's bye, so they hear it before their port forward goes.
        async with contextlib.AsyncExitStack() as stack, CoordinatorServer(
            tb.host, tb.port, registry=registry, settings=settings, run_secrets=own
        ) as server:
            if checked:
                console.print(admission(server), highlight=False, soft_wrap=True)
            impersonated: dict[str, DeviceProfile] = {}
            emulated = None
            try:
                if self.phones is not None:
                    hand_credentials(self.phones, server, tb.tls_cert)
                    self._phones_ready = await stack.enter_async_context(self.phones.serving(server.port))
                    server.explain_loss = self.phones.explain  # a lost phone's event says how its app ended
                    self.wanted = self._count(len(self._phones_ready))
                if self.emulate:
                    # Emulated devices impersonate the config's fleet (a profile file,
                    # or the synthetic generator), so rounds are as heterogeneous as
                    # the devices they stand in for.
                    fleet = dataclasses.replace(config.fleet, size=self.emulate)
                    profiles = fleet_profiles(dataclasses.replace(config, fleet=fleet))
                    url, workers, context = server.url, config.fleet.workers, None
                    if self.ray is not None:
                        stack.enter_context(connect(self.ray))
                        url, (workers, context) = self._cluster_url(server), emulator_workers(config.fleet.runtime, workers)
                    emulated = run_emulated_fleet(
                        url, self.emulate, runtime=config.fleet.runtime,  # type: ignore[arg-type]
                        profiles=profiles, dropout=config.fleet.dropout, workers=workers,
                        seed=config.seed, log_file=self.output.log_file, verbose=self.output.verbose,
                        id_prefix=prefix, secrets=own, ca=tb.tls_cert,  # our own certificate, pinned
                        context=context,
                    )
                    impersonated = {d: dataclasses.replace(p, device_id=d) for d, p in emulated.impersonated.items()}  # type: ignore[type-var]
                    workers_are = ("Ray actor", "Ray actors") if self.ray is not None else ("process", "processes")
                    console.print(f"started {emulated.describe(*workers_are)} ({config.fleet.runtime}) for {server.url}")
                await self._wait(server, console)
                connected = registry.connected()
                devices = self.only or sorted(connected)
                console.print(f"{counted(len(connected), 'device')} connected to {server.url}")
                yield ReadyFleet(
                    remote, RealClock(), list(devices),
                    # Phones that drop out may come back.
                    device_wait_s=tb.wait_timeout_s,
                    hardware={d: dict(connected[d].hello.hardware) for d in devices if d in connected},
                    impersonated=impersonated,
                    members=registry,
                    apps=self.phones.apps if self.phones is not None else {},
                )
            finally:
                if emulated is not None:
                    await emulated.aclose()

    def _cluster_url(self, server: CoordinatorServer) -> str:
        """The server's address as devices on every node of the Ray cluster reach it."""
        if self.config.testbed.host in ("", "0.0.0.0", "::"):
            return f"ws://{this_node_address()}:{server.port}"
        if node_count() > 1:
            raise ConfigError(
                "testbed.host",
                f"{self.config.testbed.host!r} is not reachable from the Ray cluster's other nodes:"
                " listen on 0.0.0.0 to host emulated devices on a cluster (docs/scale.md)",
            )
        return server.url

    async def _wait(self, server: CoordinatorServer, console: Console) -> None:
        timeout = self.config.testbed.wait_timeout_s
        wanted = ", ".join(self.only) if self.only else f"{self.wanted} devices"
        console.print(
            f"waiting up to {timeout:g} s for {wanted}: {where_to_connect(server)}", highlight=False, soft_wrap=True
        )
        arrivals = Arrivals(console)
        with console.status(f"waiting for {self.wanted} devices on {server.url} ...") as status:

            def progress(connected: int, needed: int) -> None:
                status.update(f"waiting for devices on {server.url}: {connected}/{needed} connected")
                arrivals.say(connected, needed)

            if not self.only:
                try:
                    await server.registry.wait_for_devices(self.wanted, timeout=timeout, progress=progress)
                except RunError as exc:
                    silent = [p for p in self._phones_ready if p not in server.registry.connected()]
                    if silent and self.phones is not None:
                        raise RunError(
                            f"{exc} on {server.url}; the app was started on {', '.join(silent)} but did not"
                            f" connect: see {self.phones.log_dir}/ and docs/phones.md, troubleshooting"
                        ) from None
                    raise RunError(
                        f"{exc} on {server.url}; connect phones or emulated devices"
                        f" (mjfl devices emulate --url {server.url} --count N), start some here with"
                        " --emulate N, or wait longer (testbed.wait_timeout_s)"
                    ) from None
                return
            try:
                await server.registry.wait_until(
                    lambda connected: all(d in connected for d in self.only), timeout,
                    progress=progress, needed=len(self.only),
                )
            except RunError:
                missing = [d for d in self.only if d not in server.registry.connected()]
                raise UserError(f"--device-ids: {', '.join(missing)} did not connect within {timeout:g} s") from None


def hand_credentials(phones: Phones, server: CoordinatorServer, tls_cert: Path | None) -> None:
    """What the app on each phone is given at its launch: where the server checks credentials, the
    secret it proves (the enrolled one, else one drawn for this server); with ``tls_cert``, its pin."""
    if server.settings.keys is not None or server.settings.token is not None:
        keys = server.keys
        phones.secret_for = lambda serial: (keys.secret(serial) if keys else None) or (
            server.run_secrets.setdefault(serial, new_secret())  # over USB only: adb is trusted
        )
    phones.pin = certificate_sha256(tls_cert) if tls_cert is not None else None


def where_to_connect(server: CoordinatorServer) -> str:
    """The address devices connect to; listening on every address, this machine's as others reach it."""
    if server.host not in ("", "0.0.0.0", "::"):
        return f"devices connect to {server.url}"
    scheme = server.url.split("://")[0]
    return (
        f"devices on this machine connect to {server.url}, others to {scheme}://{_lan_address()}:{server.port}"
        " (this machine's address on its network; listening on every address)"
    )


def _lan_address() -> str:
    """This machine's address on the network of its default route (the hostname where there is none).

    Connecting a UDP socket sends nothing: it only picks the route, and with it the local address.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1 (RFC 5737): never a real peer
            return str(probe.getsockname()[0])
        except OSError:
            return socket.gethostname()


class Arrivals:
    """Lines that say how many devices have connected so far, where the console is no terminal (a terminal
    shows a status line instead): one when the count changes, at most one every ``every_s`` seconds."""

    def __init__(self, console: Console, every_s: float = 5.0) -> None:
        self.console = console
        self.every_s = every_s
        self._said_at = -math.inf

    def say(self, connected: int, needed: int) -> None:
        now = time.monotonic()
        if self.console.is_terminal or not 0 < connected < needed or now - self._said_at < self.every_s:
            return
        self._said_at = now
        self.console.print(f"connected so far: {connected} of {needed} devices", highlight=False)


def admission(server: CoordinatorServer) -> str:
    """Whom a coordinator that checks credentials admits: the enrolled devices (how many, where), the token."""
    admitted = []
    if server.keys is not None:
        admitted.append(f"the devices enrolled in {server.keys.path} ({server.keys.enrolled()}; mjfl devices keys)")
    if server.settings.token is not None:
        admitted.append("devices with the shared token (testbed.token)")
    return (
        f"admitting only {' or '.join(admitted)}, besides the devices this run starts itself; enroll another"
        " with mjfl devices enroll NAME (docs/security.md)"
    )


def key_store(tb: TestbedConfig) -> Path | None:
    """The enrolled devices' key store: ``testbed.keys``, else the user's when it exists (else none: no enrollment)."""
    if tb.keys is not None:
        return tb.keys
    default = default_key_store()
    return default if default.is_file() else None
