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
        (minimal(target_window=0), "jobs[0].target_window"),
        (minimal(target_window=2.5), "jobs[0].target_window"),
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


def test_a_target_window_is_an_integer_of_at_least_1_and_1_by_default():
    assert parse_config(minimal()).jobs[0].target.window == 1  # the round alone, as before the option
    job = parse_config(minimal(target_accuracy=0.7, target_window=3)).jobs[0]
    assert (job.target_window, job.target.window, job.target.accuracy) == (3, 3, 0.7)
    with pytest.raises(ConfigError) as info:
        parse_config(minimal(target_window=0))
    assert str(info.value) == "config field 'jobs[0].target_window': must be an integer >= 1, got 0"


def test_unreadable_files_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[jobs]\nname=")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


OFF = {
    "scheduler": ["max_update_norm_ratio"],
    "testbed": [
        "heartbeat_interval_s", "heartbeat_timeout_s", "max_message_mb", "task_timeout_s",
        "handshake_timeout_s", "max_connections_per_address", "max_tasks_in_flight",
    ],
}


@pytest.mark.parametrize("table, key", [(t, k) for t, keys in OFF.items() for k in keys])
def test_a_limit_written_0_is_off(table, key):
    config = parse_config(minimal() | {table: {key: 0}})
    assert getattr(getattr(config, table), key) is None
    with pytest.raises(ConfigError) as info:
        parse_config(minimal() | {table: {key: -1}})
    assert info.value.field == f"{table}.{key}" and "0 (off)" in str(info.value)


def test_limits_turned_off_reach_the_server_and_the_remote_fleet_as_none(tmp_path):
    from mjfl.coordinator.run.host import server_settings

    raw = minimal() | {"testbed": dict.fromkeys(OFF["testbed"], 0)}
    settings, fleet = server_settings(parse_config(raw).testbed)
    assert settings.heartbeat_interval is None and settings.heartbeat_timeout is None
    assert settings.handshake_timeout is None and settings.max_message_bytes is None
    assert settings.max_connections_per_address is None
    assert fleet == {"task_timeout": None, "max_tasks_in_flight": None}


def test_each_default_has_one_home():
    """What a run configures by default is what the server, the sessions and the engine use alone."""
    from mjfl.coordinator.config import SchedulerConfig, TestbedConfig
    from mjfl.coordinator.engine.engine import EngineSettings
    from mjfl.coordinator.remote.fleet import RemoteFleet
    from mjfl.coordinator.remote.registry import DeviceRegistry
    from mjfl.coordinator.remote.server import ServerSettings
    from mjfl.device.protocol import CoordinatorSession
    from mjfl.schedulers.base import CostWeights

    testbed, server, session = TestbedConfig(), ServerSettings(), CoordinatorSession("c")
    assert testbed.heartbeat_interval_s == server.heartbeat_interval == session.heartbeat_interval
    assert testbed.heartbeat_timeout_s == server.heartbeat_timeout == session.heartbeat_timeout
    assert testbed.handshake_timeout_s == server.handshake_timeout
    assert testbed.max_message_mb * 2**20 == server.max_message_bytes
    assert testbed.max_connections_per_address == server.max_connections_per_address
    assert testbed.max_tasks_in_flight == RemoteFleet(DeviceRegistry()).max_tasks_in_flight
    scheduler, engine, weights = SchedulerConfig(), EngineSettings(), CostWeights()
    assert (scheduler.alpha, scheduler.beta, scheduler.omega, scheduler.utility) == (
        weights.alpha, weights.beta, weights.omega, weights.utility
    )
    for name in ("min_plan", "min_returns", "profile_window", "plan_busy", "parallel", "max_update_norm_ratio"):
        assert getattr(engine, name) == getattr(scheduler, name), name
