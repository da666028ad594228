"""What the devices present lack for a run's jobs, said before it starts (coordinator/run/coverage.py)."""

import asyncio
import contextlib
import dataclasses

import numpy as np
import pytest
from rich.console import Console

from mjfl.coordinator.config import JobConfig, parse_config
from mjfl.coordinator.engine.clock import RealClock
from mjfl.coordinator.run.coverage import LAB_CONFIG, explain, shortfalls
from mjfl.coordinator.run.driver import Driver, Output, ReadyFleet
from mjfl.coordinator.run.preparation import Assignment, PreparedJob
from mjfl.coordinator.storage.database import Storage
from mjfl.errors import RunError, UserError
from mjfl.ids import DeviceId, JobId


def job(name: str, labels: list[list[int]], fraction: float = 0.5) -> PreparedJob:
    parts = [(np.zeros((len(y), 1), np.float32), np.asarray(y, np.int64)) for y in labels]
    fields = {f.name: None for f in dataclasses.fields(PreparedJob)}
    return PreparedJob(**(fields | {"parts": parts, "config": JobConfig(JobId(name), "lenet5", fraction=fraction)}))


def devices(n: int) -> list[DeviceId]:
    return [DeviceId(f"d{k}") for k in range(n)]


# Six shards of two classes each; classes 8 and 9 are only in the last one.
PAIRS = [[0, 1], [2, 3], [4, 5], [6, 7], [0, 2], [8, 9]]


def test_classes_that_only_absent_devices_hold_block_and_few_classes_a_round_only_warn():
    # Four devices of six shards: classes 8 and 9 wait for a device that has not come.
    short = shortfalls([job("a", PAIRS)], Assignment(6, devices(4)))
    assert [(s.missing, s.held, s.plan, s.seen, s.classes) for s in short] == [((8, 9), 8 / 12, 2, 4, 10)]
    assert short[0].blocking
    # Every shard held: nothing is missing, but two devices a round see at most 4 of 10 classes.
    (everyone,) = shortfalls([job("a", PAIRS)], Assignment(6, devices(6)))
    assert everyone.missing == () and not everyone.blocking and (everyone.plan, everyone.seen) == (3, 6)
    # The smallest plan counts (scheduler.min_plan), and a round that may see every class is fine.
    assert shortfalls([job("a", PAIRS)], Assignment(6, devices(6)), min_plan=5) == []
    iid = [list(range(10))] * 4
    assert shortfalls([job("iid", iid)], Assignment(6, devices(4))) == []  # 4 of 6 shards, no class missing


def test_the_message_says_what_each_job_lacks_and_what_to_do():
    short = shortfalls([job("a", PAIRS), job("b", [list(range(10))] * 6)], Assignment(6, devices(4)))
    text = explain(short, present=4, slots=6, cut_for="fleet.size")
    assert text.splitlines()[0].startswith("4 devices are too few for this config: its data is cut into 6 shards (fleet.size)")
    assert "  job a: they hold 67% of its data and none of class(es) 8, 9; a round trains 2 of the 4 devices" in text
    assert "job b" not in text  # it lacks nothing
    assert LAB_CONFIG in text and "--force" in text and 'fleet.shards = "present"' in text
    # A fleet larger than a lab is not sent to the lab's config; one that only warns is not told to force.
    assert LAB_CONFIG not in explain(short, present=12, slots=24, cut_for="fleet.size")
    warned = explain(shortfalls([job("a", PAIRS)], Assignment(6, devices(6))), present=6, slots=6, cut_for="fleet.size")
    assert "may never reach its target" in warned and "--force" not in warned and LAB_CONFIG in warned


class SixPhones:
    """Six devices present in real time, on a fleet that trains nothing (the run must not get that far)."""

    mode = "real"
    kind = "testbed"

    def __init__(self) -> None:
        self.prepared = 0

    def run(self, main):
        return asyncio.run(main)

    def profiles(self):
        return []

    def prepare(self, jobs) -> None:
        self.prepared += 1

    async def run_task(self, device, task):
        raise AssertionError("no task may be sent")

    @contextlib.asynccontextmanager
    async def fleet(self):
        yield ReadyFleet(self, RealClock(), devices(6))


def quickstart_like(tmp_path):
    """The quickstart's shape: non-IID data cut for 24 devices, two a round of six."""
    return parse_config({
        "out_dir": str(tmp_path / "out"),
        "fleet": {"size": 24},
        "jobs": [{"name": "lenet", "model": "lenet5", "image_size": 12, "fraction": 0.25, "target_accuracy": 0.75}],
    })


def test_a_testbed_run_on_too_few_devices_is_refused_before_anything_is_recorded(tmp_path):
    config = quickstart_like(tmp_path)
    fleet = SixPhones()
    with pytest.raises(UserError) as info:
        Driver(config, Output(config.out_dir, Console(), live=False)).train(["meta-greedy"], fleet)
    text = str(info.value)
    assert text.startswith("6 devices are too few for this config: its data is cut into 24 shards (fleet.size)")
    assert "job lenet: they hold" in text and LAB_CONFIG in text and "--force" in text
    assert fleet.prepared == 0  # nothing was sent to a device
    with Storage(config.database_path) as storage:
        assert storage.runs() == []  # nothing to --resume
    assert not (config.out_dir / "checkpoints").exists()


def test_force_starts_it_anyway_with_the_same_message_as_a_warning(tmp_path):
    config = quickstart_like(tmp_path)
    console = Console(record=True, width=400)
    # The stand-in fleet has no device to plan, so the run that starts ends at once for want of devices.
    with pytest.raises(RunError, match="no job could run"):
        Driver(config, Output(config.out_dir, console, live=False)).train(["meta-greedy"], SixPhones(), force=True)
    said = console.export_text()
    assert "warning: 6 devices are too few for this config" in said and LAB_CONFIG in said
    with Storage(config.database_path) as storage:
        assert [status for _, status in storage.runs()] == ["failed"]
