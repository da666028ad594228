"""One emulated device: its connection to the coordinator, its session, its reconnects and its tasks.

Stopping. ``stop()`` says bye going_away and ends ``run()``; so does the
coordinator's ``bye going_away`` (its shutdown, or a newer connection with
our id) or ``normal``, and a refusal (``unauthorized``, ``unsupported_version``).
Any other end (a lost connection, a protocol error, a heartbeat timeout)
is followed by a reconnect after ``Backoff.delay``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import platform
import socket
import ssl
from collections import deque
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from mjfl import seeds
from mjfl.device.connection import Connection
from mjfl.device.emulated.device_model import DeviceModel, ModelName, TrainerFactory
from mjfl.device.emulated.emulator.artifacts import PROCESS_STORE, ArtifactStore
from mjfl.device.emulated.emulator.backoff import DEFAULT_BACKOFF, Backoff
from mjfl.device.emulated.emulator.lane import TrainingLane
from mjfl.device.emulated.emulator.task import (
    Link,
    TaskEnded,
    TaskRecord,
    TaskReply,
    result_weights,
)
from mjfl.device.protocol import (
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
    Welcome,
)
from mjfl.device.protocol.credentials import NONCE_HEADER, hello_proof, is_nonce
from mjfl.device.tls import client_context
from mjfl.errors import UserError
from mjfl.jobs.base import TrainResult
from mjfl.seeds import Purpose

__all__ = ["REFUSAL_CODES", "STOP_CODES", "EmulatedDevice", "Impersonation", "devices_running"]

log = logging.getLogger(__name__)

REFUSAL_CODES = frozenset({"unauthorized", "unsupported_version"})
"""Bye codes by which the coordinator refuses a device: it would refuse it again."""
STOP_CODES = frozenset({"going_away", "normal"}) | REFUSAL_CODES
"""Bye codes from the coordinator after which reconnecting is pointless or unwanted."""


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
        seed: int = 0,
        token: str = "",
        secret: str | None = None,
        ca: Path | None = None,
        lane: TrainingLane | None = None,
        make_trainer: TrainerFactory | None = None,
        store: ArtifactStore | None = None,
        backoff: Backoff = DEFAULT_BACKOFF,
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
        self._store = store if store is not None else PROCESS_STORE
        self._seed_streams(seed, dropout)
        self.hardware = self._hardware(hardware)
        self.held: set[str] = set()
        """sha256 of the artifacts this device was given (listed in its hello)."""
        self.history: list[TaskRecord] = []
        self.sessions = 0  # sessions that got a welcome
        self.delays: list[float] = []  # every reconnect delay, in order
        self.heartbeat_rtts: deque[float] = deque(maxlen=10_000)  # of its own heartbeats, seconds
        self.stopped_by: str | None = None  # why run() ended
        self.refusal: str | None = None  # the coordinator's bye when it refused us (REFUSAL_CODES)
        self._stop = asyncio.Event()
        self._link: Link | None = None

    def _seed_streams(self, seed: int, dropout: float) -> None:
        """Three streams of ``seed``: the device model's round draws, the training seeds, the backoff jitter."""
        streams = [seeds.stream(seed, p) for p in (Purpose.ROUND_TIMES, Purpose.OWN_TASKS, Purpose.BACKOFF)]
        profile = self.profile
        self.model = DeviceModel(
            profile.a if profile is not None else None, profile.mu if profile is not None else None,
            dropout=dropout, rng=streams[0],
        )
        self._train_seeds = streams[1]
        self._backoff_rng = streams[2]

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
                welcomed = await self._connect_and_serve()
                if self._stop.is_set():
                    break
                attempt = 0 if welcomed else attempt + 1
                await self._wait_to_reconnect(attempt)
        finally:
            if own_lane:
                self._lane.close()
                self._lane = None

    async def _connect_and_serve(self) -> bool:
        """One connection, served until it ends; True if the coordinator welcomed us."""
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
                return await self._serve(ws)
        except InvalidURI as exc:
            raise UserError(f"coordinator URL {self.url}: {exc}") from None
        except ssl.SSLCertVerificationError as exc:
            # Not our coordinator, or the wrong --ca: say so, and keep trying.
            log.warning("%s: %s is not trusted: %s", self.device_id, self.url, exc.verify_message)
        except (OSError, TimeoutError, InvalidHandshake, ConnectionClosed) as exc:
            log.debug("%s: connection to %s failed: %r", self.device_id, self.url, exc)
        return False

    async def _wait_to_reconnect(self, attempt: int) -> None:
        delay = self.backoff.delay(attempt, self._backoff_rng)
        self.delays.append(delay)
        log.debug("%s: reconnecting in %.2f s", self.device_id, delay)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._stop.wait()

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
        link: Link
        conn = Connection(
            ws, session, name=self.device_id, on_event=lambda event, arrived, ready: self._on_event(link, event, arrived, ready),
            open_timeout=self.open_timeout, open_timeout_reason="no welcome", close_timeout=self.close_timeout,
        )
        link = Link(conn)
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

    def _on_event(self, link: Link, event: Any, arrived: float, ready: float) -> None:
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
            self._on_closed(event)
        # A Heartbeat needs nothing here: the session has queued its ack.

    def _on_closed(self, event: Closed) -> None:
        if not (event.by_peer and event.code in STOP_CODES):
            log.warning("%s: session closed: %s (%s)", self.device_id, event.code, event.reason)
            return
        bye = f"bye {event.code}: {event.reason}"
        self.stopped_by = self.stopped_by or bye
        if event.code in REFUSAL_CODES:
            self.refusal = bye
        self._stop.set()
        level = logging.INFO if event.code in ("going_away", "normal") else logging.ERROR
        log.log(level, "%s: coordinator said bye %s (%s); stopping", self.device_id, event.code, event.reason)

    # -- tasks ------------------------------------------------------------------

    async def _work(self, link: Link) -> None:
        """The device's tasks, one at a time (a phone trains one job at a time)."""
        while True:
            task, arrived, ready = await link.tasks.get()
            record = next(r for r in reversed(self.history) if r.task_id == task.task_id)
            try:
                await self._answer(TaskReply(link, task, record, arrived, ready))
            finally:
                link.cancels.pop(task.task_id, None)

    async def _answer(self, reply: TaskReply) -> None:
        """One task: draw its fate, train it, take the impersonated phone's time, answer (protocol.md 5.4-5.8)."""
        task = reply.task
        provision = reply.link.session.job(task.job_id)
        assert provision is not None  # the session checked the task against its provision
        x, y = self._store.shards[task.shard_sha256]
        # The device model decides this round's fate (Formula 4, drop-out) before training.
        fate = self.model.draw(task.training.epochs, len(y))
        reply.record.target_s = fate.duration_s
        seed = self._task_seed(task)
        try:
            if fate.drops:
                await reply.drop_out(fate.duration_s)
            reply.check_in_time()
            trained, loaded = await self._train(reply, provision.model, x, y, seed)
            if fate.duration_s is not None:
                await reply.wait_until(fate.duration_s)  # stretch the round to the impersonated phone's time
            reply.check_cancel()
            weights = result_weights(task, trained)
        except TaskEnded as ended:
            reply.answer_error(ended)
            return
        power_w = None if self.profile is None else self.profile.power_w
        reply.answer_result(weights, trained, loaded, power_w=power_w, round_s=fate.duration_s)
        # A phone's app logs each task it trains; so does the device it stands in for (its log, the device log).
        log.info(
            "%s: trained %s round %d: %d samples x %d epochs, mean loss %.4f, %.2f s of compute", self.device_id,
            task.job_id, task.round, trained.samples, task.epochs, trained.mean_loss, trained.compute_s,
        )

    def _task_seed(self, task: Task) -> int:
        # The coordinator's seed (docs/models.md, "The task generator"); drawn
        # either way, so a task without one leaves the device's other draws as they were.
        own_seed = int(self._train_seeds.integers(2**31))
        return own_seed if task.seed is None else task.seed

    async def _train(
        self, reply: TaskReply, model: ModelName, x: np.ndarray, y: np.ndarray, seed: int
    ) -> tuple[TrainResult, float]:
        """Train on the lane: the result and the seconds spent loading the trainer; ``TaskEnded`` if it failed."""
        task = reply.task
        assert self._lane is not None
        reply.record.started_at = reply.now()
        try:
            trained = await self._lane.train(
                self.runtime, model, task.program_sha256, self._store.programs[task.program_sha256], task, x, y, seed,
            )
        except Exception as exc:  # noqa: BLE001 - whatever the trainer raises, the task failed
            log.warning("%s: task %s failed: %r", self.device_id, task.task_id, exc)
            raise TaskEnded("task_failed", f"training failed: {type(exc).__name__}", "error") from None
        reply.record.trained_at = reply.now()
        return trained


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
