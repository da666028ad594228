"""`mjfl study STUDY.toml`: a grid of simulations (variants x seeds), ending with the report.

The study itself (its file, the grid, the report of each variant) is
``mjfl.coordinator.run.study``; this checks the command's arguments and runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl.coordinator.run.study import load_study, run_study
from mjfl.errors import UserError


def study(study_file: Path, out: Path, *, seeds: int | None, console: Console) -> dict[str, Any]:
    """Run the study of ``study_file`` into ``out`` (``seeds``: seeds 0..N-1 instead of the file's)."""
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: a file is in the way")
    return run_study(load_study(study_file, seeds), out, console=console)
