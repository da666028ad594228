"""Where a run's events are kept: each finished round in the run database (and its checkpoint), each profile refit."""

from __future__ import annotations

from mjfl.coordinator.engine.events import ProfileRefitted, RoundAggregated, RunEvent
from mjfl.coordinator.storage.checkpoints import Checkpoints, JobCheckpoint
from mjfl.coordinator.storage.database import Storage
from mjfl.errors import DuplicateRoundError, RunError, StorageError


class Recorder:
    """Storage's part of the run's events: checkpoint a finished round first, then commit it; keep profile refits.

    An observer of the engine (``engine/events.py``). The checkpoint
    (real-time runs; None in virtual time) is written before the round is
    committed to the database, so resume is exact (``storage/checkpoints.py``).
    A round that cannot be saved stops the run with one ``RunError`` naming
    the round, where it is kept, and how to continue.
    """

    def __init__(self, storage: Storage, checkpoints: Checkpoints | None) -> None:
        self.storage = storage
        self.checkpoints = checkpoints

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RoundAggregated):
            self._round(event)
        elif isinstance(event, ProfileRefitted):
            self.storage.record_refit(event.refit)

    def _round(self, event: RoundAggregated) -> None:
        record = event.record
        try:
            if self.checkpoints is not None:
                self.checkpoints.save(
                    event.job,
                    JobCheckpoint(record.round, dict(event.weights), event.scheduler, event.best_accuracy, event.stopped),
                )
            self.storage.record_round(record, event.choices)
        except (OSError, StorageError) as exc:
            # The output folder became unwritable or full: stop with one clear line.
            # Round r was not committed, so resume redoes it; rounds before it are all kept.
            if isinstance(exc, DuplicateRoundError):
                raise
            if isinstance(exc, OSError) and exc.strerror:
                where = exc.filename or (self.checkpoints.root if self.checkpoints is not None else self.storage.path)
                reason = f"{exc.strerror}: {where}"
            else:
                reason = str(exc)
            raise RunError(
                f"cannot save round {record.round} of job {record.job} ({reason}); every round before it is"
                f" saved in {self.storage.path}: make room or fix the folder's permissions, then continue"
                f" with --resume (run {record.run_id})"
            ) from None
