"""The device host: everything that brings a testbed's or a lab's devices up, once, for both.

`mjfl testbed run` (``testbed.py: RemoteDevices``) and `mjfl serve`
(``lab/service.py``) host their devices the same way, with ``DeviceHost``:

1. made: the device registry (``remote/registry.py``), with the profiles of
   ``fleet.profiles``; the remote fleet over it (``remote/fleet.py``), the
   engine's ``Fleet``; secrets for the emulated devices this process starts
   itself where the server checks credentials (kept in memory only);
2. ``serving()``: the WebSocket server (``remote/server.py``) on the
   section's host and port; the attached phones (``--phones``) prepared and
   pointed at it over adb, given their secret and the certificate's pin;
   ``emulate`` emulated devices that impersonate the fleet, local worker
   processes or, with ``ray``, Ray actors;
3. on exit: the emulated devices stopped, the server's bye to every device,
   then the app force-stopped on every phone and its port forward taken back
   (the phones hear the bye first).

Its policies, decided here once for every command: a phone whose app's
connection was lost (no bye from either side) has its app started again if it
no longer runs (``Phones.lost``); the leaving's reason says how the app ended
when the phone's log says (``Phones.explain``); a host listening on every
address is told as this machine's address on its network; a server that
checks credentials says whom it admits.

``section`` names the table its settings come from (``testbed`` for a run,
``server`` for a lab), so that every message names the setting to change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl.addresses import listens_everywhere
from mjfl.coordinator.config import FleetConfig, RunConfig, TestbedConfig
from mjfl.coordinator.remote.certs import certificate_sha256
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.keys import default_key_store
from mjfl.coordinator.remote.registry import DeviceRegistry
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.coordinator.run.preparation import fleet_profiles
from mjfl.device.emulated.emulator.fleet import EmulatedFleet, default_id_prefix, run_emulated_fleet
from mjfl.device.emulated.ray_cluster import (
    RayOptions,
    connect,
    emulator_workers,
    node_count,
    this_node_address,
)
from mjfl.device.phones.attached import Phones
from mjfl.device.protocol.credentials import new_secret
from mjfl.errors import ConfigError
from mjfl.profiling.planning import PlanningProfiles
from mjfl.profiling.profiles import DeviceProfile, load_profiles


@dataclass(frozen=True)
class HostOptions:
    """What a command starts or attaches beside the server."""

    emulate: int = 0  # emulated devices started here
    phones: Phones | None = None  # the phones attached over adb (checked: Phones.attached)
    ray: RayOptions | None = None  # the emulated devices as Ray actors of that cluster
    log_file: Path | None = None  # where the emulated devices' processes log
    verbose: bool = False

    def __post_init__(self) -> None:
        check_emulate(self.emulate)


def check_emulate(count: int) -> None:
    """How many emulated devices a command may start: none or more (a ConfigError naming ``emulate``)."""
    if count < 0:
        raise ConfigError("emulate", f"the number of emulated devices must be >= 0, not {count}")


class DeviceHost:
    """A command's devices, hosted (see the module docstring); ``serving()`` brings them up."""

    def __init__(
        self, settings: TestbedConfig, fleet: FleetConfig, *, seed: int, options: HostOptions = HostOptions(),
        section: str = "testbed",
    ) -> None:
        self.config, self.fleet_config, self.seed, self.options, self.section = settings, fleet, seed, options, section
        self.settings, limits = server_settings(settings)
        profiles = load_profiles(fleet.profiles) if fleet.profiles is not None else []
        self.registry = DeviceRegistry(PlanningProfiles(profiles))
        self.remote = RemoteFleet(self.registry, **limits)
        # Devices this process starts itself prove secrets drawn for them, kept in memory only.
        prefix = default_id_prefix()
        self.own = {f"{prefix}-{i}": new_secret() for i in range(options.emulate)} if self.checks_credentials else {}
        self._server: CoordinatorServer | None = None
        self.emulated: EmulatedFleet | None = None
        self.impersonated: dict[str, DeviceProfile] = {}  # each emulated device's own profile, by device id
        self.phones_ready: list[str] = []  # the phones the app was started on

    @property
    def checks_credentials(self) -> bool:
        return self.settings.keys is not None or self.settings.token is not None

    @property
    def server(self) -> CoordinatorServer:
        if self._server is None:
            raise AssertionError("the device host is not serving yet")
        return self._server

    @property
    def apps(self) -> dict[str, str | None]:
        """Each attached phone's installed app (``Phones.apps``), kept with a run's provenance."""
        return dict(self.options.phones.apps) if self.options.phones is not None else {}

    @contextlib.asynccontextmanager
    async def serving(self, console: Console) -> AsyncIterator[DeviceHost]:
        """The server, the phones and the emulated devices, until the block ends (see the module docstring)."""
        c = self.config
        # The phones' serving ends after the server's bye, so they hear it before their port forward goes.
        async with contextlib.AsyncExitStack() as stack, CoordinatorServer(
            c.host, c.port, registry=self.registry, settings=self.settings, run_secrets=self.own,
            port_setting=f"{self.section}.port",
        ) as server:
            self._server = server
            if self.checks_credentials:
                console.print(admission(server, self.section), highlight=False, soft_wrap=True)
            try:
                if self.options.phones is not None:
                    await self._serve_phones(self.options.phones, server, stack)
                if self.options.emulate:
                    self._emulate(server, stack, console)
                yield self
            finally:
                if self.emulated is not None:
                    await self.emulated.aclose()

    async def _serve_phones(self, phones: Phones, server: CoordinatorServer, stack: contextlib.AsyncExitStack) -> None:
        hand_credentials(phones, server, self.config.tls_cert)
        self.phones_ready = await stack.enter_async_context(phones.serving(server.port))
        server.explain_loss = phones.explain  # a lost phone's event says how its app ended
        # A phone's device id is its serial. A crash or a kill ends the connection with no bye ("connection
        # lost"); a bye (the app's, or the server's at its shutdown) is meant and is not undone.
        self.registry.on_leave(lambda device, reason: phones.lost(device) if reason.startswith("connection lost") else None)

    def _emulate(self, server: CoordinatorServer, stack: contextlib.AsyncExitStack, console: Console) -> None:
        """``emulate`` devices that impersonate the fleet (a profile file, or the synthetic generator), so
        rounds are as heterogeneous as the devices they stand in for."""
        fleet, options = self.fleet_config, self.options
        profiles = fleet_profiles(RunConfig(jobs=(), fleet=dataclasses.replace(fleet, size=options.emulate), seed=self.seed))
        url, workers, context = server.url, fleet.workers, None
        if options.ray is not None:
            stack.enter_context(connect(options.ray))
            url, (workers, context) = self._cluster_url(server), emulator_workers(fleet.runtime, workers)
        self.emulated = run_emulated_fleet(
            url, options.emulate, runtime=fleet.runtime, profiles=profiles, dropout=fleet.dropout, workers=workers,
            seed=self.seed, log_file=options.log_file, verbose=options.verbose, id_prefix=default_id_prefix(),
            secrets=self.own, ca=self.config.tls_cert,  # our own certificate, pinned
            context=context,
        )
        self.impersonated = {d: dataclasses.replace(p, device_id=d) for d, p in self.emulated.impersonated.items()}  # type: ignore[type-var]
        workers_are = ("Ray actor", "Ray actors") if options.ray is not None else ("process", "processes")
        console.print(f"started {self.emulated.describe(*workers_are)} ({fleet.runtime}) for {server.url}", highlight=False)

    def _cluster_url(self, server: CoordinatorServer) -> str:
        """The server's address as devices on every node of the Ray cluster reach it."""
        if listens_everywhere(self.config.host):
            return f"ws://{this_node_address()}:{server.port}"
        if node_count() > 1:
            raise ConfigError(
                f"{self.section}.host",
                f"{self.config.host!r} is not reachable from the Ray cluster's other nodes:"
                " listen on 0.0.0.0 to host emulated devices on a cluster (docs/scale.md)",
            )
        return server.url


