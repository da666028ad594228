"""Emulated devices: protocol v1 clients that train like a phone (docs/testbed.md).

An ``EmulatedDevice`` connects to the coordinator over a real WebSocket and
does what the Android app does (protocol.md section 11): hello with its
hardware and cached artifacts, stores programs and shards by sha256, trains
every task with the trainers (``mjfl.jobs.trainers``: the task's ExecuTorch
program, or eager PyTorch), answers with the weights and its timing,
heartbeats, and reconnects with exponential backoff when the connection is
lost. Impersonating a profiled phone, it also takes that phone's time: each
round is stretched to a time drawn from the profile's Formula 4 model for the
task's epochs and its shard size (the device model, ``device_model.py``: the same
Formula 4 draw, drop-out and deadline rules as a simulated device); when
training took less, the device waits the rest before answering. With each
result it reports a modelled energy in ``device_state`` (``device_model.modelled_energy``:
the profile's ``power_w`` over the round's compute time, the drawn one when it
impersonates a phone), where a phone reports one measured from its battery.

Where training runs. Training is CPU-bound and the ExecuTorch runtime holds
the GIL for a whole training step, so it must never run in the
coordinator's process. ``run_emulated_fleet`` spreads devices over worker
processes; in each process the devices share one ``TrainingLane``, a single
training thread with its trainer cache: they train one at a time there, and
the event loop keeps
serving every device's messages and heartbeats between steps. More threads
would not train faster (the GIL), only more processes do, so devices of
different processes really train in parallel.

Each connection is served by the connection runner (``android_bridge/connection.py``), the
same one the coordinator's server uses.

Stopping. ``stop()`` says bye going_away and ends ``run()``; so does the
coordinator's ``bye going_away`` (its shutdown, or a newer connection with
our id) or ``normal``, and a refusal (``unauthorized``, ``unsupported_version``).
Any other end (a lost connection, a protocol error, a heartbeat timeout)
is followed by a reconnect after ``Backoff.delay``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import multiprocessing
import multiprocessing.synchronize
import os
import platform
import signal
import socket
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Self

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from mjfl import logs
from mjfl.android_bridge.connection import Connection
from mjfl.android_bridge.devices.device_model import (
    DeviceModel,
    ModelName,
    TrainerCache,
    TrainerFactory,
    modelled_energy,
)
from mjfl.android_bridge.protocol import (
    DEFAULT_MAX_CONTROL_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    Cancel,
    Closed,
    DeviceSession,
    Error,
    HeartbeatAck,
    Provision,
    Runtime,
    State,
    Task,
    Timing,
    Welcome,
)
from mjfl.android_bridge.protocol.credentials import NONCE_HEADER, hello_proof, is_nonce
from mjfl.android_bridge.tls import client_context
from mjfl.errors import SessionClosed, UserError
from mjfl.jobs.base import TrainResult

log = logging.getLogger(__name__)

# Bye codes from the coordinator after which reconnecting is pointless or unwanted.
STOP_CODES = frozenset({"going_away", "normal", "unauthorized", "unsupported_version"})


# -- training -----------------------------------------------------------------


class Impersonation(Protocol):
    """The profiled phone an emulated device stands in for (a profiling.profiles.DeviceProfile)."""

    @property
    def device_id(self) -> str: ...

    @property
    def a(self) -> float: ...

    @property
    def mu(self) -> float: ...

    @property
    def hardware(self) -> Mapping[str, Any]: ...

    @property
    def power_w(self) -> float | None: ...


class TrainingLane:
    """One training thread and its trainer cache: devices sharing a lane train one at a time.

    The trainers (ExecuTorch modules) are kept by the device model's
    ``TrainerCache``, so a job's program is loaded once per lane.
    ``torch_threads`` sets torch's intra-op threads for the process before the
    first training (1 in worker processes: they share the cores).

    A ``batched`` lane (the batched runtime, ``mjfl.jobs.batched``) trains
    the devices' tasks together instead: the tasks that arrive while it
    trains (or in the same turn of the event loop) are its next batch, each
    model's in one ``train_many`` call; every device still gets its own
    result.
    """

    def __init__(
        self,
        make_trainer: TrainerFactory | None = None,
        *,
        max_trainers: int = 8,
        torch_threads: int | None = None,
        batched: bool = False,
    ) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mjfl-train")
        self._trainers = TrainerCache(make_trainer, size=max_trainers, torch_threads=torch_threads)
        self.batched = batched
        self._torch_threads = torch_threads
        self._queue: list[tuple[ModelName, Task, np.ndarray, np.ndarray, int, asyncio.Future[tuple[TrainResult, float]]]] = []
        self._drainer: asyncio.Task[None] | None = None
        self._batched_trainers: dict[ModelName, Any] = {}

    async def train(
        self, runtime: str, model: ModelName, program_sha256: str, program: bytes, task: Task,
        x: np.ndarray, y: np.ndarray, seed: int,
    ) -> tuple[TrainResult, float]:
        """Train ``task`` on the lane's thread; the result and the seconds spent loading the trainer."""
        if self.batched:
            return await self._queued(model, task, x, y, seed)
        work = functools.partial(
            self._trainers.train, runtime, model, program_sha256, lambda: program, task.weights, x, y,
            task.training, seed=seed,
        )
        return await asyncio.get_running_loop().run_in_executor(self._executor, work)

    async def _queued(
        self, model: ModelName, task: Task, x: np.ndarray, y: np.ndarray, seed: int
    ) -> tuple[TrainResult, float]:
        future: asyncio.Future[tuple[TrainResult, float]] = asyncio.get_running_loop().create_future()
        self._queue.append((model, task, x, y, seed, future))
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.ensure_future(self._drain())
        return await future

    async def _drain(self) -> None:
        """Train what is queued, batch after batch, until nothing is."""
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)  # the devices that got a task in this turn queue theirs
        while self._queue:
            batch, self._queue = [item for item in self._queue if not item[-1].done()], []
            by_model: dict[ModelName, list[Any]] = {}
            for item in batch:
                by_model.setdefault(item[0], []).append(item)
            for model, items in by_model.items():
                log.info("batched lane: %d devices of a %s job trained together", len(items), model.name)
                try:
                    results = await loop.run_in_executor(self._executor, self._train_batch, model, items)
                except Exception as exc:  # noqa: BLE001 - every device of the batch fails as its task would
                    for *_, future in items:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                for (*_, future), result in zip(items, results, strict=True):
                    if not future.done():
                        future.set_result((result, 0.0))

    def _train_batch(self, model: ModelName, items: Sequence[Any]) -> list[TrainResult]:
        """On the lane's thread: the batched trainer of ``model`` over the queued tasks."""
        from mjfl.jobs.base import ModelSpec
        from mjfl.jobs.batched import BatchedTask, BatchedTrainer

        trainer = self._batched_trainers.get(model)
        if trainer is None:
            if self._torch_threads is not None:
                import torch

                torch.set_num_threads(self._torch_threads)
            # The eager model of the provision's spec, as the torch runtime's trainer builds it.
            spec = ModelSpec(model.name, tuple(model.input_shape), model.num_classes)  # type: ignore[arg-type]
            trainer = self._batched_trainers[model] = BatchedTrainer(spec)
        tasks = [
            BatchedTask({k: np.array(v) for k, v in task.weights.items()}, x, y, task.training, seed)
            for _, task, x, y, seed, _ in items
        ]
        return list(trainer.train_many(tasks))

    def close(self) -> None:
        """Stop taking work; a training already running finishes on its own."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self._drainer is not None:
            self._drainer.cancel()


class ArtifactStore:
    """Programs and shards by sha256, kept for the process lifetime (protocol.md section 6).

    Devices of one process share the bytes; each device lists only what it
    was given itself.
    """

    def __init__(self) -> None:
        self.programs: dict[str, bytes] = {}
        self.shards: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def keep(self, provision: Provision) -> None:
        if provision.program is not None:
            self.programs[provision.program.sha256] = bytes(provision.program.data)
        if provision.shard is not None:
            # Copies: the received views are read-only and would pin the whole message.
            self.shards[provision.shard.sha256] = (np.array(provision.shard.x), np.array(provision.shard.y))

    def has(self, sha256: str) -> bool:
        return sha256 in self.programs or sha256 in self.shards


_PROCESS_STORE = ArtifactStore()


# -- reconnecting -------------------------------------------------------------


@dataclass(frozen=True)
class Backoff:
    """Reconnect delays: ``min(maximum, initial * factor**attempt)``, less up to ``jitter`` of it at random.

    The jitter spreads a fleet that lost its coordinator at once, so the
    restarted coordinator does not get every reconnect in the same instant.
    """

    initial: float = 0.5
    factor: float = 2.0
    maximum: float = 30.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if not (0 < self.initial <= self.maximum and self.factor >= 1 and 0 <= self.jitter < 1):
            raise ValueError("need 0 < initial <= maximum, factor >= 1 and 0 <= jitter < 1")

    def delay(self, attempt: int, rng: np.random.Generator) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 64))
        return float(base * (1.0 - self.jitter * rng.random()))


# -- one device ---------------------------------------------------------------


@dataclass
class TaskRecord:
    """One task as the device saw it (times on the device's event-loop clock, ``time.monotonic``)."""

    task_id: str
    job_id: str
    round: int
    received_at: float
    target_s: float | None = None  # the impersonated round time drawn for this task
    started_at: float | None = None  # training started
    trained_at: float | None = None  # training ended
    answered_at: float | None = None
    download_s: float = 0.0
    compute_s: float = 0.0
    outcome: str = "pending"  # "result", "cancelled", "error", "lost"


@dataclass(eq=False)
class _Link:
    """One session as the device sees it: the connection and the tasks it was given."""

    conn: Connection
    tasks: asyncio.Queue[tuple[Task, float, float]] = field(default_factory=asyncio.Queue)
    cancels: dict[str, asyncio.Event] = field(default_factory=dict)
    results: int = 0

    @property
    def session(self) -> DeviceSession:
        assert isinstance(self.conn.session, DeviceSession)
        return self.conn.session


class EmulatedDevice:
    """A device that speaks protocol v1 to ``url`` and trains like a phone.

    ``profile``: impersonate this profiled phone (its ``a``/``mu`` go in the
    hello, and rounds are stretched to its Formula 4 times). ``dropout``: the
    chance that a round never comes back (the device model's rule, as in the
    virtual-time fleet). ``seed`` seeds the device's round-time draws, its
    training seeds and its backoff jitter. ``lane``: the training thread to
    share (a private one by default). ``store``: where artifacts are kept
    (the process's by default). ``runtime``: "executorch" trains the task's
    program, "torch" an eager model built from the provision's model spec.
    """

    def __init__(
        self,
        url: str,
        device_id: str,
        *,
        runtime: Runtime = "executorch",
        profile: Impersonation | None = None,
        dropout: float = 0.0,
        seed: int | Sequence[int] = 0,
        token: str = "",
        secret: str | None = None,
        ca: Path | None = None,
        lane: TrainingLane | None = None,
        make_trainer: TrainerFactory | None = None,
        store: ArtifactStore | None = None,
        backoff: Backoff = Backoff(),
        hardware: Mapping[str, Any] | None = None,
        max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
        max_control_bytes: int | None = DEFAULT_MAX_CONTROL_BYTES,
        max_part_bytes: int | None = None,
        open_timeout: float = 10.0,
        close_timeout: float = 5.0,
    ) -> None:
        self.url = url
        self.device_id = device_id
        self.runtime = runtime
        self.profile = profile
        self.token = token
        self.secret = secret  # enrolled: prove it in the hello (protocol.md 5.1.1)
        self._tls = client_context(ca) if url.startswith("wss://") else None
        self.backoff = backoff
        self.max_message_bytes = max_message_bytes
        self.max_control_bytes = max_control_bytes
        self.max_part_bytes = max_part_bytes
        self.open_timeout = open_timeout
        self.close_timeout = close_timeout
        self._lane = lane
        self._make_trainer = make_trainer
        self._store = store if store is not None else _PROCESS_STORE
        streams = np.random.SeedSequence(seed).spawn(3)
        self.model = DeviceModel(
            profile.a if profile is not None else None, profile.mu if profile is not None else None,
            dropout=dropout, rng=np.random.default_rng(streams[0]),
        )
        self._train_seeds = np.random.default_rng(streams[1])
        self._backoff_rng = np.random.default_rng(streams[2])
        self.hardware = self._hardware(hardware)
        self.held: set[str] = set()
        """sha256 of the artifacts this device was given (listed in its hello)."""
        self.history: list[TaskRecord] = []
        self.sessions = 0  # sessions that got a welcome
        self.delays: list[float] = []  # every reconnect delay, in order
        self.heartbeat_rtts: deque[float] = deque(maxlen=10_000)  # of its own heartbeats, seconds
        self.stopped_by: str | None = None  # why run() ended
        self._stop = asyncio.Event()
        self._link: _Link | None = None

    def _hardware(self, extra: Mapping[str, Any] | None) -> dict[str, Any]:
        hardware: dict[str, Any] = {}
        if self.profile is not None:
            hardware.update(self.profile.hardware)
        hardware.update(
            {
                "model": hardware.get("model", "emulated"),
                "emulated": True,
                "cores": os.cpu_count(),
                "os": f"{platform.system()} {platform.release()}",
                "host": socket.gethostname(),
            }
        )
        if self.profile is not None:
            # The coordinator plans with these when it has no profile of its own for us.
            hardware.update(impersonates=self.profile.device_id, a=self.profile.a, mu=self.profile.mu)
        hardware.update(extra or {})
        return hardware

    @property
    def connected(self) -> bool:
        link = self._link
        return link is not None and link.session.state is State.OPEN

    # -- control ----------------------------------------------------------------

    def stop(self) -> None:
        """End ``run()``: say bye going_away to the coordinator and do not reconnect."""
        self.stopped_by = self.stopped_by or "stopped"
        self._stop.set()
        if self._link is not None:
            self._link.conn.close("going_away", "device stopping")

    def kill(self) -> None:
        """Die like a crashed phone: drop the connection without a bye and never come back."""
        self.stopped_by = self.stopped_by or "killed"
        self._stop.set()
        if self._link is not None:
            self._link.conn.abort()

    def drop(self) -> None:
        """Lose the connection without a bye (a network cut); the device reconnects."""
        if self._link is not None:
            self._link.conn.abort()

    # -- the loop ---------------------------------------------------------------

    async def run(self) -> None:
        """Connect, serve, reconnect with backoff, until stopped (see the module docstring)."""
        own_lane = self._lane is None
        if self._lane is None:
            self._lane = TrainingLane(self._make_trainer)
        attempt = 0
        try:
            while not self._stop.is_set():
                welcomed = False
                try:
                    async with connect(
                        self.url,
                        compression=None,
                        max_size=self._websocket_max_size(),
                        ping_interval=None,
                        open_timeout=self.open_timeout,
                        close_timeout=self.close_timeout,
                        proxy=None,
                        **({"ssl": self._tls} if self._tls is not None else {}),
                    ) as ws:
                        welcomed = await self._serve(ws)
                except InvalidURI as exc:
                    raise UserError(f"--url: {exc}") from None
                except ssl.SSLCertVerificationError as exc:
                    # Not our coordinator, or the wrong --ca: say so, and keep trying.
                    log.warning("%s: %s is not trusted: %s", self.device_id, self.url, exc.verify_message)
                except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
                    log.debug("%s: connection to %s failed: %r", self.device_id, self.url, exc)
                if self._stop.is_set():
                    break
                attempt = 0 if welcomed else attempt + 1
                delay = self.backoff.delay(attempt, self._backoff_rng)
                self.delays.append(delay)
                log.debug("%s: reconnecting in %.2f s", self.device_id, delay)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._stop.wait()
        finally:
            if own_lane:
                self._lane.close()
                self._lane = None

    def _websocket_max_size(self) -> int | None:
        if self.max_message_bytes is None:
            return None
        return max(self.max_message_bytes, self.max_control_bytes or 0)

    def _proof(self, ws: ClientConnection) -> str | None:
        """The hello's proof of our secret over the nonce of this connection's handshake."""
        if self.secret is None:
            return None
        nonce = ws.response.headers.get(NONCE_HEADER) if ws.response is not None else None
        if not is_nonce(nonce):
            log.warning("%s: the coordinator sent no nonce (%s): cannot prove the secret", self.device_id, NONCE_HEADER)
            return None
        assert nonce is not None
        return hello_proof(self.secret, nonce, self.device_id)

    async def _serve(self, ws: ClientConnection) -> bool:
        """One session over the connection runner; True if it was welcomed."""
        session = DeviceSession(
            max_message_bytes=self.max_message_bytes,
            max_control_bytes=self.max_control_bytes,
            max_part_bytes=self.max_part_bytes,
        )
        link: _Link
        conn = Connection(
            ws, session, name=self.device_id, on_event=lambda event, arrived, ready: self._on_event(link, event, arrived, ready),
            open_timeout=self.open_timeout, open_timeout_reason="no welcome", close_timeout=self.close_timeout,
        )
        link = _Link(conn)
        session.send_hello(
            self.device_id, runtime=self.runtime, token=self.token, hardware=self.hardware,
            cached=sorted(h for h in self.held if self._store.has(h)), proof=self._proof(ws),
        )
        self._link = link
        if self._stop.is_set():  # stop() came while connecting
            session.send_bye("going_away", "device stopping")
        try:
            async with asyncio.TaskGroup() as group:
                work = group.create_task(self._work(link), name=f"{self.device_id} work")
                await conn.run()
                work.cancel()
        finally:
            self._link = None
            for cancel in link.cancels.values():
                cancel.set()
            for record in self.history:
                if record.outcome == "pending":
                    record.outcome = "lost"
        return conn.opened.is_set()

    def _on_event(self, link: _Link, event: Any, arrived: float, ready: float) -> None:
        if isinstance(event, Welcome):
            self.sessions += 1
            log.debug("%s: connected to %s", self.device_id, event.coordinator_id)
        elif isinstance(event, Provision):
            self._store.keep(event)
            self.held |= {event.program_sha256, event.shard_sha256}
        elif isinstance(event, Task):
            self.history.append(TaskRecord(event.task_id, event.job_id, event.round, arrived))
            link.cancels[event.task_id] = asyncio.Event()
            link.tasks.put_nowait((event, arrived, ready))
        elif isinstance(event, Cancel):
            cancel = link.cancels.get(event.task_id)
            if cancel is not None:
                cancel.set()
        elif isinstance(event, HeartbeatAck):
            self.heartbeat_rtts.append(arrived - event.echo)
        elif isinstance(event, Error):
            log.info("%s: coordinator reports %s: %s", self.device_id, event.code, event.reason)
        elif isinstance(event, Closed):
            if event.by_peer and event.code in STOP_CODES:
                self.stopped_by = self.stopped_by or f"bye {event.code}: {event.reason}"
                self._stop.set()
                level = logging.INFO if event.code in ("going_away", "normal") else logging.ERROR
                log.log(level, "%s: coordinator said bye %s (%s); stopping", self.device_id, event.code, event.reason)
            else:
                log.warning("%s: session closed: %s (%s)", self.device_id, event.code, event.reason)
        # A Heartbeat needs nothing here: the session has queued its ack.

    async def _work(self, link: _Link) -> None:
        """The device's tasks, one at a time (a phone trains one job at a time)."""
        while True:
            task, arrived, ready = await link.tasks.get()
            record = next(r for r in reversed(self.history) if r.task_id == task.task_id)
            try:
                await self._train(link, task, record, arrived, ready)
            finally:
                link.cancels.pop(task.task_id, None)

    async def _train(self, link: _Link, task: Task, record: TaskRecord, arrived: float, ready: float) -> None:
        session, conn = link.session, link.conn
        loop = asyncio.get_running_loop()
        cancel = link.cancels[task.task_id]
        provision = session.job(task.job_id)
        assert provision is not None  # the session checked the task against its provision
        x, y = self._store.shards[task.shard_sha256]
        # The device model decides this round's fate (Formula 4, drop-out) before training.
        fate = self.model.draw(task.training.epochs, len(y))
        record.target_s = fate.duration_s
        # The coordinator's seed (docs/models.md, "The task generator"); drawn
        # either way, so a task without one leaves the device's other draws as they were.
        own_seed = int(self._train_seeds.integers(2**31))
        seed = own_seed if task.seed is None else task.seed

        def answer_error(code: str, reason: str, outcome: str) -> None:
            record.outcome, record.answered_at = outcome, loop.time()
            with contextlib.suppress(SessionClosed):
                session.send_error(code, reason, task_id=task.task_id)
                conn.flush()

        async def until(seconds: float | None) -> None:
            """Wait until ``seconds`` after the task arrived, or a cancel."""
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if seconds is None else max(0.0, arrived + seconds - loop.time())):
                    await cancel.wait()

        if fate.drops:
            # A lost round: silence until the coordinator gives up (its deadline
            # cancels the task; the grace keeps us from racing its timer), or,
            # with no deadline, an error when the round would have ended.
            if task.deadline_s is not None:
                await until(2 * task.deadline_s + 1.0)
            else:
                await until(fate.duration_s or 0.0)
            if cancel.is_set():
                return answer_error("cancelled", "cancelled by the coordinator", "cancelled")
            return answer_error("task_failed", "dropped out", "error")
        if cancel.is_set():
            return answer_error("cancelled", "cancelled before training", "cancelled")
        if task.deadline_s is not None and loop.time() - arrived > task.deadline_s:
            return answer_error("cancelled", "the deadline passed before training", "cancelled")
        assert self._lane is not None
        record.started_at = loop.time()
        try:
            trained, loaded = await self._lane.train(
                self.runtime, provision.model, task.program_sha256,
                self._store.programs[task.program_sha256], task, x, y, seed,
            )
        except Exception as exc:  # noqa: BLE001 - whatever the trainer raises, the task failed
            log.warning("%s: task %s failed: %r", self.device_id, task.task_id, exc)
            return answer_error("task_failed", f"training failed: {type(exc).__name__}", "error")
        record.trained_at = loop.time()
        if fate.duration_s is not None:
            # Stretch the round to the impersonated phone's time.
            await until(fate.duration_s)
        if cancel.is_set():
            return answer_error("cancelled", "cancelled by the coordinator", "cancelled")
        try:
            ordered = {name: np.asarray(trained.weights[name], dtype=task.weights[name].dtype) for name in task.weights}
        except KeyError as exc:
            return answer_error("task_failed", f"the trainer lost tensor {exc}", "error")
        if not math.isfinite(trained.mean_loss) or not all(np.isfinite(a).all() for a in ordered.values()):
            # Protocol 5.8: never send such weights, nor a loss the result cannot carry.
            return answer_error("diverged", "the loss or weights became NaN or infinite", "error")
        done = loop.time()
        record.download_s = (ready - arrived) + loaded
        record.compute_s = done - ready - loaded
        # The previous result's upload: binary sends since then (the link sends little else).
        upload = conn.binary_send_s if link.results else None
        # The impersonated phone's time is the drawn round, not this machine's training.
        energy = modelled_energy(
            None if self.profile is None else self.profile.power_w,
            record.compute_s if fate.duration_s is None else fate.duration_s,
        )
        try:
            session.send_result(
                task.task_id, weights=ordered, samples=int(trained.samples), mean_loss=float(trained.mean_loss),
                timing=Timing(record.download_s, record.compute_s, upload), device_state=energy,
            )
        except SessionClosed:
            return
        conn.binary_send_s = 0.0
        link.results += 1
        record.outcome, record.answered_at = "result", done
        conn.flush()


