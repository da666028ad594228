"""`mjfl testbed run`: the real-time testbed, a run over phones and emulated devices."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mjfl.addresses import LIVE_DASHBOARD_PORT
from mjfl.cli import options
from mjfl.cli.options import (
    AdbOption,
    AddressOption,
    ConnectOption,
    DashboardHostOption,
    DashboardOption,
    DashboardPortOption,
    RayOption,
    console,
)
from mjfl.cli.process import exit_on_ctrl_c
from mjfl.cli.syntax import Typer

testbed_app = Typer(help="The real-time testbed: coordinator, phones and emulated devices.", no_args_is_help=True)

# The run configuration's settings that this command's flags set (``options.run_config``).
SETTINGS = {
    "out_dir": "--out", "testbed.host": "--host", "testbed.port": "--port", "testbed.tls_cert": "--tls-cert",
    "testbed.tls_key": "--tls-key", "testbed.keys": "--keys",
}


@testbed_app.command("run")
def testbed_run(
    config: Annotated[Path, typer.Argument(help="Run configuration (TOML).")],
    emulate: Annotated[int, typer.Option(help="Also start N emulated devices on this machine.")] = 0,
    phones: Annotated[bool, typer.Option("--phones", help="Also train on the phones attached over adb (the app started on each).")] = False,
    adb: AdbOption = None,
    connect: ConnectOption = None,
    apk: Annotated[Path | None, typer.Option(help="With --phones: install this app on them first.")] = None,
    host: Annotated[str | None, typer.Option(help="Listen address (default: the config's testbed.host).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default: the config's testbed.port; 0 picks one).")] = None,
    out: Annotated[Path | None, typer.Option(help="Output directory (default: the config's out_dir).")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last unfinished run of this output directory.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Start even when the devices present hold none of some class of a job (devices that join later take the free shards).")] = False,
    live: Annotated[bool, typer.Option(help="Show the live per-job view.")] = True,
    dashboard: DashboardOption = True,
    dashboard_port: DashboardPortOption = LIVE_DASHBOARD_PORT,
    dashboard_host: DashboardHostOption = "127.0.0.1",
    tls_cert: Annotated[Path | None, typer.Option(help="Serve wss:// with this certificate (PEM; mjfl certs create).")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The private key of --tls-cert (PEM).")] = None,
    keys: Annotated[Path | None, typer.Option(help="Key store of the enrolled devices (default: the config's testbed.keys).")] = None,
    ray: RayOption = False,
    address: AddressOption = None,
) -> None:
    """Train the config's jobs over connected phones and/or emulated devices, in real time."""
    from mjfl.commands.testbed import testbed_run as run_testbed

    phone_options = options.phones(phones, adb, apk, connect)
    with options.flags_of(SETTINGS, arguments={"resume": "--resume", "emulate": "--emulate"}):
        run_config = options.run_config(config, out=out, host=host, port=port, tls_cert=tls_cert, tls_key=tls_key, keys=keys)
        output = options.output(run_config.out_dir, live, dashboard_port if dashboard else None, dashboard_host)
        with exit_on_ctrl_c(console):
            run_testbed(run_config, output, emulate=emulate, resume=resume, phones=phone_options,
                        ray=options.ray(ray, address), force=force)
