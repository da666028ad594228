"""The lab's database: forward-only run states, tokens kept as digests, idempotent submits, a versioned schema,
one connection shared by threads under its lock."""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mjfl.coordinator.lab.store import _MIGRATIONS, FINAL, SCHEMA_VERSION, STATES, LabStore
from mjfl.coordinator.storage.connection import BUSY_TIMEOUT_S
from mjfl.errors import DataError, StorageError


@pytest.fixture
def store(tmp_path: Path):
    with LabStore(tmp_path / "lab.db") as opened:
        yield opened


def test_a_runs_state_only_moves_forward_and_a_final_state_stays(store: LabStore) -> None:
    store.add_researcher("alice")
    run, new = store.submit("alice", method="random", needs=4, config_toml="x", key=None)
    assert new and run.state == "queued" and run.run_id == "0001-alice"
    for state in ("admitted", "running"):
        assert store.move(run.run_id, state).state == state
    with pytest.raises(StorageError, match="only moves forward"):
        store.move(run.run_id, "queued")
    done = store.move(run.run_id, "completed", "every job reached its target", reached=True)
    assert done.final and done.targets_reached is True and done.ended_at is not None
    for state in STATES:  # not even to another final state
        with pytest.raises(StorageError):
            store.move(run.run_id, state)
    assert [state for _, state, _ in store.history(run.run_id)] == ["queued", "admitted", "running", "completed"]
    # The rule is the table's: a write that goes around the code is refused too.
    with pytest.raises(sqlite3.IntegrityError):
        store._db.sqlite.execute("UPDATE runs SET state = 'running' WHERE run_id = ?", (run.run_id,))
    assert set(FINAL) < set(STATES)


def test_a_submit_key_returns_the_same_run_to_its_owner_only(store: LabStore) -> None:
    store.add_researcher("alice")
    store.add_researcher("bob")
    first, new = store.submit("alice", method="random", needs=4, config_toml="a", key="k1")
    again, repeated = store.submit("alice", method="random", needs=4, config_toml="a", key="k1")
    assert new and not repeated and again.run_id == first.run_id and len(store.runs()) == 1
    other, bobs = store.submit("bob", method="random", needs=4, config_toml="b", key="k1")
    assert bobs and other.run_id != first.run_id and [r.seq for r in store.runs()] == [1, 2]


def test_tokens_are_kept_as_digests_and_revoking_one_refuses_it(store: LabStore, tmp_path: Path) -> None:
    token = store.add_researcher("alice", admin=True)
    assert store.holder_of(token).name == "alice" and store.holder_of(token).admin
    assert token not in (tmp_path / "lab.db").read_bytes().decode("latin-1")
    assert store.holder_of("not a token") is None
    assert store.revoke("alice") and store.revoke("alice") and not store.revoke("nobody")
    assert store.holder_of(token) is None
    fresh = store.add_researcher("alice")  # again: a new token, the old one still refused
    assert store.holder_of(fresh).name == "alice" and store.holder_of(token) is None


def test_a_lab_db_from_before_it_kept_a_version_is_taken_up_as_version_1_with_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "lab.db"
    conn = sqlite3.connect(path)  # as the lab wrote it before: the schema, no version
    for statement in _MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("INSERT INTO researchers VALUES ('alice', 'digest', 1, '2026-01-01T00:00:00.000+00:00', NULL)")
    conn.execute(
        "INSERT INTO runs (run_id, seq, owner, state, method, needs, config_toml, submitted_at)"
        " VALUES ('0001-alice', 1, 'alice', 'running', 'random', 2, 'x', '2026-01-01T00:00:01.000+00:00')"
    )
    conn.commit()
    conn.close()
    with LabStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION == 1
        assert [r.name for r in store.researchers()] == ["alice"] and store.researcher("alice").admin
        assert [(r.run_id, r.state) for r in store.runs()] == [("0001-alice", "running")]
        with pytest.raises(StorageError, match="only moves forward"):
            store.move("0001-alice", "admitted")  # its trigger still holds
        assert store.submit("alice", method="random", needs=2, config_toml="y", key=None)[0].seq == 2
    with LabStore(path) as store:  # opened again: nothing to migrate, nothing lost
        assert store.schema_version == 1 and [r.seq for r in store.runs()] == [1, 2]


def test_a_lab_db_newer_than_this_mjfl_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "lab.db"
    LabStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(DataError, match=f"lab.db: schema version {SCHEMA_VERSION + 1} is newer"):
        LabStore(path)


def test_a_writer_waits_for_another_process_lock_as_the_run_database_does(store: LabStore) -> None:
    with store._db.reading() as conn:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == BUSY_TIMEOUT_S * 1000


def test_threads_sharing_one_store_each_get_whole_answers(store: LabStore) -> None:
    """The event loop writes while worker threads read (the lab's page): every use holds the store's lock."""
    owners = [f"r{i}" for i in range(4)]
    for owner in owners:
        store.add_researcher(owner)

    def work(owner: str) -> list[int]:
        seen = []
        for n in range(25):
            run, _ = store.submit(owner, method="random", needs=1, config_toml=f"{owner} {n}", key=f"k{n}")
            store.move(run.run_id, "admitted")
            seen.append(len(store.runs()))
            assert [state for _, state, _ in store.history(run.run_id)] == ["queued", "admitted"]
            assert store.holder_of("not a token") is None and store.run(run.run_id).owner == owner
        return seen

    with ThreadPoolExecutor(len(owners)) as pool:
        counts = list(pool.map(work, owners))
    runs = store.runs()
    assert [r.seq for r in runs] == list(range(1, 101))  # each submit took its own number
    assert {r.config_toml for r in runs} == {f"{o} {n}" for o in owners for n in range(25)}
    assert all(seen == sorted(seen) and seen[-1] <= 100 for seen in counts)
    assert all(r.state == "admitted" for r in store.runs("admitted")) and len(store.runs("queued")) == 0


def test_a_file_that_is_not_a_database_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "lab.db"
    path.write_text("not a database at all, just some text that is long enough" * 20)
    with pytest.raises(StorageError, match=r"lab.db: cannot open the lab's database \(file is not a database\)"):
        LabStore(path)
