"""What people read after (and during) a run: outcomes, summary.json, rounds.csv, plots, tables.

Everything here is computed from records (``mjfl.coordinator.storage.records``), so a
report can be rebuilt from the run database alone. ``results`` arguments map
a scheduling method to the (jobs, rounds) of its run::

    {"meta-greedy": (jobs, records), "random": (jobs, records), ...}

The numbers are the paper's (Tables 4-5): a job's time to target is the
run-clock time (seconds since the run started; runs start at 0) at the end
of its first round that reaches the target; a group's time is its slowest
job's, since the group is done when its last job is.

Plots use matplotlib's Agg canvas directly (no pyplot, no global backend
switch), so they work headless and from any thread.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias

from rich.console import Console
from rich.live import Live
from rich.table import Table

from mjfl.coordinator.storage.checkpoints import write_atomically
from mjfl.coordinator.storage.records import JobInfo, JobOutcome, RoundRecord, SchedulerChoice
from mjfl.ids import JobId

__all__ = [
    "CSV_COLUMNS",
    "JobStatus",
    "LiveView",
    "Results",
    "job_outcomes",
    "plot_accuracy",
    "plot_meta_greedy_wins",
    "reached_target",
    "results_table",
    "summary",
    "target_text",
    "write_rounds_csv",
    "write_summary",
]

Results: TypeAlias = Mapping[str, tuple[Sequence[JobInfo], Sequence[RoundRecord]]]
JobStatus: TypeAlias = Literal["running", "reached", "stopped"]

NOT_REACHED = "—"
BASELINE = "random"  # speedups are quoted against FedAvg's random selection, as in the paper

CSV_COLUMNS: tuple[str, ...] = (
    "method",
    "run_id",
    "job",
    "round",
    "started_s",
    "ended_s",
    "accuracy",
    "loss",
    "aggregated",
    "devices",
    "failed",
    "expected_time_s",
    "cost",
    "winner",
    "plan",
)


# --- outcomes and summary ----------------------------------------------------


def reached_target(job: JobInfo, record: RoundRecord) -> bool:
    """Whether ``record`` meets ``job``'s target (``records.Target``, as the engine decides)."""
    return job.target.reached(record.accuracy, record.loss)


def job_outcomes(
    jobs: Sequence[JobInfo], records: Sequence[RoundRecord]
) -> dict[JobId, JobOutcome]:
    """Each job's row of Tables 4-5, in ``jobs`` order.

    Only records of the job's own run (``run_id``) count. ``final_accuracy``
    is the last round's accuracy (NaN when the job has no round).
    """
    outcomes: dict[JobId, JobOutcome] = {}
    for job in jobs:
        own = sorted(
            (r for r in records if r.run_id == job.run_id and r.job == job.job),
            key=lambda r: r.round,
        )
        first = next((r for r in own if reached_target(job, r)), None)
        outcomes[job.job] = JobOutcome(
            job=job.job,
            rounds=len(own),
            final_accuracy=own[-1].accuracy if own else math.nan,
            time_to_target_s=None if first is None else first.ended_s,
            reached_target=first is not None,
        )
    return outcomes


def summary(results: Results) -> dict[str, Any]:
    """``{"methods": {method: {"jobs": {job: {...}}, "total_time_s": ...}}}``.

    Per job: ``time_to_target_s`` (float, or None if never reached),
    ``final_accuracy`` (float; None only if the job has no round or a NaN
    accuracy, since JSON has no NaN) and ``rounds`` (int). ``total_time_s`` is
    the group's time to target, the latest of its jobs', or None when any job
    (or every job, for an empty group) never reached its target.
    """
    methods: dict[str, Any] = {}
    for method, (jobs, records) in results.items():
        outcomes = job_outcomes(jobs, records)
        entries = {
            str(job): {
                "time_to_target_s": _float_or_none(outcome.time_to_target_s),
                "final_accuracy": _float_or_none(outcome.final_accuracy),
                "rounds": int(outcome.rounds),
            }
            for job, outcome in outcomes.items()
        }
        times = [o.time_to_target_s for o in outcomes.values()]
        total = None if not times or None in times else max(t for t in times if t is not None)
        methods[method] = {"jobs": entries, "total_time_s": _float_or_none(total)}
    return {"methods": methods}


