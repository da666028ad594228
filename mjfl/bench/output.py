"""What every bench does with its figures: a table on the console, a JSON file, a log beside it; and its steps."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mjfl.coordinator.results.files import write_json

__all__ = ["log_path", "machine", "step", "table", "write"]


@contextlib.contextmanager
def step(console: Console, what: str) -> Iterator[Callable[[str], None]]:
    """A bench's step while it runs: a spinner on a terminal, updated by the function it yields; elsewhere
    (a log, a pipe) one line as it starts, so a long bench is never silent."""
    if console.is_terminal:
        with console.status(what) as status:
            yield status.update
    else:
        console.print(what, highlight=False, soft_wrap=True)
        yield lambda _: None


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]], *, left: Collection[str] = ()) -> Table:
    """A table of figures: the first column (what a row is) and ``left`` ones aligned left, figures right."""
    out = Table(title=title)
    for n, column in enumerate(columns):
        out.add_column(column, justify="left" if n == 0 or column in left else "right")
    for row in rows:
        out.add_row(*row)
    return out


def machine() -> str:
    """This machine for a title, "N CPUs, load average ...": timings move with the load."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "?"
    return f"{os.cpu_count()} CPUs, load average {load}"


def log_path(json_path: Path | None) -> Path | None:
    """A bench's log file (its third-party output included): ``<json>.log`` beside its JSON; none without one."""
    return None if json_path is None else json_path.with_suffix(".log")


def write(figures: Mapping[str, Any], json_path: Path | None, console: Console) -> None:
    """Write ``figures`` as JSON to ``json_path`` (if given); say where, and where the log is if there is one."""
    if json_path is None:
        return
    write_json(json_path, figures)  # whole or absent, as a report's JSON
    log = log_path(json_path)
    console.print(f"wrote {json_path}" + (f"; log in {log}" if log is not None and log.exists() else ""), highlight=False, soft_wrap=True)
