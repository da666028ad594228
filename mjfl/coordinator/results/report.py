"""The report steps: figures from records, then the files, the plots and the table.

Two reports, one path each, both built from the records alone:

- ``report_run``: the end of every run (``run.driver.Driver``), one run per
  method: ``summary.json``, ``rounds.csv``, ``energy.csv``,
  ``accuracy-<job>.png``, ``meta-greedy-wins.png``, and on the terminal the
  paper's Tables 4-5 for these runs and each job's and the group's energy to
  target;
- ``report_runs``: `mjfl report` and the end of `mjfl study`, every finished
  run of some output folders gathered per method (``outcomes.gather``; an
  interrupted one apart, its method labelled so: ``runs.INTERRUPTED``), the
  paper's own figures beside them (``paper.figures_for``): the tables, each
  run's provenance (``provenance.py``: a row each, in full in the JSON), and
  optionally the JSON, ``accuracy-<job>.png`` and ``member-wins.png``.

The terminal gets what a person reads at a glance, a row per method; each
device's figures (a row per device and method) go to the files
(``energy.csv``, the JSON) and the dashboard.

``gathered_figures`` is the pure part of the second, for any other front end.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl.coordinator.results import paper
from mjfl.coordinator.results.energy import not_measured_text
from mjfl.coordinator.results.files import write_energy_csv, write_json, write_rounds_csv
from mjfl.coordinator.results.outcomes import Results, Runs, gather, summary
from mjfl.coordinator.results.plots import plot_accuracy, plot_member_wins, plot_meta_greedy_wins
from mjfl.coordinator.results.provenance import provenance_table
from mjfl.coordinator.results.runs import FinishedRun, finished_runs
from mjfl.coordinator.results.tables import (
    energy_known,
    energy_table,
    gathered_table,
    results_table,
)
from mjfl.coordinator.results.utilisation import busy_line, utilisation
from mjfl.coordinator.storage.records import JobInfo, SchedulerChoice
from mjfl.errors import UserError

__all__ = ["ENERGY_FILE", "SUMMARY_FILE", "gathered_figures", "report_run", "report_runs"]

SUMMARY_FILE = "summary.json"
ENERGY_FILE = "energy.csv"  # each device's energy per method, beside the summary


def report_run(
    out_dir: str | os.PathLike[str], results: Results, choices: Sequence[SchedulerChoice], *, console: Console,
    plots: bool = True,
) -> dict[str, Any]:
    """The end of a run: write its files and plots into ``out_dir``, print its table (a quiet console: not even
    rendered); returns the summary.

    ``choices``: Meta-Greedy's candidates, for ``meta-greedy-wins.png`` (none: no plot). ``plots`` False: no
    plots (a study's many runs; `mjfl report FOLDER --plots DIR` draws them from the files).
    """
    folder = Path(out_dir)
    figures = summary(results)
    write_json(folder / SUMMARY_FILE, figures)
    write_rounds_csv(folder / "rounds.csv", results)
    write_energy_csv(folder / ENERGY_FILE, figures)
    if plots:
        plot_accuracy(folder, {method: [run] for method, run in results.items()})
        plot_meta_greedy_wins(folder / "meta-greedy-wins.png", choices)
    if console.quiet:  # rich renders before it drops a quiet console's text: a study's many runs skip both
        return figures
    jobs = next(iter(results.values()))[0]
    console.print(results_table(figures, jobs))
    _print_energy(console, figures["methods"], jobs, devices=f"each device's energy: {ENERGY_FILE}")
    return figures


def report_runs(
    folders: Sequence[Path],
    *,
    console: Console,
    json_path: Path | None = None,
    plots: Path | None = None,
    title: str = "",
    provenance: bool = True,
) -> dict[str, Any]:
    """Gather the finished and interrupted runs of ``folders`` per method; print the table, optionally write JSON and plots.

    Returns the gathered figures (``gathered_figures``, also what ``json_path``
    holds). ``plots``: a folder for ``accuracy-<job>.png`` (every run a line,
    a colour per method) and ``member-wins.png`` (the share of rounds each
    Meta-Greedy member's plan won, cumulated over the rounds: the paper's
    appendix figure). ``title`` prefixes the table's title. ``provenance``: a row per run of what it ran on
    (``provenance.provenance_table``), in full in the figures.
    """
    found = finished_runs(folders)
    if not found.finished:
        raise UserError(f"no finished or interrupted run in {', '.join(map(str, folders))}")
    figures = gathered_figures(found.finished, provenance=provenance)
    jobs = list(_jobs(found.finished).values())
    console.print(gathered_table(figures, jobs, title))
    console.print(figures["paper"]["note"], highlight=False)
    _print_energy(console, figures["methods"], jobs, devices="each device's energy: mjfl report --json FILE")
    for busy in figures["utilisation"]:
        console.print(f"busy {busy['label']} · {busy['run_id']}: {busy_line(busy)}", highlight=False)
    if provenance:
        console.print(provenance_table(figures["provenance"]))
    if found.unfinished:
        console.print(f"left out {found.unfinished} unfinished run(s) (running or failed)", highlight=False)
    # soft_wrap: a long path stays on one line, whole, for a person to copy.
    if plots is not None:
        runs = _records(found.finished)
        written = plot_accuracy(plots, runs) + plot_member_wins(plots, runs)
        console.print(f"wrote {len(written)} plots to {plots}", highlight=False, soft_wrap=True)
    if json_path is not None:
        write_json(json_path, figures)
        console.print(f"wrote {json_path}", highlight=False, soft_wrap=True)
    return figures


def gathered_figures(runs: Sequence[FinishedRun], *, provenance: bool = True) -> dict[str, Any]:
    """``{"methods": {label: outcomes.gather(...)}, "paper": paper.figures_for(...), "utilisation": [...],
    "provenance": {run id: provenance.provenance_document(...)}}`` (`mjfl report --json`; ``provenance`` False
    leaves that out).

    Methods (run labels) and jobs come in order of first appearance;
    ``utilisation`` has a row per run, in ``runs``' order: its ``run_id``,
    ``label`` and ``seed`` with ``Utilisation.figures`` (each device's and
    the fleet's busy fraction).
    """
    partitions: dict[str, str] = {}
    for run in runs:
        for name, partition in run.partitions.items():
            partitions.setdefault(name, partition)
    figures: dict[str, Any] = {
        "methods": {
            label: gather([run.records for run in group], [run.info.seed for run in group])
            for label, group in _by_label(runs).items()
        },
        "paper": paper.figures_for(_jobs(runs), partitions),
        "utilisation": [
            {"run_id": run.info.run_id, "label": run.label, "seed": run.info.seed, **utilisation(run.rounds).figures()}
            for run in runs
        ],
    }
    if provenance:
        figures["provenance"] = {run.info.run_id: run.provenance for run in runs}
    return figures


def _print_energy(console: Console, methods: dict[str, Any], jobs: Sequence[JobInfo], *, devices: str) -> None:
    """The energy table (``devices`` its caption), or one line when no device round told its energy (older runs, phones that cannot);
    then, for each device some of whose tasks were not measured, how many and why ("not measured, charging")."""
    if not energy_known(methods):
        console.print("no energy recorded for these runs", highlight=False)
    else:
        console.print(energy_table(methods, jobs, caption=devices))
    for name, method in methods.items():
        for device, entry in method["energy"]["devices"].items():
            if entry.get("not_measured"):
                label = f"{name}, device {device}" if len(methods) > 1 else f"device {device}"
                console.print(f"{label}: {not_measured_text(entry['not_measured'])}", highlight=False, soft_wrap=True)
    if any(e.get("not_measured", {}).get("charging") for m in methods.values() for e in m["energy"]["devices"].values()):
        console.print("a phone measures energy on battery only: docs/phones.md, energy (wireless debugging)", highlight=False)


def _by_label(runs: Sequence[FinishedRun]) -> dict[str, list[FinishedRun]]:
    grouped: dict[str, list[FinishedRun]] = {}
    for run in runs:
        grouped.setdefault(run.label, []).append(run)
    return grouped


def _records(runs: Sequence[FinishedRun]) -> Runs:
    return {label: [run.records for run in group] for label, group in _by_label(runs).items()}


def _jobs(runs: Sequence[FinishedRun]) -> dict[str, JobInfo]:
    """Each job by name, as the first run that has it describes it."""
    jobs: dict[str, JobInfo] = {}
    for run in runs:
        for job in run.jobs:
            jobs.setdefault(str(job.job), job)
    return jobs
