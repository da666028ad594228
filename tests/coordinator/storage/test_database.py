"""Tests of the run database: round trips, WAL, per-round atomicity, resume helpers."""

from __future__ import annotations

import dataclasses
import math
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from repository import ROOT
from storage_records import A, B, database_at, device, job_infos, round_record, run_info

from mjfl.coordinator.storage.database import SCHEMA_VERSION, Storage
from mjfl.coordinator.storage.records import (
    DeviceAdmission,
    DeviceRound,
    FleetEvent,
    ProfileRefit,
    ProgramBuild,
    RoundRecord,
    RunInfo,
    RunProvenance,
    SchedulerChoice,
)
from mjfl.coordinator.storage.schema import MIGRATIONS
from mjfl.errors import (
    DataError,
    DuplicateRoundError,
    RunError,
    StorageError,
    UnknownRunError,
    UserError,
)
from mjfl.ids import DeviceId, JobId
from mjfl.profiling.profiles import DeviceProfile, TimingModel


@pytest.fixture
def db() -> Storage:
    storage = Storage(":memory:")
    storage.start_run(run_info(), job_infos())
    return storage


# --- runs and jobs ----------------------------------------------------------------


def test_run_and_jobs_round_trip_in_order(db: Storage) -> None:
    assert db.run("r1") == (run_info(), "running")
    assert db.jobs("r1") == job_infos()  # start_run order, not alphabetical
    db.start_run(run_info("r2", "random"), job_infos("r2"))
    assert [info.run_id for info, _ in db.runs()] == ["r1", "r2"]
    db.finish_run("r1", status="finished", ended_at="2025-03-01T13:00:00+00:00")
    assert db.run("r1")[1] == "finished"
    assert db.runs()[1] == (run_info("r2", "random"), "running")


def test_a_jobs_target_window_is_kept_so_a_stored_run_is_reported_by_its_own_rule(db: Storage) -> None:
    smoothed = [dataclasses.replace(j, target_window=3) for j in job_infos("r3")]
    db.start_run(run_info("r3"), smoothed)
    assert db.jobs("r3") == smoothed and db.jobs("r3")[0].target.window == 3
    assert [j.target_window for j in db.jobs("r1")] == [1, 1]


def test_unknown_and_duplicate_runs(db: Storage) -> None:
    with pytest.raises(UnknownRunError, match="nope"):
        db.run("nope")
    with pytest.raises(UnknownRunError):
        db.finish_run("nope", status="failed", ended_at="2025-03-01T13:00:00+00:00")
    with pytest.raises(StorageError, match="already recorded"):
        db.start_run(run_info(), [])
    with pytest.raises(StorageError, match="not 'running'"):
        db.finish_run("r1", status="running", ended_at="x")  # type: ignore[arg-type]
    with pytest.raises(StorageError, match="belongs to run"):
        db.start_run(run_info("r3"), job_infos("other"))
    assert [info.run_id for info, _ in db.runs()] == ["r1"]  # nothing half-started
    assert issubclass(UnknownRunError, UserError) and issubclass(StorageError, RunError)


def test_resume_run_reopens_interrupted_not_finished(db: Storage) -> None:
    # Positional, as simulate.py calls it.
    db.finish_run("r1", "interrupted", "2025-03-01T13:00:00+00:00")
    assert db.resume_run("r1") == run_info()
    assert db.run("r1")[1] == "running"
    db.finish_run("r1", status="finished", ended_at="2025-03-01T14:00:00+00:00")
    with pytest.raises(StorageError, match="nothing to resume"):
        db.resume_run("r1")


# --- rounds -------------------------------------------------------------------------


def test_round_round_trip_keeps_device_order_and_every_field(db: Storage) -> None:
    full = device(
        "d9",
        "rejected",
        samples=0,
        mean_loss=None,
        duration_s=0.25,
        download_s=0.1,
        compute_s=0.05,
        upload_s=0.1,
        error="update holds NaN",
        energy_j=12.5,
    )
    first = round_record(A, 1, devices=(device("d5"), full, device("d0")))
    second = round_record(B, 1, winner="greedy")
    third = round_record(A, 2, winner="bods")
    db.record_round(first)
    db.record_round(second, {"greedy": 1.5, "bods": 2.5})
    db.record_round(third, {"greedy": 3.0, "bods": 2.0})
    assert db.rounds("r1") == [first, second, third]  # recorded order
    assert db.rounds("r1", A) == [first, third]
    assert db.rounds("r1")[0].plan == ("d5", "d9", "d0")
    assert db.rounds("other") == []