def write_summary(path: str | os.PathLike[str], summary: Mapping[str, Any]) -> Path:
    """Write a ``summary()`` as JSON (None as null), atomically; returns the path."""
    text = json.dumps(summary, indent=2, allow_nan=False) + "\n"
    # A temporary file and a rename: a crash never leaves half a summary.
    return write_atomically(Path(path), text)


def write_rounds_csv(path: str | os.PathLike[str], results: Results) -> Path:
    """One CSV row per job round across methods (columns ``CSV_COLUMNS``).

    Rows go method by method, then run (the jobs' run first), then job (in
    ``jobs`` order), then round.
    ``aggregated`` is 1/0, ``devices`` the plan size, ``failed`` the devices
    whose update was not used (status failed or rejected), ``plan`` the device
    ids in plan order joined by ``;``; an absent winner is an empty field.
    """
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    with file.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for method, (jobs, records) in results.items():
            runs = {
                run_id: index
                for index, run_id in enumerate(
                    dict.fromkeys([*(j.run_id for j in jobs), *(r.run_id for r in records)])
                )
            }
            order = {job.job: index for index, job in enumerate(jobs)}
            for r in sorted(
                records,
                key=lambda r: (runs[r.run_id], order.get(r.job, len(order)), r.job, r.round),
            ):
                writer.writerow(
                    (
                        method,
                        r.run_id,
                        r.job,
                        r.round,
                        r.started_s,
                        r.ended_s,
                        r.accuracy,
                        r.loss,
                        int(r.aggregated),
                        len(r.devices),
                        sum(d.status != "ok" for d in r.devices),
                        r.expected_time_s,
                        r.cost,
                        r.winner or "",
                        ";".join(r.plan),
                    )
                )
    return file


# --- plots -------------------------------------------------------------------


