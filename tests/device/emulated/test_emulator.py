"""Emulated devices against the real coordinator server, on loopback sockets."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from loopback import fleet_of
from repository import ROOT
from waiting import PATIENCE_S, eventually_async
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed

from mjfl.coordinator.engine.fleet import JobArtifacts, Task
from mjfl.coordinator.remote.keys import KeyStore
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.device.emulated.emulator.backoff import Backoff
from mjfl.device.emulated.emulator.device import EmulatedDevice, devices_running
from mjfl.device.emulated.emulator.fleet import run_emulated_fleet
from mjfl.device.protocol import Shard
from mjfl.errors import DeviceFailure
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining
from mjfl.jobs.models import ModelSpec, initial_weights
from mjfl.jobs.trainers import ExecuTorchTrainer
from mjfl.profiling.profiles import DeviceProfile
from mjfl.schedulers import round_time
from mjfl.testkit.echo import EchoTrainer, echo_trainer

pytestmark = pytest.mark.timeout(60)

SPEC = ModelSpec("lenet5", (1, 16, 16), 10)
WEIGHTS = {"w": np.zeros((3, 2), np.float32), "b": np.ones(4, np.float32)}
FAST = ServerSettings(heartbeat_interval=0.2, heartbeat_timeout=2.0, handshake_timeout=2.0, close_timeout=1.0, shutdown_timeout=3.0)
ECHO = functools.partial(echo_trainer, delta=1.0)


def shard(n=20, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, *SPEC.input_shape)).astype(np.float32), rng.integers(0, 10, n)


def artifacts(devices, n=20, program=b"placeholder program"):
    return JobArtifacts(JobId("j"), SPEC, program, {DeviceId(d): shard(n, k) for k, d in enumerate(devices)})


def task(round_=1, weights=WEIGHTS, **kw):
    return Task(JobId("j"), round_, weights, LocalTraining(epochs=kw.pop("epochs", 1), batch_size=8, lr=0.05), **kw)


def test_backoff_grows_exponentially_with_jitter_and_a_cap():
    backoff = Backoff(initial=0.5, factor=2.0, maximum=4.0, jitter=0.25)
    rng = np.random.default_rng(0)
    for attempt, base in enumerate([0.5, 1.0, 2.0, 4.0, 4.0, 4.0]):
        delays = [backoff.delay(attempt, rng) for _ in range(200)]
        assert all(0.75 * base <= d <= base for d in delays)
        assert max(delays) - min(delays) > 0.1 * base  # jittered, not constant
    with pytest.raises(ValueError):
        Backoff(initial=0.0)


async def test_reconnects_with_backoff_after_the_server_restarts_and_lists_its_cache():
    server = CoordinatorServer("127.0.0.1", 0, settings=FAST)
    await server.start()
    port = server.port
    backoff = Backoff(initial=0.05, factor=2.0, maximum=0.4, jitter=0.5)
    dev = EmulatedDevice(server.url, "phoenix", runtime="torch", make_trainer=ECHO, backoff=backoff, seed=1)
    job = artifacts(["phoenix"])
    async with devices_running(dev):
        await server.registry.wait_for_devices(1, PATIENCE_S)
        fleet_of(server).prepare([job])
        await fleet_of(server).run_task(DeviceId("phoenix"), task())
        await server.close(graceful=False)  # a crash: no bye, so the device keeps trying
        await eventually_async(lambda: len(dev.delays) >= 5, what="five reconnect attempts")
        restarted = CoordinatorServer("127.0.0.1", port, settings=FAST)
        async with restarted:
            await restarted.registry.wait_for_devices(1, PATIENCE_S)
            hello = restarted.registry.connected()[DeviceId("phoenix")].hello
            x, y = job.shards[DeviceId("phoenix")]
            assert set(hello.cached) == {hashlib.sha256(job.program).hexdigest(), Shard(x, y).sha256}
            fleet_of(restarted).prepare([job])
            result = await fleet_of(restarted).run_task(DeviceId("phoenix"), task(round_=2))
            assert result.weights["b"].tolist() == [2.0] * 4
    assert dev.sessions == 2
    # One delay per failed attempt, doubling from `initial` up to `maximum`, each jittered down.
    for attempt, delay in enumerate(dev.delays[:5]):
        base = min(0.4, 0.05 * 2**attempt)
        assert 0.5 * base <= delay <= base


async def test_an_impersonating_device_takes_its_profiles_round_times():
    # Formula 4 with tau = 2 epochs, D = 20 samples: shift 0.1 s, mean 0.1 + 1/rate = 0.2 s.
    profile = DeviceProfile("pixel-7", a=0.0025, mu=400.0, hardware={"model": "Pixel 7"}, power_w=2.5)
    shift, rate = round_time.shift_and_rate(profile.a, profile.mu, 2, 20)
    expected = float(round_time.mean(shift, rate))
    async with CoordinatorServer("127.0.0.1", 0, settings=FAST) as server:
        devices = [
            EmulatedDevice(server.url, f"imp-{k}", runtime="torch", make_trainer=ECHO, profile=profile, seed=k)
            for k in range(4)
        ]
        async with devices_running(*devices):
            await server.registry.wait_for_devices(4, PATIENCE_S)
            info = server.registry.connected()[DeviceId("imp-0")]
            assert info.profile_source == "hello" and (info.profile.a, info.profile.mu) == (0.0025, 400.0)
            assert info.hello.hardware["model"] == "Pixel 7" and info.hello.hardware["impersonates"] == "pixel-7"
            fleet_of(server).prepare([artifacts([d.device_id for d in devices])])

            async def rounds(device_id):
                return [await fleet_of(server).run_task(DeviceId(device_id), task(round_=r, epochs=2)) for r in range(8)]

            results = [r for rs in await asyncio.gather(*(rounds(d.device_id) for d in devices)) for r in rs]
            durations = np.array([r.duration_s for r in results])
            await eventually_async(lambda: all(d.heartbeat_rtts for d in devices), what="every device's heartbeat answered")
    # The devices drew Formula 4's round times (their seeds fix the draws), in the order of the results ...
    targets = np.array([r.target_s for d in devices for r in d.history])
    assert targets.min() >= float(shift)  # Formula 4's floor
    assert abs(targets.mean() - expected) < 0.05
    # ... and each round lasted at least its drawn time, as the coordinator and as the device measured it
    # (how little more than that is `mjfl bench coordinator`'s overhead_fraction; 1e-6: the clock's arithmetic).
    assert np.all(durations >= targets - 1e-6), durations - targets
    assert all(r.download_s + r.compute_s >= r.target_s - 1e-6 for d in devices for r in d.history)
    # The energy is modelled on the impersonated phone's drawn round, at its profile's power.
    assert {r.device_state["energy_source"] for r in results} == {"modelled"}
    energies = sorted(r.device_state["energy_j"] for r in results)
    assert energies == pytest.approx(sorted(2.5 * t for t in targets))


async def test_a_device_heartbeats_and_leaves_a_silent_coordinator():
    sessions = []

    async def mute(ws):
        """Welcome the device, then never answer."""
        await ws.recv()
        settings = {"heartbeat_interval_s": 0.1, "heartbeat_timeout_s": 0.4, "max_message_bytes": None, "max_control_bytes": None}
        await ws.send(json.dumps({"type": "welcome", "version": 1, "coordinator_id": "mute", "settings": settings}))
        seen = []
        with contextlib.suppress(ConnectionClosed):
            async for message in ws:
                seen.append(json.loads(message))
        sessions.append((seen, ws.close_code))

    async with serve(mute, "127.0.0.1", 0, compression=None, ping_interval=None) as server:
        port = server.sockets[0].getsockname()[1]
        dev = EmulatedDevice(f"ws://127.0.0.1:{port}", "d", runtime="torch", make_trainer=ECHO, backoff=Backoff(initial=0.05, maximum=0.05))
        async with devices_running(dev):
            await eventually_async(lambda: len(sessions) >= 2, what="the device to come back for a second session")
    seen, close_code = sessions[0]
    beats = [m["seq"] for m in seen if m["type"] == "heartbeat"]
    assert beats and beats == list(range(1, len(beats) + 1)), seen  # it asked before it gave up
    assert seen[-1]["type"] == "bye" and seen[-1]["code"] == "heartbeat_timeout"
    assert close_code == 1011 and dev.sessions >= 2  # and it came back


async def test_a_device_whose_training_fails_or_diverges_answers_with_an_error():
    def broken(runtime, spec, program):
        raise RuntimeError("no such program")

    async with CoordinatorServer("127.0.0.1", 0, settings=FAST) as server:
        bad = EmulatedDevice(server.url, "bad", runtime="torch", make_trainer=broken)
        nan = EmulatedDevice(server.url, "nan", runtime="torch", make_trainer=functools.partial(echo_trainer, delta=float("nan")))
        async with devices_running(bad, nan):
            await server.registry.wait_for_devices(2, PATIENCE_S)
            fleet_of(server).prepare([artifacts(["bad", "nan"])])
            with pytest.raises(DeviceFailure, match="task_failed: training failed: RuntimeError"):
                await fleet_of(server).run_task(DeviceId("bad"), task())
            with pytest.raises(DeviceFailure, match="diverged") as failure:
                await fleet_of(server).run_task(DeviceId("nan"), task())
            assert failure.value.status == "failed"
            assert list(server.registry.connected()) == ["bad", "nan"]  # errors do not end sessions
    assert bad.sessions == nan.sessions == 1


class _LossOnlyDiverges(EchoTrainer):
    """Finite weights and a NaN loss: what a program whose loss overflowed before its step hands back."""

    def train(self, weights, x, y, training, *, seed=0):
        return dataclasses.replace(super().train(weights, x, y, training, seed=seed), mean_loss=float("nan"))


def _loss_only_diverges(runtime, spec, program):
    return _LossOnlyDiverges()


async def test_a_nan_loss_with_finite_weights_answers_diverged():
    async with CoordinatorServer("127.0.0.1", 0, settings=FAST) as server:
        dev = EmulatedDevice(server.url, "lossy", runtime="torch", make_trainer=_loss_only_diverges)
        async with devices_running(dev):
            await server.registry.wait_for_devices(1, PATIENCE_S)
            fleet_of(server).prepare([artifacts(["lossy"])])
            with pytest.raises(DeviceFailure, match="diverged: the loss or weights became NaN"):
                await fleet_of(server).run_task(DeviceId("lossy"), task())
            assert list(server.registry.connected()) == ["lossy"]


async def test_stop_says_bye_and_the_coordinator_fails_the_pending_task():
    async with CoordinatorServer("127.0.0.1", 0, settings=FAST) as server:
        dev = EmulatedDevice(server.url, "leaver", runtime="torch", make_trainer=ECHO, profile=DeviceProfile("p", a=1.0, mu=1e6))
        async with asyncio.TaskGroup() as group:
            runner = group.create_task(dev.run())
            await server.registry.wait_for_devices(1, PATIENCE_S)
            fleet_of(server).prepare([artifacts(["leaver"])])
            pending = group.create_task(_outcome(fleet_of(server).run_task(DeviceId("leaver"), task())))
            await eventually_async(lambda: dev.history, what="the device to get its task")
            dev.stop()
            await runner
        failure = pending.result()
        assert isinstance(failure, DeviceFailure) and "device said bye going_away" in failure.reason
        assert dev.stopped_by == "stopped" and dev.history[0].outcome == "lost"
        assert not server.registry.connected()


@pytest.fixture(scope="module")
def lenet_program():
    from mjfl.jobs.export import cached_program

    # The project's program cache: exported once per spec and tool versions.
    path, _ = cached_program(SPEC, ROOT / ".mjfl-cache" / "programs")
    return path.read_bytes()


# The first test to ask for the program exports it on a fresh clone: over a minute on two cores that a
# second suite shares (measured: the module's 60 s ran out beside another `make test`).
EXPORTS = pytest.mark.timeout(600)


@EXPORTS
async def test_an_executorch_device_trains_the_tasks_program_over_the_wire(lenet_program):
    weights = initial_weights(SPEC, 0)
    async with CoordinatorServer("127.0.0.1", 0, settings=FAST) as server:
        dev = EmulatedDevice(server.url, "et", runtime="executorch")
        async with devices_running(dev):
            await server.registry.wait_for_devices(1, PATIENCE_S)
            fleet_of(server).prepare([artifacts(["et"], n=40, program=lenet_program)])
            result = await fleet_of(server).run_task(DeviceId("et"), task(weights=weights))
    assert list(result.weights) == list(weights) and result.samples == 40
    assert all(np.isfinite(w).all() for w in result.weights.values())
    assert not np.allclose(result.weights["conv1.weight"], weights["conv1.weight"])
    assert result.timing.compute_s > 0 and result.timing.download_s > 0 and result.mean_loss > 0


@EXPORTS
async def test_the_tasks_seed_fixes_the_update_whichever_device_trains_it(lenet_program):
    """docs/models.md, "The task generator": the coordinator's seed, not the device's, orders batches."""
    weights = initial_weights(SPEC, 0)
    x, y = shard(40, 0)
    training = LocalTraining(epochs=2, batch_size=8, lr=0.05, momentum=0.9)
    reference = ExecuTorchTrainer(lenet_program, SPEC).train(weights, x, y, training, seed=4321)
    async with CoordinatorServer("127.0.0.1", 0, settings=FAST) as server:
        devices = [EmulatedDevice(server.url, d, runtime="executorch", seed=k) for k, d in enumerate(("a", "b"))]
        async with devices_running(*devices):
            await server.registry.wait_for_devices(2, PATIENCE_S)
            job = JobArtifacts(JobId("j"), SPEC, lenet_program, {DeviceId("a"): (x, y), DeviceId("b"): (x, y)})
            fleet_of(server).prepare([job])
            seeded = Task(JobId("j"), 1, weights, training, seed=4321)
            a, b = [await fleet_of(server).run_task(DeviceId(d), seeded) for d in ("a", "b")]
    for name, want in reference.weights.items():
        assert np.array_equal(a.weights[name], want) and np.array_equal(b.weights[name], want), name
    assert a.mean_loss == b.mean_loss == pytest.approx(reference.mean_loss, rel=1e-6)


@pytest.mark.timeout(120)
async def test_killing_a_worker_process_fails_its_devices_tasks_at_once(caplog):
    # Device i impersonates profile i (mod 2) and runs in worker i (mod 2): worker 0's devices take rounds of
    # 2,000 s (20 samples x a = 100), which only the kill can end; worker 1's, rounds of 2 s, which they finish.
    doomed = DeviceProfile("steady", a=100.0, mu=1e6)
    other = DeviceProfile("steady-too", a=0.1, mu=2e6)
    async with CoordinatorServer("127.0.0.1", 0, settings=FAST) as server:
        fleet = run_emulated_fleet(server.url, 4, runtime="torch", workers=2, id_prefix="w", profiles=[doomed, other], make_trainer=ECHO)
        # Device i impersonates profile i (mod their number), whichever worker it runs in.
        assert fleet.device_ids == ["w-0", "w-1", "w-2", "w-3"]
        assert [fleet.impersonated[d].device_id for d in fleet.device_ids] == ["steady", "steady-too"] * 2
        assert [fleet.assignment[d] for d in fleet.device_ids] == [0, 1, 0, 1]
        try:
            await server.registry.wait_for_devices(4, timeout=60)
            assert sorted(fleet.device_ids) == sorted(server.registry.connected())
            fleet_of(server).prepare([artifacts(fleet.device_ids)])
            async with asyncio.TaskGroup() as group:
                runs = {d: group.create_task(_outcome(fleet_of(server).run_task(DeviceId(d), task()))) for d in fleet.device_ids}
                await eventually_async(
                    lambda: all(server.registry.in_flight(DeviceId(d)) for d in fleet.device_ids),
                    what="every device's task sent",
                )
                killed = fleet.kill_worker(0)
        finally:
            with caplog.at_level(logging.WARNING, logger="mjfl.device.emulated.emulator.fleet"):
                await fleet.aclose(timeout=PATIENCE_S)
    assert killed == ["w-0", "w-2"]
    for d, run in runs.items():
        outcome = run.result()
        if d in killed:  # ended by the kill: their rounds had 2,000 s to go
            assert isinstance(outcome, DeviceFailure) and "connection lost" in outcome.reason
        else:  # the other worker's devices trained on, undisturbed
            assert not isinstance(outcome, DeviceFailure), outcome
            assert outcome.weights["b"].tolist() == [2.0] * 4
    # The surviving worker stopped on its bye, not by the fallback that terminates workers.
    assert fleet.processes[0].exitcode == -signal.SIGKILL and fleet.processes[1].exitcode == 0
    assert "did not stop" not in caplog.text


async def _outcome(coro):
    try:
        return await coro
    except DeviceFailure as failure:
        return failure


@contextlib.asynccontextmanager
async def emulate_command(url, count, id_prefix):
    """`mjfl devices emulate` for ``url`` in a process of its own (killed if still running after the block)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "mjfl.cli", "devices", "emulate", "--url", url, "--count", str(count),
        "--runtime", "torch", "--workers", "1", "--id-prefix", id_prefix,
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=os.environ | {"PYTHONUNBUFFERED": "1"},
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.timeout(120)
async def test_the_device_emulate_command_runs_devices_until_ctrl_c():
    async with (
        CoordinatorServer("127.0.0.1", 0, settings=FAST) as server,
        emulate_command(server.url, 3, "cli") as process,
    ):
        await server.registry.wait_for_devices(3, timeout=60)
        assert sorted(server.registry.connected()) == ["cli-0", "cli-1", "cli-2"]
        process.send_signal(signal.SIGINT)
        async with asyncio.timeout(PATIENCE_S):
            output = (await process.communicate())[0].decode()
        assert process.returncode == 0, output
        await eventually_async(lambda: not server.registry.connected(), what="every device to leave")
    assert "3 emulated devices in 1 process (cli-0, cli-1, cli-2)" in output


@pytest.mark.timeout(120)
async def test_devices_the_coordinator_refuses_end_the_emulate_command_with_an_error(tmp_path):
    """Like the JVM client (exit 3, refused), the command does not exit 0 when its devices were refused."""
    keys = KeyStore(tmp_path / "devices.db", create=True)
    keys.enroll("lab-0")  # from now on the coordinator admits enrolled devices only
    async with (
        CoordinatorServer("127.0.0.1", 0, settings=dataclasses.replace(FAST, keys=keys.path)) as server,
        emulate_command(server.url, 1, "stranger") as process,
    ):
        async with asyncio.timeout(60):
            output = (await process.communicate())[0].decode()
        assert not server.registry.connected()
    assert "1 emulated device in 1 process (stranger-0)" in output
    assert "stranger-0: coordinator said bye unauthorized (credentials refused)" in output
    last = output.strip().splitlines()[-1]
    assert process.returncode == 1, output
    assert last.startswith(f"error: {server.url} refused the emulated devices") and "--key-file" in last, output
