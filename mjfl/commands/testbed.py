"""`mjfl testbed run`: the config's jobs over connected phones and emulated devices, in real time.

Every round is checkpointed and recorded, so ``--resume`` continues a run
that crashed or was interrupted, and Ctrl-C stops cleanly with everything
flushed (docs/testbed.md).
"""

from __future__ import annotations

from typing import Any

from mjfl.coordinator.config import RunConfig
from mjfl.coordinator.driver import Driver, Output
from mjfl.coordinator.testbed import RemoteDevices


def testbed_run(config: RunConfig, output: Output, *, emulate: int = 0, resume: bool = False) -> dict[str, Any]:
    """Run the config's jobs with its scheduler in real time; returns the summary also written."""
    devices = RemoteDevices(config, output, emulate=emulate)
    return Driver(config, output).train([config.scheduler.method], devices, resume=resume)