def plot_accuracy(out_dir: str | os.PathLike[str], results: Results) -> list[Path]:
    """One ``accuracy-<job>.png`` per job: accuracy vs run time, a line per method.

    The job's accuracy target is a dashed line. Jobs come in order of first
    appearance across methods; a job with no rounds in any method gets no plot.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    infos: dict[JobId, JobInfo] = {}
    for jobs, _ in results.values():
        for job in jobs:
            infos.setdefault(job.job, job)
    owners = {method: _run_jobs(jobs) for method, (jobs, _) in results.items()}
    written: list[Path] = []
    for name, info in infos.items():
        curves = {
            method: sorted(
                # As in job_outcomes: only the rounds of the job's own run.
                (r for r in records if r.job == name and (r.run_id, name) in owners[method]),
                key=lambda r: r.round,
            )
            for method, (_, records) in results.items()
        }
        if not any(curves.values()):
            continue
        figure = Figure(figsize=(7.0, 4.5), layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        for method, rounds in curves.items():
            if rounds:
                axes.plot(
                    [r.ended_s for r in rounds],
                    [r.accuracy for r in rounds],
                    label=method,
                    linewidth=1.5,
                    marker="o",  # a one-round run is still visible
                    markersize=3,
                )
        if info.target_accuracy is not None:
            axes.axhline(
                info.target_accuracy,
                linestyle="--",
                color="grey",
                linewidth=1.0,
                label=f"target {info.target_accuracy:g}",
            )
        axes.set_title(f"{name}: {info.model} on {info.dataset}")
        axes.set_xlabel("run time (s)")
        axes.set_ylabel("test accuracy")
        axes.set_xlim(left=0.0)
        axes.grid(True, alpha=0.3)
        axes.legend(loc="best")
        path = directory / f"accuracy-{_file_safe(name)}.png"
        figure.savefig(path, dpi=120)
        written.append(path)
    return written


def plot_meta_greedy_wins(
    path: str | os.PathLike[str], choices: Sequence[SchedulerChoice]
) -> Path | None:
    """Grouped bars: per job, how many rounds each Meta-Greedy member's plan won.

    Members that took part but never won show as 0. None (and no file) when
    there are no choices, i.e. the run did not use Meta-Greedy.
    """
    if not choices:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    jobs = list(dict.fromkeys(c.job for c in choices))
    members = list(dict.fromkeys(c.member for c in choices))
    wins = {(job, member): 0 for job in jobs for member in members}
    for choice in choices:
        wins[choice.job, choice.member] += int(choice.won)

    figure = Figure(
        figsize=(max(6.0, 1.2 * len(jobs) * len(members) / 2), 4.5), layout="constrained"
    )
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    width = 0.8 / len(members)
    for index, member in enumerate(members):
        offsets = [j + (index - (len(members) - 1) / 2) * width for j in range(len(jobs))]
        bars = axes.bar(offsets, [wins[job, member] for job in jobs], width, label=member)
        axes.bar_label(bars, fontsize=7)
    axes.set_xticks(range(len(jobs)), [str(job) for job in jobs])
    axes.set_title("Meta-Greedy: whose plan ran (Algorithm 4)")
    axes.set_xlabel("job")
    axes.set_ylabel("rounds won")
    axes.yaxis.set_major_locator(MaxNLocator(integer=True))
    axes.legend(title="member", fontsize=8)
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(file, dpi=120)
    return file


# --- tables ------------------------------------------------------------------


def results_table(summary: Mapping[str, Any], jobs: Sequence[JobInfo]) -> Table:
    """The paper's Tables 4-5: a row per method; per job, time to target and final accuracy.

    Then the group's time to target and, when a ``random`` run is present,
    how many times faster than it each method reached the group target. The
    best of each column is bold green; "—" marks a target never reached.
    """
    methods: Mapping[str, Any] = summary["methods"]
    table = Table(title="Time to target accuracy", title_justify="left")
    table.add_column("method", style="bold")
    columns: list[tuple[str, list[float | None], bool]] = []  # (kind, values, lower is better)
    for job in jobs:
        target = target_text(job)
        table.add_column(f"{job.job}\ntime to target (s)\n{target}", justify="right")
        table.add_column(f"{job.job}\nfinal accuracy\n(last round)", justify="right")
        columns.append(
            ("time", [_job_value(m, job.job, "time_to_target_s") for m in methods.values()], True)
        )
        columns.append(
            ("acc", [_job_value(m, job.job, "final_accuracy") for m in methods.values()], False)
        )
    table.add_column("group\ntime to target (s)\n(slowest job)", justify="right")
    columns.append(("time", [m.get("total_time_s") for m in methods.values()], True))
    baseline = next((name for name in methods if name.lower() == BASELINE), None)
    baseline_time = None if baseline is None else methods[baseline].get("total_time_s")
    if baseline is not None:
        table.add_column(f"speedup\nvs {baseline}\n(group)", justify="right")
        columns.append(
            (
                "speedup",
                [_speedup(baseline_time, m.get("total_time_s")) for m in methods.values()],
                False,
            )
        )

    best = [_best(values, lower) for _, values, lower in columns]
    for row, method in enumerate(methods):
        cells = [method]
        for (kind, values, _), top in zip(columns, best):
            text = _cell(kind, values[row])
            cells.append(
                f"[bold green]{text}[/]" if top is not None and values[row] == top else text
            )
        table.add_row(*cells)

    table.caption = _fastest(methods, baseline)
    return table


def _fastest(methods: Mapping[str, Any], baseline: str | None) -> str | None:
    """The caption naming the fastest group against the baseline, when there is one to compare with."""
    reached = {name: m["total_time_s"] for name, m in methods.items() if m.get("total_time_s") is not None}
    if len(methods) < 2 or baseline is None or baseline not in reached:
        return None
    fastest = min(reached, key=reached.__getitem__)
    if fastest == baseline:
        return f"fastest group: {baseline}, the baseline"
    return f"fastest group: {fastest}, {reached[baseline] / reached[fastest]:.2f}x faster than {baseline}"


# --- live view -----------------------------------------------------------------


class LiveView:
    """A live table, one row per (method, job): round, accuracy, best, run time, target, status.

    Use as a context manager around a run and feed it ``update(record,
    method)`` after each round. On a terminal it redraws in place a few times
    a second. Elsewhere (CI, a pipe, a log file) nothing is redrawn: it prints
    one line when a job reaches its target or stops, and the final table on
    exit, so a log gets a handful of lines, never a stream of frames. With
    ``enabled=False`` it prints nothing at all.
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
                self._rows.setdefault((method, job.job), _Row(target=target_text(job), info=job))

    def update(self, record: RoundRecord, method: str) -> None:
        """Show a finished round; a job whose target is met turns ``reached``."""
        announce = None
        with self._lock:
            row = self._rows.setdefault((method, record.job), _Row(target="", info=None))
            row.round = record.round
            row.accuracy = record.accuracy
            if not math.isnan(record.accuracy):
                row.best = record.accuracy if row.best is None else max(row.best, record.accuracy)
            row.time_s = record.ended_s
            if (
                row.status == "running"
                and row.info is not None
                and reached_target(row.info, record)
            ):
                row.status = "reached"
                announce = f"{method} / {record.job}: target reached in round {record.round}"
        if announce:
            self._announce(announce)

    def set_status(self, method: str, job: JobId | str, status: JobStatus) -> None:
        """Set a row's status, e.g. ``stopped`` when the round budget R_m runs out."""
        with self._lock:
            row = self._rows.setdefault((method, JobId(job)), _Row(target="", info=None))
            changed = row.status != status
            row.status = status
        if changed and status != "running":
            self._announce(f"{method} / {job}: {status}")

    def render(self) -> Table:
        """The table as it stands (what the live display draws)."""
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
                _STATUS_STYLE[row.status].format(row.status),
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
            if not self._interactive:
                self.console.line()

    def _announce(self, line: str) -> None:
        # On a terminal the table already shows it; elsewhere a line is the only news.
        if self.enabled and not self._interactive:
            self.console.print(line, markup=False, highlight=False)


