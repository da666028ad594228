"""Outcomes: a job's, a run's (the summary), and those of several runs of a method gathered.

Pure functions from records (``mjfl.coordinator.storage.records``) to plain
data (dicts of numbers, None where a target was never reached), so a report
can be rebuilt from the run database alone and any front end can show it.

The numbers are the paper's (Tables 4-5): a job's time to target is the
run-clock time (seconds since the run started; runs start at 0) at the end
of its first round that reaches the target; a group's time is its slowest
job's, since the group is done when its last job is (``targets``, the one
home of both rules).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from mjfl.coordinator.results.energy import device_energy, energy_to_target, merge_device_energy
from mjfl.coordinator.results.targets import JobRounds, group_time, job_rounds
from mjfl.coordinator.storage.records import JobInfo, JobOutcome, RoundRecord
from mjfl.ids import JobId

__all__ = ["Results", "RunRecords", "Runs", "gather", "job_outcomes", "run_summary", "spread", "summary"]

RunRecords: TypeAlias = tuple[Sequence[JobInfo], Sequence[RoundRecord]]
"""One run's jobs and rounds, as the run database holds them."""

Results: TypeAlias = Mapping[str, RunRecords]
"""One run per method: ``{"meta-greedy": (jobs, records), "random": (jobs, records), ...}``."""

Runs: TypeAlias = Mapping[str, Sequence[RunRecords]]
"""Several runs per method (seeds, folders): ``{"random": [(jobs, records), ...], ...}``."""


def job_outcomes(jobs: Sequence[JobInfo], records: Sequence[RoundRecord]) -> dict[JobId, JobOutcome]:
    """Each job's row of Tables 4-5, in ``jobs`` order.

    Only records of the job's own run (``run_id``) count. ``final_accuracy``
    is the last round's accuracy (NaN when the job has no round).
    """
    return {job.job: _outcome(job, job_rounds(job, records)) for job in jobs}


def run_summary(jobs: Sequence[JobInfo], records: Sequence[RoundRecord]) -> dict[str, Any]:
    """One run's ``{"jobs": {job: {...}}, "total_time_s": ..., "energy": {...}}`` (see ``summary``)."""
    progress = [job_rounds(job, records) for job in jobs]
    outcomes = [_outcome(job, rounds) for job, rounds in zip(jobs, progress)]
    entries = {
        str(outcome.job): {
            "time_to_target_s": _float_or_none(outcome.time_to_target_s),
            "final_accuracy": _float_or_none(outcome.final_accuracy),
            "rounds": int(outcome.rounds),
        }
        for outcome in outcomes
    }
    total = group_time([o.time_to_target_s for o in outcomes])
    runs = {job.run_id for job in jobs}
    energy = {
        "jobs": {str(job.job): energy_to_target([rounds]) for job, rounds in zip(jobs, progress)},
        "group": energy_to_target(progress),
        "devices": device_energy(r for r in records if r.run_id in runs),
    }
    return {"jobs": entries, "total_time_s": _float_or_none(total), "energy": energy}


def summary(results: Results) -> dict[str, Any]:
    """``{"methods": {method: {"jobs": {job: {...}}, "total_time_s": ...}}}`` (summary.json).

    Per job: ``time_to_target_s`` (float, or None if never reached),
    ``final_accuracy`` (float; None only if the job has no round or a NaN
    accuracy, since JSON has no NaN) and ``rounds`` (int). ``total_time_s`` is
    the group's time to target, the latest of its jobs', or None when any job
    (or every job, for an empty group) never reached its target. ``energy``:
    ``{"jobs": energy.job_energy(...), "group": energy.energy_to_target(...),
    "devices": energy.device_energy(...)}``, each job's energy to its target,
    the group's (every job's, None until its last job reached its target) and
    each device's energy over the run.
    """
    return {"methods": {method: run_summary(jobs, records) for method, (jobs, records) in results.items()}}


def gather(runs: Sequence[RunRecords], seeds: Iterable[int]) -> dict[str, Any]:
    """One method's runs: per job and for the group, the ``spread`` over the runs.

    ``{"runs", "seeds", "jobs": {job: {"time_to_target_s", "final_accuracy"}},
    "group_time_s", "wins", "energy"}``; ``energy``: per job and for the group
    the ``spread`` of its energy to target (``energy.energy_to_target``), per
    device its energy over every run (``energy.merge_device_energy``, in
    device order); ``wins``: the share of all rounds (every run, every job)
    whose plan each Meta-Greedy member made, most first (empty for other
    schedulers).
    """
    summaries = [run_summary(jobs, records) for jobs, records in runs]
    jobs: dict[str, Any] = {}
    for name in dict.fromkeys(job for entry in summaries for job in entry["jobs"]):
        entries = [entry["jobs"][name] for entry in summaries if name in entry["jobs"]]
        jobs[name] = {
            "time_to_target_s": spread([e["time_to_target_s"] for e in entries]),
            "final_accuracy": spread([e["final_accuracy"] for e in entries]),
        }
    wins = Counter(r.winner for _, records in runs for r in records if r.winner is not None)
    decided = sum(wins.values())
    return {
        "runs": len(runs),
        "seeds": sorted(set(seeds)),
        "jobs": jobs,
        "group_time_s": spread([entry["total_time_s"] for entry in summaries]),
        "wins": {member: round(count / decided, 4) for member, count in wins.most_common()} if decided else {},
        "energy": {
            "jobs": {
                name: spread([e["energy"]["jobs"][name]["to_target_j"] for e in summaries if name in e["energy"]["jobs"]])
                for name in jobs
            },
            "group": spread([entry["energy"]["group"]["to_target_j"] for entry in summaries]),
            "devices": merge_device_energy(entry["energy"]["devices"] for entry in summaries),
        },
    }


def spread(values: Sequence[float | None]) -> dict[str, Any]:
    """Mean and standard deviation of the values that exist (None: not reached), and how many of how many do."""
    present = [v for v in values if v is not None]
    return {
        "mean": statistics.fmean(present) if present else None,
        "sd": statistics.stdev(present) if len(present) > 1 else None,
        "reached": len(present),
        "runs": len(values),
    }


def _outcome(job: JobInfo, progress: JobRounds) -> JobOutcome:
    own, first = progress.rounds, progress.first_reached
    return JobOutcome(
        job=job.job,
        rounds=len(own),
        final_accuracy=own[-1].accuracy if own else math.nan,
        time_to_target_s=None if first is None else first.ended_s,
        reached_target=first is not None,
    )


def _float_or_none(value: float | None) -> float | None:
    if value is None or not math.isfinite(value):
        return None
    return float(value)
