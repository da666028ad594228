"""What the dashboard shows, as JSON-able dicts built from a run's records.

Pure functions: records in (``mjfl.coordinator.storage.records``, the
profiles), plain dicts of numbers, strings and None out (JSON has no NaN).
The server sends these shapes from ``/api/runs`` and ``/api/runs/{id}``; the
live dashboard of a ``mjfl testbed run`` (``live.py``) pushes the same shapes, so
nothing here knows where the records came from.

Time to target comes from ``results.outcomes``, a group's from
``results.targets.group_time`` (the one definition of each); a device's expected round time is Formula 4's mean,
``tau*a*D + tau*D/mu`` (``DeviceProfile``). What a device is (phone,
emulated, JVM) and its model and OS come from its hello's ``hardware``
(``identity``); the events list merges a real-time run's fleet events with
the failures and refused updates of its rounds (``events_table``).

The device timeline is its own shape, built apart (``timeline.py``), served by
its own route (``/api/runs/{id}/timeline``), not a part of the run view.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from mjfl.coordinator.results.energy import energy_resolution, job_energy, task_energy
from mjfl.coordinator.results.outcomes import run_summary
from mjfl.coordinator.results.targets import group_time
from mjfl.coordinator.storage.records import (
    DeviceRound,
    FleetEvent,
    JobInfo,
    RoundRecord,
    RunInfo,
    SchedulerChoice,
)

__all__ = [
    "EVENTS_SHOWN", "RunView", "Speed", "add_round", "choice_row", "choices_table", "device_row", "devices_table", "epochs_of",
    "event_row", "events_table", "identity", "jobs_view", "round_devices", "round_events", "run_entry", "run_line",
    "run_view", "told_state", "unrecorded_view",
]

RunView = dict[str, Any]
EVENTS_SHOWN = 1000  # the newest events a view carries (a run of 1,000 flaky phones has many more)
_TOLD = ("battery_pct", "charging", "thermal_status")  # what a device tells of its state (protocol.md 5.5)


class Speed(Protocol):
    """A device's Formula 4 parameters (a stored ``DeviceProfile``, or the planning view of a connected device)."""

    a: float
    mu: float


def run_entry(
    key: str, folder: str, label: str, info: RunInfo, status: str, jobs: Sequence[JobInfo],
    rounds: Sequence[RoundRecord],
) -> dict[str, Any]:
    """One line of the runs list: who ran, how it ended, each job's time to target."""
    summary = run_summary(jobs, rounds)
    entries = [{"job": str(job), **entry} for job, entry in summary["jobs"].items()]
    return run_line(key, folder, label, info, status, entries)


