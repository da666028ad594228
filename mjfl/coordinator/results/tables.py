"""The results tables (the paper's Tables 4-5) as rich tables: one run per method, or many gathered.

They render what ``outcomes`` computed (``summary``, ``gather``) and, beside
a gathered table, the paper's own figures (``paper.figures_for``). Speedups
are quoted against FedAvg's random selection, as in the paper; "—" marks a
target never reached. The energy table (``energy_table``) renders each job's
and the group's energy to target as ``energy`` computed them, "—" where no
energy is known.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

from mjfl.coordinator.results import paper
from mjfl.coordinator.storage.records import JobInfo
from mjfl.ids import JobId

__all__ = ["BASELINE", "NOT_REACHED", "energy_known", "energy_table", "gathered_table", "results_table"]

NOT_REACHED = "—"
BASELINE = "random"


def results_table(summary: Mapping[str, Any], jobs: Sequence[JobInfo]) -> Table:
    """The paper's Tables 4-5 for one run per method (``outcomes.summary``): a row per method.

    Per job, time to target and final accuracy; then the group's time to
    target and, when a ``random`` run is present, how many times faster than
    it each method reached the group target. The best of each column is bold
    green.
    """
    methods: Mapping[str, Any] = summary["methods"]
    table = Table(title="Time to target accuracy", title_justify="left")
    table.add_column("method", style="bold", no_wrap=True)  # a name cut short reads as another method
    columns: list[tuple[str, list[float | None], bool]] = []  # (kind, values, lower is better)
    for job in jobs:
        table.add_column(f"{job.job}\ntime to target (s)\n{job.target}", justify="right")
        table.add_column(f"{job.job}\nfinal accuracy\n(last round)", justify="right")
        columns.append(("time", [_job_value(m, job.job, "time_to_target_s") for m in methods.values()], True))
        columns.append(("acc", [_job_value(m, job.job, "final_accuracy") for m in methods.values()], False))
    table.add_column("group\ntime to target (s)\n(slowest job)", justify="right")
    columns.append(("time", [m.get("total_time_s") for m in methods.values()], True))
    baseline = next((name for name in methods if name.lower() == BASELINE), None)
    baseline_time = None if baseline is None else methods[baseline].get("total_time_s")
    if baseline is not None:
        table.add_column(f"speedup\nvs {baseline}\n(group)", justify="right")
        columns.append(
            ("speedup", [_speedup(baseline_time, m.get("total_time_s")) for m in methods.values()], False)
        )

    best = [_best(values, lower) for _, values, lower in columns]
    for row, method in enumerate(methods):
        cells = [method]
        for (kind, values, _), top in zip(columns, best):
            text = _cell(kind, values[row])
            cells.append(f"[bold green]{text}[/]" if top is not None and values[row] == top else text)
        table.add_row(*cells)

    table.caption = _fastest(methods, baseline)
    return table


def gathered_table(gathered: Mapping[str, Any], jobs: Sequence[JobInfo], title: str = "") -> Table:
    """Tables 4-5 over many runs (``mjfl report``): per method, mean ± sd over its runs, then the paper's rows.

    ``gathered`` is ``{"methods": {name: outcomes.gather(...)}, "paper":
    paper.figures_for(...)}``. A time reached in only some runs says how many
    (``(1/2)``); the fastest group reached in every run is bold green; the
    caption gives Meta-Greedy's member shares.
    """
    methods: Mapping[str, Any] = gathered["methods"]
    seeds = sorted({s for m in methods.values() for s in m["seeds"]})
    table = Table(
        title=f"{title}Time to target accuracy, mean ± sd over runs (seeds {', '.join(map(str, seeds))})",
        title_justify="left",
    )
    table.add_column("method", style="bold", overflow="fold")
    table.add_column("runs", justify="right")
    for job in jobs:
        table.add_column(f"{job.job}\ntime to target (s)\n{job.target}", justify="right")
        table.add_column(f"{job.job}\nfinal accuracy", justify="right")
    table.add_column("group\ntime to target (s)", justify="right")
    baseline = methods.get(BASELINE, {}).get("group_time_s", {}).get("mean")
    if baseline is not None:
        table.add_column(f"speedup\nvs {BASELINE}", justify="right")
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


def _add_paper_rows(table: Table, matches: Mapping[str, Any], jobs: Sequence[JobInfo], *, extra: int) -> None:
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
            cells += [NOT_REACHED if time is None else f"{time:.1f}", f"{entry['final_accuracy']:.4f}"]
        table.add_row(*cells, *[""] * extra, style="dim")


def _fastest(methods: Mapping[str, Any], baseline: str | None) -> str | None:
    """The caption naming the fastest group against the baseline, when there is one to compare with."""
    reached = {name: m["total_time_s"] for name, m in methods.items() if m.get("total_time_s") is not None}
    if len(methods) < 2 or baseline is None or baseline not in reached:
        return None
    fastest = min(reached, key=reached.__getitem__)
    if fastest == baseline:
        return f"fastest group: {baseline}, the baseline"
    return f"fastest group: {fastest}, {reached[baseline] / reached[fastest]:.2f}x faster than {baseline}"


def _complete(entry: Mapping[str, Any]) -> bool:
    """Reached in every run: only then is a mean comparable across methods."""
    return entry["mean"] is not None and entry["reached"] == entry["runs"]


def _time_cell(entry: Mapping[str, Any]) -> str:
    if entry["mean"] is None:
        return NOT_REACHED
    text = f"{entry['mean']:.1f}" + (f" ± {entry['sd']:.1f}" if entry["sd"] is not None else "")
    if entry["reached"] < entry["runs"]:
        text += f" ({entry['reached']}/{entry['runs']})"
    return text


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


def energy_known(methods: Mapping[str, Any]) -> bool:
    """Whether any device round of any method told its energy (else the energy table holds only "—")."""
    return any(entry["rounds"] for m in methods.values() for entry in m["energy"]["devices"].values())


def energy_table(methods: Mapping[str, Any], jobs: Sequence[JobInfo], *, caption: str | None = None) -> Table:
    """Energy to target per method, each job's and the group's (joules); ``caption``: where each device's is.

    ``methods``: ``{name: figures}``, the figures of ``outcomes.run_summary``
    (one run: an energy to target, with how many of its device rounds told
    theirs when not all did) or of ``outcomes.gather`` (several runs: mean ±
    sd, and in how many runs it is known). Each device's energy stays off
    the terminal (a row per device and method): the run's files hold it.
    """
    table = Table(title="Energy to target (J): every device round up to the target round", title_justify="left",
                  caption=caption)
    table.add_column("method", style="bold", overflow="fold")
    for job in jobs:
        table.add_column(f"{job.job}\nenergy to target (J)\n{job.target}", justify="right")
    table.add_column("group\nenergy to target (J)\n(every job)", justify="right")
    for name, method in methods.items():
        entries = method["energy"]["jobs"]
        cells = [_energy_to_target_cell(entries.get(str(job.job))) for job in jobs]
        table.add_row(name, *cells, _energy_to_target_cell(method["energy"]["group"]))
    return table


def _energy_to_target_cell(entry: Mapping[str, Any] | None) -> str:
    if entry is None:
        return ""
    if "mean" in entry:  # a spread over runs
        return _time_cell(entry)
    text = _joules(entry["to_target_j"])
    if entry["to_target_j"] is not None and entry["known"] < entry["device_rounds"]:
        text += f" ({entry['known']}/{entry['device_rounds']} known)"  # a lower bound
    return text


def _joules(value: float | None) -> str:
    return NOT_REACHED if value is None else f"{value:.1f}"

