"""Run databases written with the real Storage API for the dashboard's tests (``dashboard_runs``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from dashboard_runs import write_run


@pytest.fixture
def run_writer() -> Callable[..., None]:
    """``write_run(folder, run_id="mg-0", *, devices=4, finished=True)``."""
    return write_run


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """An output folder with one finished run (``mg-0``) and one interrupted (``mg-1``)."""
    out = tmp_path / "out"
    write_run(out)
    write_run(out, "mg-1", finished=False)
    return out
