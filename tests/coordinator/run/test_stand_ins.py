"""Simulated stand-in devices (``fleet.stand_ins``) and what the statistical utility makes of them."""

import pytest
from rich.console import Console

from mjfl.commands.simulate import simulate
from mjfl.coordinator.config import parse_config
from mjfl.coordinator.run.driver import Output
from mjfl.coordinator.run.preparation import fleet_profiles
from mjfl.coordinator.run.simulated import stand_in_devices
from mjfl.coordinator.run.testbed import RemoteDevices
from mjfl.coordinator.storage.database import Storage
from mjfl.errors import ConfigError

pytestmark = pytest.mark.slow


def test_the_fastest_share_of_the_fleet_are_stand_ins():
    profiles = [(1.0, 1.0), (0.1, 10.0), (0.5, 2.0), (0.2, 5.0)]  # a + 1/mu: 2, 0.2, 1, 0.4
    assert stand_in_devices(profiles, 0.5) == {1, 3}
    assert stand_in_devices(profiles, 0.0) == set()


def test_a_testbed_refuses_stand_ins_naming_the_field(tmp_path):
    # A testbed's devices train what they are given: the share would be silently ignored.
    with pytest.raises(ConfigError, match=r"fleet\.stand_ins.*simulated fleets only"):
        RemoteDevices(config(tmp_path, 1.0), Output(tmp_path, Console(), live=False), emulate=2)


def config(tmp_path, utility):
    return parse_config(
        {
            "seed": 0,
            "out_dir": str(tmp_path / f"out-{utility}"),
            "fleet": {"size": 8, "workers": 1, "runtime": "batched", "stand_ins": 0.25},
            "scheduler": {"method": "greedy", "utility": utility},
            "jobs": [
                {"name": "lenet", "model": "lenet5", "image_size": 12, "partition": "iid", "epochs": 1,
                 "batch_size": 16, "lr": 0.05, "fraction": 0.25, "max_rounds": 6},
            ],
        }
    )


def stand_in_picks(tmp_path, utility):
    """Greedy's picks of stand-ins over 6 rounds of 2 devices, and the job's accuracy each round."""
    cfg = config(tmp_path, utility)
    stand_ins = {p.device_id for k, p in enumerate(fleet_profiles(cfg))
                 if k in stand_in_devices([(q.a, q.mu) for q in fleet_profiles(cfg)], 0.25)}
    simulate(cfg, ["greedy"], Output(tmp_path / f"out-{utility}", Console(), live=False))
    with Storage(cfg.database_path) as storage:
        run = storage.runs()[0][0]
        rounds = storage.rounds(run.run_id)
    picks = [d for r in rounds for d in r.devices]
    assert all(d.mean_loss == 0.0 for d in picks if d.device in stand_ins)
    return sum(d.device in stand_ins for d in picks), [r.accuracy for r in rounds]


def test_with_the_signal_greedy_tries_the_stand_ins_once_and_then_learns(tmp_path):
    # The two stand-ins are the fleet's fastest: Greedy without the signal plans them every round,
    # and their unchanged models never move the job's; with it, only the first round has them.
    off, off_accuracy = stand_in_picks(tmp_path, 0.0)
    on, on_accuracy = stand_in_picks(tmp_path, 1.0)
    assert off == 12 and len(set(off_accuracy)) == 1
    assert on == 2 and on_accuracy[-1] > on_accuracy[0]
