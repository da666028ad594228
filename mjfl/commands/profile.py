"""`mjfl profile` and `mjfl profile show`: run a profiling session, inspect its profiles."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rich.console import Console

from mjfl.commands.testbed import attached_phones
from mjfl.coordinator.config import FleetConfig, JobConfig, RunConfig
from mjfl.coordinator.run.driver import Driver, Output
from mjfl.coordinator.run.testbed import RemoteDevices
from mjfl.device.phones.attached import PhoneOptions
from mjfl.errors import UserError
from mjfl.ids import JobId
from mjfl.jobs.base import LocalTraining
from mjfl.profiling.profiles import DeviceProfile
from mjfl.profiling.report import show_profiles

# Without a config: one small calibration job (LeNet-5 on digits).
DEFAULT_JOB = JobConfig(
    name=JobId("lenet5"), model="lenet5", image_size=12, training=LocalTraining(batch_size=8, lr=0.05), partition="iid"
)


def default_config(emulate: int) -> RunConfig:
    """The configuration of a profiling session run without one."""
    return RunConfig(jobs=(DEFAULT_JOB,), fleet=FleetConfig(size=max(emulate, 1)), out_dir=Path("runs/profile"))


def profile_run(
    config: RunConfig,
    output: Output,
    *,
    emulate: int = 0,
    devices: Sequence[str] = (),
    rounds: int = 10,
    phones: PhoneOptions | None = None,
) -> list[DeviceProfile]:
    """Profile connected, attached (``phones``) or emulated devices; writes profiles.json, observations.csv, table and plots."""
    if rounds < 3:
        raise UserError("--rounds must be >= 3 (a fit needs at least 3 observations per device)")
    from mjfl.coordinator.run.preparation import validate_models

    validate_models(config)  # before any device is contacted
    attached = attached_phones(config, phones, output)
    wanted = None if attached is not None else emulate or config.testbed.min_devices or 1
    fleet = RemoteDevices(config, output, emulate=emulate, only=devices, wanted=wanted, phones=attached)
    return Driver(config, output).profile(fleet, rounds=rounds)


def show(path: Path, *, console: Console, out_dir: Path | None = None) -> list[Path]:
    """`mjfl profile show`: a profile file's table and CDF plots."""
    if not path.is_file():
        raise UserError(f"{path}: no such profile file")
    return show_profiles(path, console=console, out_dir=out_dir)
