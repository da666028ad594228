"""Identifiers shared across the package."""

from typing import NewType

DeviceId = NewType("DeviceId", str)
JobId = NewType("JobId", str)

# A lab's runs meet on one server, so a job travels there under an id that carries its run's.
WIRE_SEPARATOR = "/"


def wire_job(run_id: str, job: str) -> JobId:
    """A run's job as the lab's server and devices know it: ``<run>/<job>``."""
    return JobId(f"{run_id}{WIRE_SEPARATOR}{job}")


def run_and_job(wire: str) -> tuple[str | None, JobId]:
    """The run and job of a wire id (``wire_job``); a job outside a lab has no run (None)."""
    run, separator, job = wire.partition(WIRE_SEPARATOR)
    return (run, JobId(job)) if separator else (None, JobId(wire))
