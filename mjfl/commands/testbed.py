"""`mjfl testbed run`: the config's jobs over connected phones and emulated devices, in real time.

Every round is checkpointed and recorded, so ``--resume`` continues a run
that crashed or was interrupted, and Ctrl-C stops cleanly with everything
flushed (docs/testbed.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mjfl import logs
from mjfl.addresses import is_loopback, listens_everywhere
from mjfl.coordinator.config import RunConfig
from mjfl.coordinator.run.driver import Driver, Output
from mjfl.coordinator.run.testbed import RemoteDevices
from mjfl.device.emulated.ray_cluster import RayOptions
from mjfl.device.phones.attached import PhoneOptions, Phones
from mjfl.errors import ConfigError, UserError


def testbed_run(
    config: RunConfig, output: Output, *, emulate: int = 0, resume: bool = False, phones: PhoneOptions | None = None,
    ray: RayOptions | None = None, force: bool = False,
) -> dict[str, Any]:
    """Run the config's jobs with its scheduler in real time; returns the summary also written.

    With ``phones``, the phones attached over adb train too: checked before
    anything else (no phone: one line, nothing started), then pointed at the
    coordinator once it listens. With ``ray``, the ``emulate`` devices run on that Ray cluster.
    Devices too few for the jobs' data (classes none of them holds) refuse the
    run before its first round, unless ``force`` (``coordinator/run/coverage.py``).
    """
    if ray is not None and not emulate:
        raise UserError("--ray runs the emulated devices on Ray: give --emulate N too")
    from mjfl.coordinator.run.preparation import validate_models

    validate_models(config)  # an operator without a rule stops here: no device contacted, nothing recorded
    devices = RemoteDevices(config, output, emulate=emulate, phones=attached_phones(config, phones, output), ray=ray)
    return Driver(config, output).train([config.scheduler.method], devices, resume=resume, force=force)




def attached_phones(config: RunConfig, options: PhoneOptions | None, output: Output) -> Phones | None:
    """The usable phones attached over adb (PhoneError when none), their logs going to <out>/phones/."""
    if options is None:
        return None
    return phones_for(
        config.testbed.host, "testbed.host", options, output.out_dir / logs.PHONE_LOGS,
        say=lambda line: output.console.print(line, highlight=False),
    )


def phones_for(host: str, field: str, options: PhoneOptions, log_dir: Path, *, say: Callable[[str], None]) -> Phones:
    """The usable phones attached over adb for a coordinator listening on ``host`` (the config's ``field``).

    Checked before anything is started or written: a ``host`` that ``adb
    reverse`` does not reach is a ConfigError; no adb server or no usable
    phone, a PhoneError (one line each).
    """
    if not (is_loopback(host) or listens_everywhere(host)):  # where `adb reverse` delivers a phone's connections
        raise ConfigError(
            field,
            f"{host!r} is not reachable through adb reverse, which connects the phones to"
            " 127.0.0.1: listen on 127.0.0.1 (the default) or 0.0.0.0 to train on attached phones",
        )
    phones = Phones(options, log_dir=log_dir, say=say)
    phones.attached()
    return phones
