"""One SQLite connection that threads share: how mjfl's databases are opened, its lock, its transactions.

Who owns what: a ``Connection`` owns its ``sqlite3.Connection``, and every use of it, a read or a write,
holds the connection's lock (``reading``, ``transaction``); so the event loop and ``asyncio.to_thread``
workers may share one ``Connection``, each statement's rows fetched before the lock is let go. The lock
is re-entrant: a write may read what it needs under it.

Every connection opens with the same settings (docs/storage.md, "Guarantees"):

- a busy timeout of ``BUSY_TIMEOUT_S``: another process (``mjfl report``, a dashboard) may briefly hold
  the file's lock; a statement waits for it rather than fail;
- ``isolation_level=None``: no implicit BEGIN; every write opens its own ``BEGIN IMMEDIATE`` in
  ``transaction``, so what is one transaction is explicit;
- rows as ``sqlite3.Row``, read by column name.

``open_writer`` and ``open_reader`` open the run database (``database.Storage``); another database of
mjfl's (the lab's ``lab.db``) opens its file with ``connect`` and guards it with a ``Connection``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mjfl.errors import DataError, StorageError

__all__ = [
    "BUSY_TIMEOUT_S", "Connection", "closed_on_error", "connect", "open_reader", "open_writer", "refused", "stand_in",
]

BUSY_TIMEOUT_S = 5.0  # a reader (mjfl report) may briefly hold the WAL; wait, don't fail


def connect(target: str | Path, *, uri: bool = False) -> sqlite3.Connection:
    """``sqlite3.connect`` with the settings every mjfl database opens with (see the module docstring).

    ``check_same_thread=False``: the caller guards the connection with a ``Connection``'s lock instead.
    """
    conn = sqlite3.connect(target, uri=uri, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    return conn


class Connection:
    """An open SQLite connection (``sqlite``) and the lock that guards every use of it.

    ``origin`` names the file in errors (or ``:memory:``).
    """

    def __init__(self, sqlite: sqlite3.Connection, origin: str) -> None:
        self.sqlite = sqlite
        self.origin = origin
        self._lock = threading.RLock()

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection, for reads, under the lock: fetch the rows before the block ends."""
        with self._lock:
            yield self.sqlite

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One explicit write transaction: committed on success, rolled back on any exception.

        BEGIN IMMEDIATE takes the write lock up front, so a concurrent reader
        can never make the transaction fail half-way on a lock upgrade.
        """
        try:
            with self._lock, self.sqlite:
                self.sqlite.execute("BEGIN IMMEDIATE")
                yield self.sqlite
        except sqlite3.OperationalError as exc:
            # "database or disk is full", "attempt to write a readonly database", I/O errors:
            # the transaction is rolled back, every earlier commit stays.
            raise StorageError(f"{self.origin}: the database refused a write: {exc}") from None

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            self.sqlite.close()


@contextmanager
def refused(what: str) -> Iterator[None]:
    """An insert the schema refuses (an unknown run or job) as a StorageError saying ``what`` was not kept."""
    try:
        yield
    except sqlite3.IntegrityError as exc:
        raise StorageError(f"{what}: {exc}") from exc


def open_writer(target: str, prepare: Callable[[Connection], None]) -> Connection:
    """The run database ``target`` (a file, or ``:memory:``) to read and write, made ready by ``prepare``
    (the migrations); ``DataError`` if it cannot be opened or is not a usable run database."""
    try:
        db = Connection(connect(target), target)
    except sqlite3.Error as exc:
        raise DataError(f"{target}: cannot open the run database: {exc}") from exc
    with closed_on_error(db, _unusable(db)):
        # Pragmas must run outside a transaction. WAL lets reports read
        # while a run writes; synchronous=NORMAL is safe from corruption
        # in WAL mode (docs/storage.md, "Guarantees").
        db.sqlite.execute("PRAGMA journal_mode = WAL")
        db.sqlite.execute("PRAGMA synchronous = NORMAL")
        db.sqlite.execute("PRAGMA foreign_keys = ON")
        prepare(db)
    return db


def open_reader(file: Path, ready: Callable[[sqlite3.Connection, str], bool]) -> Connection | None:
    """The run database ``file`` to read only (a write raises ``StorageError``), or None where ``ready`` says
    its schema cannot be read yet (and where the file is not there): nothing is created or written."""
    if not file.exists():
        return None
    try:
        db = Connection(connect(f"{file.absolute().as_uri()}?mode=ro", uri=True), str(file))
    except sqlite3.Error as exc:
        raise DataError(f"{file}: cannot open the run database: {exc}") from exc
    with closed_on_error(db, _unusable(db)):
        db.sqlite.execute("PRAGMA query_only = ON")
        if ready(db.sqlite, db.origin):
            return db
    db.close()
    return None


def stand_in(origin: str, prepare: Callable[[Connection], None]) -> Connection:
    """An empty read-only run database standing in for ``origin`` (a file not there, or not ready yet)."""
    db = open_writer(":memory:", prepare)
    db.origin = origin
    db.sqlite.execute("PRAGMA query_only = ON")
    return db


@contextmanager
def closed_on_error(db: Connection, refusal: Callable[[sqlite3.DatabaseError], Exception]) -> Iterator[None]:
    """Close ``db`` if making it ready goes wrong; what SQLite refuses there is raised as ``refusal(its error)``."""
    try:
        yield
    except sqlite3.DatabaseError as exc:
        db.close()
        raise refusal(exc) from exc
    except BaseException:
        db.close()
        raise


def _unusable(db: Connection) -> Callable[[sqlite3.DatabaseError], Exception]:
    """A file SQLite cannot read as a run database, said as a ``DataError`` naming it."""
    return lambda exc: DataError(f"{db.origin}: not a usable mjfl run database: {exc}")
