"""`mjfl report RUN_DIR...`: the paper's Tables 4-5 over every finished run of the given folders.

Each folder is a run's output folder (``out_dir``); everything is read back
from its run database, so a report can be rebuilt long after the runs, and
runs of several seeds (one folder each, or several in one) are gathered per
method: ``mjfl.coordinator.results.report.report_runs`` does the report; this
checks the command's arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl.coordinator.results.report import report_runs
from mjfl.coordinator.storage.database import DATABASE_FILE
from mjfl.errors import UserError


def report(
    run_dirs: Sequence[Path], *, console: Console, json_path: Path | None = None, plots: Path | None = None
) -> dict[str, Any]:
    """Report the finished runs of ``run_dirs``: the table, and the JSON and plots where asked."""
    if not run_dirs:
        raise UserError(f"give at least one run folder (a run's out_dir, holding {DATABASE_FILE})")
    if json_path is not None and json_path.is_dir():
        raise UserError(f"--json {json_path}: a folder is in the way; give a file")
    if plots is not None and plots.exists() and not plots.is_dir():
        raise UserError(f"--plots {plots}: a file is in the way; give a folder")
    return report_runs(run_dirs, console=console, json_path=json_path, plots=plots)
