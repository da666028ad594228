"""`mjfl bench faults`: the fault-injection suite, bounded in count and time, loopback only.

Four scenarios (docs/faults.md, "The fault suite"):

1. ``device_kills``: two jobs over ``devices`` emulated devices behind the
   fault proxy (a bandwidth cap, so transfers take time); a fifth of the
   devices are killed, each at a random moment of a random phase of a task:
   mid-download (the task is on the wire), mid-training, mid-upload (the
   result is on the wire). Every job must still reach its target, and each
   kill must be recorded as a failure of the victim's round.
2. ``network``: the same jobs, with task deadlines, through a proxy that
   delays, caps bandwidth, drops, cuts and reorders connections: deadlines
   and re-planning must hold, every job reaching its target.
3. ``coordinator_kills``: `mjfl testbed run --emulate` on the digits, its
   process group SIGKILLed at ``coordinator_kills`` random moments and each
   time restarted with ``--resume``; the run must finish with every round of
   every job in the database exactly once.
4. ``output_full``: the same run with its output folder on a small tmpfs
   that is filled up mid-run: one clear error, every finished round kept;
   after room is made, ``--resume`` finishes the run (skipped where a tmpfs
   cannot be mounted: it needs root).

In 1 and 2 the devices train echo models (``mjfl.testkit.echo``: the coordinator is
under test, not learning): a job's accuracy there is the share of its target
progress its global model shows, so a job reaches its target only through
enough aggregated rounds. 3 and 4 train real models on real data.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from mjfl import seeds
from mjfl.bench import output
from mjfl.coordinator.config import JobConfig
from mjfl.coordinator.engine.clock import RealClock
from mjfl.coordinator.engine.engine import Engine, EngineJob, EngineSettings
from mjfl.coordinator.engine.events import RoundLog
from mjfl.coordinator.engine.fleet import JobArtifacts
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.remote.server import CoordinatorServer, ServerSettings
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import database_path
from mjfl.device.emulated.emulator.backoff import Backoff
from mjfl.device.emulated.emulator.device import EmulatedDevice, devices_running
from mjfl.errors import UserError
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import ModelSpec
from mjfl.profiling.profiles import DeviceProfile
from mjfl.schedulers.registry import make_scheduler
from mjfl.seeds import Purpose
from mjfl.testkit.echo import echo_trainer
from mjfl.testkit.faultproxy import FaultProxy, Faults

Figures = dict[str, Any]

_SPEC = ModelSpec("lenet5", (1, 16, 16), 10)
_STEP = 1.0  # what one echo round adds to every weight
_TARGET_ROUNDS = 6  # aggregated rounds' worth of progress that is a job's target
_FAST = {"heartbeat_interval": 0.5, "heartbeat_timeout": 5.0, "handshake_timeout": 5.0, "close_timeout": 1.0}


# -- 1 and 2: in-process rounds over emulated devices behind the proxy --------------------------


def _progress(spec: ModelSpec, weights: Any, x: Any, y: Any) -> tuple[float, float]:
    """The echo jobs' accuracy: the mean step the global model has made, as a share of the target."""
    moved = float(np.mean(weights["b"])) / (_STEP * _TARGET_ROUNDS)
    return min(1.0, moved), 1.0 - min(1.0, moved)


def _echo_job(name: str, devices: list[str], deadline_s: float | None, seed: int) -> EngineJob:
    config = JobConfig(
        JobId(name), "lenet5", fraction=0.5, max_rounds=40, target_accuracy=1.0 - 1e-6, deadline_s=deadline_s
    )
    weights = {"w": np.zeros(25_000, np.float32), "b": np.zeros(4, np.float32)}  # 100 KB each way
    return EngineJob(
        config, spec=_SPEC, scheduler=make_scheduler("random", seed=seed), samples={DeviceId(d): 6 for d in devices},
        test_x=np.zeros((1, 1, 16, 16), np.float32), test_y=np.zeros(1, np.int64), weights=weights,
    )


