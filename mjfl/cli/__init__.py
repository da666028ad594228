"""The `mjfl` command line: parses, calls a command (``mjfl.commands``), prints.

This module assembles the command tree and is the entry point (``main``;
`python -m mjfl.cli`). One module per sub-app: ``toplevel`` (simulate,
report, dashboard, study, export), ``testbed``, ``profile``, ``bench``,
``devices``, ``certs``, ``lab`` (serve, submit, runs, log, cancel, pull; lab
researcher, lab drain). Beside them, ``options`` holds what several
commands share (the consoles, common options, the flag a setting is set by),
``syntax`` how options are spelled (one comma-separated value for a list,
earlier spellings refused with the new one), and ``process`` how an `mjfl`
process behaves (BLAS threads, SIGTERM and Ctrl-C, worker processes).

Heavy imports (torch, executorch) happen inside the commands, so `mjfl --help`
stays fast.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from mjfl import logs
from mjfl.cli import lab, options, process, profile, toplevel
from mjfl.cli.bench import bench_app
from mjfl.cli.certs import certs_app
from mjfl.cli.devices import device_app
from mjfl.cli.models import models_app
from mjfl.cli.options import console
from mjfl.cli.options import output as _output  # noqa: F401 - tests/commands/test_dashboard_cli.py reads it here
from mjfl.cli.syntax import Typer
from mjfl.cli.testbed import testbed_app
from mjfl.errors import MjflError, UserError, ours

app = Typer(name="mjfl", no_args_is_help=True, pretty_exceptions_enable=False)

# In the order `mjfl --help` lists them: the commands, then the groups.
app.command("simulate")(toplevel.simulate)
app.command("report")(toplevel.report)
app.command("dashboard")(toplevel.dashboard)
app.command("study")(toplevel.study)
app.command("profile-show", hidden=True, context_settings={"ignore_unknown_options": True})(profile.profile_show_renamed)
app.command("export")(toplevel.export_program)
app.command("serve")(lab.serve)
app.command("submit")(lab.submit)
app.command("runs")(lab.runs)
app.command("log")(lab.log)
app.command("cancel")(lab.cancel)
app.command("pull")(lab.pull)
app.add_typer(bench_app, name="bench")
app.add_typer(device_app, name="devices")
app.add_typer(device_app, name="device", hidden=True)  # its old name
app.add_typer(certs_app, name="certs")
app.add_typer(models_app, name="models")
app.add_typer(profile.profile_app, name="profile")
app.add_typer(testbed_app, name="testbed")
app.add_typer(lab.lab_app, name="lab")


@app.callback()
def _options(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every log line (third-party ones too) on the terminal.")] = False,
) -> None:
    """A testbed for multi-job federated learning on real and emulated phones.

    An option that takes several values takes them as one comma-separated
    list: --fleet-sizes 100,1000, --models lenet5,vgg6.
    """
    options.set_verbose(verbose)
    logs.setup(verbose=verbose)


def main() -> None:
    """Console-script entry point: the user's errors (exit 2) and a run's end (exit 1) print one line."""
    with process.policy():
        try:
            app(args=sys.argv[1:])
        except (MjflError, ExceptionGroup) as exc:
            error = ours(exc)
            if error is None:
                raise
            console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
            raise SystemExit(2 if isinstance(error, UserError) else 1) from None


__all__ = ["app", "console", "main"]
