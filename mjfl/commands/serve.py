"""`mjfl serve LAB.toml`: the lab's service (``mjfl.coordinator.lab``), until Ctrl-C, SIGTERM or a drain."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Console

from mjfl import logs
from mjfl.commands.testbed import phones_for
from mjfl.coordinator.lab.config import load_lab_config
from mjfl.coordinator.lab.service import ServeOptions, serve_lab
from mjfl.coordinator.run.host import check_emulate
from mjfl.device.emulated.ray_cluster import RayOptions
from mjfl.device.phones.attached import PhoneOptions
from mjfl.errors import UserError


def serve(
    lab_file: Path, *, out: Path | None, emulate: int, drain: bool, verbose: bool, console: Console,
    phones: PhoneOptions | None = None, ray: RayOptions | None = None,
) -> None:
    """Check everything a lab needs before anything is started or written, then serve it.

    With ``phones``: no adb server, no usable phone, or a server ``adb
    reverse`` does not reach (``server.host``) is one line, as for `mjfl
    testbed run --phones`.
    """
    check_emulate(emulate)
    if ray is not None and not emulate:
        raise UserError("--ray runs the emulated devices on Ray: give --emulate N too")
    if emulate and phones is not None:
        # The emulated devices impersonate the lab's fleet ([fleet]); phones are that fleet.
        raise UserError("--phones and --emulate go one at a time: a lab serves its attached phones or emulated devices, not both")
    lab = load_lab_config(lab_file)
    out_dir = out or lab.out_dir
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: a file is in the way; give a folder")
    attached = None if phones is None else phones_for(
        lab.server.host, "server.host", phones, out_dir / logs.PHONE_LOGS,
        say=lambda line: console.print(line, highlight=False, soft_wrap=True),
    )
    options = ServeOptions(emulate=emulate, phones=attached, ray=ray, drain=drain, verbose=verbose)
    asyncio.run(serve_lab(lab, out_dir, console, options))
