"""Training on Ray: a real local Ray cluster (2 CPUs), shared by every test here.

The virtual-time fleet must give the same records on Ray as in the local
process pool, and the testbed's emulated devices, hosted by Ray actors,
must train a job to its target over real WebSockets.
"""

import subprocess
import sys

import pytest
import ray  # in the dev extras: make test runs these tests, never skips them
from processes import wait_for
from rich.console import Console

from mjfl.commands import testbed
from mjfl.commands.simulate import simulate
from mjfl.coordinator.config import parse_config
from mjfl.coordinator.run.driver import Output
from mjfl.coordinator.storage.database import Storage
from mjfl.device.emulated.ray_cluster import (
    RayContext,
    RayEvent,
    RayOptions,
    TrainingPool,
    connect,
    emulator_workers,
)
from mjfl.errors import UserError


def small_run(folder, target=None, **fleet):
    lenet = {"name": "lenet", "model": "lenet5", "image_size": 12, "partition": "iid", "epochs": 1,
             "batch_size": 16, "lr": 0.05, "fraction": 0.5, "max_rounds": 3}
    if target is not None:
        lenet["target_accuracy"] = target
    return parse_config(
        {
            "seed": 4,
            "out_dir": str(folder),
            "fleet": {"size": 6, "workers": 2, **fleet},
            "scheduler": {"method": "greedy"},
            "testbed": {"port": 0, "wait_timeout_s": 120, "heartbeat_interval_s": 1.0},
            "jobs": [lenet],
        }
    )


def records(config):
    with Storage(config.database_path) as storage:
        run = storage.runs()[0][0].run_id
        return [
            (r.job, r.round, r.plan, r.started_s, r.ended_s, r.accuracy, r.loss,
             tuple((d.status, d.samples, d.mean_loss, d.duration_s) for d in r.devices))
            for r in storage.rounds(run)
        ]


def test_simulate_on_ray_gives_the_local_pools_records(tmp_path, cluster):
    local = small_run(tmp_path / "local")
    on_ray = small_run(tmp_path / "ray")
    simulate(local, ["greedy"], Output(local.out_dir, Console(quiet=True), live=False))
    simulate(on_ray, ["greedy"], Output(on_ray.out_dir, Console(quiet=True), live=False), ray=cluster)
    expected = records(local)
    assert len(expected) == 3  # no target: every round ran
    assert all(r[5] > 0 for r in expected)  # every round trained and evaluated a model
    # Exactly equal: same seeds, same trainer code, one thread each; only the processes differ.
    assert records(on_ray) == expected


def test_the_batched_runtime_on_ray_holds_a_gpu_a_batch_and_gives_the_local_records(tmp_path, cluster):
    local = small_run(tmp_path / "local", runtime="batched")
    on_ray = small_run(tmp_path / "ray", runtime="batched")
    simulate(local, ["greedy"], Output(local.out_dir, Console(quiet=True), live=False))
    simulate(on_ray, ["greedy"], Output(on_ray.out_dir, Console(quiet=True), live=False), ray=cluster)
    expected = records(local)
    assert len(expected) == 3 and all(r[5] > 0 for r in expected)
    assert records(on_ray) == expected
    assert "each batch trains on one of the cluster's 1 GPUs" in (on_ray.out_dir / "mjfl.log").read_text()


def test_batched_emulator_workers_are_one_per_gpu_each_holding_its_share(cluster):
    with connect(cluster):
        workers, context = emulator_workers("batched", None)
        assert (workers, context.num_gpus) == (1, 1)
        workers, context = emulator_workers("executorch", None)
        assert (workers, context.num_gpus) == (2, 0)  # one per CPU, no GPU
        workers, context = emulator_workers("batched", 3)  # more workers than GPUs: each a third of it
        assert (workers, context.num_gpus) == (3, 1 / 3)


def test_a_gpu_pool_task_is_given_the_gpu(cluster):
    pool = TrainingPool(num_gpus=1)
    try:
        assert pool.submit(ray.get_gpu_ids).result(timeout=60) == [0]
    finally:
        pool.shutdown()


@pytest.mark.parametrize("runtime", ["torch", "batched"])  # batched: two workers share the declared GPU
def test_testbed_devices_on_ray_actors_reach_the_target(tmp_path, cluster, runtime):
    config = small_run(tmp_path / "testbed", target=0.5, runtime=runtime)
    summary = testbed.testbed_run(config, Output(config.out_dir, Console(quiet=True), live=False), emulate=3, ray=cluster)
    lenet = summary["methods"]["greedy"]["jobs"]["lenet"]
    assert lenet["time_to_target_s"] is not None, lenet
    assert lenet["final_accuracy"] >= 0.5
    with Storage(config.database_path) as storage:
        rounds = storage.rounds(storage.runs()[0][0].run_id)
    trained = {d.device for r in rounds for d in r.devices if d.status == "ok"}
    assert len(trained) >= 2 and all(d.startswith("emu-") for d in trained)
    # The actors are gone with the fleet: their CPUs are free again (Ray frees a killed actor's in the background).
    wait_for(lambda: ray.available_resources().get("CPU") == 2 and ray.available_resources().get("GPU") == 1, timeout=60)


def test_a_training_error_in_a_ray_worker_reaches_the_caller(cluster):
    pool = TrainingPool()
    try:
        with pytest.raises(ray.exceptions.RayTaskError, match="ZeroDivisionError"):
            pool.submit(divmod, 1, 0).result(timeout=60)
        assert pool.submit(divmod, 7, 2).result(timeout=60) == (3, 1)
    finally:
        pool.shutdown()


def test_a_stop_flag_slow_to_answer_is_not_taken_for_set_and_a_gone_one_is(cluster):
    class SlowFlag:  # defined here, so that Ray's workers get it by value (they cannot import this module)
        def is_set(self) -> bool:
            import time

            time.sleep(5)  # slower than the event's wait below: a flag on a loaded machine
            return True

    slow = RayEvent(ray.remote(num_cpus=0)(SlowFlag).remote(), answer_s=0.5)
    assert slow.is_set() is False  # beside another suite this stopped every device of a fleet just started
    context = RayContext()
    event = context.Event()
    assert event.is_set() is False
    event.set()
    assert event.is_set() is True
    ray.kill(event._flag)
    gone = RayEvent(event._flag, answer_s=30)
    assert gone.is_set() is True  # its maker is gone: the devices stop


def test_without_ray_installed_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(UserError, match=r"pip install 'mjfl\[ray\]'"), connect(RayOptions()):
        pass


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["simulate", "run.toml", "--address", "10.0.0.1:6379"], "--address goes with --ray"),
        (["testbed", "run", "run.toml", "--ray"], "--ray runs the emulated devices on Ray: give --emulate N"),
    ],
)
def test_ray_options_misused_get_one_line_and_start_nothing(tmp_path, args, needle):
    (tmp_path / "run.toml").write_text(
        f'out_dir = "{tmp_path / "out"}"\n[fleet]\nsize = 2\n[[jobs]]\nname = "lenet"\nmodel = "lenet5"\nimage_size = 12\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "mjfl.cli", *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
        check=False, stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 2, result.stderr
    assert needle in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()
