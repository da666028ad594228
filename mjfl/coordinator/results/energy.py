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
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mjfl.coordinator.results.targets import JobRounds, job_rounds
from mjfl.coordinator.storage.records import JobInfo, RoundRecord

__all__ = ["device_energy", "device_order", "energy_to_target", "job_energy", "merge_device_energy"]


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
    """Per device, in order of first appearance: ``{"total_j", "rounds", "per_round_j", "source"}``.

    Over every device round of ``records`` that told an energy: their sum, how
    many, the mean per round, and where it came from (``energy_source`` from
    the device state: "battery", "modelled", or several joined by "+"). A
    device none of whose rounds told one has ``total_j`` and ``per_round_j``
    None, ``rounds`` 0 and ``source`` None.
    """
    totals: dict[str, list[float]] = {}
    sources: dict[str, dict[str, None]] = {}
    for record in records:
        for d in record.devices:
            energies = totals.setdefault(str(d.device), [])
            seen = sources.setdefault(str(d.device), {})
            if d.energy_j is None:
                continue
            energies.append(d.energy_j)
            source = (d.device_state or {}).get("energy_source")
            seen[source if isinstance(source, str) else "unknown"] = None
    return {device: _device_entry(sum(energies), len(energies), sources[device]) for device, energies in totals.items()}


def merge_device_energy(tables: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Several runs' ``device_energy`` as one, in ``device_order``: totals and rounds added, per round and sources recomputed."""
    totals: dict[str, tuple[float, int]] = {}
    sources: dict[str, dict[str, None]] = {}
    for table in tables:
        for device, entry in table.items():
            total, rounds = totals.get(device, (0.0, 0))
            totals[device] = (total + (entry["total_j"] or 0.0), rounds + entry["rounds"])
            seen = sources.setdefault(device, {})
            for source in (entry["source"] or "").split("+"):
                if source:
                    seen[source] = None
    return {device: _device_entry(*totals[device], sources[device]) for device in sorted(totals, key=device_order)}


def device_order(device: str) -> tuple[str | int, ...]:
    """A key that lists devices as a person would: ``d2`` before ``d10`` (runs of digits compared as numbers)."""
    # Split on a captured group, the parts alternate: text, digits, text, ...
    return tuple(int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", device)))


def _device_entry(total: float, rounds: int, sources: Mapping[str, None]) -> dict[str, Any]:
    return {
        "total_j": float(total) if rounds else None,
        "rounds": rounds,
        "per_round_j": float(total) / rounds if rounds else None,
        "source": "+".join(sources) or None,
    }
