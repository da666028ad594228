"""One emulator worker process: its devices, their shared training lane, and when they stop.

``run_emulated_fleet`` (``fleet.py``) starts ``worker_main`` in each worker
(a spawned process, or a Ray actor), with a picklable ``WorkerConfig``. The
worker exits with ``REFUSED`` when the coordinator refused one of its
devices, as the JVM client does (``mjfl-device``: 3, refused by the
coordinator).
"""

from __future__ import annotations

import asyncio
import multiprocessing.synchronize
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mjfl import logs, seeds
from mjfl.device.emulated.device_model import TrainerFactory
from mjfl.device.emulated.emulator.backoff import Backoff
from mjfl.device.emulated.emulator.device import EmulatedDevice, Impersonation
from mjfl.device.emulated.emulator.lane import TrainingLane
from mjfl.device.protocol import Runtime
from mjfl.jobs.runtime import import_device_modules
from mjfl.seeds import Purpose

__all__ = ["REFUSED", "WorkerConfig", "worker_main"]

REFUSED = 3
"""A worker's exit status when the coordinator refused one of its devices (bye unauthorized or unsupported_version)."""


@dataclass(frozen=True)
class WorkerConfig:
    """What one worker runs: its devices (ids, indices, profiles, secrets) and how they connect and train."""

    url: str
    device_ids: tuple[str, ...]
    indices: tuple[int, ...]
    runtime: str  # executorch, torch or batched
    profiles: tuple[Impersonation | None, ...]
    dropout: float
    seed: int
    token: str
    secrets: Mapping[str, str]
    ca: Path | None
    make_trainer: TrainerFactory | None
    backoff: Backoff
    max_part_bytes: int | None
    log_file: Path | None
    verbose: bool


def worker_main(config: WorkerConfig, stop_event: multiprocessing.synchronize.Event) -> None:
    """The worker process: run its devices until ``stop_event`` or the coordinator's bye; exit ``REFUSED`` if refused."""
    # Ctrl-C goes to the whole process group; the parent turns it into stop_event.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logs.setup_worker(config.log_file, verbose=config.verbose)
    _raise_open_files_limit()
    if config.runtime == "executorch":
        import_device_modules()  # before the lane's thread: the exporter's package stays unimported
    if asyncio.run(_run_devices(config, stop_event)):
        sys.exit(REFUSED)


async def _run_devices(config: WorkerConfig, stop_event: multiprocessing.synchronize.Event) -> bool:
    """Run the worker's devices until they stop; True if the coordinator refused any of them."""
    batched = config.runtime == "batched"
    lane = TrainingLane(config.make_trainer, torch_threads=1, batched=batched)
    # Batched devices train the provision's eager model: on the protocol they are the torch runtime.
    runtime: Runtime = "torch" if batched else config.runtime  # type: ignore[assignment]
    devices = [
        EmulatedDevice(
            config.url, device_id, runtime=runtime, profile=profile, dropout=config.dropout,
            seed=seeds.integer(config.seed, Purpose.DEVICE, index), token=config.token, secret=config.secrets.get(device_id), ca=config.ca,
            lane=lane, backoff=config.backoff, max_part_bytes=config.max_part_bytes,
        )
        for device_id, index, profile in zip(config.device_ids, config.indices, config.profiles)
    ]
    try:
        async with asyncio.TaskGroup() as group:
            watcher = group.create_task(_watch(stop_event, devices), name="stop watcher")
            async with asyncio.TaskGroup() as running:
                for device in devices:
                    running.create_task(device.run(), name=device.device_id)
            watcher.cancel()
    finally:
        lane.close()
    return any(device.refusal is not None for device in devices)


async def _watch(stop_event: multiprocessing.synchronize.Event, devices: Sequence[EmulatedDevice]) -> None:
    """Stop the devices when asked, and when the process that started us is gone.

    A coordinator killed with -9 must not leave devices that keep
    reconnecting under ids its restart will use again.
    """
    parent = os.getppid()
    # Asked on a thread: on Ray the event is a remote flag, and its answer may take seconds on a loaded
    # machine, which the devices' heartbeats on this loop must not wait for.
    while not await asyncio.to_thread(stop_event.is_set) and os.getppid() == parent:
        await asyncio.sleep(0.1)
    for device in devices:
        device.stop()


def _raise_open_files_limit() -> None:
    """Many devices in one process need a socket each: lift the soft limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass
