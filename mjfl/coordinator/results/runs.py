"""The ended runs of output folders, read back from their run databases.

Each folder is a run's output folder (``out_dir``), its records in the run
database (``storage/layout.py: database_path``). A run is named by its method
and the settings that make it a variant (non-default cost weights, the
method's options), so runs of one variant over several seeds or folders
gather under one name (``outcomes.gather``). A run stopped before its end
(Ctrl-C, a lab's cancel: its status ``interrupted``) is read too, its name
saying so (``INTERRUPTED``): its rounds up to the stop gather apart from the
finished runs'. A run still running, or one that failed, is left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mjfl.coordinator.config import SchedulerConfig
from mjfl.coordinator.results.outcomes import RunRecords
from mjfl.coordinator.results.provenance import provenance_document
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import DATABASE_FILE, database_path
from mjfl.coordinator.storage.records import JobInfo, RoundRecord, RunInfo
from mjfl.errors import UserError

__all__ = ["INTERRUPTED", "REPORTED", "FinishedRun", "FoundRuns", "finished_runs", "partition_name", "run_label"]

REPORTED = ("finished", "interrupted")  # the statuses of the runs read back
INTERRUPTED = " (interrupted)"  # what an interrupted run's name ends with
_WEIGHTS = ("alpha", "beta", "omega")  # the cost weights (schedulers/cost.py)


@dataclass(frozen=True)
class FinishedRun:
    """An ended run (finished or interrupted): its record, its name, its jobs and rounds, and its jobs' partitions."""

    info: RunInfo
    label: str  # ``run_label``: the method and what makes the run a variant (and ``INTERRUPTED``)
    jobs: tuple[JobInfo, ...]
    rounds: tuple[RoundRecord, ...]
    partitions: Mapping[str, str]  # job -> ``partition_name``, where the run's configuration says
    provenance: Mapping[str, Any] | None = None  # ``provenance_document``: what it ran on (None: not kept)
    status: str = "finished"  # or "interrupted"

    @property
    def records(self) -> RunRecords:
        return self.jobs, self.rounds


@dataclass(frozen=True)
class FoundRuns:
    """What the folders hold: the ended runs (finished or interrupted), in order, and how many others (running or
    failed) were left out."""

    finished: tuple[FinishedRun, ...]
    unfinished: int


def finished_runs(folders: Iterable[Path]) -> FoundRuns:
    """Every finished or interrupted run of ``folders``, folder by folder in the order each database started them.

    A folder without a run database is the user's mistake (``UserError``): a
    report of nothing would hide it.
    """
    finished: list[FinishedRun] = []
    unfinished = 0
    for folder in folders:
        database = database_path(folder)
        if not database.is_file():
            raise UserError(f"{folder}: no run database ({DATABASE_FILE}) here; give a run's output folder")
        with Storage(database) as storage:
            for info, status in storage.runs():
                if status not in REPORTED:
                    unfinished += 1
                    continue
                config = json.loads(info.config_json)
                label = run_label(info.method, config.get("scheduler", {}))
                finished.append(
                    FinishedRun(
                        info=info,
                        label=label if status == "finished" else label + INTERRUPTED,
                        jobs=tuple(storage.jobs(info.run_id)),
                        rounds=tuple(storage.rounds(info.run_id)),
                        partitions={
                            str(job["name"]): partition_name(job)
                            for job in config.get("jobs", [])
                            if "name" in job and "partition" in job
                        },
                        provenance=provenance_document(*storage.provenance(info.run_id)),
                        status=status,
                    )
                )
    return FoundRuns(tuple(finished), unfinished)


def run_label(method: str, scheduler: Mapping[str, Any]) -> str:
    """The method, and the settings that make its runs a variant: non-default weights, its options."""
    default = SchedulerConfig()
    settings = {k: scheduler[k] for k in _WEIGHTS if k in scheduler and scheduler[k] != getattr(default, k)}
    settings |= scheduler.get("options", {}).get(method, {})
    if not settings:
        return method
    return f"{method} ({', '.join(f'{k}={v}' for k, v in settings.items())})"


def partition_name(job: Mapping[str, Any]) -> str:
    """A job's partition as the paper's tables name it: its non-IID is two classes a device."""
    scheme = str(job["partition"])
    classes = job.get("classes_per_device", 2)
    return scheme if scheme != "noniid" or classes == 2 else f"noniid ({classes} classes per device)"
