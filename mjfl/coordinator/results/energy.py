"""Energy: what each job spent to reach its target, and what each device spent, from the records.

Pure functions from round records to plain data, like ``outcomes``. A device
round's energy is ``DeviceRound.energy_j``: measured from the battery on
phones, modelled (``power_w x compute_s``) for emulated and simulated devices
(protocol.md 5.5, docs/profiles.md section 9); None when not known (a phone
without a charge counter, a task trained while charging, a failed task, a
round recorded before the database held energy).

A job's energy to target sums its device rounds' energy over its rounds up to
and including the first that reached the target (``targets.job_rounds``, the
round whose end is the job's time to target); a group's sums its jobs'.
Rounds whose devices told no energy add nothing, so the sum is a lower bound
when some were unknown: ``known`` and ``device_rounds`` say how many of them
it counts.

A phone says why a task's energy is null (``device_state.energy_source``,
protocol.md 5.5): it trained while charging, its battery has no charge
counter, the counter rose or read implausibly, or it could not be read.
``task_energy`` words one task's energy as the dashboard and `mjfl report`
show it: the joules with the fuel gauge's resolution ("14.4 J ± 14.4"),
or why there is none ("not measured, charging"); ``device_energy`` counts
each device's tasks not measured, by reason.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mjfl.coordinator.results.targets import JobRounds, job_rounds
from mjfl.coordinator.storage.records import JobInfo, RoundRecord

__all__ = [
    "NOT_MEASURED", "device_energy", "device_order", "energy_resolution", "energy_to_target", "job_energy",
    "merge_device_energy",
    "not_measured_text", "task_energy",
]  # fmt: skip

# Why a phone's task has no energy, by its ``energy_source`` (the app's words, protocol.md 5.5), as people read it.
NOT_MEASURED = {
    "charging": "not measured, charging",
    "unsupported": "not measured, no charge counter",
    "counter_rose": "not measured, the charge counter rose",
    "unavailable": "not measured, the counter could not be read",
    "implausible": "not measured, an implausible reading",
}


def task_energy(energy_j: float | None, device_state: Mapping[str, Any] | None) -> str:
    """One task's energy as shown: "14.4 J ± 14.4" (± the fuel gauge's resolution, when told), "3.2 J" (modelled),
    why it is not known ("not measured, charging"), or "" when the device said nothing of it (a failed task, an
    older app)."""
    state = device_state or {}
    if energy_j is not None:
        resolution = energy_resolution(state)
        return f"{energy_j:.1f} J" + (f" ± {resolution:.1f}" if resolution is not None else "")
    source = state.get("energy_source")
    if not isinstance(source, str) or source in ("battery", "modelled"):
        return ""
    return NOT_MEASURED.get(source, f"not measured, {source}")


def not_measured_text(counts: Mapping[str, int]) -> str:
    """Device rounds not measured, by reason: "12 not measured, charging; 3 not measured, no charge counter"."""
    return "; ".join(f"{n} {NOT_MEASURED.get(source, f'not measured, {source}')}" for source, n in counts.items())


def energy_resolution(state: Mapping[str, Any]) -> float | None:
    """The fuel gauge's step a task's energy is known to (``energy_resolution_j``): a finite number > 0, else None."""
    value = state.get("energy_resolution_j")
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    return float(value) if ok else None


def job_energy(jobs: Sequence[JobInfo], records: Sequence[RoundRecord]) -> dict[str, dict[str, Any]]:
    """Per job, ``energy_to_target`` of its rounds, in ``jobs`` order."""
    return {str(job.job): energy_to_target([job_rounds(job, records)]) for job in jobs}


def energy_to_target(jobs: Iterable[JobRounds]) -> dict[str, Any]:
    """``{"to_target_j", "known", "device_rounds"}`` of one job's rounds, or of a group's (every job's).

    ``to_target_j``: joules over each job's device rounds up to its target,
    None when a job never reached it (a group is done when its last job is)
    or no device round up to it told its energy. ``known`` /
    ``device_rounds``: the device rounds counted (every round of a job that
    never reached its target) that told an energy, and all of them.
    """
    progress = list(jobs)
    energies = [d.energy_j for job in progress for r in job.up_to_target for d in r.devices]
    known = [e for e in energies if e is not None]
    reached = all(job.reached_at is not None for job in progress)
    return {
        "to_target_j": float(sum(known)) if known and reached else None,
        "known": len(known),
        "device_rounds": len(energies),
    }


def device_energy(records: Iterable[RoundRecord]) -> dict[str, dict[str, Any]]:
    """Per device, in order of first appearance:
    ``{"total_j", "rounds", "per_round_j", "source", "resolution_j", "not_measured"}``.

    Over every device round of ``records`` that told an energy: their sum, how
    many, the mean per round, and where it came from (``energy_source`` from
    the device state: "battery", "modelled", or several joined by "+"); the
    sum's uncertainty from the fuel gauge's steps (the rounds' resolutions
    added; None when none told one). A device none of whose rounds told one
    has ``total_j`` and ``per_round_j`` None, ``rounds`` 0 and ``source``
    None. ``not_measured``: its rounds with no energy that said why, by
    ``energy_source`` ("charging": 12).
    """
    totals: dict[str, list[float]] = {}
    sources: dict[str, dict[str, None]] = {}
    resolutions: dict[str, list[float]] = {}
    missing: dict[str, dict[str, int]] = {}
    for record in records:
        for d in record.devices:
            device, state = str(d.device), d.device_state or {}
            energies = totals.setdefault(device, [])
            seen = sources.setdefault(device, {})
            steps = resolutions.setdefault(device, [])
            why = missing.setdefault(device, {})
            source = state.get("energy_source")
            if d.energy_j is None:
                if task_energy(None, state):
                    why[str(source)] = why.get(str(source), 0) + 1
                continue
            energies.append(d.energy_j)
            seen[source if isinstance(source, str) else "unknown"] = None
            if (step := energy_resolution(state)) is not None:
                steps.append(step)
    return {
        device: _device_entry(sum(energies), len(energies), sources[device], resolutions[device] or None, missing[device])
        for device, energies in totals.items()
    }


def merge_device_energy(tables: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Several runs' ``device_energy`` as one, in ``device_order``: totals and rounds added, per round and sources recomputed."""
    totals: dict[str, tuple[float, int]] = {}
    sources: dict[str, dict[str, None]] = {}
    resolutions: dict[str, list[float]] = {}
    missing: dict[str, dict[str, int]] = {}
    for table in tables:
        for device, entry in table.items():
            total, rounds = totals.get(device, (0.0, 0))
            totals[device] = (total + (entry["total_j"] or 0.0), rounds + entry["rounds"])
            seen = sources.setdefault(device, {})
            for source in (entry["source"] or "").split("+"):
                if source:
                    seen[source] = None
            steps = resolutions.setdefault(device, [])
            if entry.get("resolution_j") is not None:
                steps.append(entry["resolution_j"])
            why = missing.setdefault(device, {})
            for source, n in (entry.get("not_measured") or {}).items():
                why[source] = why.get(source, 0) + n
    return {
        device: _device_entry(*totals[device], sources[device], resolutions[device] or None, missing[device])
        for device in sorted(totals, key=device_order)
    }


def device_order(device: str) -> tuple[str | int, ...]:
    """A key that lists devices as a person would: ``d2`` before ``d10`` (runs of digits compared as numbers)."""
    # Split on a captured group, the parts alternate: text, digits, text, ...
    return tuple(int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", device)))


def _device_entry(
    total: float, rounds: int, sources: Mapping[str, None], resolutions: list[float] | None, missing: Mapping[str, int]
) -> dict[str, Any]:
    return {
        "total_j": float(total) if rounds else None,
        "rounds": rounds,
        "per_round_j": float(total) / rounds if rounds else None,
        "source": "+".join(sources) or None,
        "resolution_j": float(sum(resolutions)) if resolutions and rounds else None,
        "not_measured": dict(missing),
    }
