"""What a profiling session measured, and the Formula 4 fit of each device from it.

A session (``mjfl.coordinator.run.calibration``) sends each device calibration
tasks at several shard sizes D and epochs tau and records every task's timing
as an ``Observation``, kept apart:

* ``duration_s``: send of the task to receipt of the result, on the
  coordinator's clock: what a round costs the scheduler (the paper's combined
  quantity);
* ``compute_s``: training as the device measured it;
* ``communication_s = duration_s - compute_s``: transfer, decoding and queueing.

Per device, ``fit_components`` (fit.py) fits compute and the combined time to
Formula 4 (normalised by tau*D) and communication per round; the combined fit
is the profile the schedulers use (``a``, ``mu``). Every job's tasks feed one
profile per device, as the paper's a_k and mu_k are per device.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from mjfl.profiling.fit import fit_components
from mjfl.profiling.profiles import DeviceProfile


@dataclass(frozen=True)
class Observation:
    """One calibration task's timing (seconds)."""

    device: str
    job: str
    epochs: int
    samples: int
    duration_s: float
    download_s: float
    compute_s: float
    upload_s: float | None  # None: not measured (a session's first result)

    @property
    def communication_s(self) -> float:
        return max(self.duration_s - self.compute_s, 0.0)



def fit_profiles(
    observations: Sequence[Observation],
    hardware: Mapping[str, Mapping[str, object]] | None = None,
) -> tuple[list[DeviceProfile], dict[str, str]]:
    """A profile per device with at least 3 observations; and why the others have none."""
    by_device: dict[str, list[Observation]] = {}
    for obs in observations:
        by_device.setdefault(obs.device, []).append(obs)
    profiles, skipped = [], {}
    for device, rows in by_device.items():
        if len(rows) < 3:
            skipped[device] = f"only {len(rows)} observations"
            continue
        try:
            fits = fit_components(
                [r.compute_s for r in rows], [r.communication_s for r in rows],
                [r.epochs for r in rows], [r.samples for r in rows],
            )
        except ValueError as exc:
            skipped[device] = str(exc)
            continue
        profiles.append(
            DeviceProfile.from_fit(device, fits, source="profiled", hardware=dict((hardware or {}).get(device, {})))  # type: ignore[arg-type]
        )
    return profiles, skipped


def write_observations(path: Path, observations: Sequence[Observation]) -> None:
    """observations.csv: one row per calibration task (read back by ``mjfl profile show``); empty = not measured."""
    path.parent.mkdir(parents=True, exist_ok=True)
    names = [f.name for f in fields(Observation)]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for obs in observations:
            writer.writerow({k: "" if v is None else v for k, v in asdict(obs).items()})


def read_observations(path: Path) -> list[Observation]:
    with open(path, newline="") as f:
        return [
            Observation(
                r["device"], r["job"], int(r["epochs"]), int(r["samples"]), float(r["duration_s"]),
                float(r["download_s"]), float(r["compute_s"]), float(r["upload_s"]) if r["upload_s"] else None,
            )
            for r in csv.DictReader(f)
        ]
