"""The lab's own state in SQLite (``LAB_DIR/lab.db``): researchers, runs, their states and submitted configs.

A run's rounds are not here: each run keeps its own run database and
checkpoints in its folder (``LAB_DIR/runs/<run>/``), as `mjfl testbed run`
writes them. This database says who may submit, what was submitted (the
config verbatim), in which order, and where each run stands:

    queued -> admitted -> running -> completed | failed | cancelled | abandoned

A run's state only moves forward, and a final state is never overwritten:
the table's trigger refuses anything else, so no code path can (a
restarted service resumes ``running`` runs, it does not rewind them). Every
change is kept in ``run_states`` with its reason.

Tokens are kept as SHA-256 digests; a token is shown once, when made.

Who owns what: the store owns one SQLite connection, shared by the event
loop (the API's submits, moves and notes, the scheduler of runs) and the
``asyncio.to_thread`` workers that read it (the lab's page, ``LabView``,
and its run pages). Every use of that connection, a read or a
transaction, holds its one lock (``storage.connection.Connection``), so no
two threads ever use it at once and each statement's rows are fetched
before the lock is let go. One lock rather than a connection per thread:
each use is one statement or one short transaction (well under a
millisecond), SQLite lets one writer in at a time whatever the
connections, and a worker pool's threads come and go, so their
connections would be left open where ``close`` cannot reach them. A write
waits up to ``storage.connection.BUSY_TIMEOUT_S`` for another process
(a ``sqlite3`` shell, a backup) that holds the file's lock, as the run
database does.

The schema's version is ``PRAGMA user_version``; ``_MIGRATIONS[i]`` takes
the file from version ``i`` to ``i + 1``, each in one transaction with the
version's stamp (``storage.schema.upgrade``, as the run database is
migrated): a new version appends a migration and never edits an earlier
one, and a file newer than this mjfl is refused. Version 1 is the schema
``lab.db`` had before it kept a version, its statements ``IF NOT EXISTS``
so that such a file is taken up as it is.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Self, get_args

from mjfl.coordinator.storage.connection import Connection, closed_on_error, connect
from mjfl.coordinator.storage.schema import Table, record_of, upgrade
from mjfl.errors import StorageError

RunState = Literal["queued", "admitted", "running", "completed", "failed", "cancelled", "abandoned"]
STATES: tuple[RunState, ...] = get_args(RunState)
FINAL: frozenset[RunState] = frozenset({"completed", "failed", "cancelled", "abandoned"})
_RANK_SQL = "CASE {0} WHEN 'queued' THEN 0 WHEN 'admitted' THEN 1 WHEN 'running' THEN 2 ELSE 3 END"

_SCHEMA_V1 = (
    """
    CREATE TABLE IF NOT EXISTS researchers (
        name          TEXT PRIMARY KEY,
        token_sha256  TEXT NOT NULL UNIQUE,
        admin         INTEGER NOT NULL CHECK (admin IN (0, 1)),
        created_at    TEXT NOT NULL,
        revoked_at    TEXT
    )
    """,
    f"""
    CREATE TABLE IF NOT EXISTS runs (
        run_id        TEXT PRIMARY KEY,
        seq           INTEGER NOT NULL UNIQUE,
        owner         TEXT NOT NULL REFERENCES researchers (name),
        submit_key    TEXT,
        state         TEXT NOT NULL CHECK (state IN ({", ".join(f"'{s}'" for s in STATES)})),
        method        TEXT NOT NULL,
        needs         INTEGER NOT NULL CHECK (needs >= 1),
        config_toml   TEXT NOT NULL,
        submitted_at  TEXT NOT NULL,
        admitted_at   TEXT,
        started_at    TEXT,
        ended_at      TEXT,
        reason        TEXT,
        targets_reached INTEGER CHECK (targets_reached IN (0, 1)),
        UNIQUE (owner, submit_key)
    )
    """,
    f"""
    CREATE TRIGGER IF NOT EXISTS runs_move_forward BEFORE UPDATE OF state ON runs
    WHEN {_RANK_SQL.format("NEW.state")} <= {_RANK_SQL.format("OLD.state")}
    BEGIN SELECT RAISE(ABORT, 'a run''s state only moves forward'); END
    """,
    """
    CREATE TABLE IF NOT EXISTS run_states (
        run_id  TEXT NOT NULL REFERENCES runs (run_id),
        at      TEXT NOT NULL,
        state   TEXT NOT NULL,
        reason  TEXT
    )
    """,
)

_MIGRATIONS: tuple[tuple[str, ...], ...] = (_SCHEMA_V1,)
SCHEMA_VERSION = len(_MIGRATIONS)


@dataclass(frozen=True)
class Researcher:
    name: str
    admin: bool
    created_at: str
    revoked_at: str | None = None


@dataclass(frozen=True)
class LabRun:
    """A submitted run, as the lab keeps it."""

    run_id: str
    seq: int
    owner: str
    submit_key: str | None
    state: RunState
    method: str
    needs: int  # devices it needs connected (its fleet's size)
    config_toml: str
    submitted_at: str
    admitted_at: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    reason: str | None = None
    targets_reached: bool | None = None  # completed runs: whether every job reached its target

    @property
    def final(self) -> bool:
        return self.state in FINAL


class LabStore:
    """``lab.db``: open with ``with LabStore(path) as store``; every write is one transaction.

    Safe to share between the event loop and worker threads (the module docstring says how).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._db = _open(path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    @property
    def schema_version(self) -> int:
        """The schema version of the open file (``PRAGMA user_version``)."""
        with self._db.reading() as conn:
            return _version(conn)

    # -- researchers ----------------------------------------------------------

    def add_researcher(self, name: str, *, admin: bool = False) -> str:
        """A new researcher (or one revoked before, afresh); returns the token, shown this once."""
        token = secrets.token_urlsafe(32)
        with self._db.transaction() as conn:
            conn.execute(
                "INSERT INTO researchers (name, token_sha256, admin, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET token_sha256 = excluded.token_sha256, admin = excluded.admin,"
                " created_at = excluded.created_at, revoked_at = NULL",
                (name, _digest(token), int(admin), _now()),
            )
        return token

    def revoke(self, name: str) -> bool:
        """Revoke ``name``'s token; False if there is no such researcher (revoking twice is fine)."""
        with self._db.transaction() as conn:
            found = conn.execute("UPDATE researchers SET revoked_at = coalesce(revoked_at, ?) WHERE name = ?", (_now(), name))
        return found.rowcount > 0

    def researcher(self, name: str) -> Researcher | None:
        found = _RESEARCHERS.rows(self._db, "name = ?", (name,), order="name")
        return _researcher(found[0]) if found else None

    def researchers(self) -> list[Researcher]:
        return [_researcher(row) for row in _RESEARCHERS.rows(self._db, None, (), order="name")]

    def holder_of(self, token: str) -> Researcher | None:
        """The researcher whose token this is, unless revoked."""
        found = _RESEARCHERS.rows(self._db, "token_sha256 = ? AND revoked_at IS NULL", (_digest(token),), order="name")
        return _researcher(found[0]) if found else None

    # -- runs -----------------------------------------------------------------

    def submit(self, owner: str, *, method: str, needs: int, config_toml: str, key: str | None) -> tuple[LabRun, bool]:
        """Queue a run; with ``key``, a run ``owner`` submitted before under it is returned instead. (run, new?)"""
        with self._db.transaction() as conn:
            if key is not None:
                found = conn.execute("SELECT run_id FROM runs WHERE owner = ? AND submit_key = ?", (owner, key)).fetchone()
                if found is not None:
                    return self._run(found["run_id"]), False
            seq = conn.execute("SELECT coalesce(max(seq), 0) + 1 AS seq FROM runs").fetchone()["seq"]
            run_id = f"{seq:04d}-{owner}"
            now = _now()
            conn.execute(
                "INSERT INTO runs (run_id, seq, owner, submit_key, state, method, needs, config_toml, submitted_at)"
                " VALUES (?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
                (run_id, seq, owner, key, method, needs, config_toml, now),
            )
            conn.execute("INSERT INTO run_states VALUES (?, ?, 'queued', NULL)", (run_id, now))
        return self._run(run_id), True

    def move(self, run_id: str, state: RunState, reason: str | None = None, *, reached: bool | None = None) -> LabRun:
        """Move a run forward to ``state`` (a StorageError if that would not be forward); ``reached``: its targets."""
        now = _now()
        stamp = {"admitted": "admitted_at", "running": "started_at"}.get(state, "ended_at" if state in FINAL else None)
        try:
            with self._db.transaction() as conn:
                sets = "state = ?, reason = ?, targets_reached = ?" + (f", {stamp} = coalesce({stamp}, ?)" if stamp else "")
                values = (state, reason, None if reached is None else int(reached), *((now,) if stamp else ()))
                conn.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", (*values, run_id))
                conn.execute("INSERT INTO run_states VALUES (?, ?, ?, ?)", (run_id, now, state, reason))
        except sqlite3.IntegrityError as exc:
            raise StorageError(f"run {run_id}: cannot move to {state} ({exc})") from None
        return self._run(run_id)

    def note(self, run_id: str, reason: str | None) -> None:
        """Why a run waits (its state unchanged)."""
        with self._db.transaction() as conn:
            conn.execute("UPDATE runs SET reason = ? WHERE run_id = ?", (reason, run_id))

    def run(self, run_id: str) -> LabRun | None:
        found = _RUNS.rows(self._db, "run_id = ?", (run_id,), order="seq")
        return _lab_run(found[0]) if found else None

    def runs(self, *states: RunState) -> list[LabRun]:
        """Runs in submission order (those in ``states``, or all)."""
        where = f"state IN ({', '.join('?' * len(states))})" if states else None
        return [_lab_run(row) for row in _RUNS.rows(self._db, where, states, order="seq")]

    def history(self, run_id: str) -> list[tuple[str, str, str | None]]:
        """(at, state, reason) of every state a run took, in order."""
        with self._db.reading() as conn:
            rows = conn.execute("SELECT at, state, reason FROM run_states WHERE run_id = ? ORDER BY rowid", (run_id,))
            return [(row["at"], row["state"], row["reason"]) for row in rows]

    def _run(self, run_id: str) -> LabRun:
        found = self.run(run_id)
        assert found is not None, f"run {run_id} was just written"
        return found


_RUNS = Table(
    "runs",
    ("run_id", "seq", "owner", "submit_key", "state", "method", "needs", "config_toml", "submitted_at", "admitted_at",
     "started_at", "ended_at", "reason", "targets_reached"),
)
_RESEARCHERS = Table("researchers", ("name", "admin", "created_at", "revoked_at"))  # what is read: not the digest


def _open(path: Path) -> Connection:
    """``lab.db`` at ``path``, migrated to ``SCHEMA_VERSION``; a file SQLite cannot open is a StorageError."""

    def refusal(exc: sqlite3.Error) -> StorageError:
        return StorageError(f"{path}: cannot open the lab's database ({exc})")

    try:
        db = Connection(connect(path), str(path))
    except sqlite3.Error as exc:
        raise refusal(exc) from None
    with closed_on_error(db, refusal):
        db.sqlite.execute("PRAGMA journal_mode = WAL")
        db.sqlite.execute("PRAGMA foreign_keys = ON")
        with db.reading() as conn:
            at = _version(conn)
        upgrade(db, _MIGRATIONS, at, _stamp)
    return db


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()["user_version"])


def _stamp(conn: sqlite3.Connection, version: int) -> None:
    # A pragma takes no bound parameter; the version is the code's own integer.
    conn.execute(f"PRAGMA user_version = {int(version)}")


def _researcher(row: sqlite3.Row) -> Researcher:
    return record_of(Researcher, row, admin=bool(row["admin"]))


def _lab_run(row: sqlite3.Row) -> LabRun:
    reached = row["targets_reached"]
    return record_of(LabRun, row, targets_reached=None if reached is None else bool(reached))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