def server_settings(tb: TestbedConfig) -> tuple[ServerSettings, dict[str, Any]]:
    """The server's settings and the remote fleet's limits, as a ``[testbed]`` (or a lab's ``[server]``) gives them."""
    settings = ServerSettings(
        heartbeat_interval=tb.heartbeat_interval_s, heartbeat_timeout=tb.heartbeat_timeout_s,
        max_message_bytes=None if tb.max_message_mb is None else int(tb.max_message_mb * 2**20),
        keys=key_store(tb), token=tb.token, tls_cert=tb.tls_cert, tls_key=tb.tls_key,
        handshake_timeout=tb.handshake_timeout_s,
        max_connections_per_address=tb.max_connections_per_address,
    )
    return settings, {"task_timeout": tb.task_timeout_s, "max_tasks_in_flight": tb.max_tasks_in_flight}


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
    if not listens_everywhere(server.host):
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


def admission(server: CoordinatorServer, section: str = "testbed") -> str:
    """Whom a coordinator that checks credentials admits: the enrolled devices (how many, where), the token."""
    admitted = []
    if server.keys is not None:
        admitted.append(f"the devices enrolled in {server.keys.path} ({server.keys.enrolled()}; mjfl devices keys)")
    if server.settings.token is not None:
        admitted.append(f"devices with the shared token ({section}.token)")
    return (
        f"admitting only {' or '.join(admitted)}, besides the devices this process starts itself; enroll another"
        " with mjfl devices enroll NAME (docs/security.md)"
    )


def key_store(tb: TestbedConfig) -> Path | None:
    """The enrolled devices' key store: ``testbed.keys``, else the user's when it exists (else none: no enrollment)."""
    if tb.keys is not None:
        return tb.keys
    default = default_key_store()
    return default if default.is_file() else None
