"""The run database's schema: its tables as each version created them, the migrations between versions,
and what the code reads and writes of each table (``Table``: its columns, written once).

A file is at the version its ``schema_version`` table says. ``migrate`` takes a file opened for writing to
``SCHEMA_VERSION``; ``ready`` says whether a read-only reader can read a file as it is (docs/storage.md,
"Guarantees" and "Schema").
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mjfl.coordinator.storage.connection import Connection
from mjfl.errors import DataError

__all__ = [
    "MIGRATIONS", "READABLE_FROM", "SCHEMA_VERSION", "TABLES", "Table", "from_json", "migrate", "ready", "record_of",
    "to_json", "upgrade", "version",
]

R = TypeVar("R")

# MIGRATIONS[i] takes the database from version i to i + 1; a new version
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

# Version 9: the run clock's anchors (records.wall_time): at run-clock time run_s the wall clock read wall_s (Unix
# seconds), kept each time a run's engine starts (its first start and each resume), so that a round's run-clock
# times can be put on the wall clock. Anchors at one run_s are all kept, in recording order (anchor_id).
_SCHEMA_V9 = (
    """
    CREATE TABLE run_clocks (
        anchor_id INTEGER PRIMARY KEY,
        run_id    TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
        run_s     REAL NOT NULL CHECK (run_s >= 0),
        wall_s    REAL NOT NULL
    )
    """,
    "CREATE INDEX run_clocks_by_run ON run_clocks (run_id, run_s)",
)

# Version 10: a job's model as given (a zoo name or a factory, ``models.py:Net``) and, for a factory, the sha256
# of its source file and of each helper file (docs/models.md, "Your own model"), beside the program built from it.
_SCHEMA_V10 = (
    "ALTER TABLE provenance_programs ADD COLUMN model TEXT",
    "ALTER TABLE provenance_programs ADD COLUMN model_sha256 TEXT",
    "ALTER TABLE provenance_programs ADD COLUMN model_files_json TEXT",
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (
    _SCHEMA_V1, _SCHEMA_V2, _SCHEMA_V3, _SCHEMA_V4, _SCHEMA_V5, _SCHEMA_V6, _SCHEMA_V7, _SCHEMA_V8, _SCHEMA_V9, _SCHEMA_V10,
)
SCHEMA_VERSION = len(MIGRATIONS)
# The oldest schema a read-only reader reads as it is: version 6 only renamed a column, which
# ``Table.select`` names by either name, so a finished run of version 5 needs no upgrade to be read;
# versions 7 and 9 only added tables, which read as empty where they are missing (``Table.present``); version 8
# only added a column with a default, which reads as that default where it is missing; version 10 only added
# nullable columns, which read as null where they are missing.
READABLE_FROM = 5


@dataclass(frozen=True)
class Table:
    """What mjfl writes and reads of one table: its name and its columns, the one list both the INSERT and the
    SELECT are made from, so that a row goes in and comes back by column name (``sqlite3.Row``).

    ``older``: for a column a file read as it is (from ``READABLE_FROM`` on) may lack, what is read in its place:
    the column's name before a rename, or the default it was added with. ``added``: the schema version that
    created the table; one added after ``READABLE_FROM`` reads as empty in a file without it. A table's integer
    key (its rowid) is not among ``columns``: SQLite numbers the rows, and reads order by it.
    """

    name: str
    columns: tuple[str, ...]
    older: Mapping[str, str] = field(default_factory=dict)
    added: int = 1

    def row(self, record: object, **given: Any) -> dict[str, Any]:
        """The row of ``record`` for ``insert``: each column the attribute of its name, but those ``given``."""
        assert given.keys() <= set(self.columns), f"{self.name} has no column {sorted(given.keys() - set(self.columns))}"
        return {c: given[c] if c in given else getattr(record, c) for c in self.columns}

    def insert(self, verb: str = "INSERT") -> str:
        """``verb INTO name (columns) VALUES (:column, ...)``: a row is bound as a mapping of column to value."""
        names = ", ".join(self.columns)
        return f"{verb} INTO {self.name} ({names}) VALUES ({', '.join(f':{c}' for c in self.columns)})"

    def upsert(self, key: str) -> str:
        """``insert()`` that updates every other column of the row whose ``key`` is already there."""
        updates = ", ".join(f"{c} = excluded.{c}" for c in self.columns if c != key)
        return f"{self.insert()} ON CONFLICT ({key}) DO UPDATE SET {updates}"

    def select(self, conn: sqlite3.Connection, *, of: str = "") -> str:
        """The SELECT list of every column, each named as in ``columns`` (``of``: the table's alias in a join).

        Where ``conn``'s file lacks a column, what ``older`` names stands in, under the column's name.
        """
        have = self._have(conn) if self.older else set(self.columns)
        prefix = f"{of}." if of else ""
        return ", ".join(
            f"{prefix}{c}" if c in have else f"{_older_expression(prefix, self.older[c])} AS {c}" for c in self.columns
        )

    def rows(self, db: Connection, where: str | None, params: Sequence[Any], *, order: str) -> list[sqlite3.Row]:
        """Every column (``select``) of the rows ``where`` picks (values bound from ``params``), by ``order``.

        ``where`` and ``order`` are the code's own SQL, never data. None where the file is older than the table.
        """
        with db.reading() as conn:
            if self.added > READABLE_FROM and not self.present(conn):
                return []
            condition = "" if where is None else f" WHERE {where}"
            return conn.execute(
                f"SELECT {self.select(conn)} FROM {self.name}{condition} ORDER BY {order}", params
            ).fetchall()

    def present(self, conn: sqlite3.Connection) -> bool:
        """Whether ``conn``'s file has the table (a file read as it is may be older than it)."""
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (self.name,)).fetchone() is not None

    def _have(self, conn: sqlite3.Connection) -> set[str]:
        return {row["name"] for row in conn.execute(f"PRAGMA table_info({self.name})")}


