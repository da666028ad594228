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
"""

from __future__ import annotations

import datetime as dt
import hashlib
import secrets
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Self, get_args

from mjfl.errors import StorageError

RunState = Literal["queued", "admitted", "running", "completed", "failed", "cancelled", "abandoned"]
STATES: tuple[RunState, ...] = get_args(RunState)
FINAL: frozenset[RunState] = frozenset({"completed", "failed", "cancelled", "abandoned"})
_RANK_SQL = "CASE {0} WHEN 'queued' THEN 0 WHEN 'admitted' THEN 1 WHEN 'running' THEN 2 ELSE 3 END"

_SCHEMA = (
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
    """``lab.db``: open with ``with LabStore(path) as store``; every write is one transaction."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA foreign_keys = ON")
            for statement in _SCHEMA:
                self._conn.execute(statement)
        except sqlite3.Error as exc:
            raise StorageError(f"{path}: cannot open the lab's database ({exc})") from None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._conn.close()

    # -- researchers ----------------------------------------------------------

    def add_researcher(self, name: str, *, admin: bool = False) -> str:
        """A new researcher (or one revoked before, afresh); returns the token, shown this once."""
        token = secrets.token_urlsafe(32)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO researchers (name, token_sha256, admin, created_at) VALUES (?, ?, ?, ?)"
                " ON CONFLICT (name) DO UPDATE SET token_sha256 = excluded.token_sha256, admin = excluded.admin,"
                " created_at = excluded.created_at, revoked_at = NULL",
                (name, _digest(token), int(admin), _now()),
            )
        return token

    def revoke(self, name: str) -> bool:
        """Revoke ``name``'s token; False if there is no such researcher (revoking twice is fine)."""
        with self._write() as conn:
            found = conn.execute("UPDATE researchers SET revoked_at = coalesce(revoked_at, ?) WHERE name = ?", (_now(), name))
        return found.rowcount > 0

    def researcher(self, name: str) -> Researcher | None:
        row = self._conn.execute(
            "SELECT name, admin, created_at, revoked_at FROM researchers WHERE name = ?", (name,)
        ).fetchone()
        return None if row is None else Researcher(row[0], bool(row[1]), row[2], row[3])

    def researchers(self) -> list[Researcher]:
        rows = self._conn.execute("SELECT name, admin, created_at, revoked_at FROM researchers ORDER BY name")
        return [Researcher(r[0], bool(r[1]), r[2], r[3]) for r in rows]

    def holder_of(self, token: str) -> Researcher | None:
        """The researcher whose token this is, unless revoked."""
        row = self._conn.execute(
            "SELECT name, admin, created_at, revoked_at FROM researchers WHERE token_sha256 = ? AND revoked_at IS NULL",
            (_digest(token),),
        ).fetchone()
        return None if row is None else Researcher(row[0], bool(row[1]), row[2], row[3])

    # -- runs -----------------------------------------------------------------

    def submit(self, owner: str, *, method: str, needs: int, config_toml: str, key: str | None) -> tuple[LabRun, bool]:
        """Queue a run; with ``key``, a run ``owner`` submitted before under it is returned instead. (run, new?)"""
        with self._write() as conn:
            if key is not None:
                found = conn.execute("SELECT run_id FROM runs WHERE owner = ? AND submit_key = ?", (owner, key)).fetchone()
                if found is not None:
                    return self._run(found[0]), False
            seq = conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM runs").fetchone()[0]
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
            with self._write() as conn:
                sets = "state = ?, reason = ?, targets_reached = ?" + (f", {stamp} = coalesce({stamp}, ?)" if stamp else "")
                values = (state, reason, None if reached is None else int(reached), *((now,) if stamp else ()))
                conn.execute(f"UPDATE runs SET {sets} WHERE run_id = ?", (*values, run_id))
                conn.execute("INSERT INTO run_states VALUES (?, ?, ?, ?)", (run_id, now, state, reason))
        except sqlite3.IntegrityError as exc:
            raise StorageError(f"run {run_id}: cannot move to {state} ({exc})") from None
        return self._run(run_id)

    def note(self, run_id: str, reason: str | None) -> None:
        """Why a run waits (its state unchanged)."""
        with self._write() as conn:
            conn.execute("UPDATE runs SET reason = ? WHERE run_id = ?", (reason, run_id))

    def run(self, run_id: str) -> LabRun | None:
        return self._run(run_id) if self._conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() else None

    def runs(self, *states: RunState) -> list[LabRun]:
        """Runs in submission order (those in ``states``, or all)."""
        where = f" WHERE state IN ({', '.join('?' * len(states))})" if states else ""
        rows = self._conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs{where} ORDER BY seq", states)
        return [_lab_run(row) for row in rows]

    def history(self, run_id: str) -> list[tuple[str, str, str | None]]:
        """(at, state, reason) of every state a run took, in order."""
        rows = self._conn.execute("SELECT at, state, reason FROM run_states WHERE run_id = ? ORDER BY rowid", (run_id,))
        return [tuple(row) for row in rows]  # type: ignore[misc]

    def _run(self, run_id: str) -> LabRun:
        return _lab_run(self._conn.execute(f"SELECT {_RUN_COLUMNS} FROM runs WHERE run_id = ?", (run_id,)).fetchone())

    def _write(self) -> _Transaction:
        return _Transaction(self._conn, self.path)


_RUN_COLUMNS = (
    "run_id, seq, owner, submit_key, state, method, needs, config_toml, submitted_at, admitted_at, started_at,"
    " ended_at, reason, targets_reached"
)


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK``), a full disk or a locked file said as a StorageError."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.conn, self.path = conn, path

    def __enter__(self) -> sqlite3.Connection:
        self.conn.execute("BEGIN IMMEDIATE")
        return self.conn

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if kind is None:
            self.conn.execute("COMMIT")
            return
        self.conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.OperationalError):
            raise StorageError(f"{self.path}: {exc}") from None


def _lab_run(row: tuple[Any, ...]) -> LabRun:
    *head, reached = row
    return LabRun(*head, targets_reached=None if reached is None else bool(reached))


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
