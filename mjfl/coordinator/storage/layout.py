"""Where a run's output folder keeps what the run leaves: one place names the files.

    <out_dir>/mjfl.db                       the run database (``database.py``; docs/storage.md)
    <out_dir>/checkpoints/<run id>/         the checkpoints of a real-time run (``checkpoints.py``)
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DATABASE_FILE", "checkpoints_path", "database_path"]

DATABASE_FILE = "mjfl.db"


def database_path(out_dir: str | os.PathLike[str]) -> Path:
    """Where a run's output folder keeps its run database: ``<out_dir>/mjfl.db``."""
    return Path(out_dir) / DATABASE_FILE


def checkpoints_path(out_dir: str | os.PathLike[str], run_id: str) -> Path:
    """Where a run's output folder keeps the checkpoints of run ``run_id``."""
    return Path(out_dir) / "checkpoints" / run_id
