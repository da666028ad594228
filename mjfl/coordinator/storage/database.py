"""The run database: runs, rounds, device-rounds, scheduler choices, profiles, provenance and the run clock in SQLite.

One embedded SQLite file (WAL journal) holds everything a run leaves behind,
so reports can be rebuilt from it and a coordinator that dies can resume
without repeating a finished round. The schema, its units and the
guarantees are in docs/storage.md.

Guarantees:

- ``record_round`` writes a round, its device rounds and its Meta-Greedy
  candidates in ONE transaction: after a crash the round is either wholly
  there or wholly absent, never half a round.
- A (run, job, round) is recorded at most once; recording it again raises
  ``DuplicateRoundError`` instead of overwriting it.
- Every value is a bound parameter; no SQL is built from data.

``Storage`` is the one public class, a facade over the package's rooms: ``schema`` (the tables, their
migrations and columns), ``connection`` (opening a file, its lock, its transactions) and one module per
record type, which it delegates to: ``runs`` (runs and jobs), ``rounds`` (rounds, device rounds and
scheduler choices), ``refits``, ``fleet_events``, ``provenance`` (provenance and admissions),
``device_profiles`` and ``clocks`` (the run clock's anchors).

``Storage`` is synchronous (a round is a few small inserts, well under a
millisecond); an asyncio engine may call it directly or via
``asyncio.to_thread`` (one connection, guarded by a lock: ``connection.Connection``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

from mjfl.coordinator.storage import (
    clocks,
    device_profiles,
    fleet_events,
    refits,
    rounds,
    runs,
    schema,
)
from mjfl.coordinator.storage import provenance as provenance_tables
from mjfl.coordinator.storage.connection import Connection, open_reader, open_writer, stand_in
from mjfl.coordinator.storage.records import (
    ClockAnchor,
    DeviceAdmission,
    FleetEvent,
    JobInfo,
    ProfileRefit,
    RoundRecord,
    RunInfo,
    RunProvenance,
    SchedulerChoice,
)
from mjfl.coordinator.storage.runs import RUN_STATUSES, RunStatus
from mjfl.coordinator.storage.schema import SCHEMA_VERSION
from mjfl.ids import DeviceId, JobId
from mjfl.profiling.profiles import DeviceProfile

__all__ = ["RUN_STATUSES", "SCHEMA_VERSION", "RunStatus", "Storage"]


class Storage:
    """The run database at ``path`` (created with its parent folders if absent).

    ``Storage(":memory:")`` gives a private in-memory database (tests). Use it
    as a context manager, or call ``close()``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db: Connection = open_writer(str(path), schema.migrate)

    @classmethod
    def read_only(cls, path: str | os.PathLike[str]) -> Self:
        """The run database at ``path``, to read while another process may be writing it.

        Nothing is created, migrated or written: a write raises ``StorageError``.
        A file that is not there yet, or whose schema its writer has not finished
        creating, reads as an empty database (no runs, no rounds); so does an
        older file that holds no run. An older file with runs is read as it is
        from schema version 5 on, and refused (``DataError``) before that: the
        first ``Storage(path)`` that opens it upgrades it.
        Readers see the last committed transaction (WAL) and never block the writer.
        """
        file = Path(path)
        storage = cls.__new__(cls)
        storage._db = open_reader(file, schema.ready) or stand_in(str(file), schema.migrate)
        return storage

    @property
    def path(self) -> str:
        """The database file (or ``:memory:``)."""
        return self._db.origin

    # --- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        """Close the database (idempotent)."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def schema_version(self) -> int:
        """The schema version of the open database."""
        with self._db.reading() as conn:
            return schema.version(conn)

    # --- runs and jobs -------------------------------------------------------

    def start_run(self, run: RunInfo, jobs: Sequence[JobInfo]) -> None:
        """Record a new run (status ``running``) and its jobs, in one transaction."""
        runs.start(self._db, run, jobs)

    def finish_run(self, run_id: str, status: RunStatus, ended_at: str) -> None:
        """Set a run's final ``status`` and wall-clock ``ended_at`` (ISO 8601)."""
        runs.finish(self._db, run_id, status, ended_at)

    def resume_run(self, run_id: str) -> RunInfo:
        """Mark an interrupted or failed run ``running`` again and return it.

        A finished run has nothing left to do and is refused. The caller then
        continues each job after ``last_round(run_id, job)``.
        """
        return runs.resume(self._db, run_id)

    def run(self, run_id: str) -> tuple[RunInfo, RunStatus]:
        """A run and its status; ``UnknownRunError`` if absent."""
        return runs.run(self._db, run_id)

    def runs(self) -> list[tuple[RunInfo, RunStatus]]:
        """Every run with its status, in the order they were started."""
        return runs.runs(self._db)

    def jobs(self, run_id: str) -> list[JobInfo]:
        """The jobs of a run, in the order given to ``start_run``."""
        return runs.jobs(self._db, run_id)

    # --- rounds --------------------------------------------------------------

    def record_round(self, record: RoundRecord, choices: Mapping[str, float] | None = None) -> None:
        """Record a finished round with its device rounds and Meta-Greedy candidates.

        ``choices`` maps each Meta-Greedy member to its cost under the selector (ReCost, Formula 12, for the paper's);
        ``record.winner`` must be one of them. Everything lands in one
        transaction. Raises ``DuplicateRoundError`` if the round is already
        recorded and ``StorageError`` if any row breaks a constraint (unknown
        run or job, a device twice in one plan, ...); either way nothing of
        the round is written.
        """
        rounds.record(self._db, record, choices)

    def rounds(self, run_id: str, job: JobId | str | None = None) -> list[RoundRecord]:
        """The recorded rounds of a run (or of one job), in the order they were recorded.

        Device rounds come back in the order of the original plan; a NaN
        accuracy, loss, expected time or cost comes back as NaN.
        """
        return rounds.rounds(self._db, run_id, job)

    def choices(self, run_id: str, job: JobId | str | None = None) -> list[SchedulerChoice]:
        """Every Meta-Greedy candidate of a run (winners and losers), by round then member order."""
        return rounds.choices(self._db, run_id, job)

    def recorded_rounds(self, run_id: str | None = None) -> list[tuple[JobId, int]]:
        """(job, round) of every recorded round of a run, or of every run with None; by job, then round.

        The keys alone, cheap enough to poll: what an audit of lost or repeated
        rounds needs (a round recorded by two runs appears twice).
        """
        return rounds.recorded(self._db, run_id)

    def last_round(self, run_id: str, job: JobId | str) -> int:
        """The last recorded round of a job (0 if none); resume continues after it."""
        return rounds.last_round(self._db, run_id, job)

    def participation(self, run_id: str) -> dict[JobId, dict[DeviceId, int]]:
        """How often each device was planned for each job of a run (s_{k,m}, Formula 5).

        Counts every recorded device round, failed ones included, as the
        engine counts every plan it issued; what resume restores fairness from.
        """
        return rounds.participation(self._db, run_id)

    def last_losses(self, run_id: str) -> dict[JobId, dict[DeviceId, float]]:
        """Each device's mean training loss with its last accepted update of each job of a run.

        The engine's statistical-utility signal (``Engine.losses``), restored on
        resume: the ``ok`` device round of the highest round per (job, device)
        that reported a finite loss (NaN is stored as NULL and skipped).
        """
        return rounds.last_losses(self._db, run_id)

    def elapsed_s(self, run_id: str) -> float:
        """Run-clock time of a run's last recorded round end (0.0 if none): resume's time offset."""
        return rounds.elapsed_s(self._db, run_id)

    def loss_history(self, job_key: str, *, exclude_run: str | None = None) -> list[list[float]]:
        """Loss after each round of every earlier finished run of the job ``job_key``.

        One list per (run, job) with this key, runs in start order, losses in
        round order (NaN where a round's loss was NaN). Runs that did not
        finish (interrupted, failed, still running) and ``exclude_run`` (the
        run being planned) are left out. Feeds Formula 10's loss-curve fit.
        """
        return rounds.loss_history(self._db, job_key, exclude_run)

    # --- the run clock ---------------------------------------------------------

    def record_clock(self, run_id: str, run_s: float, wall_s: float) -> None:
        """Keep that at run-clock time ``run_s`` (seconds since the run's start) the wall clock read ``wall_s``.

        ``wall_s`` is Unix seconds. The run driver keeps one each time a run's engine starts (its first
        start, each resume). ``StorageError`` for an unknown run, a negative or non-finite ``run_s`` or a
        non-finite ``wall_s``.
        """
        clocks.record(self._db, run_id, run_s, wall_s)

    def clocks(self, run_id: str) -> list[ClockAnchor]:
        """A run's clock anchors ``(run_s, wall_s)``, by ``run_s`` ascending (anchors at one ``run_s`` in the
        order kept); none for a run recorded before they were kept. Read them with ``records.wall_time``."""
        return clocks.anchors(self._db, run_id)

    # --- profiles ------------------------------------------------------------

    def record_refit(self, refit: ProfileRefit) -> None:
        """Record an online refit of a device's profile during a run."""
        refits.record(self._db, refit)

    def refits(self, run_id: str) -> list[ProfileRefit]:
        """The profile refits of a run, in the order they were recorded."""
        return refits.refits(self._db, run_id)

    def save_profiles(self, profiles: Sequence[DeviceProfile], *, updated_at: str | None = None) -> None:
        """Make ``profiles`` the latest known profile of their devices (one transaction).

        A device already stored is updated in place; ``updated_at`` (ISO 8601,
        default now in UTC) records when.
        """
        device_profiles.save(self._db, profiles, updated_at)

    def load_profiles(self) -> list[DeviceProfile]:
        """The latest profile of every device, in the order devices were first saved.

        Rows are parsed by the profile file's parser, so a corrupt row raises
        ``DataError`` naming the device and field.
        """
        return device_profiles.load(self._db)

    # --- fleet events ----------------------------------------------------------

    def record_fleet_event(self, event: FleetEvent) -> None:
        """Keep a device's join or leave, or a refused connection, of a real-time run."""
        fleet_events.record(self._db, event)

    def fleet_events(self, run_id: str) -> list[FleetEvent]:
        """A run's fleet events, in the order they were recorded."""
        return fleet_events.events(self._db, run_id)

    # --- provenance (the module is provenance_tables: a parameter here is named provenance) -----

    def record_provenance(self, provenance: RunProvenance) -> None:
        """Keep what a run ran on and its programs, in one transaction; a run that has it keeps the first."""
        provenance_tables.record(self._db, provenance)

    def record_admissions(self, admissions: Sequence[DeviceAdmission]) -> int:
        """Keep devices' admissions, in one transaction, but those the run has of the same content; how many were new."""
        return provenance_tables.record_admissions(self._db, admissions)

    def provenance(self, run_id: str) -> tuple[RunProvenance | None, list[DeviceAdmission]]:
        """What run ``run_id`` ran on (None: not kept, an older run) and its devices' admissions, in order."""
        return provenance_tables.provenance(self._db, run_id)
