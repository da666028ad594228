"""How a run's data is shared among the devices present (coordinator/run/preparation.py)."""

import dataclasses

import numpy as np
import pytest

from mjfl.coordinator.config import parse_config
from mjfl.coordinator.run.preparation import Assignment, PreparedJob, shard_count
from mjfl.errors import ConfigError
from mjfl.ids import DeviceId


def job_with_shards(labels: list[list[int]]) -> PreparedJob:
    parts = [(np.zeros((len(y), 1), np.float32), np.asarray(y, np.int64)) for y in labels]
    fields = {f.name: None for f in dataclasses.fields(PreparedJob)}
    return PreparedJob(**(fields | {"parts": parts}))


def test_coverage_names_the_classes_only_absent_devices_hold():
    job = job_with_shards([[0, 0, 1], [1, 2], [3, 3, 3, 3], [4, 0]])
    two = Assignment(4, [DeviceId("a"), DeviceId("b")])  # shards 0 and 1 held
    missing, share = job.coverage(two)
    assert missing == [3, 4] and share == 5 / 11
    # A device that joins takes the next shard, and with it class 3.
    two.assign(DeviceId("c"))
    assert job.coverage(two) == ([4], 9 / 11)
    assert job.coverage(Assignment(4, [DeviceId(d) for d in "abcd"])) == ([], 1.0)


def test_a_round_covers_at_most_the_classes_of_its_richest_shards():
    job = job_with_shards([[0, 1], [2, 3, 3], [4], [5, 6, 7]])
    everyone = Assignment(4, [DeviceId(d) for d in "abcd"])
    assert job.classes_a_round(everyone, 2) == (5, 8)  # {5,6,7} and {0,1} (or {2,3})
    assert job.classes_a_round(everyone, 4) == (8, 8)


def test_the_data_is_cut_for_the_fleet_or_for_the_devices_present():
    def config(**fleet):
        return parse_config({"fleet": {"size": 6} | fleet, "jobs": [{"name": "a", "model": "lenet5"}]})

    # By default real time leaves spare shards for the fleet's missing devices to take later.
    assert shard_count(config(), 4, real_time=True) == 6
    assert shard_count(config(), 8, real_time=True) == 8
    # "present": exactly the devices there at the start, however many the fleet says.
    assert shard_count(config(shards="present"), 4, real_time=True) == 4
    assert shard_count(config(shards="present"), 8, real_time=True) == 8
    # Virtual time: the devices simulated are the fleet.
    assert shard_count(config(), 4, real_time=False) == 4
    with pytest.raises(ConfigError, match="fleet.shards"):
        config(shards="all")
