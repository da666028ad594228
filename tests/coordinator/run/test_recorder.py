"""The recorder: every finished round checkpointed, then committed; a round that cannot be saved stops the run with one clear error."""

from __future__ import annotations

import contextlib
import os
import subprocess

import numpy as np
import pytest

from mjfl.coordinator.engine.events import RoundAggregated
from mjfl.coordinator.run.database import RunDatabase
from mjfl.coordinator.run.recorder import Recorder
from mjfl.coordinator.storage.checkpoints import Checkpoints
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.coordinator.storage.records import DeviceRound, JobInfo, RoundRecord, RunInfo
from mjfl.errors import RunError
from mjfl.ids import DeviceId, JobId
from mjfl.schedulers.registry import make_scheduler

pytestmark = pytest.mark.timeout(60)

@pytest.fixture
def small_disk(tmp_path):
    """A real 1 MiB file system (tmpfs) to fill up; skipped where mounting is not allowed."""
    folder = tmp_path / "out"
    folder.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip("mounting a small tmpfs needs root here")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def recorder_over(folder, *, start=True):
    """The run database (on its own thread, as a run has it) and its recorder."""
    database = RunDatabase(database_path(folder))
    info = RunInfo("run-1", "random", "real", 0, "{}", "2026-01-01T00:00:00+00:00")
    if start:
        database.sync(lambda s: s.start_run(info, [JobInfo("run-1", JobId("j"), "lenet5", "digits", None, None, 10, "lenet5/digits")]))
    return database, Recorder(database, Checkpoints(folder / "checkpoints"))


def rounds(database):
    return [r.round for r in database.sync(lambda s: s.rounds("run-1"))]


def finished(n):
    """The engine's event for round ``n`` of job j: its record, and the model and scheduler a checkpoint keeps."""
    record = RoundRecord("run-1", JobId("j"), n, n - 1.0, float(n), (DeviceRound(DeviceId("d0"), "ok", 6, 0.5, 1.0),), 0.5, 1.0, True, 1.0, 1.0)
    return RoundAggregated(record, None, None, {"w": np.full(4, float(n), np.float32)}, make_scheduler("random", seed=0), 0.5)


def fill(folder):
    """Write until the file system says it is full."""
    with contextlib.suppress(OSError), open(folder / "filler", "wb") as f:
        while True:
            f.write(bytes(64 * 1024))
            f.flush()


def test_a_full_output_folder_stops_the_run_with_one_clear_error_and_keeps_every_finished_round(small_disk):
    database, recorder = recorder_over(small_disk)
    with database:
        for n in (1, 2):
            recorder(finished(n))
        database.flush()
        fill(small_disk)
        recorder(finished(3))  # written on the database's thread: the run hears of it at its next event or drain
        with pytest.raises(RunError, match=r"cannot save round 3 of job j \(.*\); every round before it is saved.*resuming"):
            database.flush()
        with pytest.raises(RunError, match="round 3"):
            recorder(finished(4))  # nothing after an unsaved round is saved
        assert rounds(database) == [1, 2]
    (small_disk / "filler").unlink()  # room again: resume redoes round 3
    storage = Storage(database_path(small_disk))
    with storage:
        assert [r.round for r in storage.rounds("run-1")] == [1, 2]
        storage.record_round(finished(3).record)
        assert [r.round for r in storage.rounds("run-1")] == [1, 2, 3]


def test_an_unwritable_checkpoint_folder_stops_the_run_before_the_round_is_committed(tmp_path):
    database, recorder = recorder_over(tmp_path)
    folder = tmp_path / "checkpoints" / "j"
    with database:
        recorder(finished(1))
        database.flush()
        locked = lock(folder)
        try:
            recorder(finished(2))
            with pytest.raises(RunError, match="cannot save round 2 of job j .*resuming"):
                database.flush()
        finally:
            locked()
        assert rounds(database) == [1]  # not half a round: no checkpoint, no record
    database, recorder = recorder_over(tmp_path, start=False)  # resumed: the round is redone
    with database:
        recorder(finished(2))
        database.flush()
        assert rounds(database) == [1, 2]


def test_rounds_are_written_off_the_callers_thread_in_the_order_they_came(tmp_path):
    import threading

    database, recorder = recorder_over(tmp_path)
    seen = []
    with database:
        database.put(lambda s: seen.append(threading.current_thread().name))
        for n in range(1, 6):
            recorder(finished(n))
        database.flush()
        assert rounds(database) == [1, 2, 3, 4, 5]
    assert seen[0].startswith("mjfl-database") and seen[0] != threading.current_thread().name
    assert sorted(p.name for p in (tmp_path / "checkpoints" / "j").iterdir())  # checkpoints written too


def lock(folder):
    """Make ``folder`` refuse new files (immutable for root, read-only otherwise); returns the undo."""
    if os.geteuid() == 0:
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False).returncode != 0:
            pytest.skip("chattr is not supported on this file system")
        return lambda: subprocess.run(["chattr", "-i", str(folder)], check=True)
    folder.chmod(0o555)
    return lambda: folder.chmod(0o755)