# -- fleets of emulated devices in worker processes ----------------------------


@contextlib.asynccontextmanager
async def devices_running(*devices: EmulatedDevice) -> AsyncIterator[None]:
    """Run emulated devices in this event loop for the duration of a block.

    They connect and serve in the background; leaving the block stops them
    and waits until each has closed its session.
    """
    async with asyncio.TaskGroup() as group:
        for device in devices:
            group.create_task(device.run(), name=device.device_id)
        try:
            yield
        finally:
            for device in devices:
                device.stop()


def default_id_prefix() -> str:
    """``emu-<host>``: with the device index, an id that survives an emulator restart."""
    host = socket.gethostname().split(".")[0] or "host"
    return f"emu-{host}"


@dataclass(frozen=True)
class _WorkerConfig:
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

    def alive(self) -> bool:
        return any(p.is_alive() for p in self.processes)

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
    backoff: Backoff = Backoff(),
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
    if count < 1:
        raise UserError(f"--count must be >= 1, got {count}")
    if runtime not in ("executorch", "torch", "batched"):
        raise UserError(f"--runtime must be executorch, torch or batched, got {runtime!r}")
    # The batched runtime trains many devices in one process (the one that would own a GPU).
    default_workers = 1 if runtime == "batched" else os.cpu_count() or 1
    workers = max(1, min(count, workers or default_workers))
    prefix = id_prefix or default_id_prefix()
    ids = [f"{prefix}-{first_index + i}" for i in range(count)]
    chosen = [None if not profiles else profiles[i % len(profiles)] for i in range(count)]
    ctx: Any = context if context is not None else multiprocessing.get_context("spawn")
    stop_event = ctx.Event()
    processes: list[multiprocessing.process.BaseProcess] = []
    assignment = {device: i % workers for i, device in enumerate(ids)}
    for w in range(workers):
        mine = list(range(w, count, workers))
        config = _WorkerConfig(
            url, tuple(ids[i] for i in mine), tuple(first_index + i for i in mine), runtime,
            tuple(chosen[i] for i in mine), dropout, seed, token,
            {ids[i]: secrets[ids[i]] for i in mine if secrets and ids[i] in secrets}, ca, make_trainer, backoff, max_part_bytes,
            log_file, verbose,
        )
        process = ctx.Process(target=_worker_main, args=(config, stop_event), name=f"mjfl-emulator-{w}", daemon=True)
        process.start()
        processes.append(process)
    impersonated = {device: profile for device, profile in zip(ids, chosen) if profile is not None}
    return EmulatedFleet(processes, stop_event, assignment, impersonated)


