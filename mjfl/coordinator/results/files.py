"""The report's files: JSON documents (summary.json, `mjfl report --json`, study.json), rounds.csv and energy.csv."""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from mjfl.coordinator.results.energy import device_order, not_measured_text
from mjfl.coordinator.results.outcomes import Results, RunRecords
from mjfl.coordinator.storage.checkpoints import write_atomically

__all__ = ["CSV_COLUMNS", "ENERGY_COLUMNS", "write_energy_csv", "write_json", "write_rounds_csv"]

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

ENERGY_COLUMNS: tuple[str, ...] = (
    "method", "device", "total_j", "rounds", "per_round_j", "source", "resolution_j", "not_measured",
)  # fmt: skip


def write_json(path: str | os.PathLike[str], document: Mapping[str, Any]) -> Path:
    """Write ``document`` as indented JSON (None as null, NaN refused), atomically; returns the path."""
    text = json.dumps(document, indent=2, allow_nan=False) + "\n"
    # A temporary file and a rename: a crash never leaves half a document (a study
    # takes a summary.json for a finished run).
    file = write_atomically(Path(path), text)
    # The temporary file was private (mkstemp: 0600); a report is as readable as
    # its neighbours, rounds.csv and the plots: 0666 less the umask.
    umask = os.umask(0o022)
    os.umask(umask)
    file.chmod(0o666 & ~umask)
    return file


def write_rounds_csv(path: str | os.PathLike[str], results: Results) -> Path:
    """One CSV row per job round across methods (columns ``CSV_COLUMNS``).

    Rows go method by method, then run (the jobs' run first), then job (in
    ``jobs`` order), then round.
    ``aggregated`` is 1/0, ``devices`` the plan size, ``failed`` the devices
    whose update was not used (status failed or rejected), ``plan`` the device
    ids in plan order joined by ``;``; an absent winner is an empty field.
    """
    return _write_csv(path, CSV_COLUMNS, (row for method, run in results.items() for row in _round_rows(method, run)))


def write_energy_csv(path: str | os.PathLike[str], summary: Mapping[str, Any]) -> Path:
    """Each device's energy over each method's run, one row per method and device (columns ``ENERGY_COLUMNS``).

    ``summary``: ``outcomes.summary``'s figures (``energy.device_energy`` per
    method). Rows go method by method, then in ``energy.device_order``; an
    energy no round told is an empty field.
    """
    return _write_csv(path, ENERGY_COLUMNS, _energy_rows(summary))


def _round_rows(method: str, run: RunRecords) -> Iterator[tuple[Any, ...]]:
    jobs, records = run
    run_ids = dict.fromkeys([*(j.run_id for j in jobs), *(r.run_id for r in records)])
    runs = {run_id: index for index, run_id in enumerate(run_ids)}
    order = {job.job: index for index, job in enumerate(jobs)}
    for r in sorted(records, key=lambda r: (runs[r.run_id], order.get(r.job, len(order)), r.job, r.round)):
        yield (
            method, r.run_id, r.job, r.round, r.started_s, r.ended_s, r.accuracy, r.loss, int(r.aggregated),
            len(r.devices), sum(d.status != "ok" for d in r.devices), r.expected_time_s, r.cost, r.winner or "",
            ";".join(r.plan),
        )


def _energy_rows(summary: Mapping[str, Any]) -> Iterator[tuple[Any, ...]]:
    for method, figures in summary["methods"].items():
        devices = figures["energy"]["devices"]
        for device in sorted(devices, key=device_order):
            entry = {**devices[device], "not_measured": not_measured_text(devices[device].get("not_measured") or {}) or None}
            yield (method, device, *(entry.get(column) for column in ENERGY_COLUMNS[2:]))


def _write_csv(path: str | os.PathLike[str], columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> Path:
    """``rows`` under a header of ``columns`` (None as an empty field); returns the path."""
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    with file.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out)
        writer.writerow(columns)
        writer.writerows(rows)
    return file