def record_of(kind: type[R], row: sqlite3.Row, **given: Any) -> R:
    """A ``kind`` (a record's dataclass) of ``row``: each field the column of its name, but those ``given``."""
    names = _field_names(kind)
    assert given.keys() <= set(names), f"{kind.__name__} has no field {sorted(given.keys() - set(names))}"
    return kind(**{name: given[name] if name in given else row[name] for name in names})


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    """A record's fields, once per kind (a run's rounds are 100,000 records; ``dataclasses.fields`` each time was
    a third of reading them)."""
    return tuple(f.name for f in dataclasses.fields(kind))


def _older_expression(prefix: str, older: str) -> str:
    """An older column's name (under the table's alias), or a literal default as it is."""
    return f"{prefix}{older}" if older.isidentifier() else older


RUNS = Table("runs", ("run_id", "method", "mode", "seed", "config_json", "started_at", "ended_at", "status"))
JOBS = Table(
    "jobs",
    ("run_id", "job", "position", "model", "dataset", "target_accuracy", "target_loss", "max_rounds", "job_key",
     "target_window"),
    older={"target_window": "1"},
)
ROUNDS = Table(
    "rounds",
    ("run_id", "job", "round", "started_s", "ended_s", "accuracy", "loss", "aggregated", "expected_time_s", "cost",
     "winner"),
)
DEVICE_ROUNDS = Table(
    "device_rounds",
    ("run_id", "job", "round", "position", "device", "status", "samples", "mean_loss", "duration_s", "download_s",
     "compute_s", "upload_s", "error", "device_state", "wait_s", "energy_j"),
)
SCHEDULER_CHOICES = Table(
    "scheduler_choices",
    ("run_id", "job", "round", "position", "member", "selector_cost", "won"),
    older={"selector_cost": "recost"},
)
PROFILE_REFITS = Table("profile_refits", ("run_id", "device", "at_s", "a", "mu", "observations", "ks_statistic"))
FLEET_EVENTS = Table("fleet_events", ("run_id", "at_s", "kind", "device", "detail", "hardware_json"))
PROVENANCE = Table(
    "provenance",
    ("run_id", "recorded_at", "config_text", "config_file", "config_sha256", "redacted_json", "versions_json"),
    added=7,
)
PROVENANCE_PROGRAMS = Table(
    "provenance_programs",
    ("run_id", "job", "sha256", "size", "file", "shard_samples_json", "model", "model_sha256", "model_files_json"),
    older={"model": "NULL", "model_sha256": "NULL", "model_files_json": "NULL"},
    added=7,
)
PROVENANCE_DEVICES = Table(
    "provenance_devices",
    ("run_id", "device", "admitted_at", "shard", "hello_json", "profile_json", "app_json", "digest"),
    added=7,
)
DEVICE_PROFILES = Table(
    "device_profiles",
    ("device_id", "a", "mu", "a_ci_low", "a_ci_high", "mu_ci_low", "mu_ci_high", "ks_statistic", "n", "source",
     "compute_json", "communication_json", "hardware_json", "updated_at", "power_w"),
)
RUN_CLOCKS = Table("run_clocks", ("run_id", "run_s", "wall_s"), added=9)

