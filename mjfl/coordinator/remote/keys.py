"""The enrolled devices' key store: one SQLite file, readable by its owner only (docs/security.md).

``mjfl devices enroll NAME`` draws a secret, stores it and prints it once;
the coordinator needs the secret itself to check a hello's HMAC (a hash of
it would not do), so the file is created with mode 0600 and its journal
follows that mode. SQLite, not a text file: the coordinator writes "last
seen" while ``mjfl devices enroll``/``revoke`` may run beside it, and SQLite
serialises those writers where a rewritten text file would lose one.

Revoking keeps the row (when, and the device's last visit) but erases the
secret: nothing can be verified against it any more.

A device *key file* is the other side's: ``NAME SECRET`` a line, what
``mjfl devices enroll NAME --save FILE`` appends and ``mjfl devices emulate
--key-file FILE`` reads (``append_key_file``, ``read_key_file``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mjfl.device.protocol.credentials import is_secret, new_secret, proof_matches
from mjfl.errors import DataError, UserError

_SCHEMA = """
CREATE TABLE IF NOT EXISTS devices (
    name        TEXT PRIMARY KEY,
    secret      TEXT,              -- NULL once revoked
    enrolled_at REAL NOT NULL,     -- Unix time
    revoked_at  REAL,
    last_seen   REAL               -- Unix time of the latest accepted hello
)
"""


def default_key_store() -> Path:
    """``$XDG_CONFIG_HOME/mjfl/devices.db`` (``~/.config/mjfl/devices.db``): the lab's, across runs."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "mjfl" / "devices.db"


@dataclass(frozen=True)
class EnrolledDevice:
    """One row of ``mjfl devices keys``; times are Unix seconds."""

    name: str
    enrolled_at: float
    revoked_at: float | None
    last_seen: float | None


class KeyStore:
    """The enrolled devices of ``path``; ``create`` makes the file (0600) when it is missing.

    SQLite serialises writers, so a store can be shared by the coordinator and
    the command line at once.
    """

    def __init__(self, path: Path, *, create: bool = False) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            if not create:
                raise DataError(f"key store {self.path}: no such file (enroll a device: mjfl devices enroll NAME)")
            self._create()
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        with self._db() as db:
            db.execute(_SCHEMA)

    def _create(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # Created 0600 before SQLite writes a byte; SQLite gives its journal the same mode.
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            pass
        except OSError as exc:
            raise DataError(f"key store {self.path}: cannot create it: {exc.strerror or exc}") from None

    @contextlib.contextmanager
    def _db(self, *, durable: bool = False) -> Iterator[sqlite3.Connection]:
        """One transaction on the store's connection (opened once: a coordinator checks every hello)."""
        with self._lock:  # the phones' launches ask from worker threads
            yield from self._transaction(durable)

    def _transaction(self, durable: bool) -> Iterator[sqlite3.Connection]:
        try:
            if self._conn is None:
                self._conn = sqlite3.connect(self.path, timeout=10.0, check_same_thread=False)
                self._conn.execute("PRAGMA journal_mode = WAL")  # its -wal and -shm take the file's mode
            # A hello's "last seen" is written without an fsync (WAL keeps the file consistent; a
            # power cut may lose the latest one); an enrollment or a revocation is on disk when it returns.
            self._conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
            with self._conn:
                yield self._conn
        except sqlite3.DatabaseError as exc:
            raise DataError(f"key store {self.path}: {exc}") from None

    def close(self) -> None:
        """Close the store's connection (a later call opens it again)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def enroll(self, name: str, *, secret: str | None = None) -> str:
        """Issue a fresh secret for ``name`` (replacing a revoked one) and return it.

        UserError if ``name`` is enrolled and not revoked: revoke it first.
        """
        if not 1 <= len(name) <= 256:
            raise UserError(f"device name {name!r}: must be 1 to 256 characters (a protocol id)")
        secret = secret if secret is not None else new_secret()
        if not is_secret(secret):
            raise UserError("secret: must be 16 to 256 characters of A-Z a-z 0-9 - _")
        with self._db(durable=True) as db:
            row = db.execute("SELECT secret FROM devices WHERE name = ?", (name,)).fetchone()
            if row is not None and row[0] is not None:
                raise UserError(f"device {name!r} is already enrolled; revoke it first (mjfl devices revoke {name})")
            db.execute(
                "INSERT OR REPLACE INTO devices (name, secret, enrolled_at, revoked_at, last_seen)"
                " VALUES (?, ?, ?, NULL, NULL)",
                (name, secret, time.time()),
            )
        return secret

    def revoke(self, name: str) -> None:
        """Erase ``name``'s secret: its hellos are refused from now on. UserError if not enrolled."""
        with self._db(durable=True) as db:
            updated = db.execute(
                "UPDATE devices SET secret = NULL, revoked_at = ? WHERE name = ? AND secret IS NOT NULL",
                (time.time(), name),
            ).rowcount
        if not updated:
            raise UserError(f"device {name!r} is not enrolled in {self.path} (or already revoked)")

    def devices(self) -> list[EnrolledDevice]:
        """Every device ever enrolled, by name."""
        with self._db() as db:
            rows = db.execute("SELECT name, enrolled_at, revoked_at, last_seen FROM devices ORDER BY name").fetchall()
        return [EnrolledDevice(*row) for row in rows]

    def enrolled(self) -> int:
        """How many devices hold a secret now (enrolled and not revoked): those a coordinator may admit."""
        with self._db() as db:
            (count,) = db.execute("SELECT COUNT(*) FROM devices WHERE secret IS NOT NULL").fetchone()
        return int(count)

    def verify(self, name: str, nonce: str, proof: str) -> bool:
        """Whether ``proof`` proves ``name``'s secret for ``nonce``; a success updates "last seen"."""
        with self._db() as db:
            row = db.execute("SELECT secret FROM devices WHERE name = ?", (name,)).fetchone()
            if row is None or row[0] is None or not proof_matches(row[0], nonce, name, proof):
                return False
            db.execute("UPDATE devices SET last_seen = ? WHERE name = ?", (time.time(), name))
        return True

    def secret(self, name: str) -> str | None:
        """``name``'s secret (None when unknown or revoked), e.g. to hand to an attached phone over adb."""
        with self._db() as db:
            row = db.execute("SELECT secret FROM devices WHERE name = ?", (name,)).fetchone()
        return None if row is None else row[0]


def append_key_file(path: Path, name: str, secret: str) -> None:
    """Add ``NAME SECRET`` to a device key file (created 0600), as ``--key-file`` reads it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(f"{name} {secret}\n")
    except OSError as exc:
        raise UserError(f"key file {path}: {exc.strerror or exc}") from None


def read_key_file(path: Path) -> dict[str, str]:
    """A device key file: one ``NAME SECRET`` per line; ``#`` comments and blank lines skipped."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise UserError(f"key file {path}: {exc.strerror or exc}") from None
    secrets: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        if len(words) != 2:
            raise UserError(f"key file {path}, line {number}: expected NAME SECRET")
        secrets[words[0]] = words[1]
    return secrets


__all__ = ["EnrolledDevice", "KeyStore", "append_key_file", "default_key_store", "read_key_file"]