def run_line(
    key: str, folder: str, label: str, info: RunInfo, status: str, jobs: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """A line of the runs list from its jobs' entries (each with its ``time_to_target_s``), a finished run's or the live one's."""
    return {
        "id": key,
        "folder": folder,
        "run_id": info.run_id,
        "method": info.method,
        "label": label,
        "mode": info.mode,
        "seed": info.seed,
        "started_at": info.started_at,
        "status": status,
        "jobs": list(jobs),
        "total_time_s": group_time([job["time_to_target_s"] for job in jobs]),
    }


def jobs_view(jobs: Sequence[JobInfo], rounds: Sequence[RoundRecord]) -> list[dict[str, Any]]:
    """Each job: its target, budget, time to target and its series (columns, in round order)."""
    summary = run_summary(jobs, rounds)["jobs"]
    energy = job_energy(jobs, rounds)
    by_job: dict[str, list[RoundRecord]] = {str(j.job): [] for j in jobs}
    for record in rounds:
        by_job.setdefault(str(record.job), []).append(record)
    views = []
    for job in jobs:
        own = sorted(by_job[str(job.job)], key=lambda r: r.round)
        done = len(own)
        entry = summary[str(job.job)]
        views.append(
            {
                "job": str(job.job),
                "model": job.model,
                "dataset": job.dataset,
                # window: the rounds whose mean must meet the target (1: the round alone; docs/config.md)
                "target": {"accuracy": job.target_accuracy, "loss": job.target_loss, "window": job.target_window},
                "max_rounds": job.max_rounds,
                "rounds": done,
                "rounds_left": max(job.max_rounds - done, 0),
                "time_to_target_s": entry["time_to_target_s"],
                "final_accuracy": entry["final_accuracy"],
                # Joules of its device rounds up to the target (a lower bound when some told none).
                "energy_to_target_j": _number(energy[str(job.job)]["to_target_j"]),
                "energy_known": energy[str(job.job)]["known"],
                "energy_device_rounds": energy[str(job.job)]["device_rounds"],
                "series": {
                    "round": [r.round for r in own],
                    "time_s": [_number(r.ended_s) for r in own],
                    "accuracy": [_number(r.accuracy) for r in own],
                    "loss": [_number(r.loss) for r in own],
                },
            }
        )
    return views


def devices_table(
    rounds: Sequence[RoundRecord],
    profiles: Mapping[str, Speed],
    epochs: Mapping[str, int],
    hardware: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per device that took part (or connected, when ``hardware`` names it): its rounds, last failure and state.

    ``epochs`` (job -> tau) turns the device's profile into the expected time
    of its last round (Formula 4's mean); a device without a profile, or a job
    not in ``epochs``, has none. Rounds are taken in ``rounds`` order (recorded
    order), so "last" is the last recorded. ``hardware`` (device -> its
    hello's facts) gives each row its kind, model and OS (``identity``).
    """
    rows: dict[str, dict[str, Any]] = {}
    for device, facts in (hardware or {}).items():
        rows[device] = device_row(device, facts)
    for record in rounds:
        add_round(rows, record, profiles, epochs)
    return list(rows.values())


def device_row(device: str, hardware: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A device's row before any round: its identity (``identity``) and the state its hello told, nothing counted yet."""
    row = {
        "device": device, **identity(hardware), "rounds": 0, "ok": 0, "failed": 0, "rejected": 0,
        "last_failure": None, "last_round_s": None, "expected_round_s": None,
        "battery_pct": None, "charging": None, "thermal_status": None, "energy_j": None,
        "energy_resolution_j": None, "energy": "",
    }
    row.update(told_state(hardware))
    return row


def told_state(hardware: Mapping[str, Any] | None) -> dict[str, Any]:
    """Battery, charging and thermal status a hello told (the app sends its ``device_state`` in ``hardware``)."""
    state = (hardware or {}).get("device_state")
    if not isinstance(state, Mapping):
        return {}
    return {name: state[name] for name in _TOLD if name in state}


def identity(hardware: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a device is, from its hello's ``hardware`` (protocol.md 5.1): ``{"kind", "model", "os"}``.

    ``kind``: ``emulated`` (an emulated device says ``"emulated": true``),
    ``phone`` (its ``os`` starts with "Android": the app), ``jvm`` (it names
    its ``java`` version: the JVM client), else ``device``; None when it was
    never seen connecting (a virtual-time run, a run before schema 5).
    """
    if hardware is None:
        return {"kind": None, "model": None, "os": None}
    os_name = hardware.get("os")
    if hardware.get("emulated") is True:
        kind = "emulated"
    elif isinstance(os_name, str) and os_name.startswith("Android"):
        kind = "phone"
    elif "java" in hardware:
        kind = "jvm"
    else:
        kind = "device"
    model = hardware.get("model")
    return {"kind": kind, "model": None if model is None else str(model), "os": None if os_name is None else str(os_name)}


def add_round(
    rows: dict[str, dict[str, Any]], record: RoundRecord, profiles: Mapping[str, Speed],
    epochs: Mapping[str, int],
) -> None:
    """Count one round in ``rows`` (device -> ``devices_table`` row), as ``devices_table`` does for each.

    The live dashboard calls it once per finished round, so a row costs the
    round's devices only, never the run's history.
    """
    for part in record.devices:
        row = rows.get(part.device)
        if row is None:
            row = rows[part.device] = device_row(str(part.device))
        row["rounds"] += 1
        row[part.status] += 1
        if part.status != "ok" and part.error:
            row["last_failure"] = part.error
        row["last_round_s"] = _number(part.duration_s)
        _add_energy(row, part)
        profile = profiles.get(part.device)
        tau = epochs.get(str(record.job))
        row["expected_round_s"] = (
            None if profile is None or tau is None
            else _number(tau * profile.a * part.samples + tau * part.samples / profile.mu)
        )
        state = part.device_state or {}
        for name in _TOLD:
            if name in state:
                row[name] = state[name]


def _add_energy(row: dict[str, Any], part: DeviceRound) -> None:
    """A device round's energy added to its device's row: the sum (``energy_j``; measured or modelled,
    results/energy.py) with its resolution's, and ``energy`` as shown: the sum, or why its latest task had none."""
    state = part.device_state or {}
    shown = task_energy(part.energy_j, state)
    if part.energy_j is not None:
        row["energy_j"] = (row["energy_j"] or 0.0) + part.energy_j
        if (step := energy_resolution(state)) is not None:
            row["energy_resolution_j"] = (row["energy_resolution_j"] or 0.0) + step
    elif not shown:
        return  # nothing said of this task's energy: the row keeps what it showed
    total = row["energy_j"]
    if part.energy_j is None:
        row["energy"] = shown + (f" (earlier tasks {total:.1f} J)" if total is not None else "")
    else:
        resolution = row["energy_resolution_j"]
        row["energy"] = f"{total:.1f} J" + (f" ± {resolution:.1f}" if resolution is not None else "")


def events_table(events: Sequence[FleetEvent], rounds: Sequence[RoundRecord]) -> list[dict[str, Any]]:
    """The run's events, oldest first, the newest ``EVENTS_SHOWN``: ``event_row`` of each fleet event and ``round_events``."""
    rows = [event_row(e) for e in events] + [row for record in rounds for row in round_events(record)]
    rows.sort(key=lambda row: row["at_s"])
    return rows[-EVENTS_SHOWN:]


def event_row(event: FleetEvent) -> dict[str, Any]:
    """A fleet event (joined, left, refused) as a row of the events list."""
    return {"at_s": _number(event.at_s), "kind": event.kind, "device": event.device, "job": None, "round": None,
            "detail": event.detail}


def round_events(record: RoundRecord) -> list[dict[str, Any]]:
    """A round's failed devices and refused updates (``rejected``) as rows of the events list.

    A device's row is timed when its answer (or failure) came: the round's
    start plus its wait and its time, no later than the round's end.
    """
    return [
        {
            "at_s": _number(min(record.ended_s, record.started_s + part.wait_s + part.duration_s)),
            "kind": part.status, "device": str(part.device), "job": str(record.job), "round": record.round,
            "detail": part.error or "",
        }
        for part in record.devices
        if part.status != "ok"
    ]


def choices_table(rounds: Sequence[RoundRecord], choices: Sequence[SchedulerChoice]) -> list[dict[str, Any]]:
    """One row per job round: the plan kept (Meta-Greedy's winner, each member's cost under its selector), planned vs answered.

    A device answered when it sent a result back (used or rejected); failed
    ones (dropped out, timed out) did not.
    """
    members: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for choice in choices:
        members.setdefault((str(choice.job), choice.round), []).append(
            {"member": choice.member, "cost": _number(choice.selector_cost), "won": choice.won}
        )
    return [choice_row(r, members.get((str(r.job), r.round), [])) for r in rounds]


def choice_row(r: RoundRecord, members: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One ``choices_table`` row: a round and its plan's candidates (``{"member", "cost", "won"}``)."""
    return {
        "job": str(r.job),
        "round": r.round,
        "winner": r.winner,
        "members": list(members),
        "planned": len(r.devices),
        "answered": sum(d.status != "failed" for d in r.devices),
        "used": sum(d.status == "ok" for d in r.devices),
        "expected_time_s": _number(r.expected_time_s),
        "time_s": _number(r.duration_s),
    }


def round_devices(record: RoundRecord) -> dict[str, Any]:
    """Who one round planned and what each answered: ``{"job", "round", "winner", "devices": [...]}``, in plan order.

    Each device: its status (``ok``: used; ``rejected``: answered, its update
    refused; ``failed``: no answer), the reason, its samples, how long it
    waited for another job to free it, its round time and its parts
    (download, compute, upload, as it reported them), and its energy.
    """
    return {
        "job": str(record.job), "round": record.round, "winner": record.winner,
        "devices": [
            {
                "device": str(part.device), "status": part.status, "error": part.error, "samples": part.samples,
                "wait_s": _number(part.wait_s), "time_s": _number(part.duration_s),
                "download_s": _number(part.download_s), "compute_s": _number(part.compute_s),
                "upload_s": _number(part.upload_s), "mean_loss": _number(part.mean_loss),
                "energy_j": _number(part.energy_j), "energy": task_energy(part.energy_j, part.device_state),
            }
            for part in record.devices
        ],
    }


def run_view(
    entry: Mapping[str, Any],
    jobs: Sequence[JobInfo],
    rounds: Sequence[RoundRecord],
    choices: Sequence[SchedulerChoice],
    profiles: Mapping[str, Speed],
    epochs: Mapping[str, int],
    events: Sequence[FleetEvent] = (),
    provenance: Mapping[str, Any] | None = None,
    *,
    hardware: Mapping[str, Mapping[str, Any]] | None = None,
) -> RunView:
    """Everything the page shows of one run: ``{"run", "jobs", "devices", "choices", "events", "provenance"}``.

    A device's identity is what its last ``joined`` event said of it, else
    its ``hardware`` here (device -> its hello's facts, as its admission kept
    them). ``provenance``: what the run ran on
    (``results.provenance.provenance_document``; None: not kept).
    """
    told = dict(hardware or {})
    told.update({str(e.device): e.hardware for e in events if e.kind == "joined" and e.device is not None})
    return {
        "run": dict(entry),
        "jobs": jobs_view(jobs, rounds),
        "devices": devices_table(rounds, profiles, epochs, told),
        "choices": choices_table(rounds, choices),
        "events": events_table(events, rounds),
        "provenance": provenance,
    }


def unrecorded_view(key: str, folder: str, method: str, status: str) -> RunView:
    """What the page shows of a run that recorded nothing yet (a lab's queued run, or one whose fleet gathers):
    ``run_view``'s shape, its line with what is known (no seed, no start), no jobs and no rounds."""
    entry = {"id": key, "folder": folder, "run_id": key, "method": method, "label": method, "mode": None,
             "seed": None, "started_at": None, "status": status, "jobs": [], "total_time_s": None}
    return run_view(entry, [], [], [], {}, {})


def epochs_of(config: Mapping[str, Any]) -> dict[str, int]:
    """Each job's local epochs (tau) from a run's stored configuration (``runs.config_json``)."""
    epochs = {}
    for job in config.get("jobs", []):
        training = job.get("training") or {}
        if "name" in job and isinstance(training.get("epochs"), int):
            epochs[str(job["name"])] = training["epochs"]
    return epochs


def _number(value: float | None) -> float | None:
    """A float for JSON: None for NaN or infinity (JSON has neither)."""
    if value is None or not math.isfinite(value):
        return None
    return float(value)
