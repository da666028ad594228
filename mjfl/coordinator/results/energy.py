"""Energy: what each job spent to reach its target, and what each device spent, from the records.

Pure functions from round records to plain data, like ``outcomes``. A device
round's energy is ``DeviceRound.energy_j``: measured from the battery on
phones, modelled (``power_w x compute_s``) for emulated and simulated devices
(protocol.md 5.5, docs/profiles.md section 9); None when not known (a phone
without a charge counter, a task trained while charging, a failed task, a
round recorded before the database held energy).

A job's energy to target sums its device rounds' energy over its rounds up to
and including the first that reached the target (``records.Target.reached``,
the round whose end is the job's time to target). Rounds whose devices told
no energy add nothing, so the sum is a lower bound when some were unknown:
``known`` and ``device_rounds`` say how many of them it counts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from mjfl.coordinator.storage.records import JobInfo, RoundRecord

__all__ = ["device_energy", "job_energy", "merge_device_energy"]


def job_energy(jobs: Sequence[JobInfo], records: Sequence[RoundRecord]) -> dict[str, dict[str, Any]]:
    """Per job, ``{"to_target_j", "known", "device_rounds"}``, in ``jobs`` order.

    ``to_target_j``: joules, None when the job never reached its target or no
    device round up to it told its energy. ``known`` / ``device_rounds``: the
    device rounds up to the target (every round when it was never reached)
    that told an energy, and all of them.
    """
    entries: dict[str, dict[str, Any]] = {}
    for job in jobs:
        own = sorted((r for r in records if r.run_id == job.run_id and r.job == job.job), key=lambda r: r.round)
        reached = next((i for i, r in enumerate(own) if job.target.reached(r.accuracy, r.loss)), None)
        counted = own if reached is None else own[: reached + 1]
        energies = [d.energy_j for r in counted for d in r.devices]
        known = [e for e in energies if e is not None]
        entries[str(job.job)] = {
            "to_target_j": float(sum(known)) if known and reached is not None else None,
            "known": len(known),
            "device_rounds": len(energies),
        }
    return entries


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
    return {device: _device_entry(energies, sources[device]) for device, energies in totals.items()}


def merge_device_energy(tables: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Several runs' ``device_energy`` as one: totals and rounds added, per round and sources recomputed."""
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
    merged: dict[str, dict[str, Any]] = {}
    for device, (total, rounds) in totals.items():
        merged[device] = {
            "total_j": total if rounds else None,
            "rounds": rounds,
            "per_round_j": total / rounds if rounds else None,
            "source": "+".join(sources[device]) or None,
        }
    return merged


def _device_entry(energies: Sequence[float], sources: Mapping[str, None]) -> dict[str, Any]:
    total = float(sum(energies))
    return {
        "total_j": total if energies else None,
        "rounds": len(energies),
        "per_round_j": total / len(energies) if energies else None,
        "source": "+".join(sources) or None,
    }
