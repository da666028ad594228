from pathlib import Path

import pytest
from repository import ROOT

from mjfl.coordinator.config import load_config, parse_config
from mjfl.errors import ConfigError


def minimal(**job):
    return {"fleet": {"size": 10}, "jobs": [{"name": "a", "model": "lenet5", **job}]}


def test_quickstart_is_valid():
    config = load_config(ROOT / "examples" / "quickstart.toml")
    assert [j.name for j in config.jobs] == ["lenet", "cnn", "vgg"]
    assert config.fleet.size and 20 <= config.fleet.size <= 30
    assert all(j.partition == "noniid" and j.dataset == "digits" for j in config.jobs)


def test_defaults_and_paths(tmp_path):
    config = parse_config(minimal(data_dir="data") | {"out_dir": "out"}, base=tmp_path)
    job = config.jobs[0]
    assert job.data_dir == tmp_path / "data"  # inputs: next to the config
    assert config.out_dir == Path("out") and config.database_path == Path("out") / "mjfl.db"
    assert config.scheduler.method == "meta-greedy" and config.scheduler.omega == "sqrt"


@pytest.mark.parametrize(
    "raw, field",
    [
        (minimal(lr=-0.1), "jobs[0].lr"),
        (minimal(batch_size=257), "jobs[0].batch_size"),
        (minimal(lr="fast"), "jobs[0].lr"),
        (minimal(model="gpt"), "jobs[0].model"),
        (minimal(partition="weird"), "jobs[0].partition"),
        (minimal(fraction=0), "jobs[0].fraction"),
        (minimal(target_accuracy=1.5), "jobs[0].target_accuracy"),
        (minimal(epochs=True), "jobs[0].epochs"),
        (minimal(learning_rate=0.1), "jobs[0].learning_rate"),
        ({"fleet": {"size": 10}, "jobs": [{"model": "lenet5"}]}, "jobs[0].name"),
        ({"fleet": {"size": 0}, "jobs": [{"name": "a", "model": "lenet5"}]}, "fleet.size"),
        ({"jobs": [{"name": "a", "model": "lenet5"}]}, "fleet.size"),
        (minimal() | {"scheduler": {"method": "best"}}, "scheduler.method"),
        (minimal() | {"scheduler": {"omega": "cube"}}, "scheduler.omega"),
        (minimal() | {"scheduler": {"members": ["greedy", "oracle"]}}, "scheduler.members"),
        (minimal() | {"scheduler": {"utility": -1}}, "scheduler.utility"),
        (minimal() | {"scheduler": {"options": {"rlds": {"horizon": "later"}}}}, "scheduler.options.rlds"),
        (minimal() | {"fleet": {"size": 5, "stand_ins": 1.0}}, "fleet.stand_ins"),
        (minimal() | {"scheduler": {"options": {"meta-greedy": {"horizon": 0}}}}, "scheduler.options.meta-greedy"),
        (minimal() | {"scheduler": {"options": {"bods": {"candidate": 64}}}}, "scheduler.options.bods"),
        (minimal() | {"fleet": {"size": 5, "runtime": "tflite"}}, "fleet.runtime"),
        (minimal() | {"fleet": {"size": 5, "slow_fraction": 1.5}}, "fleet.slow_fraction"),
        (minimal() | {"fleet": {"size": 5, "slow_factor": [0.5, 2.0]}}, "fleet.slow_factor"),
        (minimal() | {"fleet": {"size": 5, "slow_factor": [10, 5]}}, "fleet.slow_factor"),
        (minimal() | {"fleet": {"size": 5, "slow_factor": [5, 7, 10]}}, "fleet.slow_factor"),
        (minimal() | {"fleet": {"size": 5, "slow_factor": "5x"}}, "fleet.slow_factor"),
        (minimal() | {"testbed": {"heartbeat_interval_s": 10, "heartbeat_timeout_s": 5}}, "testbed.heartbeat_timeout_s"),
        (minimal() | {"sead": 1}, "sead"),
        ({"fleet": {"size": 4}, "jobs": [{"name": "a", "model": "lenet5"}, {"name": "a", "model": "cnn-b"}]}, "jobs"),
        ({"fleet": {"size": 4}, "jobs": []}, "jobs"),
    ],
)
def test_every_bad_field_is_named(raw, field):
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    assert info.value.field == field
    assert str(info.value).startswith(f"config field '{field}'")


def test_unreadable_files_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[jobs]\nname=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)
