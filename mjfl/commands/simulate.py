"""`mjfl simulate`: every method on identical jobs, fleet and seed, in virtual time.

This is how the paper's tables were produced: devices train for real, their
round times are sampled from their profiles (Formula 4), and the virtual clock
makes an experiment of hours on phones take minutes here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mjfl.coordinator.config import RunConfig
from mjfl.coordinator.run.driver import Driver, Output
from mjfl.coordinator.run.simulated import SimulatedDevices
from mjfl.device.emulated.ray_cluster import RayOptions
from mjfl.errors import UserError
from mjfl.schedulers.registry import METHODS


def simulate(config: RunConfig, methods: Sequence[str], output: Output, *, ray: RayOptions | None = None) -> dict[str, Any]:
    """Run every method in virtual time; returns the summary written to the output folder.

    With ``ray``, the devices train on that Ray cluster instead of local processes.
    """
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise UserError(f"--methods: unknown {unknown}; choose from {', '.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise UserError(f"--methods: each method once, got {', '.join(methods)}")
    from mjfl.coordinator.run.preparation import validate_models

    validate_models(config)  # an operator without a rule stops here, before anything is recorded
    driver = Driver(config, output)
    with SimulatedDevices(config, output, ray=ray) as devices:
        return driver.train(methods, devices)
