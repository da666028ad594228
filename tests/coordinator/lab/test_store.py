"""The lab's database: forward-only run states, tokens kept as digests, idempotent submits."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mjfl.coordinator.lab.store import FINAL, STATES, LabStore
from mjfl.errors import StorageError


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
        store._conn.execute("UPDATE runs SET state = 'running' WHERE run_id = ?", (run.run_id,))
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
