"""The run database: runs, rounds, device-rounds, scheduler choices, profiles and provenance in SQLite.

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

``Storage`` is synchronous (a round is a few small inserts, well under a
millisecond); an asyncio engine may call it directly or via
``asyncio.to_thread`` (one connection, guarded by a lock).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self, TypeAlias, TypeVar, get_args

from mjfl.coordinator.storage.records import (
    DeviceAdmission,
    DeviceRound,
    FleetEvent,
    JobInfo,
    ProfileRefit,
    ProgramBuild,
    RoundRecord,
    RunInfo,
    RunProvenance,
    SchedulerChoice,
)
from mjfl.errors import DataError, DuplicateRoundError, StorageError, UnknownRunError
from mjfl.ids import DeviceId, JobId
from mjfl.profiling.profiles import (
    FORMAT,
    DeviceProfile,
    profiles_from_document,
    profiles_to_document,
)

T = TypeVar("T")

__all__ = ["RUN_STATUSES", "SCHEMA_VERSION", "RunStatus", "Storage"]

RunStatus: TypeAlias = Literal["running", "finished", "interrupted", "failed"]
RUN_STATUSES: tuple[str, ...] = get_args(RunStatus)

# --- schema -----------------------------------------------------------------
#
# _MIGRATIONS[i] takes the database from version i to i + 1; a new version
# appends statements (ALTER TABLE ... ADD COLUMN, CREATE TABLE ...) and never
# edits an earlier entry. Each migration runs in one transaction with the
# version bump, so a crash mid-migration leaves the previous version intact.
# `position` columns keep the order records were given in (plan order, job
# order, member order), which SQL rows otherwise do not have.

_SCHEMA_V1 = (
    """
    CREATE TABLE runs (
        run_id      TEXT PRIMARY KEY,
        method      TEXT NOT NULL,
        mode        TEXT NOT NULL CHECK (mode IN ('virtual', 'real')),
        seed        INTEGER NOT NULL,
        config_json TEXT NOT NULL,
        started_at  TEXT NOT NULL,
        ended_at    TEXT,
        status      TEXT NOT NULL DEFAULT 'running'
                    CHECK (status IN ('running', 'finished', 'interrupted', 'failed'))
    )
    """,
    """
    CREATE TABLE jobs (
        run_id          TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        job             TEXT NOT NULL,
        position        INTEGER NOT NULL,
        model           TEXT NOT NULL,
        dataset         TEXT NOT NULL,
        target_accuracy REAL,
        target_loss     REAL,
        max_rounds      INTEGER NOT NULL CHECK (max_rounds >= 0),
        job_key         TEXT NOT NULL,
        PRIMARY KEY (run_id, job)
    )
    """,
    "CREATE INDEX jobs_by_key ON jobs (job_key)",
    # accuracy, loss, expected_time_s and cost are NULL when NaN: SQLite
    # stores a bound NaN as NULL, and a diverged loss must not lose the round.
    """
    CREATE TABLE rounds (
        run_id          TEXT NOT NULL,
        job             TEXT NOT NULL,
        round           INTEGER NOT NULL CHECK (round >= 1),
        started_s       REAL NOT NULL,
        ended_s         REAL NOT NULL CHECK (ended_s >= started_s),
        accuracy        REAL,
        loss            REAL,
        aggregated      INTEGER NOT NULL CHECK (aggregated IN (0, 1)),
        expected_time_s REAL,
        cost            REAL,
        winner          TEXT,
        PRIMARY KEY (run_id, job, round),
        FOREIGN KEY (run_id, job) REFERENCES jobs (run_id, job) ON DELETE CASCADE
    )
    """,
    """
    CREATE TABLE device_rounds (
        run_id     TEXT NOT NULL,
        job        TEXT NOT NULL,
        round      INTEGER NOT NULL,
        position   INTEGER NOT NULL,
        device     TEXT NOT NULL,
        status     TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'rejected')),
        samples    INTEGER NOT NULL CHECK (samples >= 0),
        mean_loss  REAL,
        duration_s REAL NOT NULL,
        download_s REAL,
        compute_s  REAL,
        upload_s   REAL,
        error      TEXT,
        PRIMARY KEY (run_id, job, round, position),
        UNIQUE (run_id, job, round, device),
        FOREIGN KEY (run_id, job, round) REFERENCES rounds (run_id, job, round)
            ON DELETE CASCADE
    )
    """,
    "CREATE INDEX device_rounds_by_device ON device_rounds (device)",
    """
    CREATE TABLE scheduler_choices (
        run_id   TEXT NOT NULL,
        job      TEXT NOT NULL,
        round    INTEGER NOT NULL,
        position INTEGER NOT NULL,
        member   TEXT NOT NULL,
        recost   REAL,
        won      INTEGER NOT NULL CHECK (won IN (0, 1)),
        PRIMARY KEY (run_id, job, round, member),
        FOREIGN KEY (run_id, job, round) REFERENCES rounds (run_id, job, round)
            ON DELETE CASCADE
    )
    """,
    """
    CREATE TABLE profile_refits (
        refit_id     INTEGER PRIMARY KEY,
        run_id       TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        device       TEXT NOT NULL,
        at_s         REAL NOT NULL,
        a            REAL NOT NULL,
        mu           REAL NOT NULL,
        observations INTEGER NOT NULL CHECK (observations >= 0),
        ks_statistic REAL NOT NULL
    )
    """,
    "CREATE INDEX profile_refits_by_run ON profile_refits (run_id, device)",
    """
    CREATE TABLE device_profiles (
        device_id          TEXT PRIMARY KEY,
        a                  REAL NOT NULL,
        mu                 REAL NOT NULL,
        a_ci_low           REAL,
        a_ci_high          REAL,
        mu_ci_low          REAL,
        mu_ci_high         REAL,
        ks_statistic       REAL,
        n                  INTEGER NOT NULL,
        source             TEXT NOT NULL,
        compute_json       TEXT,
        communication_json TEXT,
        hardware_json      TEXT NOT NULL,
        updated_at         TEXT NOT NULL
    )
    """,
)

# Version 2: what a device told of its state with each result (protocol.md 5.5), as JSON.
_SCHEMA_V2 = ("ALTER TABLE device_rounds ADD COLUMN device_state TEXT",)

# Version 3: how long a device planned while another job held it waited to start (seconds).
_SCHEMA_V3 = ("ALTER TABLE device_rounds ADD COLUMN wait_s REAL NOT NULL DEFAULT 0",)

# Version 4: the energy a device's task used, in joules (protocol.md 5.5 `energy_j`); NULL: not
# known. And a profile's power while training (DeviceProfile.power_w), for the modelled energy.
_SCHEMA_V4 = (
    "ALTER TABLE device_rounds ADD COLUMN energy_j REAL",
    "ALTER TABLE device_profiles ADD COLUMN power_w REAL",
)

# Version 5: a real-time run's fleet events: devices that connected (with what they said of
# themselves), whose connections ended, and connections refused (records.FleetEvent).
_SCHEMA_V5 = (
    """
    CREATE TABLE fleet_events (
        event_id      INTEGER PRIMARY KEY,
        run_id        TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        at_s          REAL NOT NULL,
        kind          TEXT NOT NULL CHECK (kind IN ('joined', 'left', 'refused')),
        device        TEXT,
        detail        TEXT NOT NULL,
        hardware_json TEXT
    )
    """,
    "CREATE INDEX fleet_events_by_run ON fleet_events (run_id)",
)

# Version 6: a Meta-Greedy candidate's cost is its selector's (ReCost only for the paper's
# selector), so its column is named for that.
_SCHEMA_V6 = ("ALTER TABLE scheduler_choices RENAME COLUMN recost TO selector_cost",)

# Version 7: what a run ran on (records.RunProvenance, records.DeviceAdmission): the configuration as given,
# the versions, each job's program and shard sizes, and each device as admitted (hello, profile, shard, app).
# A device's admissions are kept once per distinct content (``digest``), so a resume or a reconnection adds
# a row only when something changed.
_SCHEMA_V7 = (
    """
    CREATE TABLE provenance (
        run_id        TEXT PRIMARY KEY REFERENCES runs (run_id) ON DELETE CASCADE,
        recorded_at   TEXT NOT NULL,
        config_text   TEXT,
        config_file   TEXT,
        config_sha256 TEXT,
        redacted_json TEXT NOT NULL,
        versions_json TEXT NOT NULL
    )
    """,
    """
    CREATE TABLE provenance_programs (
        run_id             TEXT NOT NULL,
        job                TEXT NOT NULL,
        sha256             TEXT NOT NULL,
        size               INTEGER NOT NULL CHECK (size >= 0),
        file               TEXT,
        shard_samples_json TEXT NOT NULL,
        PRIMARY KEY (run_id, job),
        FOREIGN KEY (run_id, job) REFERENCES jobs (run_id, job) ON DELETE CASCADE
    )
    """,
    """
    CREATE TABLE provenance_devices (
        admission_id INTEGER PRIMARY KEY,
        run_id       TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        device       TEXT NOT NULL,
        admitted_at  TEXT NOT NULL,
        shard        INTEGER,
        hello_json   TEXT,
        profile_json TEXT NOT NULL,
        app_json     TEXT NOT NULL,
        digest       TEXT NOT NULL,
        UNIQUE (run_id, device, digest)
    )
    """,
)

# Version 8: how many rounds' mean accuracy (loss) a job's target must meet (JobInfo.target_window), so the
# reports of a stored run count its time to target by the rule its engine stopped it by; earlier jobs: 1.
_SCHEMA_V8 = ("ALTER TABLE jobs ADD COLUMN target_window INTEGER NOT NULL DEFAULT 1 CHECK (target_window >= 1)",)

_MIGRATIONS: tuple[tuple[str, ...], ...] = (
    _SCHEMA_V1, _SCHEMA_V2, _SCHEMA_V3, _SCHEMA_V4, _SCHEMA_V5, _SCHEMA_V6, _SCHEMA_V7, _SCHEMA_V8,
)
SCHEMA_VERSION = len(_MIGRATIONS)
# The oldest schema a read-only reader reads as it is: version 6 only renamed a column, which
# ``choices`` looks up by either name, so a finished run of version 5 needs no upgrade to be read;
# version 7 only added tables, which ``provenance`` reads as empty where they are missing; version 8 only
# added a column with a default, which ``jobs`` reads as that default where it is missing.
_READABLE_FROM = 5

_BUSY_TIMEOUT_S = 5.0  # a reader (mjfl report) may briefly hold the WAL; wait, don't fail


class Storage:
    """The run database at ``path`` (created with its parent folders if absent).

    ``Storage(":memory:")`` gives a private in-memory database (tests). Use it
    as a context manager, or call ``close()``.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._origin = str(path)
        if self._origin != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: no implicit BEGIN; every write opens its own
        # BEGIN IMMEDIATE in _transaction, so what is one transaction is explicit.
        try:
            self._conn = sqlite3.connect(
                self._origin,
                timeout=_BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise DataError(f"{self._origin}: cannot open the run database: {exc}") from exc
        self._lock = threading.RLock()
        try:
            # Pragmas must run outside a transaction. WAL lets reports read
            # while a run writes; synchronous=NORMAL is safe from corruption
            # in WAL mode (docs/storage.md, "Guarantees").
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise DataError(f"{self._origin}: not a usable mjfl run database: {exc}") from exc
        except BaseException:
            self._conn.close()
            raise

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
        if not file.exists():
            return cls._empty(file)
        try:
            conn = sqlite3.connect(
                f"{file.absolute().as_uri()}?mode=ro",
                uri=True,
                timeout=_BUSY_TIMEOUT_S,
                isolation_level=None,
                check_same_thread=False,
            )
        except sqlite3.Error as exc:
            raise DataError(f"{file}: cannot open the run database: {exc}") from exc
        try:
            conn.execute("PRAGMA query_only = ON")
            ready = _schema_ready(conn, str(file))
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise DataError(f"{file}: not a usable mjfl run database: {exc}") from exc
        except BaseException:
            conn.close()
            raise
        if not ready:
            conn.close()
            return cls._empty(file)
        storage = cls.__new__(cls)
        storage._origin, storage._conn, storage._lock = str(file), conn, threading.RLock()
        return storage

    @classmethod
    def _empty(cls, path: Path) -> Self:
        """A read-only empty database standing in for ``path`` (not there, or not ready yet)."""
        storage = cls(":memory:")
        storage._origin = str(path)
        storage._conn.execute("PRAGMA query_only = ON")
        return storage

    @property
    def path(self) -> str:
        """The database file (or ``:memory:``)."""
        return self._origin

    # --- lifecycle -----------------------------------------------------------

    def close(self) -> None:
        """Close the database (idempotent)."""
        with self._lock:
            self._conn.close()

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
        with self._lock:
            return self._version()

    # --- runs and jobs -------------------------------------------------------

    def start_run(self, run: RunInfo, jobs: Sequence[JobInfo]) -> None:
        """Record a new run (status ``running``) and its jobs, in one transaction."""
        for job in jobs:
            if job.run_id != run.run_id:
                raise StorageError(
                    f"job {job.job!r} belongs to run {job.run_id!r}, not {run.run_id!r}"
                )
        with self._transaction() as conn:
            if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run.run_id,)).fetchone():
                raise StorageError(f"run {run.run_id!r} is already recorded")
            try:
                conn.execute(
                    "INSERT INTO runs (run_id, method, mode, seed, config_json, started_at)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (run.run_id, run.method, run.mode, run.seed, run.config_json, run.started_at),
                )
                conn.executemany(
                    "INSERT INTO jobs (run_id, job, position, model, dataset, target_accuracy,"
                    " target_loss, max_rounds, job_key, target_window) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [
                        (
                            j.run_id,
                            j.job,
                            position,
                            j.model,
                            j.dataset,
                            j.target_accuracy,
                            j.target_loss,
                            j.max_rounds,
                            j.job_key,
                            j.target_window,
                        )
                        for position, j in enumerate(jobs)
                    ],
                )
            except sqlite3.IntegrityError as exc:
                raise StorageError(f"run {run.run_id!r} not recorded: {exc}") from exc

    def finish_run(self, run_id: str, status: RunStatus, ended_at: str) -> None:
        """Set a run's final ``status`` and wall-clock ``ended_at`` (ISO 8601)."""
        if status not in RUN_STATUSES or status == "running":
            raise StorageError(f"a run ends as finished, interrupted or failed, not {status!r}")
        self._set_status(run_id, status, ended_at)

    def resume_run(self, run_id: str) -> RunInfo:
        """Mark an interrupted or failed run ``running`` again and return it.

        A finished run has nothing left to do and is refused. The caller then
        continues each job after ``last_round(run_id, job)``.
        """
        info, status = self.run(run_id)
        if status == "finished":
            raise StorageError(f"run {run_id!r} is finished; there is nothing to resume")
        self._set_status(run_id, "running", None)
        return info

    def run(self, run_id: str) -> tuple[RunInfo, RunStatus]:
        """A run and its status; ``UnknownRunError`` if absent."""
        with self._lock:
            row = self._conn.execute(
                "SELECT run_id, method, mode, seed, config_json, started_at, status"
                " FROM runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        if row is None:
            raise UnknownRunError(f"no run {run_id!r} in {self._origin}")
        return _run_from_row(row)

    def runs(self) -> list[tuple[RunInfo, RunStatus]]:
        """Every run with its status, in the order they were started."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT run_id, method, mode, seed, config_json, started_at, status"
                " FROM runs ORDER BY rowid"
            ).fetchall()
        return [_run_from_row(row) for row in rows]

    def jobs(self, run_id: str) -> list[JobInfo]:
        """The jobs of a run, in the order given to ``start_run``."""
        with self._lock:
            window = _target_window_column(self._conn)
            rows = self._conn.execute(
                "SELECT run_id, job, model, dataset, target_accuracy, target_loss, max_rounds,"
                f" job_key, {window} FROM jobs WHERE run_id = ? ORDER BY position",
                (run_id,),
            ).fetchall()
        return [
            JobInfo(
                run_id=r[0],
                job=JobId(r[1]),
                model=r[2],
                dataset=r[3],
                target_accuracy=r[4],
                target_loss=r[5],
                max_rounds=r[6],
                job_key=r[7],
                target_window=r[8],
            )
            for r in rows
        ]

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
        where = f"round {record.round} of job {record.job!r} in run {record.run_id!r}"
        if choices and record.winner not in choices:
            raise StorageError(
                f"{where}: winner {record.winner!r} is not among the candidates {sorted(choices)}"
            )
        key = (record.run_id, record.job, record.round)
        with self._transaction() as conn:
            if conn.execute(
                "SELECT 1 FROM rounds WHERE run_id = ? AND job = ? AND round = ?", key
            ).fetchone():
                raise DuplicateRoundError(f"{where} is already recorded")
            try:
                conn.execute(
                    "INSERT INTO rounds (run_id, job, round, started_s, ended_s, accuracy, loss,"
                    " aggregated, expected_time_s, cost, winner)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        *key,
                        record.started_s,
                        record.ended_s,
                        record.accuracy,
                        record.loss,
                        int(record.aggregated),
                        record.expected_time_s,
                        record.cost,
                        record.winner,
                    ),
                )
                conn.executemany(
                    "INSERT INTO device_rounds (run_id, job, round, position, device, status,"
                    " samples, mean_loss, duration_s, download_s, compute_s, upload_s, error,"
                    " device_state, wait_s, energy_j) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [(*key, position, *_device_round_row(d)) for position, d in enumerate(record.devices)],
                )
                conn.executemany(
                    "INSERT INTO scheduler_choices (run_id, job, round, position, member,"
                    " selector_cost, won) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [
                        (*key, position, member, cost, int(member == record.winner))
                        for position, (member, cost) in enumerate((choices or {}).items())
                    ],
                )
            except sqlite3.IntegrityError as exc:
                raise StorageError(f"{where} not recorded: {exc}") from exc

    def rounds(self, run_id: str, job: JobId | str | None = None) -> list[RoundRecord]:
        """The recorded rounds of a run (or of one job), in the order they were recorded.

        Device rounds come back in the order of the original plan; a NaN
        accuracy, loss, expected time or cost comes back as NaN.
        """
        where, params = _run_job_filter(run_id, job)
        with self._lock:
            rows = self._conn.execute(
                "SELECT run_id, job, round, started_s, ended_s, accuracy, loss, aggregated,"
                f" expected_time_s, cost, winner FROM rounds WHERE {where} ORDER BY rowid",
                params,
            ).fetchall()
            device_rows = self._conn.execute(
                "SELECT job, round, device, status, samples, mean_loss, duration_s, download_s,"
                f" compute_s, upload_s, error, device_state, wait_s, energy_j FROM device_rounds WHERE {where}"
                " ORDER BY job, round, position",
                params,
            ).fetchall()
        devices: dict[tuple[str, int], list[DeviceRound]] = {}
        for d in device_rows:
            devices.setdefault((d[0], d[1]), []).append(
                DeviceRound(
                    device=DeviceId(d[2]),
                    status=d[3],
                    samples=d[4],
                    mean_loss=d[5],
                    duration_s=d[6],
                    download_s=d[7],
                    compute_s=d[8],
                    upload_s=d[9],
                    error=d[10],
                    device_state=None if d[11] is None else json.loads(d[11]),
                    wait_s=d[12],
                    energy_j=d[13],
                )
            )
        return [
            RoundRecord(
                run_id=r[0],
                job=JobId(r[1]),
                round=r[2],
                started_s=r[3],
                ended_s=r[4],
                devices=tuple(devices.get((r[1], r[2]), ())),
                accuracy=_nan_if_null(r[5]),
                loss=_nan_if_null(r[6]),
                aggregated=bool(r[7]),
                expected_time_s=_nan_if_null(r[8]),
                cost=_nan_if_null(r[9]),
                winner=r[10],
            )
            for r in rows
        ]

    def choices(self, run_id: str, job: JobId | str | None = None) -> list[SchedulerChoice]:
        """Every Meta-Greedy candidate of a run (winners and losers), by round then member order."""
        where, params = _run_job_filter(run_id, job, table="c.")
        with self._lock:
            cost = _choice_cost_column(self._conn)
            rows = self._conn.execute(
                f"SELECT c.run_id, c.job, c.round, c.member, c.{cost}, c.won"
                " FROM scheduler_choices AS c"
                " JOIN rounds AS r USING (run_id, job, round)"
                f" WHERE {where}"
                " ORDER BY r.rowid, c.position",
                params,
            ).fetchall()
        return [
            SchedulerChoice(
                run_id=r[0],
                job=JobId(r[1]),
                round=r[2],
                member=r[3],
                selector_cost=_nan_if_null(r[4]),
                won=bool(r[5]),
            )
            for r in rows
        ]

    def recorded_rounds(self, run_id: str | None = None) -> list[tuple[JobId, int]]:
        """(job, round) of every recorded round of a run, or of every run with None; by job, then round.

        The keys alone, cheap enough to poll: what an audit of lost or repeated
        rounds needs (a round recorded by two runs appears twice).
        """
        where, params = ("", ()) if run_id is None else (" WHERE run_id = ?", (run_id,))
        with self._lock:
            rows = self._conn.execute(
                f"SELECT job, round FROM rounds{where} ORDER BY job, round, rowid", params
            ).fetchall()
        return [(JobId(job), int(round_)) for job, round_ in rows]

    def last_round(self, run_id: str, job: JobId | str) -> int:
        """The last recorded round of a job (0 if none); resume continues after it."""
        with self._lock:
            row = self._conn.execute(
                "SELECT MAX(round) FROM rounds WHERE run_id = ? AND job = ?", (run_id, job)
            ).fetchone()
        return int(row[0] or 0)

    def participation(self, run_id: str) -> dict[JobId, dict[DeviceId, int]]:
        """How often each device was planned for each job of a run (s_{k,m}, Formula 5).

        Counts every recorded device round, failed ones included, as the
        engine counts every plan it issued; what resume restores fairness from.
        """
        with self._lock:
            rows = self._conn.execute(
                "SELECT job, device, COUNT(*) FROM device_rounds WHERE run_id = ?"
                " GROUP BY job, device ORDER BY job, device",
                (run_id,),
            ).fetchall()
        return _by_job_and_device(rows, int)

    def last_losses(self, run_id: str) -> dict[JobId, dict[DeviceId, float]]:
        """Each device's mean training loss with its last accepted update of each job of a run.

        The engine's statistical-utility signal (``Engine.losses``), restored on
        resume: the ``ok`` device round of the highest round per (job, device)
        that reported a finite loss (NaN is stored as NULL and skipped).
        """
        with self._lock:
            rows = self._conn.execute(
                "SELECT job, device, mean_loss FROM device_rounds AS d WHERE run_id = ? AND status = 'ok'"
                " AND mean_loss IS NOT NULL AND round = (SELECT MAX(round) FROM device_rounds"
                " WHERE run_id = d.run_id AND job = d.job AND device = d.device AND status = 'ok'"
                " AND mean_loss IS NOT NULL) ORDER BY job, device",
                (run_id,),
            ).fetchall()
        return _by_job_and_device(rows, float)

    def elapsed_s(self, run_id: str) -> float:
        """Run-clock time of a run's last recorded round end (0.0 if none): resume's time offset."""
        with self._lock:
            row = self._conn.execute(
                "SELECT MAX(ended_s) FROM rounds WHERE run_id = ?", (run_id,)
            ).fetchone()
        return float(row[0] or 0.0)

    def loss_history(self, job_key: str, *, exclude_run: str | None = None) -> list[list[float]]:
        """Loss after each round of every earlier finished run of the job ``job_key``.

        One list per (run, job) with this key, runs in start order, losses in
        round order (NaN where a round's loss was NaN). Runs that did not
        finish (interrupted, failed, still running) and ``exclude_run`` (the
        run being planned) are left out. Feeds Formula 10's loss-curve fit.
        """
        with self._lock:
            rows = self._conn.execute(
                "SELECT r.run_id, r.job, r.loss FROM rounds AS r"
                " JOIN jobs AS j USING (run_id, job)"
                " JOIN runs AS u USING (run_id)"
                " WHERE j.job_key = ? AND u.status = 'finished' AND u.run_id IS NOT ?"
                " ORDER BY u.rowid, j.position, r.round",
                (job_key, exclude_run),
            ).fetchall()
        curves: dict[tuple[str, str], list[float]] = {}
        for run_id, job, loss in rows:
            curves.setdefault((run_id, job), []).append(_nan_if_null(loss))
        return list(curves.values())

    # --- profiles ------------------------------------------------------------

    def record_refit(self, refit: ProfileRefit) -> None:
        """Record an online refit of a device's profile during a run."""
        with self._transaction() as conn:
            try:
                conn.execute(
                    "INSERT INTO profile_refits (run_id, device, at_s, a, mu, observations,"
                    " ks_statistic) VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (
                        refit.run_id,
                        refit.device,
                        refit.at_s,
                        refit.a,
                        refit.mu,
                        refit.observations,
                        refit.ks_statistic,
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise StorageError(
                    f"refit of {refit.device!r} in run {refit.run_id!r} not recorded: {exc}"
                ) from exc

    def refits(self, run_id: str) -> list[ProfileRefit]:
        """The profile refits of a run, in the order they were recorded."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT run_id, device, at_s, a, mu, observations, ks_statistic"
                " FROM profile_refits WHERE run_id = ? ORDER BY refit_id",
                (run_id,),
            ).fetchall()
        return [
            ProfileRefit(
                run_id=r[0],
                device=DeviceId(r[1]),
                at_s=r[2],
                a=r[3],
                mu=r[4],
                observations=r[5],
                ks_statistic=r[6],
            )
            for r in rows
        ]

    # --- fleet events ----------------------------------------------------------

    def record_fleet_event(self, event: FleetEvent) -> None:
        """Keep a device's join or leave, or a refused connection, of a real-time run."""
        hardware = None if event.hardware is None else json.dumps(dict(event.hardware), allow_nan=False, default=str)
        with self._transaction() as conn:
            try:
                conn.execute(
                    "INSERT INTO fleet_events (run_id, at_s, kind, device, detail, hardware_json)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (event.run_id, event.at_s, event.kind, event.device, event.detail, hardware),
                )
            except sqlite3.IntegrityError as exc:
                raise StorageError(f"{event.kind} event of run {event.run_id!r} not recorded: {exc}") from exc

    def fleet_events(self, run_id: str) -> list[FleetEvent]:
        """A run's fleet events, in the order they were recorded."""
        with self._lock:
            rows = self._conn.execute(
                "SELECT at_s, kind, device, detail, hardware_json FROM fleet_events WHERE run_id = ?"
                " ORDER BY event_id",
                (run_id,),
            ).fetchall()
        return [
            FleetEvent(
                run_id, r[0], r[1], None if r[2] is None else DeviceId(r[2]), r[3],
                None if r[4] is None else json.loads(r[4]),
            )
            for r in rows
        ]

    # --- provenance ------------------------------------------------------------

    def record_provenance(self, provenance: RunProvenance) -> None:
        """Keep what a run ran on and its programs, in one transaction; a run that has it keeps the first."""
        p = provenance
        with self._transaction() as conn, _refused(f"provenance of run {p.run_id!r} not recorded"):
            conn.execute(
                "INSERT OR IGNORE INTO provenance (run_id, recorded_at, config_text, config_file, config_sha256,"
                " redacted_json, versions_json) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (p.run_id, p.recorded_at, p.config_text, p.config_file, p.config_sha256,
                 json.dumps(list(p.redacted)), json.dumps(dict(p.versions), default=str)),
            )
            conn.executemany(
                "INSERT OR IGNORE INTO provenance_programs (run_id, job, sha256, size, file, shard_samples_json)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                [(p.run_id, b.job, b.sha256, b.size, b.file, json.dumps(list(b.shard_samples))) for b in p.programs],
            )

    def record_admissions(self, admissions: Sequence[DeviceAdmission]) -> int:
        """Keep devices' admissions, in one transaction, but those the run has of the same content; how many were new."""
        rows = []
        for a in admissions:
            told = (
                None if a.hello is None else json.dumps(dict(a.hello), sort_keys=True, default=str),
                json.dumps(dict(a.profile), sort_keys=True, default=str),
                json.dumps(dict(a.app), sort_keys=True, default=str),
            )
            digest = hashlib.sha256(json.dumps([a.shard, *told]).encode()).hexdigest()
            rows.append((a.run_id, a.device, a.admitted_at, a.shard, *told, digest))
        with self._transaction() as conn, _refused("admissions not recorded"):
            before = conn.total_changes
            conn.executemany(
                "INSERT OR IGNORE INTO provenance_devices (run_id, device, admitted_at, shard, hello_json,"
                " profile_json, app_json, digest) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            return conn.total_changes - before

    def provenance(self, run_id: str) -> tuple[RunProvenance | None, list[DeviceAdmission]]:
        """What run ``run_id`` ran on (None: not kept, an older run) and its devices' admissions, in order."""
        with self._lock:
            if not self._conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'provenance'").fetchone():
                return None, []  # a read-only reader of a version 5 or 6 database
            head = self._conn.execute(
                "SELECT recorded_at, config_text, config_file, config_sha256, redacted_json, versions_json"
                " FROM provenance WHERE run_id = ?", (run_id,),
            ).fetchone()
            programs = self._conn.execute(
                "SELECT p.job, sha256, size, file, shard_samples_json FROM provenance_programs p JOIN jobs j"
                " ON j.run_id = p.run_id AND j.job = p.job WHERE p.run_id = ? ORDER BY j.position", (run_id,),
            ).fetchall()
            devices = self._conn.execute(
                "SELECT device, admitted_at, shard, hello_json, profile_json, app_json FROM provenance_devices"
                " WHERE run_id = ? ORDER BY admission_id", (run_id,),
            ).fetchall()
        run = None if head is None else RunProvenance(
            run_id, head[0], head[1], head[2], head[3], tuple(json.loads(head[4])), json.loads(head[5]),
            tuple(ProgramBuild(JobId(r[0]), r[1], r[2], r[3], tuple(json.loads(r[4]))) for r in programs),
        )
        admissions = [
            DeviceAdmission(run_id, DeviceId(r[0]), r[1], r[2], None if r[3] is None else json.loads(r[3]),
                            json.loads(r[4]), json.loads(r[5]))
            for r in devices
        ]
        return run, admissions

    def save_profiles(
        self, profiles: Sequence[DeviceProfile], *, updated_at: str | None = None
    ) -> None:
        """Make ``profiles`` the latest known profile of their devices (one transaction).

        A device already stored is updated in place; ``updated_at`` (ISO 8601,
        default now in UTC) records when.
        """
        when = updated_at if updated_at is not None else datetime.now(UTC).isoformat()
        # The profile file's renderer validates ids and values; reuse it so
        # the database and the JSON file agree on what a valid profile is.
        entries = profiles_to_document(profiles, created=when)["devices"]
        rows = [
            (
                e["device_id"],
                e["a"],
                e["mu"],
                *_interval_columns(e["a_ci"]),
                *_interval_columns(e["mu_ci"]),
                e["ks_statistic"],
                e["n"],
                e["source"],
                _json_or_null(e["compute"]),
                _json_or_null(e["communication"]),
                json.dumps(e["hardware"], allow_nan=False),
                when,
                e.get("power_w"),
            )
            for e in entries
        ]
        with self._transaction() as conn:
            conn.executemany(
                "INSERT INTO device_profiles (device_id, a, mu, a_ci_low, a_ci_high, mu_ci_low,"
                " mu_ci_high, ks_statistic, n, source, compute_json, communication_json,"
                " hardware_json, updated_at, power_w) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
                " ON CONFLICT (device_id) DO UPDATE SET a = excluded.a, mu = excluded.mu,"
                " a_ci_low = excluded.a_ci_low, a_ci_high = excluded.a_ci_high,"
                " mu_ci_low = excluded.mu_ci_low, mu_ci_high = excluded.mu_ci_high,"
                " ks_statistic = excluded.ks_statistic, n = excluded.n,"
                " source = excluded.source, compute_json = excluded.compute_json,"
                " communication_json = excluded.communication_json,"
                " hardware_json = excluded.hardware_json, updated_at = excluded.updated_at,"
                " power_w = excluded.power_w",
                rows,
            )

    def load_profiles(self) -> list[DeviceProfile]:
        """The latest profile of every device, in the order devices were first saved.

        Rows are parsed by the profile file's parser, so a corrupt row raises
        ``DataError`` naming the device and field.
        """
        with self._lock:
            rows = self._conn.execute(
                "SELECT device_id, a, mu, a_ci_low, a_ci_high, mu_ci_low, mu_ci_high,"
                " ks_statistic, n, source, compute_json, communication_json, hardware_json,"
                " updated_at, power_w FROM device_profiles ORDER BY rowid"
            ).fetchall()
        if not rows:
            return []
        try:
            devices = [
                {
                    "device_id": r[0],
                    "a": r[1],
                    "mu": r[2],
                    "a_ci": _interval_from_columns(r[3], r[4]),
                    "mu_ci": _interval_from_columns(r[5], r[6]),
                    "ks_statistic": r[7],
                    "n": r[8],
                    "source": r[9],
                    "compute": None if r[10] is None else json.loads(r[10]),
                    "communication": None if r[11] is None else json.loads(r[11]),
                    "hardware": json.loads(r[12]),
                    **({"power_w": r[14]} if r[14] is not None else {}),
                }
                for r in rows
            ]
        except json.JSONDecodeError as exc:
            raise DataError(f"{self._origin}: device_profiles holds invalid JSON: {exc}") from exc
        document = {"format": FORMAT, "created": max(r[13] for r in rows), "devices": devices}
        return profiles_from_document(document, origin=f"{self._origin}:device_profiles")

    # --- internals -----------------------------------------------------------

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One explicit write transaction: committed on success, rolled back on any exception.

        BEGIN IMMEDIATE takes the write lock up front, so a concurrent reader
        can never make the transaction fail half-way on a lock upgrade.
        """
        try:
            with self._lock, self._conn:
                self._conn.execute("BEGIN IMMEDIATE")
                yield self._conn
        except sqlite3.OperationalError as exc:
            # "database or disk is full", "attempt to write a readonly database", I/O errors:
            # the transaction is rolled back, every earlier commit stays.
            raise StorageError(f"{self._origin}: the database refused a write: {exc}") from None

    def _version(self) -> int:
        row = self._conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def _migrate(self) -> None:
        with self._transaction() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        version = self._version()
        if (
            version == 0
            and self._conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name != 'schema_version'"
            ).fetchone()
        ):
            # Someone else's database: do not add our tables to it.
            raise DataError(f"{self._origin}: an SQLite database, but not an mjfl run database")
        if version > SCHEMA_VERSION:
            raise DataError(
                f"{self._origin}: schema version {version} is newer than this mjfl"
                f" understands ({SCHEMA_VERSION}); upgrade mjfl"
            )
        for target in range(version + 1, SCHEMA_VERSION + 1):
            with self._transaction() as conn:
                for statement in _MIGRATIONS[target - 1]:
                    conn.execute(statement)
                conn.execute("DELETE FROM schema_version")
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (target,))

    def _set_status(self, run_id: str, status: RunStatus, ended_at: str | None) -> None:
        with self._transaction() as conn:
            changed = conn.execute(
                "UPDATE runs SET status = ?, ended_at = ? WHERE run_id = ?",
                (status, ended_at, run_id),
            ).rowcount
            if changed == 0:
                raise UnknownRunError(f"no run {run_id!r} in {self._origin}")


@contextmanager
def _refused(what: str) -> Iterator[None]:
    """An insert the schema refuses (an unknown run or job) as a StorageError saying ``what`` was not kept."""
    try:
        yield
    except sqlite3.IntegrityError as exc:
        raise StorageError(f"{what}: {exc}") from exc


def _schema_ready(conn: sqlite3.Connection, origin: str) -> bool:
    """Whether a read-only connection sees this mjfl's whole schema (see ``Storage.read_only``)."""
    tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "schema_version" not in tables:
        if tables:
            raise DataError(f"{origin}: an SQLite database, but not an mjfl run database")
        return False  # a new file: its writer has not created the schema yet
    (version,) = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    version = int(version or 0)
    if version > SCHEMA_VERSION:
        raise DataError(
            f"{origin}: schema version {version} is newer than this mjfl understands ({SCHEMA_VERSION}); upgrade mjfl"
        )
    if version == SCHEMA_VERSION:
        return True
    # Migrations run one transaction each: an unfinished schema without runs is a
    # new file being created (or an old one with nothing in it); with runs, an old file.
    if "runs" in tables and conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone():
        if version >= _READABLE_FROM:
            return True
        raise DataError(
            f"{origin}: schema version {version} is older than this mjfl's ({SCHEMA_VERSION});"
            " open it for writing once (mjfl report does) to upgrade it"
        )
    return False


def _device_round_row(d: DeviceRound) -> tuple[Any, ...]:
    """A device round's columns after its key and position, as ``record_round`` inserts them."""
    return (
        d.device, d.status, d.samples, d.mean_loss, d.duration_s, d.download_s, d.compute_s, d.upload_s, d.error,
        _json_or_null(d.device_state), d.wait_s, d.energy_j,
    )


def _choice_cost_column(conn: sqlite3.Connection) -> str:
    """The column of a candidate's cost: ``selector_cost``, or ``recost`` in a file of schema version 5."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(scheduler_choices)")}
    return "recost" if "recost" in columns else "selector_cost"


def _target_window_column(conn: sqlite3.Connection) -> str:
    """What ``jobs`` selects as a job's target window: its column, or 1 in a file read as it is from before version 8."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
    return "target_window" if "target_window" in columns else "1"


def _run_from_row(row: Sequence[Any]) -> tuple[RunInfo, RunStatus]:
    info = RunInfo(
        run_id=row[0],
        method=row[1],
        mode=row[2],
        seed=row[3],
        config_json=row[4],
        started_at=row[5],
    )
    return info, row[6]


def _run_job_filter(
    run_id: str, job: str | None, *, table: str = ""
) -> tuple[str, tuple[str, ...]]:
    # Only fixed column names go into the SQL text; the values stay bound.
    if job is None:
        return f"{table}run_id = ?", (run_id,)
    return f"{table}run_id = ? AND {table}job = ?", (run_id, job)


def _nan_if_null(value: float | None) -> float:
    # The column was written from a float that cannot be None, so NULL is a NaN.
    return math.nan if value is None else value


def _interval_columns(interval: list[float] | None) -> tuple[float | None, float | None]:
    return (None, None) if interval is None else (interval[0], interval[1])


def _interval_from_columns(low: float | None, high: float | None) -> list[float] | None:
    return None if low is None or high is None else [low, high]


def _json_or_null(value: object) -> str | None:
    return None if value is None else json.dumps(value, allow_nan=False)


def _by_job_and_device(rows: Sequence[Sequence[Any]], value: Callable[[Any], T]) -> dict[JobId, dict[DeviceId, T]]:
    """``(job, device, x)`` rows as ``{job: {device: value(x)}}``."""
    out: dict[JobId, dict[DeviceId, T]] = {}
    for job, device, x in rows:
        out.setdefault(JobId(job), {})[DeviceId(device)] = value(x)
    return out