def test_choices_round_trip_with_losers(db: Storage) -> None:
    db.record_round(round_record(A, 1, winner="bods"), {"random": 4.0, "bods": 1.0, "rlds": 2.0})
    db.record_round(round_record(A, 2, winner="rlds"), {"random": 4.0, "bods": 3.0, "rlds": 2.0})
    db.record_round(round_record(B, 1))  # not a Meta-Greedy round: no candidates
    choices = db.choices("r1")
    assert choices[:3] == [
        SchedulerChoice("r1", A, 1, "random", 4.0, False),
        SchedulerChoice("r1", A, 1, "bods", 1.0, True),
        SchedulerChoice("r1", A, 1, "rlds", 2.0, False),
    ]
    assert [(c.round, c.member) for c in choices if c.won] == [(1, "bods"), (2, "rlds")]
    assert db.choices("r1", B) == []


def test_winner_must_be_a_candidate(db: Storage) -> None:
    with pytest.raises(StorageError, match="not among the candidates"):
        db.record_round(round_record(A, 1, winner="sa"), {"bods": 1.0})
    assert db.rounds("r1") == []


def test_nan_values_survive(db: Storage) -> None:
    record = dataclasses.replace(
        round_record(A, 1, devices=(device("d1", mean_loss=math.nan),)),
        accuracy=math.nan,
        loss=math.nan,
        cost=math.nan,
        expected_time_s=math.inf,
    )
    db.record_round(record)
    back = db.rounds("r1")[0]
    assert math.isnan(back.accuracy) and math.isnan(back.loss) and math.isnan(back.cost)
    assert back.expected_time_s == math.inf
    # SQLite stores a NaN as NULL; for the optional mean loss that reads as "no loss".
    assert back.devices[0].mean_loss is None


def test_rerecording_a_round_raises_and_keeps_the_first(db: Storage) -> None:
    first = round_record(A, 3)
    db.record_round(first)
    with pytest.raises(DuplicateRoundError, match="round 3 of job 'cnn'"):
        db.record_round(dataclasses.replace(first, accuracy=0.99, devices=(device("d7"),)))
    assert db.rounds("r1") == [first]


@pytest.mark.parametrize(
    "bad_devices",
    [
        (device("d1"), device("d2"), device("d1")),  # a device twice in one plan
        (device("d1"), device("d2", "lost")),  # an unknown status
        (device("d1"), device("d2", samples=-1)),
    ],
)
def test_round_is_atomic(db: Storage, bad_devices: tuple[DeviceRound, ...]) -> None:
    db.record_round(round_record(A, 1))
    with pytest.raises(StorageError, match="round 2 of job 'cnn' .* not recorded"):
        db.record_round(round_record(A, 2, devices=bad_devices, winner="bods"), {"bods": 1.0})
    # The round row went in before the bad device row: it must be gone too.
    assert [r.round for r in db.rounds("r1")] == [1]
    assert db.choices("r1") == []
    assert db.last_round("r1", A) == 1
    db.record_round(round_record(A, 2))  # the connection is still usable
    assert db.last_round("r1", A) == 2


def test_round_of_unknown_job_or_bad_number_is_refused(db: Storage) -> None:
    with pytest.raises(StorageError):
        db.record_round(round_record(JobId("vgg"), 1))
    with pytest.raises(StorageError):
        db.record_round(round_record(A, 0))  # rounds count from 1
    assert db.rounds("r1") == []


def test_last_round_participation_and_elapsed(db: Storage) -> None:
    assert db.last_round("r1", A) == 0
    assert db.elapsed_s("r1") == 0.0
    db.record_round(round_record(A, 1, devices=(device("d1"), device("d2"))))
    db.record_round(round_record(A, 2, devices=(device("d2", "failed"),)))
    db.record_round(round_record(B, 1, devices=(device("d1"),)))
    assert db.last_round("r1", A) == 2
    assert db.last_round("r1", B) == 1
    assert db.elapsed_s("r1") == 20.0
    assert db.participation("r1") == {A: {"d1": 1, "d2": 2}, B: {"d1": 1}}


