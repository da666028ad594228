"""What a run keeps of what it ran on: the configuration as given, versions, programs, each device as admitted."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from storage_records import job_infos, run_info

from mjfl.coordinator import config as configs
from mjfl.coordinator.config import JobConfig, RunConfig
from mjfl.coordinator.engine.fleet import DeviceProfileView
from mjfl.coordinator.remote.registry import ConnectedDevice
from mjfl.coordinator.run.preparation import Assignment, PreparedJob
from mjfl.coordinator.run.provenance import (
    REDACTED,
    Admissions,
    run_provenance,
    source_text,
    versions,
)
from mjfl.coordinator.storage.database import Storage
from mjfl.device import protocol
from mjfl.ids import DeviceId
from mjfl.jobs.base import ModelSpec

TEXT = '# the lab\'s run\nseed = 7\n[testbed]\ntoken = "s3cret-t0ken"\n[[jobs]]\nname = "cnn"\nmodel = "cnn"\n'


def prepared(name: str, program: bytes, shards: tuple[int, ...]) -> PreparedJob:
    x = np.zeros((1, 1, 2, 2), np.float32)
    parts = [(np.repeat(x, n, axis=0), np.zeros(n, np.int64)) for n in shards]
    return PreparedJob(
        JobConfig(name, "cnn", "digits"), ModelSpec("lenet5", (1, 2, 2), 10), program, 0, parts, (), (),
        x, np.zeros(1, np.int64), {}, Path("/cache") / f"{name}.pte",
    )


def test_a_run_keeps_its_configuration_as_given_without_its_credential(tmp_path: Path) -> None:
    file = tmp_path / "run.toml"
    file.write_text(TEXT)
    config = RunConfig((JobConfig("cnn", "cnn", "digits"),), testbed=configs.TestbedConfig(token="s3cret-t0ken"), source=file)
    text = source_text(config)
    assert text == TEXT
    kept = run_provenance("r1", config, text, [prepared("cnn", b"program bytes", (3, 2, 2))])
    assert kept.config_text == TEXT.replace("s3cret-t0ken", REDACTED) and kept.redacted == ("testbed.token",)
    assert kept.config_sha256 == hashlib.sha256(TEXT.encode()).hexdigest()  # of the text as given
    assert kept.config_file == str(file)
    (program,) = kept.programs
    assert program.sha256 == hashlib.sha256(b"program bytes").hexdigest() and program.size == 13
    assert program.shard_samples == (3, 2, 2) and program.file == "/cache/cnn.pte"
    assert kept.versions == versions() and kept.versions["mjfl"] and "torch" in kept.versions
    # A configuration from no file (a study's variant, the lab's submitted text handed in instead).
    assert source_text(RunConfig((JobConfig("cnn", "cnn", "digits"),))) is None
    missing = RunConfig((JobConfig("cnn", "cnn", "digits"),), source=tmp_path / "gone.toml")
    assert source_text(missing) is None


class Registry:
    """The registry's word on who is connected (``Membership.connected``), as a test sets it."""

    def __init__(self, devices: Mapping[str, Mapping[str, Any]]) -> None:
        self.devices = {
            DeviceId(d): ConnectedDevice(
                DeviceId(d), protocol.Hello(DeviceId(d), "token!", "executorch", (1,), hardware, ("a" * 64,), None, "proof"),
                DeviceProfileView(DeviceId(d), 0.02, 40.0), "hello", 0.0,
            )
            for d, hardware in devices.items()
        }

    def connected(self) -> Mapping[DeviceId, ConnectedDevice]:
        return self.devices

    on_join = on_leave = on_refuse = transfer = lambda self, *args: None


class Fleet:
    def profiles(self) -> list[DeviceProfileView]:
        return [DeviceProfileView(DeviceId("sim-0"), 0.01, 90.0)]


