"""Where a run's events are kept: each finished round in the run database (and its checkpoint), each profile
refit, and (``FleetRecorder``) each device that came, went or was refused."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from mjfl.coordinator.engine.events import ProfileRefitted, RoundAggregated, RunEvent
from mjfl.coordinator.engine.fleet import DeviceProfileView
from mjfl.coordinator.remote.registry import ConnectedDevice
from mjfl.coordinator.storage.checkpoints import Checkpoints, JobCheckpoint
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.records import FleetEvent
from mjfl.errors import DuplicateRoundError, RunError, StorageError
from mjfl.ids import DeviceId
from mjfl.schedulers.base import resumable

log = logging.getLogger(__name__)


class Membership(Protocol):
    """Who tells a run that devices come and go (``DeviceRegistry``); listeners run on the event loop."""

    def on_join(self, listener: Callable[[DeviceId], None]) -> None: ...

    def on_leave(self, listener: Callable[[DeviceId, str], None]) -> None: ...

    def on_refuse(self, listener: Callable[[DeviceId | None, str, str], None]) -> None: ...

    def connected(self) -> Mapping[DeviceId, ConnectedDevice]: ...

    def transfer(self, device: DeviceId) -> str | None: ...


class Recorder:
    """Storage's part of the run's events: checkpoint a finished round first, then commit it; keep profile refits.

    An observer of the engine (``engine/events.py``). The checkpoint
    (real-time runs; None in virtual time) is written before the round is
    committed to the database, so resume is exact (``storage/checkpoints.py``).
    A round that cannot be saved stops the run with one ``RunError`` naming
    the round, where it is kept, and how to continue.
    """

    def __init__(self, storage: Storage, checkpoints: Checkpoints | None) -> None:
        self.storage = storage
        self.checkpoints = checkpoints

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RoundAggregated):
            self._round(event)
        elif isinstance(event, ProfileRefitted):
            self.storage.record_refit(event.refit)

    def _round(self, event: RoundAggregated) -> None:
        record = event.record
        try:
            if self.checkpoints is not None:
                state = resumable(event.scheduler).state()
                self.checkpoints.save(
                    event.job, JobCheckpoint(record.round, dict(event.weights), state, event.best_accuracy, event.stopped)
                )
            self.storage.record_round(record, event.choices)
        except (OSError, StorageError) as exc:
            # The output folder became unwritable or full: stop with one clear line.
            # Round r was not committed, so resume redoes it; rounds before it are all kept.
            if isinstance(exc, DuplicateRoundError):
                raise
            if isinstance(exc, OSError) and exc.strerror:
                where = exc.filename or (self.checkpoints.root if self.checkpoints is not None else self.storage.path)
                reason = f"{exc.strerror}: {where}"
            else:
                reason = str(exc)
            raise RunError(
                f"cannot save round {record.round} of job {record.job} ({reason}); every round before it is"
                f" saved in {self.storage.path}: make room or fix the folder's permissions, then continue"
                f" with --resume (run {record.run_id})"
            ) from None


class FleetRecorder:
    """The device registry's word on who came, who went and who was refused, as ``FleetEvent``s.

    A listener of the registry (``Membership``): each event is stamped on the
    run's clock (``now``), kept in the run database (``storage``; None for a
    profiling session, which records no run) and handed to ``also`` (the live
    dashboard). A fleet event that cannot be saved only warns, and a view
    that fails on one is logged: the run's rounds are what must not be lost,
    and a registry listener must not raise into the server that serves every
    device.
    """

    def __init__(
        self, run_id: str, now: Callable[[], float], members: Membership, *, storage: Storage | None = None,
        also: Callable[[FleetEvent, DeviceProfileView | None], None] | None = None,
    ) -> None:
        self.run_id = run_id
        self.now = now
        self.members = members
        self.storage = storage
        self.also = also
        members.on_join(self.joined)
        members.on_leave(self.left)
        members.on_refuse(self.refused)

    def present(self) -> None:
        """A ``joined`` event for each device connected before the recorder listened (the fleet a run starts with)."""
        for device in self.members.connected():
            self.joined(device)

    def joined(self, device: DeviceId) -> None:
        info = self.members.connected().get(device)
        hardware = None if info is None else dict(info.hello.hardware)
        where = "" if info is None or not info.address else f"from {info.address}"
        self._keep(FleetEvent(self.run_id, self.now(), "joined", device, where, hardware),
                   None if info is None else info.profile)

    def left(self, device: DeviceId, reason: str) -> None:
        self._keep(FleetEvent(self.run_id, self.now(), "left", device, reason))

    def refused(self, device: DeviceId | None, address: str, reason: str) -> None:
        self._keep(FleetEvent(self.run_id, self.now(), "refused", device, f"{reason} (from {address})"))

    def _keep(self, event: FleetEvent, profile: DeviceProfileView | None = None) -> None:
        if self.storage is not None:
            try:
                self.storage.record_fleet_event(event)
            except (OSError, StorageError) as exc:
                log.warning("%s event of %s not saved: %s", event.kind, event.device or "a connection", exc)
        if self.also is not None:
            try:
                self.also(event, profile)
            except Exception:  # our bug, in a view: it must not stop the run, nor end a device's connection
                log.exception("the live view failed on a %s event of %s", event.kind, event.device or "a connection")
