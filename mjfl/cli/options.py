"""What the `mjfl` commands share: the two consoles, the options several commands take, and the steps
from parsed options to what a command is given (a run configuration, an output, phones, Ray).

A command's flag often sets a setting a lower layer knows by its own name
(``--port``: ``testbed.port``). Below the command layer an error names the
setting (``ConfigError.field``); ``flags_of`` adds the flag of the command
that set it, so the error reads the same in a config file and on the
command line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TextIO

import typer
from rich.console import Console

from mjfl.errors import ConfigError, MjflError, UserError, ours

if TYPE_CHECKING:
    from mjfl.coordinator.config import RunConfig
    from mjfl.coordinator.run.driver import Output
    from mjfl.device.emulated.ray_cluster import RayOptions
    from mjfl.device.phones.attached import PhoneOptions


def _width(stream: TextIO) -> int | None:
    """A console's width on ``stream``: the terminal's, else 160 (logs, CI and pipes are not terminals, and
    rich would squeeze a table into 80 columns)."""
    return None if stream.isatty() else 160


# Progress, tables and messages go to stderr; stdout holds only what a script takes (an id, a token, JSON,
# `mjfl runs`' table).
console = Console(stderr=True, width=_width(sys.stderr))
stdout = Console(width=_width(sys.stdout))

_shown = {"verbose": False}  # set once per process by the app's callback (--verbose)


def set_verbose(verbose: bool) -> None:
    _shown["verbose"] = verbose


def verbose() -> bool:
    """Whether --verbose was given: every log line (third-party ones too) on the terminal."""
    return _shown["verbose"]


DashboardOption = Annotated[bool, typer.Option(help="Serve the live dashboard (docs/dashboard.md).")]
DashboardPortOption = Annotated[int, typer.Option(help="The live dashboard's port (0 picks a free one).")]
DashboardHostOption = Annotated[
    str, typer.Option(help="The live dashboard's address; anything but loopback gets a token (docs/security.md).")
]
RayOption = Annotated[bool, typer.Option("--ray", help="Train on a Ray cluster (docs/scale.md); needs pip install 'mjfl\\[ray]'.")]
AddressOption = Annotated[str | None, typer.Option(help="With --ray: the cluster's address, HOST:PORT (default: a local Ray).")]
AdbOption = Annotated[str | None, typer.Option("--adb", help="The adb server, HOST:PORT (default: adb's own, 127.0.0.1:5037).")]
ConnectOption = Annotated[list[str] | None, typer.Option("--connect", metavar="HOST:PORT", help="A phone over wireless debugging (paired once with adb pair), connected first and again when it drops; repeat for each (docs/phones.md, energy).")]


def output(
    out_dir: Path, live: bool = True, dashboard_port: int | None = None, dashboard_host: str = "127.0.0.1"
) -> Output:
    """Where a command's results go; with ``dashboard_port``, its live dashboard (a token made up for a host others reach)."""
    from mjfl.coordinator.run.driver import Output

    token = None
    if dashboard_port is not None:
        from mjfl.addresses import needs_token
        from mjfl.coordinator.dashboard.server import new_token

        if not 0 <= dashboard_port <= 65535:
            raise UserError(f"--dashboard-port {dashboard_port}: must be 0 to 65535 (0: any free port)")
        if needs_token(dashboard_host):
            token = new_token()
            console.print(f"--dashboard-host {dashboard_host} is reachable from other machines: the dashboard's"
                          " address carries a token made for this run", highlight=False)
    return Output(out_dir, console, live=live, verbose=verbose(), dashboard_port=dashboard_port,
                  dashboard_host=dashboard_host, dashboard_token=token)


def run_config(
    path: Path | None,
    *,
    out: Path | None = None,
    seed: int | None = None,
    host: str | None = None,
    port: int | None = None,
    default: RunConfig | None = None,
    **testbed_overrides: Path | None,
) -> RunConfig:
    """The run configuration at ``path`` (or ``default``) with the command line's overrides."""
    from mjfl.coordinator.config import load_config

    config = load_config(path) if path is not None else default
    assert config is not None
    testbed = dataclasses.replace(
        config.testbed,
        host=host if host is not None else config.testbed.host,
        port=port if port is not None else config.testbed.port,
        **{k: v for k, v in testbed_overrides.items() if v is not None},
    )
    return dataclasses.replace(
        config, testbed=testbed, out_dir=out or config.out_dir, seed=seed if seed is not None else config.seed
    )


def ray(ray: bool, address: str | None) -> RayOptions | None:
    from mjfl.device.emulated.ray_cluster import RayOptions

    if address is not None and not ray:
        raise UserError("--address goes with --ray")
    return RayOptions(address=address) if ray else None


def phones(phones: bool, adb: str | None, apk: Path | None, connect: list[str] | None = None) -> PhoneOptions | None:
    from mjfl.device.phones.attached import PhoneOptions

    if not phones and (adb is not None or apk is not None or connect):
        raise UserError("--adb, --apk and --connect go with --phones")
    return PhoneOptions(adb=adb, apk=apk, connect=tuple(connect or ())) if phones else None


@contextlib.contextmanager
def flags_of(settings: Mapping[str, str] | None = None, *, arguments: Mapping[str, str] | None = None) -> Iterator[None]:
    """An error of the block that names a setting (``ConfigError.field``) also names the flag that sets it.

    ``settings``: the config file's settings a flag may set instead, by their dotted name
    (``{"testbed.port": "--port"}``): "config field 'testbed.port' (or --port): ...". ``arguments``:
    the lower layer's parameters that only a flag sets (``{"days": "--days"}``): "--days: ...".
    """
    try:
        yield
    except (MjflError, BaseExceptionGroup) as exc:
        error = ours(exc)
        if not isinstance(error, ConfigError):
            raise
        argument, setting = (arguments or {}).get(error.field), (settings or {}).get(error.field)
        if argument is not None:
            raise UserError(f"{argument}: {error.problem}") from None
        if setting is not None:
            raise UserError(f"config field '{error.field}' (or {setting}): {error.problem}") from None
        raise