class Kept:
    """The run database as a run's admissions write to it (``RunDatabase.put``), done at once on this thread."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def put(self, write: Callable[[Storage], None]) -> None:
        write(self.storage)


@pytest.fixture
def storage() -> Storage:
    db = Storage(":memory:")
    db.start_run(run_info(), job_infos())
    return db


def kept_apps(storage: Storage) -> dict[str, tuple[int | None, Mapping[str, Any]]]:
    return {a.device: (a.shard, a.app) for a in storage.provenance("r1")[1]}


def test_each_device_is_kept_with_its_hello_profile_shard_and_app(storage: Storage) -> None:
    registry = Registry({
        "phone-1": {"model": "Pixel 7", "os": "Android 14", "device_state": {"battery_pct": 80}},
        "phone-2": {"model": "Pixel 6"},
        "wifi-phone": {"model": "Pixel 8"},
        "told": {"model": "Pixel 9", "app_sha256": "b" * 64},
        "emu-0": {"model": "emulated", "emulated": True},
        "jvm-0": {"java": "21"},
    })
    assignment = Assignment(6, sorted(registry.devices))
    apps: dict[str, str | None] = {"phone-1": "c" * 64, "phone-2": None}
    admitted = Admissions(Kept(storage), "r1", assignment, Fleet(), members=registry, apps=apps)  # type: ignore[arg-type]
    admitted.admit([*sorted(registry.devices), DeviceId("gone")])  # one not connected (a resumed run's): not yet
    _, admissions = storage.provenance("r1")
    first = next(a for a in admissions if a.device == "phone-1")
    assert first.hello == {
        "device_id": "phone-1", "runtime": "executorch", "versions": [1], "hardware": {"model": "Pixel 7", "os": "Android 14"},
        "max_message_bytes": None,
    }  # no credential, no proof, no battery state
    assert first.profile == {"a": 0.02, "mu": 40.0, "source": "hello"} and first.shard == assignment.slot_of[DeviceId("phone-1")]
    apps_kept = {device: app for device, (_, app) in kept_apps(storage).items()}
    assert apps_kept["phone-1"] == {"sha256": "c" * 64, "source": "adb"}
    assert apps_kept["told"] == {"sha256": "b" * 64, "source": "hello"}
    assert apps_kept["phone-2"]["sha256"] is None and "adb" in apps_kept["phone-2"]["missing"]
    assert "not attached over adb" in apps_kept["wifi-phone"]["missing"]
    assert "emulated" in apps_kept["emu-0"]["absent"] and "JVM" in apps_kept["jvm-0"]["absent"]
    assert "gone" not in apps_kept


def test_a_device_admitted_again_is_kept_again_only_when_something_changed(storage: Storage) -> None:
    registry = Registry({"phone-1": {"model": "Pixel 7"}})
    apps: dict[str, str | None] = {"phone-1": "c" * 64}
    assignment = Assignment(2, [DeviceId("phone-1")])
    admitted = Admissions(Kept(storage), "r1", assignment, Fleet(), members=registry, apps=apps)  # type: ignore[arg-type]
    admitted(DeviceId("phone-1"))
    admitted(DeviceId("phone-1"))  # a reconnection, or a resume: the same hello, profile, shard and app
    apps["phone-1"] = "d" * 64  # installed again while it was away
    admitted(DeviceId("phone-1"))
    assert [a.app["sha256"][0] for a in storage.provenance("r1")[1]] == ["c", "d"]


def test_simulated_devices_are_kept_with_the_fleets_profiles(storage: Storage) -> None:
    admitted = Admissions(Kept(storage), "r1", Assignment(1, [DeviceId("sim-0")]), Fleet())  # type: ignore[arg-type]
    admitted(DeviceId("sim-0"))
    (kept,) = storage.provenance("r1")[1]
    assert kept.hello is None and kept.profile == {"a": 0.01, "mu": 90.0, "source": "fleet"} and kept.shard == 0
    assert kept.app == {"sha256": None, "absent": "a simulated device"}


def test_an_admission_that_cannot_be_kept_only_warns(caplog: pytest.LogCaptureFixture) -> None:
    storage = Storage(":memory:")  # no run r1: the database refuses the admission
    Admissions(Kept(storage), "r1", Assignment(1, [DeviceId("sim-0")]), Fleet())(DeviceId("sim-0"))  # type: ignore[arg-type]
    assert "admission of sim-0 into run r1 is not kept" in caplog.text
