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
    study_file: Path, out: Path, *, seeds: int | None, console: Console, first_seed: int | None = None,
    methods: Sequence[str] | None = None, pilot_only: bool = False, workers: int | None = None,
) -> dict[str, Any]:
    """Run the study of ``study_file`` into ``out``.

    ``seeds``: N scoring seeds instead of the file's, from ``first_seed``;
    ``methods``: a subset of the file's methods; ``pilot_only``: its pilot
    seeds alone; ``workers``: simulations at once (default: one per core).
    """
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be >= 1, got {workers}")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: a file is in the way")
    only = None if methods is None else list(methods)
    loaded = load_study(study_file, seeds, first_seed=first_seed, methods=only, pilot_only=pilot_only)
    return run_study(loaded, out, console=console, workers=workers)