def test_last_losses_are_each_devices_last_accepted_finite_loss_per_job(db: Storage) -> None:
    assert db.last_losses("r1") == {}
    db.record_round(round_record(A, 1, devices=(device("d1", mean_loss=2.0), device("d2", mean_loss=1.5))))
    db.record_round(round_record(A, 2, devices=(device("d1", mean_loss=0.5), device("d2", "failed", mean_loss=None))))
    db.record_round(round_record(A, 3, devices=(device("d1", "rejected", mean_loss=9.0), device("d3", mean_loss=float("nan")))))
    db.record_round(round_record(B, 1, devices=(device("d1", mean_loss=0.0),)))
    # d1: round 2's (round 3 was rejected); d2: round 1's (it failed in 2); d3 never reported a finite loss.
    assert db.last_losses("r1") == {A: {"d1": 0.5, "d2": 1.5}, B: {"d1": 0.0}}


def test_loss_history_counts_only_finished_runs_and_excludes_one(db: Storage) -> None:
    key = "cnn/emnist-letters"

    def losses(run_id: str, values: list[float], status: str | None) -> None:
        if run_id != "r1":  # the fixture started r1
            db.start_run(run_info(run_id), job_infos(run_id))
        for number, loss in enumerate(values, start=1):
            db.record_round(round_record(A, number, run_id=run_id, loss=loss))
        db.record_round(round_record(B, 1, run_id=run_id, loss=99.0))  # another job_key
        if status is not None:
            db.finish_run(run_id, status=status, ended_at="2025-03-02T00:00:00+00:00")  # type: ignore[arg-type]

    losses("r1", [2.0, 1.5, 1.25], "finished")
    losses("r2", [3.0, 2.0], "interrupted")
    losses("r3", [2.5, 1.0, 0.5, 0.25], "finished")
    losses("r4", [9.0], None)  # still running
    assert db.loss_history(key) == [[2.0, 1.5, 1.25], [2.5, 1.0, 0.5, 0.25]]
    assert db.loss_history(key, exclude_run="r3") == [[2.0, 1.5, 1.25]]
    assert db.loss_history("lenet5/emnist-digits") == [[99.0], [99.0]]
    assert db.loss_history("unknown") == []


# --- profiles and refits ------------------------------------------------------------


def test_refits_round_trip(db: Storage) -> None:
    refits = [
        ProfileRefit("r1", DeviceId("d2"), 30.5, 0.0021, 410.0, 12, 0.08),
        ProfileRefit("r1", DeviceId("d1"), 31.0, 0.0030, 200.0, 5, 0.2),
    ]
    for refit in refits:
        db.record_refit(refit)
    assert db.refits("r1") == refits
    with pytest.raises(StorageError):
        db.record_refit(dataclasses.replace(refits[0], run_id="nope"))


def profile(name: str, **fields: object) -> DeviceProfile:
    values: dict[str, object] = {"device_id": DeviceId(name), "a": 0.002, "mu": 400.0}
    values.update(fields)
    return DeviceProfile(**values)  # type: ignore[arg-type]


def test_profiles_round_trip_and_update_in_place() -> None:
    full = profile(
        "pixel7",
        a_ci=(0.0019, 0.0021),
        mu_ci=(290.25, 545.5),
        ks_statistic=0.0953,
        n=40,
        compute=TimingModel(0.002, 450.0, "s/(epoch*sample)", a_ci=(0.001, 0.003), n=40),
        communication=TimingModel(0.3625, 9.225, "s/MB", ks_statistic=0.1),
        hardware={"model": "Pixel 7", "ram_gb": 8, "rooted": False, "note": None},
        source="profiled",
        power_w=2.75,
    )
    bare = profile("zz-synthetic", a=0.006, mu=120.0)
    with Storage(":memory:") as db:
        assert db.load_profiles() == []
        db.save_profiles([bare, full], updated_at="2025-03-01T12:00:00+00:00")
        assert db.load_profiles() == [bare, full]
        refined = dataclasses.replace(bare, a=0.005, n=12, source="refined")
        db.save_profiles([refined])
        assert db.load_profiles() == [refined, full]  # latest per device, first-saved order


