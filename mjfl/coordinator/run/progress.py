"""A run's progress in its log: one line for every round of every job, its waits and its stops, as they happen.

An observer of the engine (``engine/events.py``). The lines go to the
``mjfl.progress`` logger at INFO, so they land in the run's ``mjfl.log``
(`mjfl log RUN --follow` shows them as they come, in a lab) whatever the
terminal shows; they are written once per round, never per task. A job
that waits for devices says so once when it starts waiting, with why
(``JobWaiting.why``), and the line of its next round says how long it waited.
"""

from __future__ import annotations

import logging

from mjfl.coordinator.engine.events import (
    JobStopped,
    JobWaiting,
    RoundAggregated,
    RunEvent,
    RunFinished,
    RunStarted,
)
from mjfl.ids import JobId

log = logging.getLogger("mjfl.progress")

STOPS = {"target": "reached its target", "budget": "used its round budget", "no devices": "found no devices to train it"}


class RoundLines:
    """The run's events as log lines (see the module docstring)."""

    def __init__(self, logger: logging.Logger = log) -> None:
        self.log = logger
        self._waiting: dict[JobId, float] = {}  # run-clock time each waiting job began to wait

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RoundAggregated):
            self._round(event)
        elif isinstance(event, JobWaiting):
            self._waiting[event.job] = event.at_s
            self.log.info("job %s round %d waits for devices: %s", event.job, event.round, event.why())
        elif isinstance(event, JobStopped):
            self.log.info("job %s stopped after %d rounds: it %s", event.job, event.rounds, STOPS[event.reason])
        elif isinstance(event, RunStarted):
            self.log.info("run %s: %d jobs over %d devices, from %.1f s", event.run_id, len(event.jobs), len(event.devices), event.at_s)
        elif isinstance(event, RunFinished):
            self.log.info("run %s finished at %.1f s", event.run_id, event.at_s)

    def _round(self, event: RoundAggregated) -> None:
        r = event.record
        failed = sum(1 for d in r.devices if d.status != "ok")
        since = self._waiting.pop(r.job, None)
        waited = "" if since is None else f", after waiting {max(r.started_s - since, 0.0):.1f} s"
        kept = "" if r.aggregated else ", too few returned: the model is kept"
        self.log.info(
            "job %s round %d: accuracy %.4f, loss %.4f, %d devices (%d failed), %.1f-%.1f s%s%s",
            r.job, r.round, r.accuracy, r.loss, len(r.devices), failed, r.started_s, r.ended_s, waited, kept,
        )
