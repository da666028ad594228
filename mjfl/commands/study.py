"""`mjfl study STUDY.toml`: a grid of simulations (variants x seeds), ending with the report.

The study itself (its file, the grid, the report of each variant) is
``mjfl.coordinator.run.study``; this checks the command's arguments and runs it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl.coordinator.run.study import load_study, run_study
from mjfl.errors import UserError


def study(
    study_file: Path, out: Path, *, seeds: int | None, console: Console, first_seed: int = 0,
    methods: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run the study of ``study_file`` into ``out``.

    ``seeds``: N seeds instead of the file's count, from ``first_seed`` (0);
    ``methods``: a subset of the file's methods.
    """
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: a file is in the way")
    only = None if methods is None else list(methods)
    return run_study(load_study(study_file, seeds, first_seed=first_seed, methods=only), out, console=console)
