"""The lab's commands (docs/lab.md): its service (`mjfl serve`), the researchers' `submit`, `runs`, `log`,
`cancel`, `pull`, and `mjfl lab researcher add/revoke`, `mjfl lab drain`.

``mjfl.cli`` registers the top-level ones; ``lab_app`` is `mjfl lab`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mjfl.addresses import LAB_API_PORT, LOOPBACK
from mjfl.cli import options
from mjfl.cli.options import AdbOption, AddressOption, ConnectOption, RayOption, console
from mjfl.cli.process import exit_on_ctrl_c
from mjfl.cli.syntax import Typer

lab_app = Typer(help="A lab's researchers and its service (docs/lab.md).", no_args_is_help=True)
researcher_app = Typer(help="Who may submit runs to the lab: a revocable token each (admins only).", no_args_is_help=True)
lab_app.add_typer(researcher_app, name="researcher")

LabOption = Annotated[str | None, typer.Option("--lab", envvar="MJFL_LAB", help=f"The lab's API, http://HOST:PORT (default: $MJFL_LAB, else http://{LOOPBACK}:{LAB_API_PORT}).")]
TokenOption = Annotated[str | None, typer.Option("--token", envvar="MJFL_TOKEN", help="Your researcher's token (default: $MJFL_TOKEN).")]
RunArgument = Annotated[str, typer.Argument(help="The run's id, as mjfl submit printed it (mjfl runs lists them).")]


def serve(
    lab_file: Annotated[Path, typer.Argument(help="The lab's configuration (LAB.toml; docs/lab.md).")],
    emulate: Annotated[int, typer.Option(help="Also start N emulated devices on this machine, for the service's life.")] = 0,
    phones: Annotated[bool, typer.Option("--phones", help="Also serve the phones attached over adb, for the service's life (the app started on each, again after a replug).")] = False,
    adb: AdbOption = None,
    connect: ConnectOption = None,
    apk: Annotated[Path | None, typer.Option(help="With --phones: install this app on them first.")] = None,
    out: Annotated[Path | None, typer.Option(help="LAB_DIR: the lab's database and run folders (default: the lab's out_dir).")] = None,
    drain: Annotated[bool, typer.Option("--drain", help="Admit no new run; exit once the runs admitted or running have ended.")] = False,
    ray: RayOption = False,
    address: AddressOption = None,
) -> None:
    """The lab's service: devices stay connected, researchers submit runs that share the fleet round by round."""
    from mjfl.commands.serve import serve as run_service

    phone_options = options.phones(phones, adb, apk, connect)
    with options.flags_of({"out_dir": "--out"}, arguments={"emulate": "--emulate"}), \
            exit_on_ctrl_c(console, "stopped: running runs resume at the next mjfl serve"):
        run_service(lab_file, out=out, emulate=emulate, drain=drain, verbose=options.verbose(), console=console,
                    phones=phone_options, ray=options.ray(ray, address))


def submit(
    config: Annotated[Path, typer.Argument(help="The run's configuration (TOML, as mjfl testbed run takes).")],
    lab: LabOption = None,
    token: TokenOption = None,
    key: Annotated[str | None, typer.Option(help="A retried submit with the same key returns the same run.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run; exit 0 when every job reached its target.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run as JSON (docs/lab-api.yaml) instead of lines.")] = False,
) -> None:
    """Submit a run to the lab; prints its id."""
    from mjfl.commands.lab import client
    from mjfl.commands.lab import submit as submit_run

    if not submit_run(client(lab, token), config, key=key, wait=wait, as_json=as_json, console=console):
        raise SystemExit(1)


def runs(
    lab: LabOption = None, token: TokenOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON (docs/lab-api.yaml).")] = False,
) -> None:
    """Every run of the lab: owner, state, queue position and why it waits (or how it ended)."""
    from mjfl.commands.lab import client
    from mjfl.commands.lab import runs as list_runs

    list_runs(client(lab, token), as_json=as_json, console=options.stdout)


def log(
    run: RunArgument, lab: LabOption = None, token: TokenOption = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep printing lines until the run has ended.")] = False,
    device: Annotated[str | None, typer.Option(help="Only the lines that name this device.")] = None,
) -> None:
    """A run's log: its coordinator's lines and those naming its devices."""
    from mjfl.commands.lab import client
    from mjfl.commands.lab import log as run_log

    run_log(client(lab, token), run, follow=follow, device=device, out=print)


def cancel(run: RunArgument, lab: LabOption = None, token: TokenOption = None) -> None:
    """Cancel a run, in any state (its owner or an admin); its devices go back to the lobby."""
    from mjfl.commands.lab import cancel as cancel_run
    from mjfl.commands.lab import client

    cancel_run(client(lab, token), run, console=console)


def pull(
    run: RunArgument,
    out: Annotated[Path, typer.Option(help="A new folder for the run's folder (then mjfl report OUT, mjfl dashboard OUT).")],
    lab: LabOption = None, token: TokenOption = None,
) -> None:
    """Copy a run's folder from the lab, as mjfl testbed run writes it."""
    from mjfl.commands.lab import client
    from mjfl.commands.lab import pull as pull_run

    pull_run(client(lab, token), run, out, console=console)


@researcher_app.command("add")
def researcher_add(
    name: Annotated[str, typer.Argument(help="The researcher's name: 1-32 of a-z, 0-9, _ and -.")],
    admin: Annotated[bool, typer.Option("--admin", help="May add and revoke researchers, cancel anyone's run, drain.")] = False,
    lab: LabOption = None, token: TokenOption = None,
) -> None:
    """Give a researcher a token (printed once on stdout); again gives a new one."""
    from mjfl.commands.lab import add_researcher, client

    add_researcher(client(lab, token), name, admin=admin, console=console)


@researcher_app.command("revoke")
def researcher_revoke(
    name: Annotated[str, typer.Argument(help="The researcher.")], lab: LabOption = None, token: TokenOption = None,
) -> None:
    """Revoke a researcher's token: the lab refuses it from now on."""
    from mjfl.commands.lab import client, revoke_researcher

    revoke_researcher(client(lab, token), name, console=console)


@lab_app.command("drain")
def lab_drain(lab: LabOption = None, token: TokenOption = None) -> None:
    """Admit no new run; the service exits once the running runs end (admins only)."""
    from mjfl.commands.lab import client, drain

    drain(client(lab, token), console=console)