TABLES: tuple[Table, ...] = (
    RUNS, JOBS, ROUNDS, DEVICE_ROUNDS, SCHEDULER_CHOICES, PROFILE_REFITS, FLEET_EVENTS, PROVENANCE,
    PROVENANCE_PROGRAMS, PROVENANCE_DEVICES, DEVICE_PROFILES, RUN_CLOCKS,
)


def version(conn: sqlite3.Connection) -> int:
    """The schema version of ``conn``'s file (0: none yet)."""
    return int(conn.execute("SELECT MAX(version) AS version FROM schema_version").fetchone()["version"] or 0)


def migrate(db: Connection) -> None:
    """Take the run database ``db`` (opened for writing) to ``SCHEMA_VERSION``, one transaction per version.

    A file that holds other tables but no ``schema_version`` is someone else's database and is refused, as is
    a file newer than this mjfl.
    """
    with db.transaction() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    with db.reading() as conn:
        at = version(conn)
        foreign = at == 0 and conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name != 'schema_version'"
        ).fetchone()
    if foreign:
        raise DataError(f"{db.origin}: an SQLite database, but not an mjfl run database")
    upgrade(db, MIGRATIONS, at, _stamp)


def _stamp(conn: sqlite3.Connection, target: int) -> None:
    conn.execute("DELETE FROM schema_version")
    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (target,))


def upgrade(
    db: Connection, migrations: Sequence[Sequence[str]], at: int, stamp: Callable[[sqlite3.Connection, int], None],
) -> None:
    """Apply ``migrations[at:]`` to ``db`` in order, each in one transaction with ``stamp(conn, its version)``.

    Any SQLite database versioned this way (the run database, the lab's ``lab.db``): a crash mid-way leaves the
    last version committed. A file at a version beyond ``migrations`` is refused (``DataError``), not misread.
    """
    if at > len(migrations):
        raise _newer(db.origin, at, len(migrations))
    for target in range(at + 1, len(migrations) + 1):
        with db.transaction() as conn:
            for statement in migrations[target - 1]:
                conn.execute(statement)
            stamp(conn, target)


def ready(conn: sqlite3.Connection, origin: str) -> bool:
    """Whether a read-only connection sees a schema it can read (see ``Storage.read_only``).

    False for a file whose writer has not finished creating the schema (or an older one without runs): it
    reads as empty. An older file with runs is read as it is from ``READABLE_FROM`` on, refused before.
    """
    tables = {row["name"] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "schema_version" not in tables:
        if tables:
            raise DataError(f"{origin}: an SQLite database, but not an mjfl run database")
        return False  # a new file: its writer has not created the schema yet
    at = version(conn)
    if at > SCHEMA_VERSION:
        raise _newer(origin, at, SCHEMA_VERSION)
    if at == SCHEMA_VERSION:
        return True
    # Migrations run one transaction each: an unfinished schema without runs is a
    # new file being created (or an old one with nothing in it); with runs, an old file.
    if "runs" in tables and conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone():
        if at >= READABLE_FROM:
            return True
        raise DataError(
            f"{origin}: schema version {at} is older than this mjfl's ({SCHEMA_VERSION});"
            " open it for writing once (mjfl report does) to upgrade it"
        )
    return False


def _newer(origin: str, at: int, understood: int) -> DataError:
    return DataError(f"{origin}: schema version {at} is newer than this mjfl understands ({understood}); upgrade mjfl")


def to_json(value: object) -> str | None:
    """A JSON column's text (NULL for None); a NaN is refused, as JSON has none."""
    return None if value is None else json.dumps(value, allow_nan=False)


def from_json(text: str | None) -> Any:
    """A JSON column's value (None for NULL)."""
    return None if text is None else json.loads(text)
