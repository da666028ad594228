"""`mjfl report RUN_DIR...`: the paper's Tables 4-5 over every finished run of the given folders.

Each folder is a run's output folder (``out_dir``); everything is read back
from its run database (``mjfl.db``), so a report can be rebuilt long after
the runs, and runs of several seeds (one folder each, or several in one)
are gathered per method: per job the mean and spread of the time to target
over the runs that reached it (and how many did), the mean final accuracy,
the group's time to target, the speedup against Random, and for Meta-Greedy
the share of rounds each member's plan won. Where a job's set-up matches one
of the paper's (``mjfl.coordinator.results.paper``: data set, model, partition and
target accuracy), the paper's figures follow as rows marked "(paper)".
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from mjfl.coordinator.results import paper, report
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.records import JobInfo, RoundRecord
from mjfl.errors import UserError

DATABASE = "mjfl.db"


def report_runs(
    dirs: Sequence[Path],
    *,
    console: Console,
    json_path: Path | None = None,
    plots: Path | None = None,
    title: str = "",
) -> dict[str, Any]:
    """Gather the finished runs of ``dirs`` per method; print the table, optionally write JSON and plots; return it.

    ``plots``: a folder for ``accuracy-<job>.png`` (accuracy against run time,
    every run a line, a colour per method) and ``member-wins.png`` (the share of
    rounds each Meta-Greedy member's plan won, cumulated over the rounds: the
    paper's appendix figure).
    """
    if not dirs:
        raise UserError("give at least one run folder (a run's out_dir, holding mjfl.db)")
    per_method: dict[str, list[dict[str, Any]]] = defaultdict(list)
    wins: dict[str, Counter[str]] = defaultdict(Counter)
    jobs: dict[str, JobInfo] = {}
    partitions: dict[str, str] = {}
    curves: dict[str, list[list[RoundRecord]]] = defaultdict(list)
    skipped = 0
    for folder in dirs:
        database = folder / DATABASE
        if not database.is_file():
            raise UserError(f"{folder}: no run database ({DATABASE}) here; give a run's output folder")
        with Storage(database) as storage:
            for info, status in storage.runs():
                if status != "finished":
                    skipped += 1
                    continue
                run_jobs = storage.jobs(info.run_id)
                records = storage.rounds(info.run_id)
                entry = report.summary({info.method: (run_jobs, records)})["methods"][info.method]
                config = json.loads(info.config_json)
                name = _label(info.method, config.get("scheduler", {}))
                per_method[name].append(entry | {"seed": info.seed, "run_id": info.run_id})
                wins[name].update(r.winner for r in records if r.winner is not None)
                curves[name].append(records)
                for job in run_jobs:
                    jobs.setdefault(str(job.job), job)
                for job_config in config.get("jobs", []):
                    if "name" in job_config and "partition" in job_config:
                        partitions.setdefault(str(job_config["name"]), _partition(job_config))
    if not per_method:
        raise UserError(f"no finished run in {', '.join(map(str, dirs))}")
    gathered = {"methods": {m: _gather(runs, wins[m]) for m, runs in per_method.items()}}
    gathered["paper"] = _paper(jobs, partitions)
    console.print(_table(gathered, list(jobs.values()), title))
    console.print(gathered["paper"]["note"], highlight=False)
    if skipped:
        console.print(f"left out {skipped} unfinished run(s)", highlight=False)
    if plots is not None:
        written = _plot_accuracy(plots, curves, jobs) + _plot_member_wins(plots, curves)
        console.print(f"wrote {len(written)} plots to {plots}", highlight=False)
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(gathered, indent=2, allow_nan=False) + "\n")
        console.print(f"wrote {json_path}", highlight=False)
    return gathered


def _partition(job_config: dict[str, Any]) -> str:
    """The job's partition as the paper's tables name it: its non-IID is two classes a device."""
    scheme = str(job_config["partition"])
    classes = job_config.get("classes_per_device", 2)
    return scheme if scheme != "noniid" or classes == 2 else f"noniid ({classes} classes per device)"


def _paper(jobs: dict[str, JobInfo], partitions: dict[str, str]) -> dict[str, Any]:
    """The paper's figures for each job whose set-up matches one of its Tables 4-5, and a one-line note."""
    matches: dict[str, Any] = {}
    for name, info in jobs.items():
        found = paper.match(info.dataset, info.model, partitions.get(name), info.target_accuracy)
        if found is None:
            continue
        matches[name] = {
            "table": found.table,
            "group": found.group,
            "job": found.name,
            "network": found.network,
            "model": found.model,
            "stand_in": found.stand_in,
            "dataset": found.dataset,
            "partition": found.partition,
            "target_accuracy": found.target_accuracy,
            "methods": {
                method: {
                    "time_to_target_min": result.time_to_target_min,
                    "time_to_target_s": result.time_to_target_s,
                    "final_accuracy": result.final_accuracy,
                }
                for method, result in found.results.items()
            },
        }
    if not matches:
        note = (
            "the paper's figures: no job here matches a set-up of its Tables 4-5 "
            "(same data set, model, partition and target accuracy; docs/results.md)"
        )
    else:
        pairs = ", ".join(
            f"{name} = {m['table']} {m['job']} {m['partition']} ({m['network']}"
            + (f", run as {m['model']}, a stand-in)" if m["stand_in"] else ")")
            for name, m in matches.items()
        )
        note = f"(paper) rows: the paper's Tables 4-5, its minutes x 60 (it prints no group time); {pairs}"
    return {"matches": matches, "note": note}


def _label(method: str, scheduler: dict[str, Any]) -> str:
    """The method, and the settings that make its runs a variant: non-default weights, its options."""
    settings = {k: scheduler[k] for k in ("alpha", "beta", "omega") if k in scheduler and scheduler[k] != _DEFAULTS[k]}
    settings |= scheduler.get("options", {}).get(method, {})
    if not settings:
        return method
    return f"{method} ({', '.join(f'{k}={v}' for k, v in settings.items())})"


_DEFAULTS = {"alpha": 1.0, "beta": 0.05, "omega": "sqrt"}


def _gather(runs: list[dict[str, Any]], wins: Counter[str]) -> dict[str, Any]:
    """One method's runs: per job and for the group, mean/spread over the runs that reached the target."""
    jobs: dict[str, Any] = {}
    for name in dict.fromkeys(job for run in runs for job in run["jobs"]):
        entries = [run["jobs"][name] for run in runs if name in run["jobs"]]
        jobs[name] = {
            "time_to_target_s": _spread([e["time_to_target_s"] for e in entries]),
            "final_accuracy": _spread([e["final_accuracy"] for e in entries]),
        }
    decided = sum(wins.values())
    return {
        "runs": len(runs),
        "seeds": sorted({run["seed"] for run in runs}),
        "jobs": jobs,
        "group_time_s": _spread([run["total_time_s"] for run in runs]),
        "wins": {member: round(count / decided, 4) for member, count in wins.most_common()} if decided else {},
    }


def _spread(values: list[float | None]) -> dict[str, Any]:
    """Mean and standard deviation of the values that exist, and how many of how many do."""
    present = [v for v in values if v is not None]
    return {
        "mean": statistics.fmean(present) if present else None,
        "sd": statistics.stdev(present) if len(present) > 1 else None,
        "reached": len(present),
        "runs": len(values),
    }


def _table(gathered: dict[str, Any], jobs: list[JobInfo], title: str = "") -> Table:
    methods: dict[str, Any] = gathered["methods"]
    seeds = sorted({s for m in methods.values() for s in m["seeds"]})
    table = Table(
        title=f"{title}Time to target accuracy, mean ± sd over runs (seeds {', '.join(map(str, seeds))})",
        title_justify="left",
    )
    table.add_column("method", style="bold", overflow="fold")
    table.add_column("runs", justify="right")
    for job in jobs:
        table.add_column(f"{job.job}\ntime to target (s)\n{report.target_text(job)}", justify="right")
        table.add_column(f"{job.job}\nfinal accuracy", justify="right")
    table.add_column("group\ntime to target (s)", justify="right")
    baseline = methods.get(report.BASELINE, {}).get("group_time_s", {}).get("mean")
    if baseline is not None:
        table.add_column(f"speedup\nvs {report.BASELINE}", justify="right")
    fastest = min(
        (m["group_time_s"]["mean"] for m in methods.values() if _complete(m["group_time_s"])), default=None
    )
    for name, method in methods.items():
        cells = [name, str(method["runs"])]
        for job in jobs:
            entry = method["jobs"].get(str(job.job))
            cells.append(_time_cell(entry["time_to_target_s"]) if entry else "")
            accuracy = entry["final_accuracy"]["mean"] if entry else None
            cells.append("" if accuracy is None else f"{accuracy:.4f}")
        group = method["group_time_s"]
        text = _time_cell(group)
        cells.append(f"[bold green]{text}[/]" if _complete(group) and group["mean"] == fastest else text)
        if baseline is not None:
            mean = group["mean"] if _complete(group) else None
            cells.append("" if mean is None or mean <= 0 else f"{baseline / mean:.2f}x")
        table.add_row(*cells)
    _add_paper_rows(table, gathered["paper"]["matches"], jobs, extra=1 + (baseline is not None))
    members = {name: m["wins"] for name, m in methods.items() if m["wins"]}
    if members:
        table.caption = "; ".join(
            f"{name} kept the plan of " + ", ".join(f"{member} {share:.0%}" for member, share in shares.items())
            for name, shares in members.items()
        )
    return table


def _add_paper_rows(table: Table, matches: dict[str, Any], jobs: list[JobInfo], *, extra: int) -> None:
    """A row per method of the paper's tables, filled in for the jobs that match; ``extra``: the group columns."""
    if not matches:
        return
    table.add_section()
    for method in paper.METHODS:
        cells = [f"[italic]{method} (paper)[/]", ""]
        for job in jobs:
            entry = matches.get(str(job.job), {}).get("methods", {}).get(method)
            if entry is None:
                cells += ["", ""]
                continue
            time = entry["time_to_target_s"]
            cells += [report.NOT_REACHED if time is None else f"{time:.1f}", f"{entry['final_accuracy']:.4f}"]
        table.add_row(*cells, *[""] * extra, style="dim")


def _complete(entry: dict[str, Any]) -> bool:
    """Reached in every run: only then is a mean comparable across methods."""
    return entry["mean"] is not None and entry["reached"] == entry["runs"]


def _time_cell(entry: dict[str, Any]) -> str:
    if entry["mean"] is None:
        return report.NOT_REACHED
    text = f"{entry['mean']:.1f}" + (f" ± {entry['sd']:.1f}" if entry["sd"] is not None else "")
    if entry["reached"] < entry["runs"]:
        text += f" ({entry['reached']}/{entry['runs']})"
    return text


def _plot_accuracy(folder: Path, curves: dict[str, list[list[RoundRecord]]], jobs: dict[str, JobInfo]) -> list[Path]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, info in jobs.items():
        figure = Figure(figsize=(7.5, 4.5), layout="constrained")
        FigureCanvasAgg(figure)
        axes = figure.add_subplot()
        for index, (method, runs) in enumerate(curves.items()):
            color = f"C{index % 10}"
            for number, records in enumerate(runs):
                rounds = sorted((r for r in records if str(r.job) == name), key=lambda r: r.round)
                axes.plot(
                    [r.ended_s for r in rounds], [r.accuracy for r in rounds], color=color, alpha=0.6,
                    linewidth=1.2, label=method if number == 0 else None,
                )
        if info.target_accuracy is not None:
            axes.axhline(info.target_accuracy, linestyle="--", color="grey", linewidth=1.0,
                         label=f"target {info.target_accuracy:g}")
        axes.set_title(f"{name}: {info.model} on {info.dataset} (every run a line)")
        axes.set_xlabel("run time (s)")
        axes.set_ylabel("test accuracy")
        axes.set_xlim(left=0.0)
        axes.grid(True, alpha=0.3)
        axes.legend(loc="best", fontsize=8)
        path = folder / f"accuracy-{re.sub(r'[^A-Za-z0-9._-]+', '-', name)}.png"
        figure.savefig(path, dpi=120)
        written.append(path)
    return written


def _plot_member_wins(folder: Path, curves: dict[str, list[list[RoundRecord]]]) -> list[Path]:
    """Per Meta-Greedy method: each member's share of the rounds won up to round r (all its runs and jobs)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    metas = {m: runs for m, runs in curves.items() if any(r.winner for records in runs for r in records)}
    if not metas:
        return []
    figure = Figure(figsize=(6.5, 3.2 * len(metas)), layout="constrained")
    FigureCanvasAgg(figure)
    for row, (method, runs) in enumerate(metas.items()):
        axes = figure.add_subplot(len(metas), 1, row + 1)
        by_round: dict[int, Counter[str]] = defaultdict(Counter)
        for records in runs:
            for r in records:
                if r.winner is not None:
                    by_round[r.round][r.winner] += 1
        members = sorted({m for c in by_round.values() for m in c})
        seen: Counter[str] = Counter()
        rounds = sorted(by_round)
        shares: dict[str, list[float]] = {m: [] for m in members}
        for number in rounds:
            seen.update(by_round[number])
            total = sum(seen.values())
            for member in members:
                shares[member].append(seen[member] / total)
        for member in members:
            axes.plot(rounds, shares[member], label=member, linewidth=1.5)
        axes.set_title(f"{method}: share of rounds won so far, per member")
        axes.set_xlabel("round")
        axes.set_ylabel("share won")
        axes.set_ylim(0, 1)
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8, ncols=3)
    path = folder / "member-wins.png"
    figure.savefig(path, dpi=120)
    return [path]