def test_file_database_uses_wal_and_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "runs.sqlite"
    with Storage(path) as db:
        db.start_run(run_info(), job_infos())
        db.record_round(round_record(A, 1))
        assert db.schema_version == SCHEMA_VERSION
    other = sqlite3.connect(path)
    try:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        other.close()
    with Storage(path) as db:
        assert db.last_round("r1", A) == 1
        assert db.rounds("r1") == [round_record(A, 1)]


def test_a_version_1_database_is_migrated_and_keeps_its_rounds(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    database_at(
        path,
        1,
        "INSERT INTO rounds (run_id, job, round, started_s, ended_s, aggregated) VALUES ('r1', 'cnn', 1, 0, 1, 1)",
        "INSERT INTO device_rounds (run_id, job, round, position, device, status, samples, duration_s)"
        " VALUES ('r1', 'cnn', 1, 0, 'p1', 'ok', 10, 1.0)",
    )
    with Storage(path) as db:
        assert db.schema_version == SCHEMA_VERSION == 10
        (old,) = db.rounds("r1")
        assert old.devices[0].device == "p1" and old.devices[0].device_state is None
        assert old.devices[0].wait_s == 0.0  # rounds from before planning busy devices waited for none
        assert old.devices[0].energy_j is None  # nor was energy measured before version 4
        state = {"battery_pct": 81.0, "charging": False, "thermal_status": 1}
        db.record_round(
            dataclasses.replace(round_record(A, 2), devices=(device("p1", device_state=state), device("p2")))
        )
        stored = db.rounds("r1", A)[-1].devices
        assert [d.device_state for d in stored] == [state, None]


def test_a_version_3_database_gains_energy_and_keeps_its_rounds(tmp_path: Path) -> None:
    path = tmp_path / "v3.sqlite"
    database_at(
        path,
        3,
        "INSERT INTO rounds (run_id, job, round, started_s, ended_s, aggregated) VALUES ('r1', 'cnn', 1, 0, 1, 1)",
        "INSERT INTO device_rounds (run_id, job, round, position, device, status, samples, duration_s, wait_s)"
        " VALUES ('r1', 'cnn', 1, 0, 'p1', 'ok', 10, 1.0, 0.5)",
    )
    with pytest.raises(DataError, match="older"):
        Storage.read_only(path)  # a reader never migrates
    with Storage(path) as db:
        assert db.schema_version == SCHEMA_VERSION
        (old,) = db.rounds("r1")
        assert old.devices[0].wait_s == 0.5 and old.devices[0].energy_j is None
        db.record_round(round_record(A, 2, devices=(device("p1", energy_j=7.25), device("p2"))))
        assert [d.energy_j for d in db.rounds("r1", A)[-1].devices] == [7.25, None]


def version_5_database(path: Path) -> None:
    """A database as mjfl wrote it before the candidates' column was renamed: one round with two candidates."""
    database_at(
        path,
        5,
        "INSERT INTO rounds (run_id, job, round, started_s, ended_s, aggregated, winner)"
        " VALUES ('r1', 'cnn', 1, 0, 1, 1, 'bods')",
        "INSERT INTO scheduler_choices (run_id, job, round, position, member, recost, won)"
        " VALUES ('r1', 'cnn', 1, 0, 'random', 4.5, 0), ('r1', 'cnn', 1, 1, 'bods', NULL, 1)",
    )


def test_a_version_5_database_is_read_as_it_is_and_its_candidates_column_renamed_by_a_writer(tmp_path: Path) -> None:
    path = tmp_path / "v5.sqlite"
    version_5_database(path)
    before = path.read_bytes()
    with Storage.read_only(path) as reader:  # a finished run of version 5: read without upgrading it
        choices = reader.choices("r1")
        assert [(c.member, c.won) for c in choices] == [("random", False), ("bods", True)]
        assert choices[0].selector_cost == 4.5 and math.isnan(choices[1].selector_cost)
        assert reader.schema_version == 5
        assert reader.provenance("r1") == (None, [])  # recorded before runs kept their provenance
    assert path.read_bytes() == before
    with Storage(path) as writer:
        assert writer.schema_version == SCHEMA_VERSION
        assert writer.choices("r1") == choices
        writer.record_round(round_record(A, 2, winner="bods"), {"bods": 1.25})
        assert writer.choices("r1", A)[-1].selector_cost == 1.25
    conn = sqlite3.connect(path)
    columns = [row[1] for row in conn.execute("PRAGMA table_info(scheduler_choices)")]
    conn.close()
    assert columns == ["run_id", "job", "round", "position", "member", "selector_cost", "won"]


def test_a_version_7_database_reads_its_jobs_with_a_window_of_1_and_keeps_new_windows(tmp_path: Path) -> None:
    path = tmp_path / "v7.sqlite"
    database_at(path, 7)
    before = path.read_bytes()
    with Storage.read_only(path) as reader:  # read as it is: the column it lacks reads as its default
        (job,) = reader.jobs("r1")
        assert reader.schema_version == 7 and job.target_window == 1 and job.target.window == 1
    assert path.read_bytes() == before
    with Storage(path) as writer:
        assert writer.schema_version == SCHEMA_VERSION
        assert [j.target_window for j in writer.jobs("r1")] == [1]
        writer.start_run(run_info("r2"), [dataclasses.replace(j, target_window=3) for j in job_infos("r2")])
        assert [j.target_window for j in writer.jobs("r2")] == [3, 3]
        with pytest.raises(StorageError):
            writer.start_run(run_info("r3"), [dataclasses.replace(job_infos("r3")[0], target_window=0)])


def test_fleet_events_are_kept_in_order_with_what_a_device_said(tmp_path: Path) -> None:
    with Storage(tmp_path / "db.sqlite") as db:
        db.start_run(RunInfo("r1", "m", "real", 7, "{}", "t"), [])
        hello = {"model": "Pixel 7", "os": "Android 14 (API 34)", "cores": 8}
        events = [
            FleetEvent("r1", 0.5, "joined", DeviceId("p1"), "from 127.0.0.1", hello),
            FleetEvent("r1", 1.0, "refused", None, "too_many_connections: at most 4 per address"),
            FleetEvent("r1", 2.5, "left", DeviceId("p1"), "connection lost (close code 1006)"),
        ]
        for event in events:
            db.record_fleet_event(event)
        assert db.fleet_events("r1") == events
        assert db.fleet_events("other") == []
        with pytest.raises(StorageError, match="refused event of run 'nobody'"):
            db.record_fleet_event(dataclasses.replace(events[1], run_id="nobody"))  # no such run


def test_foreign_keys_and_sync_pragmas_are_on(tmp_path: Path) -> None:
    with Storage(tmp_path / "db.sqlite") as db:
        conn = db._db.sqlite  # the pragmas are per connection: check this one
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL


@pytest.mark.parametrize("open_", [Storage, Storage.read_only], ids=["writer", "reader"])
def test_other_files_are_refused(tmp_path: Path, open_) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a database at all, just some text that is long enough" * 20)
    with pytest.raises(DataError, match="notes.txt"):
        open_(text)
    foreign = tmp_path / "foreign.sqlite"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(DataError, match="not an mjfl run database"):
        open_(foreign)
    newer = tmp_path / "newer.sqlite"
    Storage(newer).close()
    conn = sqlite3.connect(newer)
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(DataError, match="newer"):
        open_(newer)


# --- property: whatever goes in comes out ------------------------------------------

finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
optional = st.none() | finite
device_rounds = st.builds(
    DeviceRound,
    device=st.text(min_size=1, max_size=8).map(DeviceId),
    status=st.sampled_from(["ok", "failed", "rejected"]),
    samples=st.integers(0, 10**6),
    mean_loss=optional,
    duration_s=finite,
    download_s=optional,
    compute_s=optional,
    upload_s=optional,
    error=st.none() | st.text(max_size=20),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plans=st.lists(
        st.lists(device_rounds, max_size=6, unique_by=lambda d: d.device), min_size=1, max_size=4
    ),
    started=st.floats(0, 1e7),
    took=st.floats(0, 1e5),
    values=st.tuples(finite, finite, finite, finite),
    winner=st.none() | st.text(max_size=8),
)
def test_any_round_round_trips(
    plans: list[list[DeviceRound]],
    started: float,
    took: float,
    values: tuple[float, float, float, float],
    winner: str | None,
) -> None:
    with Storage(":memory:") as db:
        db.start_run(run_info(), job_infos())
        records = [
            RoundRecord(
                "r1",
                A,
                n,
                started,
                started + took,
                tuple(plan),
                *values[:2],
                n % 2 == 0,
                *values[2:],
                winner=winner,
            )
            for n, plan in enumerate(plans, start=1)
        ]
        for record in records:
            db.record_round(record, None if winner is None else {winner: values[3]})
        assert db.rounds("r1") == records


CRASH_MID_ROUND = """
import os, sys
sys.path[:0] = sys.argv[2:]  # tests/, as pytest has it
from mjfl.coordinator.storage.database import Storage
from storage_records import round_record, A


class DiesBeforeDeviceRows:
    # Stands in for the connection; the process dies after the round row is written.
    def __init__(self, real):
        self.real = real

    def __getattr__(self, name):
        return getattr(self.real, name)

    def __enter__(self):
        return self.real.__enter__()

    def __exit__(self, *exc):
        return self.real.__exit__(*exc)

    def executemany(self, sql, rows):
        if "device_rounds" in sql:
            os._exit(3)
        return self.real.executemany(sql, rows)


db = Storage(sys.argv[1])
db._db.sqlite = DiesBeforeDeviceRows(db._db.sqlite)
db.record_round(round_record(A, 2))
"""


def test_a_crash_mid_round_leaves_no_half_round(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = tmp_path / "runs.sqlite"
    with Storage(path) as db:
        db.start_run(run_info(), job_infos())
        db.record_round(round_record(A, 1))
    died = subprocess.run(
        [sys.executable, "-c", CRASH_MID_ROUND, str(path), str(ROOT / "tests")],
        cwd=ROOT, timeout=60, check=False,
    )
    assert died.returncode == 3  # it really died inside record_round
    with Storage(path) as db:
        assert [r.round for r in db.rounds("r1")] == [1]
        assert db.last_round("r1", A) == 1
        db.record_round(round_record(A, 2))  # resume redoes round 2 cleanly


def test_a_folder_is_not_a_database(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="cannot open"):
        Storage(tmp_path)


# --- reading a database that another process writes ---------------------------------


def test_a_reader_sees_what_the_writer_committed_and_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "run" / "mjfl.db"
    with Storage.read_only(path) as reader:  # not there yet: empty, and nothing is created
        assert reader.runs() == [] and reader.recorded_rounds() == []
    assert not path.parent.exists()
    with Storage(path) as writer:
        writer.start_run(run_info(), job_infos())
        writer.record_round(round_record(A, 1))
        writer.record_round(round_record(B, 1))
        with Storage.read_only(path) as reader:
            writer.record_round(round_record(A, 2))  # a writer goes on while the reader is open
            assert reader.recorded_rounds() == [(A, 1), (A, 2), (B, 1)]
            assert reader.recorded_rounds("r1") == reader.recorded_rounds() and reader.recorded_rounds("r2") == []
            assert [status for _, status in reader.runs()] == ["running"]
            with pytest.raises(StorageError, match="refused a write"):
                reader.finish_run("r1", "finished", "t")
        writer.finish_run("r1", "finished", "t")
    with Storage.read_only(path) as reader:
        assert [status for _, status in reader.runs()] == ["finished"]


def test_a_reader_counts_a_round_recorded_by_two_runs_twice(tmp_path: Path) -> None:
    path = tmp_path / "mjfl.db"
    with Storage(path) as writer:
        for run in ("r1", "r2"):
            writer.start_run(run_info(run), job_infos(run))
            writer.record_round(dataclasses.replace(round_record(A, 1), run_id=run))
    with Storage.read_only(path) as reader:
        assert reader.recorded_rounds() == [(A, 1), (A, 1)]
        assert reader.recorded_rounds("r2") == [(A, 1)]


def test_a_reader_reads_a_schema_still_being_created_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "mjfl.db"
    path.touch()  # the writer has created the file, nothing in it yet
    with Storage.read_only(path) as reader:
        assert reader.runs() == [] and reader.recorded_rounds() == []
    conn = sqlite3.connect(path)  # the writer's first migration is committed, not the later ones
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute("INSERT INTO schema_version (version) VALUES (1)")
    conn.commit()
    with Storage.read_only(path) as reader:
        assert reader.runs() == [] and reader.recorded_rounds() == []
    # With a run in it, a version 1 file is an older mjfl's: refused, not misread as empty.
    conn.execute("INSERT INTO runs (run_id, method, mode, seed, config_json, started_at) VALUES ('r1', 'm', 'real', 7, '{}', 't')")
    conn.commit()
    conn.close()
    with pytest.raises(DataError, match="older"):
        Storage.read_only(path)
    with Storage(path) as writer:  # a writer upgrades it; then it reads
        assert writer.schema_version == SCHEMA_VERSION
    with Storage.read_only(path) as reader:
        assert [info.run_id for info, _ in reader.runs()] == ["r1"]


# --- provenance ----------------------------------------------------------------------


def provenance(run_id: str = "r1", text: str = "seed = 7\n", job: JobId = A) -> RunProvenance:
    program = ProgramBuild(job, "9" * 64, 1234, "/cache/cnn.pte", (60, 59))
    return RunProvenance(run_id, "2026-11-28T00:00:00+00:00", text, "run.toml", "8" * 64, (), {"mjfl": "0.1.0"}, (program,))


def admission(name: str, shard: int | None = 0, *, model: str = "Pixel 7", app: str | None = "f" * 64) -> DeviceAdmission:
    hello = {"device_id": name, "runtime": "executorch", "versions": [1], "hardware": {"model": model}}
    return DeviceAdmission(
        "r1", DeviceId(name), "2026-11-28T00:00:01+00:00", shard, hello, {"a": 0.01, "mu": 50.0, "source": "hello"},
        {"sha256": app, "source": "adb"},
    )


def test_a_runs_provenance_is_kept_once_and_read_back(db: Storage) -> None:
    db.record_provenance(provenance())
    db.record_provenance(provenance(text="seed = 8\n"))  # a resumed run keeps what it had
    kept, admissions = db.provenance("r1")
    assert kept == provenance() and admissions == []
    assert db.provenance("r2") == (None, [])


def test_a_custom_models_source_digests_are_kept_with_its_program(db: Storage) -> None:
    program = ProgramBuild(
        A, "9" * 64, 1234, "/cache/net.pte", (60, 59), "/lab/models.py:Net", "7" * 64, {"/lab/blocks.py": "6" * 64}
    )
    kept = dataclasses.replace(provenance(), programs=(program,))
    db.record_provenance(kept)
    assert db.provenance("r1")[0] == kept


def test_a_provenance_the_schema_refuses_leaves_nothing_half_written(db: Storage) -> None:
    with pytest.raises(StorageError, match="provenance of run 'r1' not recorded"):
        db.record_provenance(provenance(job=JobId("no-such-job")))
    assert db.provenance("r1") == (None, [])  # neither the run's row nor its program: one transaction


def test_admissions_are_appended_once_per_content(db: Storage) -> None:
    assert db.record_admissions([admission("p1"), admission("p2", 1)]) == 2
    assert db.record_admissions([admission("p1"), admission("p2", 1)]) == 0  # the same again: a resume, a reconnection
    assert db.record_admissions([admission("p1", app="e" * 64), admission("p3", None)]) == 2  # another build; no shard
    _, admissions = db.provenance("r1")
    assert [(a.device, a.shard, a.app["sha256"][:1] if a.app["sha256"] else None) for a in admissions] == [
        ("p1", 0, "f"), ("p2", 1, "f"), ("p1", 0, "e"), ("p3", None, "f"),
    ]
    assert admissions[0] == admission("p1")
    with pytest.raises(StorageError, match="admissions not recorded"):
        db.record_admissions([dataclasses.replace(admission("p4"), run_id="r2")])  # no such run
