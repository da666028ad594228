"""`mjfl models ...`: a job's model, checked before it reaches a device."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from mjfl.cli import options
from mjfl.cli.options import console
from mjfl.cli.syntax import Typer

models_app = Typer(name="models", no_args_is_help=True, help="Check a config's models: conversion, program, speed, parity.")


@models_app.command("check")
def check(
    config: Annotated[Path, typer.Argument(help="Run configuration (TOML).", exists=False)],
    steps: Annotated[int, typer.Option(help="Parity: steps of the program against eager PyTorch.")] = 20,
    memory_mb: Annotated[float | None, typer.Option(help="The smallest device's memory for a program (MB).")] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the figures as JSON here.")] = None,
) -> None:
    """For each job's model: operators and what each became, program size and memory, step times, parity.

    Exits non-zero with the reason when a model cannot become a program or its
    program does not train as eager PyTorch does.
    """
    from dataclasses import asdict

    from mjfl.commands.models import check_models
    from mjfl.errors import UserError

    if steps < 1:
        raise UserError("--steps must be >= 1")
    run_config = options.run_config(config)
    found = check_models(run_config, console, steps=steps, memory_mb=memory_mb)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps([asdict(c) for c in found], indent=2))
