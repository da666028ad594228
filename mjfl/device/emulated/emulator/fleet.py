"""Fleets of emulated devices in worker processes: starting them, and the parent's handle on them."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.synchronize
import os
import signal
import socket
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, Self

from mjfl.device.emulated.device_model import TrainerFactory
from mjfl.device.emulated.emulator.backoff import DEFAULT_BACKOFF, Backoff
from mjfl.device.emulated.emulator.device import Impersonation
from mjfl.device.emulated.emulator.worker import REFUSED, WorkerConfig, worker_main
from mjfl.errors import ConfigError

__all__ = ["EmulatedFleet", "WorkerContext", "counted", "default_id_prefix", "run_emulated_fleet"]

log = logging.getLogger(__name__)


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun`` in the number it takes: "1 process", "2 processes", "0 devices"."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def default_id_prefix() -> str:
    """``emu-<host>``: with the device index, an id that survives an emulator restart."""
    host = socket.gethostname().split(".")[0] or "host"
    return f"emu-{host}"


class WorkerContext(Protocol):
    """Where emulator workers run: what they use of a multiprocessing context."""

    def Event(self) -> Any: ...

    def Process(self, *, target: Any, args: tuple[Any, ...], name: str, daemon: bool) -> Any: ...


class EmulatedFleet:
    """Handle on emulated devices running in worker processes (from ``run_emulated_fleet``)."""

    def __init__(
        self,
        processes: list[multiprocessing.process.BaseProcess],
        stop_event: multiprocessing.synchronize.Event,
        assignment: dict[str, int],
        impersonated: dict[str, Impersonation] | None = None,
    ) -> None:
        self.processes = processes
        self._stop_event = stop_event
        self.assignment = assignment
        """Worker index of every device id, in device index order."""
        self.impersonated = impersonated or {}
        """The profile each device impersonates, by device id."""

    @property
    def device_ids(self) -> list[str]:
        """Every device id, in device index order (``<prefix>-<first_index>`` first)."""
        return list(self.assignment)

    def describe(self, worker: str = "process", workers: str = "processes") -> str:
        """Its size and worker count, e.g. "3 emulated devices in 2 processes" (``worker``: what a worker is called)."""
        return f"{counted(len(self.assignment), 'emulated device')} in {counted(len(self.processes), worker, workers)}"

    def alive(self) -> bool:
        return any(p.is_alive() for p in self.processes)

    def refused(self) -> bool:
        """Whether the coordinator refused a device of an ended worker (bye unauthorized or unsupported_version)."""
        return any(getattr(p, "exitcode", None) == REFUSED for p in self.processes)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for every worker to exit (e.g. after the coordinator's bye); True if they did."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for p in self.processes:
            p.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return not self.alive()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every device (bye going_away), then end the workers; bounded by ``timeout`` (+2 s)."""
        self._stop_event.set()
        if not self.wait(timeout):
            log.warning("emulator workers did not stop in %.0f s; terminating them", timeout)
            for p in self.processes:
                if p.is_alive():
                    p.terminate()
            if not self.wait(1.0):
                for p in self.processes:
                    if p.is_alive():
                        p.kill()
                self.wait(1.0)

    def kill_worker(self, index: int) -> list[str]:
        """SIGKILL one worker process (its devices vanish without a bye); its device ids."""
        process = self.processes[index]
        if process.pid is not None and process.is_alive():
            os.kill(process.pid, signal.SIGKILL)
        process.join(5.0)
        return [d for d, w in self.assignment.items() if w == index]

    async def aclose(self, timeout: float = 10.0) -> None:
        """``stop()`` from async code: the joins wait in a thread, so the event loop
        (and a coordinator in it, which must answer the devices' byes) keeps running."""
        await asyncio.to_thread(self.stop, timeout)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _worker_count(count: int, runtime: str, workers: int | None) -> int:
    """How many workers ``count`` devices of ``runtime`` get (``workers``, else the default), checking both."""
    if count < 1:
        raise ConfigError("count", f"must be >= 1, got {count}")
    if runtime not in ("executorch", "torch", "batched"):
        raise ConfigError("runtime", f"must be executorch, torch or batched, got {runtime!r}")
    # The batched runtime trains many devices in one process (the one that would own a GPU).
    default_workers = 1 if runtime == "batched" else os.cpu_count() or 1
    return max(1, min(count, workers or default_workers))


def run_emulated_fleet(
    url: str,
    count: int,
    *,
    runtime: str = "executorch",
    profiles: Sequence[Impersonation] | None = None,
    dropout: float = 0.0,
    workers: int | None = None,
    id_prefix: str | None = None,
    first_index: int = 0,
    seed: int = 0,
    token: str = "",
    secrets: Mapping[str, str] | None = None,
    ca: Path | None = None,
    make_trainer: TrainerFactory | None = None,
    backoff: Backoff = DEFAULT_BACKOFF,
    max_part_bytes: int | None = None,
    log_file: Path | None = None,
    verbose: bool = False,
    context: WorkerContext | None = None,
) -> EmulatedFleet:
    """Start ``count`` emulated devices spread over ``workers`` processes (spawned).

    Device ``i`` is ``f"{id_prefix}-{i}"`` (default prefix ``emu-<host>``),
    runs in worker ``i % workers`` and impersonates ``profiles[i %
    len(profiles)]`` when profiles are given. ``make_trainer`` must be
    picklable (a module-level function, or a ``functools.partial`` of one).
    The workers log to ``log_file`` (see ``mjfl.logs.setup_worker``).
    ``secrets`` (by device id) are the enrolled devices' secrets; ``ca`` the
    certificate file a ``wss://`` coordinator is checked against.
    ``context``: where the workers run (spawned processes by default;
    ``ray_cluster.RayContext`` for Ray actors, one CPU each).
    Returns at once; the devices connect (and reconnect) on their own.
    """
    workers = _worker_count(count, runtime, workers)
    prefix = id_prefix or default_id_prefix()
    ids = [f"{prefix}-{first_index + i}" for i in range(count)]
    chosen = [None if not profiles else profiles[i % len(profiles)] for i in range(count)]
    ctx: Any = context if context is not None else multiprocessing.get_context("spawn")
    stop_event = ctx.Event()
    processes: list[multiprocessing.process.BaseProcess] = []
    for w in range(workers):
        mine = list(range(w, count, workers))
        config = WorkerConfig(
            url, tuple(ids[i] for i in mine), tuple(first_index + i for i in mine), runtime,
            tuple(chosen[i] for i in mine), dropout, seed, token,
            {ids[i]: secrets[ids[i]] for i in mine if secrets and ids[i] in secrets}, ca, make_trainer, backoff,
            max_part_bytes, log_file, verbose,
        )
        process = ctx.Process(target=worker_main, args=(config, stop_event), name=f"mjfl-emulator-{w}", daemon=True)
        process.start()
        processes.append(process)
    assignment = {device: i % workers for i, device in enumerate(ids)}
    impersonated = {device: profile for device, profile in zip(ids, chosen) if profile is not None}
    return EmulatedFleet(processes, stop_event, assignment, impersonated)