async def _echo_run(
    devices: int, faults: Faults, *, seed: int, deadline_s: float | None, kill: float, timeout_s: float
) -> Figures:
    rng = seeds.stream(seed, Purpose.KILLS)
    names = [f"d{k:02d}" for k in range(devices)]
    profile = DeviceProfile("echo", a=0.03, mu=20.0)  # ~0.2 s of training per task, with a tail
    kills: Counter[str] = Counter()
    victims: dict[str, str] = {}
    log = RoundLog()
    settings = ServerSettings(**_FAST)  # type: ignore[arg-type]
    async with CoordinatorServer("127.0.0.1", 0, settings=settings) as server, FaultProxy(
        "127.0.0.1", server.port, faults, seed=seeds.integer(seed, Purpose.NETWORK_FAULTS)
    ) as proxy:
        emulated = [
            EmulatedDevice(
                proxy.url, d, runtime="torch", profile=profile, seed=seeds.integer(seed, Purpose.DEVICE, k),
                make_trainer=functools.partial(echo_trainer, delta=_STEP), backoff=Backoff(initial=0.1, maximum=1.0),
            )
            for k, d in enumerate(names)
        ]
        jobs = [_echo_job(f"job{m}", names, deadline_s, seeds.integer(seed, Purpose.SCHEDULER, m)) for m in range(2)]
        x, y = np.zeros((6, 1, 16, 16), np.float32), np.arange(6, dtype=np.int64) % 10
        artifacts = [JobArtifacts(job.name, _SPEC, b"echo program", {DeviceId(d): (x, y) for d in names}) for job in jobs]

        async def killer(device: EmulatedDevice, phase: str) -> None:
            """Kill ``device`` at a random moment of ``phase`` of one of its tasks."""
            await asyncio.sleep(float(rng.uniform(0.5, 3.0)))
            while True:
                waiting = server.registry.in_flight(DeviceId(device.device_id))
                seen = {record.task_id: record for record in device.history}
                if phase == "download" and waiting - set(seen):
                    break  # sent, not yet received: the task is on the wire
                if phase == "training" and any(r.started_at is not None and r.trained_at is None for r in seen.values()):
                    break
                if phase == "upload" and any(seen[t].trained_at is not None for t in waiting & set(seen)):
                    break  # trained, the coordinator still waits: the result is on the wire
                await asyncio.sleep(0.002)  # polls the phase; the moment within it is the random part
            device.kill()
            kills[phase] += 1

        started = time.monotonic()
        async with devices_running(*emulated):
            await server.registry.wait_for_devices(devices, 30)
            fleet = RemoteFleet(server.registry)
            fleet.prepare(artifacts)
            engine = Engine(
                jobs, fleet, RealClock(), _progress, run_id="faults",
                settings=EngineSettings(device_wait_s=10.0, seed=seed), observers=[log],
            )
            count = round(kill * devices)
            chosen = rng.choice(devices, size=count, replace=False)
            async with asyncio.timeout(timeout_s), asyncio.TaskGroup() as group:
                run = group.create_task(engine.run())
                hunters = []
                phases = list(rng.permutation(["download", "training", "upload"]))
                for n, k in enumerate(chosen):
                    phase = str(phases[n % 3])
                    victims[names[int(k)]] = phase
                    hunters.append(group.create_task(killer(emulated[int(k)], phase)))
                await run
                for hunter in hunters:
                    hunter.cancel()  # a victim never caught in its phase before the jobs ended
    records = log.records
    failed = {dr.device for r in records for dr in r.devices if dr.status != "ok"}
    killed = [d for d, e in zip(names, emulated, strict=True) if e.stopped_by == "killed"]
    statuses = Counter(dr.status for r in records for dr in r.devices)
    return {
        "devices": devices,
        "kills": len(killed),
        "kills_by_phase": dict(kills),
        "kills_recorded": sum(d in failed for d in killed),
        "jobs": len(jobs),
        "targets_reached": sum(job.stopped == "target" for job in jobs),
        "rounds": len(records),
        "device_rounds": dict(statuses),
        "proxy": dict(proxy.counts),
        "seconds": round(time.monotonic() - started, 1),
    }


# -- 3 and 4: the real command, killed and resumed ----------------------------------------------

_CONFIG = """
seed = {seed}
out_dir = "{out}"
[fleet]
size = 4
workers = 2
[scheduler]
method = "random"
[testbed]
port = 0
wait_timeout_s = 120
heartbeat_interval_s = 1
heartbeat_timeout_s = 10
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
partition = "iid"
batch_size = 8
fraction = 0.5
max_rounds = {rounds}
[[jobs]]
name = "cnn"
model = "cnn-a-noniid"
image_size = 8
batch_size = 8
fraction = 0.5
max_rounds = {rounds}
"""


def _rounds(db: Path) -> list[tuple[str, int]]:
    """(job, round) of every round in the run database, which the command may be writing."""
    with Storage.read_only(db) as storage:
        return [(str(job), round_) for job, round_ in storage.recorded_rounds()]