class _Row:
    """Mutable state of one live row (private; the view's lock guards it)."""

    __slots__ = ("accuracy", "best", "info", "round", "status", "target", "time_s")

    def __init__(self, *, target: str, info: JobInfo | None) -> None:
        self.target = target
        self.info = info
        self.round = 0
        self.accuracy: float | None = None
        self.best: float | None = None
        self.time_s: float | None = None
        self.status: JobStatus = "running"


_STATUS_STYLE = {
    "running": "[yellow]{}[/]",
    "reached": "[bold green]{}[/]",
    "stopped": "[red]{}[/]",
}


# --- helpers -------------------------------------------------------------------


def _run_jobs(jobs: Iterable[JobInfo]) -> set[tuple[str, JobId]]:
    return {(job.run_id, job.job) for job in jobs}


def _float_or_none(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)


def _job_value(method: Mapping[str, Any], job: JobId, key: str) -> float | None:
    entry = method["jobs"].get(str(job))
    return None if entry is None else entry.get(key)


def _speedup(baseline: float | None, time: float | None) -> float | None:
    if baseline is None or time is None or time <= 0.0:
        return None
    return baseline / time


def _best(values: Sequence[float | None], lower: bool) -> float | None:
    present = [v for v in values if v is not None]
    if len(present) < 2:  # nothing to compare
        return None
    return min(present) if lower else max(present)


def _cell(kind: str, value: float | None) -> str:
    if value is None:
        return NOT_REACHED
    if kind == "time":
        return f"{value:.1f}"
    if kind == "acc":
        return f"{value:.4f}"
    return f"{value:.2f}x"


def target_text(job: JobInfo) -> str:
    return str(job.target)


def _number(value: float | None, digits: int) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _clock_text(seconds: float | None) -> str:
    if seconds is None:
        return ""
    whole = int(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "job"
