"""The run clock's anchors in the run database, the migration that adds them, and the rule that reads them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from storage_records import A, database_at, job_infos, round_record, run_info

from mjfl.coordinator.storage.database import SCHEMA_VERSION, Storage
from mjfl.coordinator.storage.records import wall_time
from mjfl.errors import StorageError


def test_anchors_come_back_by_run_clock_time_per_run_and_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "mjfl.db"
    with Storage(path) as db:
        db.start_run(run_info(), job_infos())
        db.start_run(run_info("r2"), job_infos("r2"))
        assert db.clocks("r1") == []
        db.record_clock("r1", 0.0, 1_700_000_000.5)
        db.record_clock("r2", 0.0, 1_700_000_100.0)
        db.record_clock("r1", 120.25, 1_700_003_600.0)  # a resume: the clock goes on from the last round's end
        db.record_clock("r1", 60.0, 1_700_001_000.0)  # kept out of order: read back in run-clock order
    with Storage(path) as db:
        assert db.clocks("r1") == [(0.0, 1_700_000_000.5), (60.0, 1_700_001_000.0), (120.25, 1_700_003_600.0)]
        assert db.clocks("r2") == [(0.0, 1_700_000_100.0)]
        assert db.clocks("nobody") == []
    with Storage.read_only(path) as reader:
        assert reader.clocks("r2") == [(0.0, 1_700_000_100.0)]
        with pytest.raises(StorageError, match="refused a write"):
            reader.record_clock("r2", 5.0, 1_700_000_200.0)


def test_anchors_at_one_run_clock_time_are_all_kept_in_the_order_recorded(tmp_path: Path) -> None:
    with Storage(tmp_path / "mjfl.db") as db:
        db.start_run(run_info(), job_infos())
        db.record_clock("r1", 0.0, 1000.0)
        db.record_clock("r1", 0.0, 4000.0)  # resumed before any round ended: the run clock still reads 0
        assert db.clocks("r1") == [(0.0, 1000.0), (0.0, 4000.0)]
        assert wall_time(db.clocks("r1"), 2.0) == 4002.0  # the later anchor holds


@pytest.mark.parametrize(
    ("run_id", "run_s", "wall_s", "message"),
    [
        ("nobody", 0.0, 1000.0, "clock anchor of run 'nobody' not recorded"),  # no such run
        ("r1", -1.0, 1000.0, "run_s must be a finite time >= 0"),
        ("r1", math.nan, 1000.0, "run_s must be a finite time >= 0"),
        ("r1", math.inf, 1000.0, "run_s must be a finite time >= 0"),
        ("r1", 0.0, math.nan, "wall_s must be a finite Unix time"),
        ("r1", 0.0, -math.inf, "wall_s must be a finite Unix time"),
    ],
)
def test_an_anchor_that_cannot_be_right_is_refused_and_nothing_kept(
    tmp_path: Path, run_id: str, run_s: float, wall_s: float, message: str
) -> None:
    with Storage(tmp_path / "mjfl.db") as db:
        db.start_run(run_info(), job_infos())
        with pytest.raises(StorageError, match=message):
            db.record_clock(run_id, run_s, wall_s)
        assert db.clocks("r1") == [] and db.clocks(run_id) == []


def test_a_version_8_database_reads_as_it_is_without_anchors_and_a_writer_adds_their_table(tmp_path: Path) -> None:
    path = tmp_path / "v8.sqlite"  # as mjfl wrote it before it kept clock anchors: one run, one round
    database_at(
        path, 8, "INSERT INTO rounds (run_id, job, round, started_s, ended_s, aggregated) VALUES ('r1', 'cnn', 1, 0, 7.5, 1)"
    )
    before = path.read_bytes()
    with Storage.read_only(path) as reader:  # read as it is: the table it lacks reads as no anchors
        assert reader.schema_version == 8 and reader.clocks("r1") == []
        assert [r.ended_s for r in reader.rounds("r1")] == [7.5]
    assert path.read_bytes() == before
    with Storage(path) as writer:
        assert writer.schema_version == SCHEMA_VERSION == 10
        assert writer.clocks("r1") == [] and [r.ended_s for r in writer.rounds("r1")] == [7.5]
        writer.record_clock("r1", writer.elapsed_s("r1"), 1_700_000_000.0)  # a resume of the old run
        writer.record_round(round_record(A, 2))
        assert writer.clocks("r1") == [(7.5, 1_700_000_000.0)]
    with Storage.read_only(path) as reader:
        assert reader.schema_version == SCHEMA_VERSION and reader.clocks("r1") == [(7.5, 1_700_000_000.0)]


# --- the rule: the latest anchor at or before a time ---------------------------------


def test_a_time_is_on_the_wall_clock_by_the_latest_anchor_at_or_before_it() -> None:
    anchors = [(0.0, 1000.0), (50.0, 5000.0), (80.0, 9000.0)]
    assert wall_time(anchors, 0.0) == 1000.0
    assert wall_time(anchors, 25.5) == 1025.5
    assert wall_time(anchors, 50.0) == 5000.0  # an anchor's own time: that anchor
    assert wall_time(anchors, 79.75) == 5029.75  # the clock stood still between 79.75 and the resume
    assert wall_time(anchors, 100.0) == 9020.0
    assert wall_time(anchors[1:], 10.0) is None  # before the first anchor
    assert wall_time([], 10.0) is None  # a run from before anchors were kept


anchor_lists = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 2**40)).map(lambda a: (a[0] / 4, a[1] / 8)), max_size=8
).map(lambda anchors: sorted(anchors, key=lambda a: a[0]))


@given(anchors=anchor_lists, quarters=st.integers(-4, 4 * 10**6 + 4))
def test_wall_time_is_the_last_anchor_at_or_before_the_time_shifted_by_the_time_since_it(
    anchors: list[tuple[float, float]], quarters: int
) -> None:
    run_s = quarters / 4
    before = [a for a in anchors if a[0] <= run_s]
    if not before:
        assert wall_time(anchors, run_s) is None
    else:
        anchor_run_s, anchor_wall_s = before[-1]
        assert wall_time(anchors, run_s) == anchor_wall_s + (run_s - anchor_run_s)
