"""The run database's schema: each table's columns written once and true to the file, migrations applied in order."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from storage_records import database_at

from mjfl.coordinator.storage.connection import Connection, connect
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.schema import (
    MIGRATIONS,
    SCHEDULER_CHOICES,
    SCHEMA_VERSION,
    TABLES,
    upgrade,
)
from mjfl.errors import DataError


def test_each_tables_columns_are_its_columns_in_a_migrated_file_but_its_row_number(tmp_path: Path) -> None:
    path = tmp_path / "mjfl.db"
    Storage(path).close()
    conn = sqlite3.connect(path)
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert tables == {t.name for t in TABLES} | {"schema_version"}
        for table in TABLES:
            info = conn.execute(f"PRAGMA table_info({table.name})").fetchall()
            row_number = {name for _, name, kind, _, _, key in info if key == 1 and kind == "INTEGER"}
            assert set(table.columns) | row_number == {name for _, name, *_ in info}, table.name
            assert not set(table.columns) & row_number and len(set(table.columns)) == len(table.columns), table.name
    finally:
        conn.close()


def test_a_column_a_readable_older_file_lacks_is_read_under_its_name_from_what_stood_in_its_place(
    tmp_path: Path,
) -> None:
    database_at(tmp_path / "v5.sqlite", 5)  # before the candidates' cost column was renamed
    Storage(tmp_path / "new.sqlite").close()
    old, new = connect(tmp_path / "v5.sqlite"), connect(tmp_path / "new.sqlite")
    try:
        assert "c.recost AS selector_cost" in SCHEDULER_CHOICES.select(old, of="c")
        assert "c.selector_cost" in SCHEDULER_CHOICES.select(new, of="c").split(", ")
        assert SCHEDULER_CHOICES.present(old) and SCHEDULER_CHOICES.present(new)
    finally:
        old.close()
        new.close()


def test_an_upgrade_applies_each_missing_version_in_order_and_refuses_a_newer_file(tmp_path: Path) -> None:
    migrations = (("CREATE TABLE a (x INTEGER)",), ("ALTER TABLE a ADD COLUMN y INTEGER",), ("CREATE TABLE b (z)",))
    stamped: list[int] = []

    def stamp(conn: sqlite3.Connection, version: int) -> None:
        stamped.append(version)
        conn.execute(f"PRAGMA user_version = {version}")

    db = Connection(connect(tmp_path / "x.db"), "x.db")
    try:
        db.sqlite.execute("CREATE TABLE a (x INTEGER)")  # version 1 already there
        upgrade(db, migrations, 1, stamp)
        assert stamped == [2, 3] and db.sqlite.execute("PRAGMA user_version").fetchone()[0] == 3
        assert [row["name"] for row in db.sqlite.execute("PRAGMA table_info(a)")] == ["x", "y"]
        upgrade(db, migrations, 3, stamp)  # nothing to do
        assert stamped == [2, 3]
        with pytest.raises(DataError, match=r"x.db: schema version 4 is newer than this mjfl understands \(3\)"):
            upgrade(db, migrations, 4, stamp)
    finally:
        db.close()


def test_the_schema_version_is_the_number_of_migrations() -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS) == 10
