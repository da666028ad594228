"""The one device model: Formula 4 draws, drop-outs and deadlines, the trainer cache.

Simulated devices (virtual time) and emulated devices (real sockets) both
follow these rules; the last test holds an emulated device to them end to end.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from loopback import fleet_of
from waiting import PATIENCE_S

from mjfl.coordinator.engine.fleet import JobArtifacts, Task
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.device.emulated.device_model import (
    TRAINING_POWER_W,
    DeviceModel,
    RoundDraw,
    TrainerCache,
    modelled_energy,
)
from mjfl.device.emulated.emulator.device import EmulatedDevice, devices_running
from mjfl.errors import DeviceFailure
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining, ModelSpec
from mjfl.schedulers import round_time
from mjfl.testkit.echo import echo_trainer

SPEC = ModelSpec("lenet5", (1, 16, 16), 10)


def test_rounds_follow_formula_4_for_the_tasks_epochs_and_shard():
    model = DeviceModel(0.002, 500.0, rng=np.random.default_rng(0))
    draws = np.array([model.draw(3, 40).duration_s for _ in range(20_000)])
    shift, rate = round_time.shift_and_rate(0.002, 500.0, 3, 40)
    assert draws.min() >= shift  # the floor tau*a*D
    assert draws.mean() == pytest.approx(float(round_time.mean(shift, rate)), rel=0.02)
    # Without a profile the device takes as long as its training does.
    assert DeviceModel(None, None, rng=np.random.default_rng(0)).draw(3, 40).duration_s is None


def test_the_same_stream_gives_the_same_rounds_and_dropout_never_shifts_durations():
    a, b = (DeviceModel(0.01, 100.0, dropout=0.3, rng=np.random.default_rng(7)) for _ in range(2))
    first, second = [a.draw(1, 10) for _ in range(50)], [b.draw(1, 10) for _ in range(50)]
    assert first == second
    assert 5 < sum(d.drops for d in first) < 30
    steady = DeviceModel(0.01, 100.0, dropout=0.0, rng=np.random.default_rng(7))
    assert [d.duration_s for d in first] == [steady.draw(1, 10).duration_s for _ in range(50)]


@pytest.mark.parametrize(
    ("draw", "deadline", "expected"),
    [
        (RoundDraw(3.0, drops=True), 5.0, (5.0, "dropped out")),  # noticed at the deadline
        (RoundDraw(3.0, drops=True), None, (3.0, "dropped out")),  # or when it would have ended
        (RoundDraw(7.0), 5.0, (5.0, "missed the 5.0 s deadline")),
        (RoundDraw(4.0), 5.0, None),
        (RoundDraw(None), 5.0, None),  # no profile: the coordinator's own deadline decides
    ],
)
def test_what_a_deadline_does_to_a_round(draw, deadline, expected):
    assert draw.failure(deadline) == expected


def test_modelled_energy_is_power_times_compute_time():
    assert modelled_energy(2.0, 4.5) == {"energy_j": 9.0, "energy_source": "modelled"}
    assert modelled_energy(None, 10.0)["energy_j"] == 10.0 * TRAINING_POWER_W
    assert modelled_energy(2.0, -0.1)["energy_j"] == 0.0  # a clock that stepped back spends nothing


def test_device_model_rejects_impossible_parameters():
    rng = np.random.default_rng(0)
    for kwargs in ({"a": 0.01, "mu": None}, {"a": -1.0, "mu": 1.0}, {"a": 0.01, "mu": 0.0}, {"a": 0.01, "mu": 1.0, "dropout": 1.5}):
        with pytest.raises(ValueError):
            DeviceModel(rng=rng, **kwargs)


def test_the_trainer_cache_loads_each_program_once_and_drops_the_least_recently_used():
    made = []

    def factory(runtime, model, program):
        made.append((runtime, program))
        return echo_trainer(runtime, model, program, delta=1.0)

    cache = TrainerCache(factory, size=2)
    weights = {"w": np.zeros(3, np.float32)}
    x, y = np.zeros((4, 1, 16, 16), np.float32), np.zeros(4, np.int64)

    def train(sha):
        return cache.train("torch", SPEC, sha, lambda: sha.encode(), weights, x, y, LocalTraining(epochs=1, batch_size=2, lr=0.1))

    result, _ = train("p1")
    assert result.weights["w"].tolist() == [1.0] * 3 and result.samples == 4
    assert not weights["w"].any()  # the caller's weights are never written to
    train("p1"), train("p2"), train("p1"), train("p3")  # p2 is now the least recently used
    train("p1")
    assert [program for _, program in made] == [b"p1", b"p2", b"p3"]
    train("p2")
    assert [program for _, program in made] == [b"p1", b"p2", b"p3", b"p2"]


FAST = ServerSettings(heartbeat_interval=0.2, heartbeat_timeout=2.0, handshake_timeout=2.0, close_timeout=1.0, shutdown_timeout=3.0)


async def test_an_emulated_device_that_drops_out_fails_its_rounds_as_a_simulated_one_would():
    async with CoordinatorServer("127.0.0.1", 0, settings=FAST) as server:
        device = EmulatedDevice(
            server.url, "flaky", runtime="torch", make_trainer=functools.partial(echo_trainer, delta=1.0), dropout=1.0
        )
        async with devices_running(device):
            await server.registry.wait_for_devices(1, PATIENCE_S)
            rng = np.random.default_rng(0)
            shard = (rng.normal(size=(6, *SPEC.input_shape)).astype(np.float32), rng.integers(0, 10, 6))
            fleet_of(server).prepare([JobArtifacts(JobId("j"), SPEC, b"program", {DeviceId("flaky"): shard})])
            weights = {"w": np.zeros(2, np.float32)}
            # With a deadline: silence, then the coordinator gives up at the deadline (its own timer) and cancels.
            with pytest.raises(DeviceFailure, match="no result within the 0.3 s deadline"):
                await fleet_of(server).run_task(DeviceId("flaky"), Task(JobId("j"), 1, weights, LocalTraining(1, 2, 0.1), deadline_s=0.3))
            # Without one: the device reports the lost round itself.
            with pytest.raises(DeviceFailure, match="dropped out"):
                await fleet_of(server).run_task(DeviceId("flaky"), Task(JobId("j"), 2, weights, LocalTraining(1, 2, 0.1)))
    assert [r.outcome for r in device.history] == ["cancelled", "error"]
