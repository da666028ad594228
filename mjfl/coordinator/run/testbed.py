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
import math
import time
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any, TypeVar

from rich.console import Console

from mjfl.coordinator.config import RunConfig
from mjfl.coordinator.engine.clock import RealClock
from mjfl.coordinator.remote.server import CoordinatorServer
from mjfl.coordinator.run.driver import Output, ReadyFleet
from mjfl.coordinator.run.host import DeviceHost, HostOptions, where_to_connect
from mjfl.coordinator.storage.records import RunMode
from mjfl.device.emulated.emulator.fleet import counted
from mjfl.device.emulated.ray_cluster import RayOptions
from mjfl.device.phones.attached import Phones
from mjfl.errors import ConfigError, RunError, UserError
from mjfl.ids import DeviceId

T = TypeVar("T")


class RemoteDevices:
    """Devices over the network, attached ``phones``, and ``emulate`` emulated ones started here, in real time.

    The devices are hosted by a ``DeviceHost`` (``host.py``), as a lab's are.
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
        if config.fleet.stand_ins > 0:
            raise ConfigError(
                "fleet.stand_ins",
                "stand-ins exist in simulated fleets only (mjfl simulate): a testbed's devices, phones or"
                " emulated, train every task they are given",
            )
        self.config = config
        self.output = output
        self.options = HostOptions(
            emulate=emulate, phones=phones, ray=ray, log_file=output.log_file, verbose=output.verbose
        )
        self.emulate = emulate
        self.phones = phones
        self.only = [DeviceId(d) for d in only]
        self._wanted = wanted
        self._phones_ready: list[str] = []
        self.wanted = self._count(len(phones.serials) if phones is not None else 0)

    def _count(self, phones: int) -> int:
        tb, fleet = self.config.testbed, self.config.fleet
        return len(self.only) or self._wanted or tb.min_devices or (self.emulate + phones) or fleet.size or 1

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(main)

    @contextlib.asynccontextmanager
    async def fleet(self) -> AsyncIterator[ReadyFleet]:
        config, console = self.config, self.output.console
        host = DeviceHost(config.testbed, config.fleet, seed=config.seed, options=self.options)
        async with host.serving(console):
            self._phones_ready = host.phones_ready
            self.wanted = self._count(len(host.phones_ready))
            await self._wait(host.server, console)
            connected = host.registry.connected()
            devices = self.only or sorted(connected)
            console.print(f"{counted(len(connected), 'device')} connected to {host.server.url}")
            yield ReadyFleet(
                host.remote, RealClock(), list(devices),
                # Phones that drop out may come back.
                device_wait_s=config.testbed.wait_timeout_s,
                hardware={d: dict(connected[d].hello.hardware) for d in devices if d in connected},
                impersonated=host.impersonated,
                members=host.registry,
                apps=host.apps,
            )

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
                        f" (mjfl devices emulate --url {server.url} --count N), start some with the run"
                        " (mjfl testbed run --emulate N), or wait longer (testbed.wait_timeout_s)"
                    ) from None
                return
            try:
                await server.registry.wait_until(
                    lambda connected: all(d in connected for d in self.only), timeout,
                    progress=progress, needed=len(self.only),
                )
            except RunError:
                missing = [d for d in self.only if d not in server.registry.connected()]
                raise UserError(
                    f"{', '.join(missing)}: did not connect within {timeout:g} s (testbed.wait_timeout_s)"
                ) from None


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
