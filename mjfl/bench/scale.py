"""`mjfl bench scale`: how emulated fleets of 20 to 500 devices train, locally and on Ray.

For each backend (``local``: spawned worker processes; ``ray``: Ray actors
of a local Ray, one CPU each; docs/scale.md) and each fleet size N, the
real coordinator server listens on loopback, N emulated devices connect
(``run_emulated_fleet``, one training lane per worker, as many workers as
CPUs), and every device trains the same small real task each round: a
LeNet-5 on 12x12 inputs, eager PyTorch, one epoch of one batch of 16
samples, its weights there and back over the WebSocket. Round 1 provisions
the shards and loads the trainers (a warm-up); the figures are over the
rounds after it:

trainings_per_s
    N / the round's wall time (the coordinator's first send to its last
    result), mean over the measured rounds.
coordinator_ms_per_training
    The coordinator process's CPU time (``time.process_time``: encoding
    every task, decoding and checking every result, heartbeats, the event
    loop) per device-training. Devices run in other processes, so this is
    the coordinator's own cost, which grows with the fleet.
coordinator_cpu_share
    That CPU time over the rounds' wall time: the part of one core the
    coordinator keeps busy.
connect_s
    From starting the fleet to every device connected (for Ray, the
    actors' start included; Ray's own start-up is not).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from mjfl.bench import output

BACKENDS = ("local", "ray")
FIGURES = ("trainings_per_s", "coordinator_ms_per_training", "coordinator_cpu_share", "connect_s")


def run_scale_bench(
    *,
    fleet_sizes: Sequence[int] = (20, 100, 500),
    rounds: int = 3,
    backends: Sequence[str] = BACKENDS,
    json_path: Path | None = None,
    console: Console | None = None,
) -> dict[str, Any]:
    """Measure every backend at every fleet size (module docstring); print a table, write ``json_path``."""
    from mjfl.device.emulated.ray_cluster import (
        RayContext,
        RayOptions,
        cluster_cpus,
        connect,
    )
    from mjfl.errors import UserError

    console = console or Console(stderr=True)
    unknown = [b for b in backends if b not in BACKENDS]
    if unknown or not backends:
        raise UserError(f"--backends: unknown {unknown}; choose from {', '.join(BACKENDS)}")
    if rounds < 1 or not fleet_sizes or any(n < 1 for n in fleet_sizes):
        raise UserError("--rounds and every one of --fleet-sizes must be >= 1")
    rows: list[dict[str, Any]] = []
    for backend in backends:
        with contextlib.ExitStack() as stack:
            if backend == "ray":
                stack.enter_context(connect(RayOptions()))
                workers = cluster_cpus()
            else:
                workers = os.cpu_count() or 1
            for n in fleet_sizes:
                with output.step(console, f"{backend}: {n} emulated devices, {rounds} rounds ..."):
                    context = RayContext() if backend == "ray" else None
                    figures = asyncio.run(_measure(n, rounds, workers, context))
                rows.append({"backend": backend, "devices": n, "workers": min(n, workers), **figures})
                console.print(
                    f"{backend:>5} {n:>4} devices: {figures['trainings_per_s']:.1f} trainings/s,"
                    f" coordinator {figures['coordinator_ms_per_training']:.2f} ms CPU per training", highlight=False,
                )
    report = {"cpus": os.cpu_count(), "rounds": rounds, "results": rows}
    console.print(output.table(
        f"emulated fleets at scale (loopback, {output.machine()})",
        ("backend", "devices", "workers", *FIGURES),
        (
            (
                row["backend"], str(row["devices"]), str(row["workers"]), f"{row['trainings_per_s']:.1f}",
                f"{row['coordinator_ms_per_training']:.2f}", f"{row['coordinator_cpu_share']:.3f}", f"{row['connect_s']:.1f}",
            )
            for row in rows
        ),
    ))
    output.write(report, json_path, console)
    return report


async def _measure(devices: int, rounds: int, workers: int, context: Any) -> dict[str, float]:
    from mjfl.coordinator.engine.fleet import JobArtifacts, Task
    from mjfl.coordinator.remote.fleet import RemoteFleet
    from mjfl.coordinator.remote.server import CoordinatorServer
    from mjfl.device.emulated.emulator.fleet import run_emulated_fleet
    from mjfl.ids import DeviceId, JobId
    from mjfl.jobs.base import LocalTraining
    from mjfl.jobs.models import ModelSpec, initial_weights

    spec = ModelSpec("lenet5", (1, 12, 12), 10)
    samples = 16
    rng = np.random.default_rng(0)
    weights = initial_weights(spec, 0)
    walls, cpus = [], []
    async with CoordinatorServer("127.0.0.1", 0) as server:
        started = time.perf_counter()
        fleet = run_emulated_fleet(
            server.url, devices, runtime="torch", workers=workers, id_prefix="scale", context=context,
        )
        async with fleet:
            await server.registry.wait_for_devices(devices, timeout=300)
            connect_s = time.perf_counter() - started
            ids = [DeviceId(d) for d in fleet.device_ids]
            shards = {d: (rng.normal(size=(samples, *spec.input_shape)).astype(np.float32), rng.integers(0, 10, samples)) for d in ids}
            # The torch runtime builds its model from the spec: no program is needed.
            remote = RemoteFleet(server.registry)
            remote.prepare([JobArtifacts(JobId("scale"), spec, b"\0" * 64, shards)])
            for round_ in range(1, rounds + 2):
                task = Task(JobId("scale"), round_, weights, LocalTraining(epochs=1, batch_size=samples, lr=0.05), seed=round_)
                wall, cpu = time.perf_counter(), time.process_time()
                await asyncio.gather(*(remote.run_task(d, task) for d in ids))
                if round_ > 1:  # round 1 provisions and loads: a warm-up
                    walls.append(time.perf_counter() - wall)
                    cpus.append(time.process_time() - cpu)
    wall_s, cpu_s = float(np.sum(walls)), float(np.sum(cpus))
    return {
        "trainings_per_s": float(np.mean([devices / w for w in walls])),
        "coordinator_ms_per_training": 1000 * cpu_s / (devices * len(walls)),
        "coordinator_cpu_share": cpu_s / wall_s,
        "connect_s": connect_s,
    }
