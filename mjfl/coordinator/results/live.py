"""The live view: a terminal table of every job's progress while a run goes on.

It follows the run's events (``mjfl.coordinator.engine.events``) and decides
nothing itself: a round's numbers come from ``RoundAggregated.record``, and
whether and why a job stopped from ``JobStopped.reason``, the engine's verdict.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import TracebackType
from typing import Literal, Self, TypeAlias

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from mjfl.coordinator.engine.events import JobStopped, RoundAggregated, RunEvent, StopReason
from mjfl.coordinator.results.tables import NOT_REACHED
from mjfl.coordinator.storage.records import JobInfo, RoundRecord
from mjfl.ids import JobId

__all__ = ["JobStatus", "LiveView"]

JobStatus: TypeAlias = Literal["running", "reached", "stopped"]


class LiveView:
    """A live table, one row per (method, job): round, accuracy, best, run time, target, status.

    Use as a context manager around a run and give each method's run
    ``observer(method)`` as an observer of its events. On a terminal it
    redraws in place a few times a second. Elsewhere (CI, a pipe, a log file)
    nothing is redrawn: it prints one line when a job reaches its target or
    stops, and the final table on exit, so a log gets a handful of lines,
    never a stream of frames. With ``enabled=False`` it prints nothing at all.
    """

    def __init__(
        self,
        jobs: Mapping[str, Sequence[JobInfo]] | None = None,
        *,
        console: Console | None = None,
        enabled: bool = True,
        clock: Literal["virtual", "wall"] = "virtual",
        refresh_per_second: float = 4.0,
    ) -> None:
        self.console = console or Console()
        self.enabled = enabled
        self.clock = clock
        self._lock = threading.Lock()  # rich redraws from its own thread
        self._rows: dict[tuple[str, JobId], _Row] = {}
        for method, infos in (jobs or {}).items():
            self.add_jobs(method, infos)
        self._interactive = self.console.is_terminal and not self.console.is_dumb_terminal
        self._live: Live | None = None
        if enabled:
            self._live = Live(
                get_renderable=self.render,
                console=self.console,
                auto_refresh=self._interactive,
                refresh_per_second=refresh_per_second,
                # Redirecting stdout only helps while redrawing in place.
                redirect_stdout=self._interactive,
                redirect_stderr=self._interactive,
                transient=False,
            )

    def add_jobs(self, method: str, jobs: Iterable[JobInfo]) -> None:
        """Show rows for ``jobs`` of ``method`` before their first round."""
        with self._lock:
            for job in jobs:
                self._rows.setdefault((method, job.job), _Row(target=str(job.target)))

    def observer(self, method: str) -> Callable[[RunEvent], None]:
        """An observer of ``method``'s run: it shows each ``RoundAggregated`` and each ``JobStopped``."""

        def observe(event: RunEvent) -> None:
            if isinstance(event, RoundAggregated):
                self._show(method, event.record)
            elif isinstance(event, JobStopped):
                self._stop(method, event)

        return observe

    def render(self) -> Table | Text:
        """The table as it stands (what the live display draws); nothing before the first job.

        A run refused before it starts (too few devices) leaves no empty table above its error.
        """
        with self._lock:
            if not self._rows:
                return Text("")
        table = Table(title="mjfl run", title_justify="left")
        for name in ("method", "job"):
            table.add_column(name)
        for name in ("round", "accuracy", "best", f"{self.clock} time"):
            table.add_column(name, justify="right")
        for name in ("target", "status"):
            table.add_column(name)
        with self._lock:
            rows = list(self._rows.items())
        for (method, job), row in rows:
            table.add_row(
                method,
                str(job),
                str(row.round),
                _number(row.accuracy, 4),
                _number(row.best, 4),
                _clock_text(row.time_s),
                row.target or NOT_REACHED,
                _STATUS_STYLE[row.status].format(row.status_text),
            )
        return table

    def __enter__(self) -> Self:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._live is not None:
            # Stopping draws the final table once, terminal or not; off a
            # terminal rich leaves its last line open, so end it here.
            self._live.stop()
            if not self._interactive and self._rows:
                self.console.line()

    def _show(self, method: str, record: RoundRecord) -> None:
        with self._lock:
            row = self._row(method, record.job)
            row.round = record.round
            row.accuracy = record.accuracy
            if not math.isnan(record.accuracy):
                row.best = record.accuracy if row.best is None else max(row.best, record.accuracy)
            row.time_s = record.ended_s

    def _stop(self, method: str, event: JobStopped) -> None:
        if event.reason == "target":
            self._set(method, event.job, "reached", None, f"{method} / {event.job}: target reached in round {event.rounds}")
        else:
            self._set(method, event.job, "stopped", event.reason, f"{method} / {event.job}: stopped ({event.reason})")

    def _set(self, method: str, job: JobId, status: JobStatus, reason: StopReason | None, news: str) -> None:
        with self._lock:
            row = self._row(method, job)
            changed = (row.status, row.reason) != (status, reason)
            row.status, row.reason = status, reason
        if changed and status != "running":
            self._announce(news)

    def _row(self, method: str, job: JobId) -> _Row:
        """The row of (method, job), made on first sight; the caller holds the lock."""
        return self._rows.setdefault((method, job), _Row(target=""))

    def _announce(self, line: str) -> None:
        # On a terminal the table already shows it; elsewhere a line is the only news.
        if self.enabled and not self._interactive:
            self.console.print(line, markup=False, highlight=False)


class _Row:
    """Mutable state of one live row (private; the view's lock guards it)."""

    __slots__ = ("accuracy", "best", "reason", "round", "status", "target", "time_s")

    def __init__(self, *, target: str) -> None:
        self.target = target
        self.round = 0
        self.accuracy: float | None = None
        self.best: float | None = None
        self.time_s: float | None = None
        self.status: JobStatus = "running"
        self.reason: StopReason | None = None  # why it stopped, the engine's ``JobStopped.reason``

    @property
    def status_text(self) -> str:
        return self.status if self.reason is None else f"{self.status} ({self.reason})"


_STATUS_STYLE = {
    "running": "[yellow]{}[/]",
    "reached": "[bold green]{}[/]",
    "stopped": "[red]{}[/]",
}


def _number(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _clock_text(seconds: float | None) -> str:
    if seconds is None:
        return ""
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"