class WorkerContext(Protocol):
    """Where emulator workers run: what they use of a multiprocessing context."""

    def Event(self) -> Any: ...

    def Process(self, *, target: Any, args: tuple[Any, ...], name: str, daemon: bool) -> Any: ...


def _worker_main(config: _WorkerConfig, stop_event: multiprocessing.synchronize.Event) -> None:
    # Ctrl-C goes to the whole process group; the parent turns it into stop_event.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logs.setup_worker(config.log_file, verbose=config.verbose)
    _raise_open_files_limit()
    asyncio.run(_worker(config, stop_event))


async def _worker(config: _WorkerConfig, stop_event: multiprocessing.synchronize.Event) -> None:
    batched = config.runtime == "batched"
    lane = TrainingLane(config.make_trainer, torch_threads=1, batched=batched)
    # Batched devices train the provision's eager model: on the protocol they are the torch runtime.
    runtime: Runtime = "torch" if batched else config.runtime  # type: ignore[assignment]
    devices = [
        EmulatedDevice(
            config.url, device_id, runtime=runtime, profile=profile, dropout=config.dropout,
            seed=[config.seed, index], token=config.token, secret=config.secrets.get(device_id), ca=config.ca, lane=lane, backoff=config.backoff, max_part_bytes=config.max_part_bytes,
        )
        for device_id, index, profile in zip(config.device_ids, config.indices, config.profiles)
    ]

    parent = os.getppid()

    async def watch() -> None:
        # Stop when asked, and when the process that started us is gone (a
        # coordinator killed with -9 must not leave devices that keep
        # reconnecting under ids its restart will use again).
        while not stop_event.is_set() and os.getppid() == parent:
            await asyncio.sleep(0.1)
        for device in devices:
            device.stop()

    try:
        async with asyncio.TaskGroup() as group:
            watcher = group.create_task(watch(), name="stop watcher")
            async with asyncio.TaskGroup() as running:
                for device in devices:
                    running.create_task(device.run(), name=device.device_id)
            watcher.cancel()
    finally:
        lane.close()


def _raise_open_files_limit() -> None:
    """Many devices in one process need a socket each: lift the soft limit to the hard one."""
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


__all__ = [
    "ArtifactStore",
    "Backoff",
    "EmulatedDevice",
    "EmulatedFleet",
    "Impersonation",
    "TaskRecord",
    "TrainingLane",
    "WorkerContext",
    "default_id_prefix",
    "devices_running",
    "run_emulated_fleet",
]
