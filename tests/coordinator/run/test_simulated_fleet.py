"""The virtual-time fleet without real training: what a simulated device reports with its result."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from mjfl.coordinator.engine.clock import VirtualClock, run_virtual
from mjfl.coordinator.engine.fleet import JobArtifacts, Task
from mjfl.coordinator.run import simulated
from mjfl.coordinator.run.simulated import SimulatedDevice, SimulatedFleet
from mjfl.device.emulated.device_model import TRAINING_POWER_W
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining, ModelSpec


def fake_training(runtime, spec, program, digest, weights, x, y, training, seed):
    return dict(weights), len(y), 0.5


def test_a_simulated_device_reports_its_profiles_power_times_its_drawn_round(monkeypatch):
    monkeypatch.setattr(simulated, "train_in_worker", fake_training)
    devices = [SimulatedDevice(DeviceId("hot"), 0.01, 50.0, power_w=2.5), SimulatedDevice(DeviceId("plain"), 0.01, 50.0)]
    shard = (np.zeros((20, 1, 4, 4), np.float32), np.zeros(20, np.int64))
    weights = {"w": np.ones(3, np.float32)}

    async def main():
        with ThreadPoolExecutor(1) as pool:
            fleet = SimulatedFleet(devices, VirtualClock(), seed=3, executor=pool)
            try:
                fleet.prepare([JobArtifacts(JobId("j"), ModelSpec("lenet5", (1, 4, 4), 2), b"program",
                                            {d.device: shard for d in devices})])
                task = Task(JobId("j"), 1, weights, LocalTraining(epochs=2, batch_size=4))
                return [await fleet.run_task(d.device, task) for d in devices]
            finally:
                fleet.close()

    hot, plain = run_virtual(main())
    assert hot.device_state == {"energy_j": pytest.approx(2.5 * hot.duration_s), "energy_source": "modelled"}
    assert hot.timing.compute_s == hot.duration_s > 0
    assert plain.device_state["energy_j"] == pytest.approx(TRAINING_POWER_W * plain.duration_s)  # no power_w
