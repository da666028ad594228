"""`mjfl profile`: a profiling session (`profile run`, the default) and a profile file shown (`profile show`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mjfl.addresses import LIVE_DASHBOARD_PORT
from mjfl.cli import options
from mjfl.cli.options import (
    AdbOption,
    ConnectOption,
    DashboardHostOption,
    DashboardOption,
    DashboardPortOption,
    console,
)
from mjfl.cli.syntax import DefaultRun, Typer, comma_list
from mjfl.errors import UserError

profile_app = Typer(cls=DefaultRun, help="""Profile devices: fit each one's round-time model, show a profile file.

`mjfl profile [CONFIG] [OPTIONS]` is short for `mjfl profile run [CONFIG] [OPTIONS]`.
""")


@profile_app.command("run")
def profile_run(
    config: Annotated[Path | None, typer.Argument(help="Run configuration whose jobs calibrate the devices (default: LeNet-5 on digits).")] = None,
    emulate: Annotated[int, typer.Option(help="Profile N local emulated devices (impersonating the config's fleet).")] = 0,
    phones: Annotated[bool, typer.Option("--phones", help="Profile the phones attached over adb (the app started on each).")] = False,
    adb: AdbOption = None,
    connect: ConnectOption = None,
    apk: Annotated[Path | None, typer.Option(help="With --phones: install this app on them first.")] = None,
    device_ids: Annotated[str | None, typer.Option(metavar="ID,...", help="Only these devices, by id.")] = None,
    rounds: Annotated[int, typer.Option(help="Calibration tasks per device and job.")] = 10,
    out: Annotated[Path | None, typer.Option(help="Output directory (default: <out_dir>/profile).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default: the config's testbed.port).")] = None,
    dashboard: DashboardOption = True,
    dashboard_port: DashboardPortOption = LIVE_DASHBOARD_PORT,
    dashboard_host: DashboardHostOption = "127.0.0.1",
) -> None:
    """Run a profiling session: fit each device's Formula 4 round-time model (a, mu)."""
    from mjfl.commands.profile import default_config
    from mjfl.commands.profile import profile_run as run_profile

    phone_options = options.phones(phones, adb, apk, connect)
    with options.flags_of({"out_dir": "--out", "testbed.port": "--port"}, arguments={"rounds": "--rounds", "emulate": "--emulate"}):
        # --out holds all of a session's outputs, its database too; by default they go to <out_dir>/profile and <out_dir>/mjfl.db.
        run_config = options.run_config(config, out=out, port=port, default=None if config is not None else default_config(emulate))
        out_dir = out or run_config.out_dir / "profile"
        output = options.output(out_dir, dashboard_port=dashboard_port if dashboard else None, dashboard_host=dashboard_host)
        only = comma_list("--device-ids", device_ids or "")
        run_profile(run_config, output, emulate=emulate, devices=only, rounds=rounds, phones=phone_options)


@profile_app.command("show")
def profile_show(
    file: Annotated[Path, typer.Argument(help="A profile file (profiles.json).")] = Path("runs/profile/profiles.json"),
    out: Annotated[Path | None, typer.Option(help="Where to write the CDF plots (default: next to FILE, in plots/).")] = None,
) -> None:
    """Print a profile file as a table and plot each device's empirical vs fitted CDF."""
    from mjfl.commands.profile import show

    written = show(file, console=console, out_dir=out)
    console.print(f"wrote {len(written)} CDF plots to {written[0].parent if written else out}")


def profile_show_renamed(args: Annotated[list[str] | None, typer.Argument(hidden=True)] = None) -> None:
    """`mjfl profile-show` of earlier versions."""
    raise UserError("mjfl profile-show: now mjfl profile show [FILE]")