def _run_status(db: Path) -> list[str]:
    with Storage.read_only(db) as storage:
        return [status for _, status in storage.runs()]


class _Command:
    """`mjfl testbed run` in its own process group, its terminal output in a file (a pipe could fill)."""

    def __init__(self, config: Path, *extra: str) -> None:
        args = [sys.executable, "-m", "mjfl.cli", "testbed", "run", str(config), "--emulate", "4", "--no-live", *extra]
        self.output = config.with_suffix(f".{time.monotonic_ns()}.out")
        with open(self.output, "w") as out:
            self.proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def poll(self) -> int | None:
        return self.proc.poll()

    def finish(self, timeout: float) -> str:
        """Wait for the command (killed after ``timeout``); its terminal output."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(self)
            return self.output.read_text() + "\ntimed out"
        return self.output.read_text()


def _start(config: Path, *extra: str) -> _Command:
    return _Command(config, *extra)


def _kill_group(proc: _Command) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.proc.wait(30)
    # Orphaned emulated devices notice and exit; wait so the restart's ids are free.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)


def _audit(db: Path, jobs: tuple[str, ...], rounds: int) -> Figures:
    """Rounds lost (a number missing below the last) and duplicated, per the database."""
    recorded = _rounds(db)
    counts = Counter(recorded)
    lost = duplicated = 0
    for job in jobs:
        mine = sorted(r for j, r in recorded if j == job)
        last = max(mine, default=0)
        lost += len(set(range(1, last + 1)) - set(mine))
        duplicated += sum(c - 1 for (j, _), c in counts.items() if j == job and c > 1)
    return {"rounds_recorded": len(recorded), "rounds_lost": lost, "rounds_duplicated": duplicated}


def _coordinator_kills(folder: Path, kills: int, rounds: int, seed: int, timeout_s: float) -> Figures:
    rng = seeds.stream(seed, Purpose.KILLS)
    out = folder / "run"
    config = folder / "testbed.toml"
    config.write_text(_CONFIG.format(out=out, rounds=rounds, seed=seed))
    db = database_path(out)
    started, done, unhandled, restarts = time.monotonic(), 0, 0, 0
    outputs: list[str] = []
    proc = _start(config)
    try:
        while True:
            if done < kills:
                # A random moment: after a random number of newly finished rounds, plus a random delay.
                wanted = len(_rounds(db)) + int(rng.integers(1, 4))
                while len(_rounds(db)) < wanted and proc.poll() is None and time.monotonic() - started < timeout_s:
                    time.sleep(0.2)
                time.sleep(float(rng.uniform(0.0, 1.5)))
                if proc.poll() is None:
                    _kill_group(proc)
                    outputs.append(proc.output.read_text())
                    done += 1
                    restarts += 1
                    proc = _start(config, "--resume")
                    continue
            outputs.append(proc.finish(max(1.0, timeout_s - (time.monotonic() - started))))
            break
    finally:  # interrupted (Ctrl-C, SIGTERM): the coordinator in its own session is not left running
        if proc.poll() is None:
            _kill_group(proc)
    unhandled = sum("Traceback" in text for text in outputs)
    figures = {
        "coordinator_kills": done,
        "restarts": restarts,
        "finished": proc.returncode == 0 and _run_status(db) == ["finished"],
        **_audit(db, ("lenet", "cnn"), rounds),
        "unhandled": unhandled,
        "seconds": round(time.monotonic() - started, 1),
    }
    return figures


def _output_full(folder: Path, rounds: int, seed: int, timeout_s: float) -> Figures:
    disk = folder / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)], capture_output=True, check=False)
    if mounted.returncode != 0:
        return {"skipped": "cannot mount a tmpfs here (needs root)"}
    started = time.monotonic()
    commands: list[_Command] = []
    try:
        out = disk / "run"
        config = folder / "full.toml"
        config.write_text(_CONFIG.format(out=out, rounds=rounds, seed=seed))
        db = database_path(out)
        proc = _start(config)
        commands.append(proc)
        while len(_rounds(db)) < 2 and proc.poll() is None and time.monotonic() - started < timeout_s:
            time.sleep(0.2)
        before = _rounds(db)
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as f:
            while True:
                f.write(bytes(64 * 1024))
                f.flush()
        text = proc.finish(timeout_s)
        errors = [line for line in text.splitlines() if line.startswith("error:")]
        kept = set(before) <= set(_rounds(db))
        (disk / "filler").unlink()
        resumed = _start(config, "--resume")
        commands.append(resumed)
        text2 = resumed.finish(timeout_s)
        return {
            "exit_code": proc.returncode,
            "error_lines": len(errors),
            "error": errors[0][:300] if errors else None,
            "rounds_before_full": len(before),
            "finished_rounds_kept": kept,
            "resumed_finished": resumed.returncode == 0 and _run_status(db) == ["finished"],
            **_audit(db, ("lenet", "cnn"), rounds),
            "unhandled": ("Traceback" in text) + ("Traceback" in text2),
            "seconds": round(time.monotonic() - started, 1),
        }
    finally:
        for command in commands:  # interrupted: no coordinator left running in its own session
            if command.poll() is None:
                _kill_group(command)
        subprocess.run(["umount", "-l", str(disk)], check=False)


# -- the bench -------------------------------------------------------------------------------------


def run_faults_bench(
    *, devices: int = 20, coordinator_kills: int = 3, rounds: int = 8, seed: int = 0, timeout_s: float = 600.0,
    json_path: Path | None = None, console: Console | None = None,
) -> Figures:
    """Run the four scenarios (module docstring); print a table, write ``json_path``."""
    if devices < 5 or coordinator_kills < 0 or rounds < 2:
        raise UserError("--devices must be >= 5, --coordinator-kills >= 0 and --rounds >= 2")
    console = console or Console(stderr=True)
    scenarios: dict[str, Figures] = {}
    unhandled = 0

    def scenario(name: str, run: Callable[[], Figures]) -> None:
        nonlocal unhandled
        with output.step(console, f"fault scenario {name} ..."):
            try:
                scenarios[name] = run()
            except Exception as exc:  # noqa: BLE001 - a scenario that crashed is a finding, counted
                unhandled += 1
                scenarios[name] = {"unhandled": f"{type(exc).__name__}: {exc}"}
        console.print(f"{name}: {json.dumps(scenarios[name])}")

    scenario("device_kills", lambda: asyncio.run(_echo_run(
        devices, Faults(bandwidth_bps=2_000_000), seed=seed, deadline_s=None, kill=0.2, timeout_s=timeout_s)))
    network = Faults(delay_s=0.02, bandwidth_bps=4_000_000, drop=0.2, cut=0.3, cut_after_bytes=(2_000, 400_000), reorder=0.3)
    scenario("network", lambda: asyncio.run(_echo_run(
        devices, network, seed=seed + 1, deadline_s=3.0, kill=0.0, timeout_s=timeout_s)))
    with tempfile.TemporaryDirectory(prefix="mjfl-faults-") as tmp:
        folder = Path(tmp)
        scenario("coordinator_kills", lambda: _coordinator_kills(folder, coordinator_kills, rounds, seed, timeout_s))
        scenario("output_full", lambda: _output_full(folder, rounds, seed, timeout_s))

    echo = [scenarios.get(n, {}) for n in ("device_kills", "network")]
    kills, resumed = scenarios.get("coordinator_kills", {}), scenarios.get("output_full", {})
    audits = [s for s in (kills, resumed) if "rounds_lost" in s]
    figures: Figures = {
        "kills": echo[0].get("kills", 0),
        "kills_recorded": echo[0].get("kills_recorded", 0),
        "coordinator_kills": kills.get("coordinator_kills", 0),
        "jobs": sum(s.get("jobs", 0) for s in echo),
        "targets_reached": sum(s.get("targets_reached", 0) for s in echo),
        "runs_finished": sum(bool(s.get("finished") or s.get("resumed_finished")) for s in (kills, resumed)),
        "rounds_lost": sum(s["rounds_lost"] for s in audits),
        "rounds_duplicated": sum(s["rounds_duplicated"] for s in audits),
        "unhandled": unhandled + sum(int(s.get("unhandled", 0)) for s in audits if isinstance(s.get("unhandled", 0), int)),
        "seed": seed,
        "scenarios": scenarios,
    }
    shown = ("kills", "kills_recorded", "coordinator_kills", "jobs", "targets_reached", "runs_finished",
             "rounds_lost", "rounds_duplicated", "unhandled")
    console.print(output.table(f"fault suite (seed {seed})", ("figure", "value"), ((k, str(figures[k])) for k in shown)))
    output.write(figures, json_path, console)
    return figures
