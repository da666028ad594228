"""The report's plots: accuracy against run time, and whose plans Meta-Greedy ran.

Each plot is two functions: a pure one from records to the series it shows
(what any front end would draw) and one that draws them to a PNG. Drawing
uses matplotlib's Agg canvas directly (no pyplot, no global backend switch),
so it works headless and from any thread; matplotlib is imported only then.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from mjfl.coordinator.results.outcomes import RunRecords, Runs
from mjfl.coordinator.storage.records import JobInfo, RoundRecord, SchedulerChoice
from mjfl.ids import JobId

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "AccuracyCurves",
    "MemberShares",
    "accuracy_curves",
    "member_shares",
    "meta_greedy_wins",
    "plot_accuracy",
    "plot_member_wins",
    "plot_meta_greedy_wins",
]


class AccuracyCurves(NamedTuple):
    """One job's accuracy over run time: per method, a line per run, each ``[(ended_s, accuracy), ...]`` by round."""

    job: JobInfo
    lines: dict[str, list[list[tuple[float, float]]]]


class MemberShares(NamedTuple):
    """One Meta-Greedy method's members: each one's share of the rounds won up to each round number."""

    rounds: list[int]
    shares: dict[str, list[float]]  # by member, one value per entry of ``rounds``


def accuracy_curves(runs: Runs) -> list[AccuracyCurves]:
    """Every job's curves, in order of first appearance across methods and runs; a job with no round has none.

    A line holds the rounds of one run of the job (its ``run_id``), so another
    run's records never join it.
    """
    infos: dict[JobId, JobInfo] = {}
    for method_runs in runs.values():
        for jobs, _ in method_runs:
            for job in jobs:
                infos.setdefault(job.job, job)
    curves = []
    for name, info in infos.items():
        lines = {
            method: [[(r.ended_s, r.accuracy) for r in line] for run in method_runs for line in _job_lines(run, name)]
            for method, method_runs in runs.items()
        }
        if any(lines.values()):
            curves.append(AccuracyCurves(info, lines))
    return curves


def plot_accuracy(folder: str | os.PathLike[str], runs: Runs) -> list[Path]:
    """One ``accuracy-<job>.png`` per job of ``accuracy_curves``: every run a line.

    A colour per method, named once in the legend however many runs it has;
    the job's accuracy target is a dashed line.
    """
    directory = Path(folder)
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for info, lines in accuracy_curves(runs):
        figure = _figure((7.5, 4.5))
        axes = figure.add_subplot()
        for index, (method, curves) in enumerate(lines.items()):
            for number, points in enumerate(curves):
                axes.plot(
                    [t for t, _ in points],
                    [a for _, a in points],
                    color=f"C{index % 10}",
                    alpha=0.7,
                    linewidth=1.3,
                    marker="o",  # a one-round run is still visible
                    markersize=3,
                    label=method if number == 0 else None,
                )
        if info.target_accuracy is not None:
            axes.axhline(
                info.target_accuracy, linestyle="--", color="grey", linewidth=1.0,
                label=f"target {info.target_accuracy:g}",
            )
        several = any(len(curves) > 1 for curves in lines.values())
        axes.set_title(f"{info.job}: {info.model} on {info.dataset}" + (" (every run a line)" if several else ""))
        axes.set_xlabel("run time (s)")
        axes.set_ylabel("test accuracy")
        axes.set_xlim(left=0.0)
        axes.grid(True, alpha=0.3)
        axes.legend(loc="best", fontsize=8)
        path = directory / f"accuracy-{_file_safe(info.job)}.png"
        figure.savefig(path, dpi=120)
        written.append(path)
    return written


def meta_greedy_wins(choices: Sequence[SchedulerChoice]) -> dict[JobId, dict[str, int]]:
    """Per job, how many rounds each Meta-Greedy member's plan won (0 for a member that took part and never won).

    Jobs and members in order of first appearance.
    """
    members = list(dict.fromkeys(c.member for c in choices))
    wins = {job: dict.fromkeys(members, 0) for job in dict.fromkeys(c.job for c in choices)}
    for choice in choices:
        wins[choice.job][choice.member] += int(choice.won)
    return wins


def plot_meta_greedy_wins(path: str | os.PathLike[str], choices: Sequence[SchedulerChoice]) -> Path | None:
    """Grouped bars of ``meta_greedy_wins``: per job, a bar per member.

    None (and no file) when there are no choices, i.e. the run did not use Meta-Greedy.
    """
    if not choices:
        return None
    from matplotlib.ticker import MaxNLocator

    wins = meta_greedy_wins(choices)
    jobs = list(wins)
    members = list(wins[jobs[0]])
    figure = _figure((max(6.0, 1.2 * len(jobs) * len(members) / 2), 4.5))
    axes = figure.add_subplot()
    width = 0.8 / len(members)
    for index, member in enumerate(members):
        offsets = [j + (index - (len(members) - 1) / 2) * width for j in range(len(jobs))]
        bars = axes.bar(offsets, [wins[job][member] for job in jobs], width, label=member)
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


def member_shares(runs: Runs) -> dict[str, MemberShares]:
    """Per method that recorded winners (Meta-Greedy): each member's share of the rounds won up to round r.

    Counted over all the method's runs and jobs (the rounds' ``winner``);
    members in name order, rounds in number order.
    """
    shares: dict[str, MemberShares] = {}
    for method, method_runs in runs.items():
        by_round: dict[int, Counter[str]] = defaultdict(Counter)
        for _, records in method_runs:
            for r in records:
                if r.winner is not None:
                    by_round[r.round][r.winner] += 1
        if not by_round:
            continue
        members = sorted({m for counts in by_round.values() for m in counts})
        seen: Counter[str] = Counter()
        rounds = sorted(by_round)
        series: dict[str, list[float]] = {m: [] for m in members}
        for number in rounds:
            seen.update(by_round[number])
            total = sum(seen.values())
            for member in members:
                series[member].append(seen[member] / total)
        shares[method] = MemberShares(rounds, series)
    return shares


def plot_member_wins(folder: str | os.PathLike[str], runs: Runs) -> list[Path]:
    """``member-wins.png``: ``member_shares``, a panel per Meta-Greedy method (the paper's appendix figure).

    Nothing (no file) when no method recorded a winner.
    """
    shares = member_shares(runs)
    if not shares:
        return []
    figure = _figure((6.5, 3.2 * len(shares)))
    for row, (method, (rounds, series)) in enumerate(shares.items()):
        axes = figure.add_subplot(len(shares), 1, row + 1)
        for member, values in series.items():
            axes.plot(rounds, values, label=member, linewidth=1.5)
        axes.set_title(f"{method}: share of rounds won so far, per member")
        axes.set_xlabel("round")
        axes.set_ylabel("share won")
        axes.set_ylim(0, 1)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8, ncols=3)
    directory = Path(folder)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "member-wins.png"
    figure.savefig(path, dpi=120)
    return [path]


def _job_lines(run: RunRecords, name: JobId) -> list[list[RoundRecord]]:
    """The rounds of job ``name`` in each run of ``run``'s jobs that has some: a line each, by round."""
    jobs, records = run
    lines = []
    for run_id in dict.fromkeys(job.run_id for job in jobs if job.job == name):
        rounds = sorted((r for r in records if r.run_id == run_id and r.job == name), key=lambda r: r.round)
        if rounds:
            lines.append(rounds)
    return lines


def _figure(size: tuple[float, float]) -> Figure:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=size, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def _file_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name) or "job"
