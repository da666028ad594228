"""How a run shares its data among the devices present, and the program each job gets (coordinator/run/preparation.py)."""

import dataclasses

import numpy as np
import pytest
from repository import ROOT

from mjfl.coordinator.config import parse_config
from mjfl.coordinator.run.preparation import (
    Assignment,
    PreparedJob,
    fleet_profiles,
    prepare_jobs,
    shard_count,
)
from mjfl.errors import ConfigError
from mjfl.ids import DeviceId
from mjfl.jobs.export import planned_memory

CACHE = ROOT / ".mjfl-cache" / "programs"  # the suite's program cache: exported once


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


def test_each_jobs_program_takes_batches_up_to_the_jobs_batch_size(tmp_path):
    """A task never needs more (an epoch's last batch is shorter), and the planned memory follows the bound."""
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    job = {"model": "lenet5", "image_size": 12, "partition": "iid"}
    config = parse_config({
        "seed": 0, "out_dir": str(tmp_path / "out"), "fleet": {"size": 4},
        "jobs": [{"name": "eight", **job, "batch_size": 8}, {"name": "three", **job, "batch_size": 3}],
    })
    eight, three = prepare_jobs(config, 4, cache_dir=CACHE)
    for prepared in (eight, three):
        meta = _load_for_executorch_from_buffer(prepared.program).method_meta("forward")
        assert meta.input_tensor_meta(0).sizes()[0] == meta.input_tensor_meta(1).sizes()[0] == prepared.config.training.batch_size
        assert prepared.planned_memory == planned_memory(prepared.program)
    assert three.spec == eight.spec and three.planned_memory < eight.planned_memory


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


def test_a_slow_tail_slows_its_share_of_the_fleet_by_a_factor_in_range_and_leaves_the_rest():
    def fleet(**slow):
        raw = {"seed": 3, "fleet": {"size": 40, **slow}, "jobs": [{"name": "a", "model": "lenet5"}]}
        return fleet_profiles(parse_config(raw))

    plain, tailed = fleet(), fleet(slow_fraction=0.1, slow_factor=[5.0, 10.0])
    factors = [t.a / p.a for p, t in zip(plain, tailed)]
    slowed = [k for k, f in enumerate(factors) if f != 1.0]
    assert len(slowed) == 4 and all(5.0 <= factors[k] <= 10.0 for k in slowed)
    assert all(tailed[k].mu == pytest.approx(plain[k].mu / factors[k]) for k in slowed)  # Formula 4 scales whole
    assert [p.device_id for p in tailed] == [p.device_id for p in plain]
    assert fleet(slow_fraction=0.1, slow_factor=[5.0, 10.0]) == tailed  # the seed decides
    assert fleet(salt=0) == plain and fleet(salt=7) != plain  # a salt draws another fleet on the same seed
    assert fleet(slow_fraction=0.1, slow_factor=7) == [
        dataclasses.replace(p, a=p.a * 7, mu=p.mu / 7) if k in slowed else p for k, p in enumerate(plain)
    ]
