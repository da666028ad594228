"""`mjfl bench gpu`: the batched runtime where it is meant to run, on a GPU machine; JSON figures.

Two parts, for the machines that have a GPU. Without one it refuses unless
told ``cpu``: at full size the simulation takes hours on a CPU, and the
per-device figures on a CPU are what `mjfl bench trainers` measures. Told,
it runs on the CPU and says so in its figures (the project builds and tests
without a GPU). Each part says when it starts; the simulation shows every
job's round and accuracy as it goes:

1. Device trainings per second of the per-device paths and of the batched
   trainer at each K (``mjfl.bench.trainers.device_trainings``), the eager
   and batched trainers on CUDA.
2. One paper-sized simulation: the paper's group A (`examples/
   paper-group-a.toml`: VGG-6 on CIFAR-10's shapes, CNN-A on EMNIST letters',
   LeNet-5 on EMNIST digits'; 100 devices, non-IID shards, 5 local epochs,
   the paper's batch sizes), on data this bench writes: ``scale`` times the
   real sets' sizes, each class an image prototype plus noise, so the
   models learn. `mjfl simulate` with the batched runtime, Meta-Greedy, at
   most ``rounds`` rounds a job; the figures are its wall time, its device
   trainings and their rate, and each job's rounds and accuracy.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from mjfl.bench import output
from mjfl.errors import UserError

__all__ = ["PAPER_SETS", "run_gpu_bench", "write_paper_data"]

# The paper's group A data sets: (file stem, channels, size, classes, train, test).
PAPER_SETS = {
    "cifar10": (3, 32, 10, 50_000, 10_000),
    "emnist-letters": (1, 28, 26, 124_800, 20_800),
    "emnist-digits": (1, 28, 10, 240_000, 40_000),
}
# examples/paper-group-a.toml's jobs: name, model, data set, batch size.
GROUP_A = (("vgg", "vgg6", "cifar10", 30), ("cnn", "cnn-a-noniid", "emnist-letters", 10),
           ("lenet", "lenet5", "emnist-digits", 64))


def write_paper_data(folder: Path, *, scale: float, seed: int = 0) -> dict[str, Path]:
    """Data of the paper's shapes in ``folder`` (``<set>.npz``): ``scale`` x the real sizes (at least what 100
    devices' shards need), learnable.

    Each class is a random prototype image; a sample is its class's prototype
    plus Gaussian noise of the same size, as uint8. Drawn in chunks, so the
    memory it takes is about the uint8 sets' own.
    """
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name, (channels, size, classes, train, test) in PAPER_SETS.items():
        prototypes = rng.uniform(0, 255, size=(classes, size, size, channels)).astype(np.float32)
        arrays = {}
        # At least what 100 devices' non-IID shards need (2 classes a device: 20 shards of each class).
        for split, count, least in (("train", train, classes * 60), ("test", test, classes * 2)):
            n = max(least, round(count * scale))
            y = rng.integers(0, classes, n)
            x = np.empty((n, size, size, channels), dtype=np.uint8)
            for start in range(0, n, _CHUNK):
                part = y[start : start + _CHUNK]
                noise = rng.standard_normal((len(part), size, size, channels), dtype=np.float32) * 60
                x[start : start + _CHUNK] = np.clip(prototypes[part] + noise, 0, 255)
            arrays[f"x_{split}"], arrays[f"y_{split}"] = x, y.astype(np.int64)
        path = written[name] = folder / f"{name}.npz"
        np.savez(path, **arrays)
    return written


_CHUNK = 10_000  # samples drawn at once by write_paper_data


def run_gpu_bench(
    out_dir: Path, *, scale: float = 1.0, rounds: int = 20, devices_per_step: tuple[int, ...] = (1, 8, 32, 128),
    tasks: int = 32, cpu: bool = False, json_path: Path | None = None, console: Console | None = None,
) -> dict[str, Any]:
    """Both parts (module docstring) into ``out_dir``; prints tables, writes ``json_path``, returns the figures.

    Without a GPU: UserError, unless ``cpu`` (then the figures are this CPU's).
    """
    from mjfl.bench.trainers import check_devices_per_step, device_trainings

    if not 0 < scale <= 1:
        raise UserError(f"--scale {scale}: must be in (0, 1] (a fraction of the real data sets' sizes)")
    if rounds < 1:
        raise UserError(f"--rounds {rounds}: must be >= 1")
    check_devices_per_step(devices_per_step, empty=False)
    console = console or Console(stderr=True)
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    if device == "cpu" and not cpu:
        raise UserError(
            "no CUDA device here: mjfl bench gpu measures a GPU; give --cpu to run it on this CPU anyway"
            " (hours at --scale 1; e.g. --scale 0.01 --rounds 2 takes minutes)"
        )
    where = gpu or "this CPU (--cpu: no CUDA device here)"
    console.print(f"part 1 of 2: device trainings per second on {where} ...", highlight=False)
    trainings = device_trainings(devices_per_step, cache_dir=Path(".mjfl-cache") / "programs", console=console,
                                 tasks=tasks, device=device)
    console.print(f"part 2 of 2: writing data of the paper's shapes ({scale:g} x their sizes) to {out_dir / 'data'}"
                  f" and simulating group A, at most {rounds} rounds a job ...", highlight=False, soft_wrap=True)
    data = write_paper_data(out_dir / "data", scale=scale)
    simulation = _simulate(out_dir / "run", data, rounds, console)
    report = {"device": device, "gpu": gpu, "scale": scale, "device_trainings": trainings, "simulation": simulation}
    output.write(report, json_path, console)
    return report


def _simulate(out: Path, data: dict[str, Path], rounds: int, console: Console) -> dict[str, Any]:
    from mjfl.coordinator.config import parse_config
    from mjfl.coordinator.run.driver import Driver, Output
    from mjfl.coordinator.run.simulated import SimulatedDevices
    from mjfl.coordinator.storage.database import Storage

    config = parse_config({
        "seed": 0, "out_dir": str(out),
        "fleet": {"size": 100, "runtime": "batched", "workers": 1},
        "scheduler": {"method": "meta-greedy", "alpha": 1.0, "beta": 0.05, "omega": "sqrt"},
        "jobs": [
            {"name": name, "model": model, "dataset": f"npz:{data[dataset]}", "partition": "noniid", "epochs": 5,
             "batch_size": batch, "lr": 0.05, "fraction": 0.1, "max_rounds": rounds}
            for name, model, dataset, batch in GROUP_A
        ],
    })
    started = time.perf_counter()
    output = Output(out, console)  # the live view: every job's round and accuracy as it goes
    with SimulatedDevices(config, output) as fleet:  # what `mjfl simulate` runs
        summary = Driver(config, output).train(["meta-greedy"], fleet)
    wall = time.perf_counter() - started
    with Storage(config.database_path) as storage:
        run = storage.runs()[-1][0].run_id
        trained = sum(1 for r in storage.rounds(run) for d in r.devices if d.status == "ok")
    jobs = summary["methods"]["meta-greedy"]["jobs"]
    return {
        "devices": 100, "rounds_per_job": rounds, "wall_s": round(wall, 1), "device_trainings": trained,
        "device_trainings_per_s": round(trained / wall, 2),
        "jobs": {job: {"final_accuracy": row["final_accuracy"]} for job, row in jobs.items()},
    }
