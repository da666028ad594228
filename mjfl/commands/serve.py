"""`mjfl serve LAB.toml`: the lab's service (``mjfl.coordinator.lab``), until Ctrl-C, SIGTERM or a drain."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Console

from mjfl.coordinator.lab.config import load_lab_config
from mjfl.coordinator.lab.service import ServeOptions, serve_lab
from mjfl.errors import UserError


def serve(lab_file: Path, *, out: Path | None, emulate: int, drain: bool, verbose: bool, console: Console) -> None:
    if emulate < 0:
        raise UserError("--emulate must be >= 0")
    lab = load_lab_config(lab_file)
    out_dir = out or lab.out_dir
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out {out_dir}: a file is in the way; give a folder")
    asyncio.run(serve_lab(lab, out_dir, console, ServeOptions(emulate=emulate, drain=drain, verbose=verbose)))
