"""Where a run's events are kept: each finished round in the run database (and its checkpoint), each profile
refit, and (``FleetRecorder``) each device that came, went or was refused."""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from mjfl.coordinator.engine.events import ProfileRefitted, RoundAggregated, RunEvent, RunStarted
from mjfl.coordinator.engine.fleet import DeviceProfileView
from mjfl.coordinator.remote.registry import ConnectedDevice
from mjfl.coordinator.run.database import RunDatabase
from mjfl.coordinator.storage.checkpoints import Checkpoints, JobCheckpoint
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.records import FleetEvent, RoundRecord
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

    An observer of the engine (``engine/events.py``), which must not block:
    it takes what the round leaves (the weights, a copy of the scheduler's
    state) at once and hands the writing to the run database's own thread
    (``database.py``), which writes the checkpoint (real-time runs; None in
    virtual time) before it commits the round, in round order, so resume is
    exact (``storage/checkpoints.py``). A round that cannot be saved stops the
    run with one ``RunError`` naming the round, where it is kept, and how to
    continue: raised by the next event, or when the run drains its writes.

    In real time, each start of the engine (a run's first, each resume) is
    kept as an anchor of the run clock to the wall clock (``Storage.record_clock``),
    so that the rounds of runs that share a fleet can be drawn on one clock.
    """

    def __init__(self, database: RunDatabase, checkpoints: Checkpoints | None, *, wall_clock: bool = False) -> None:
        self.database = database
        self.checkpoints = checkpoints
        self.wall_clock = wall_clock

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RoundAggregated):
            self._round(event)
        elif isinstance(event, ProfileRefitted):
            refit = event.refit
            self.database.put(lambda storage: storage.record_refit(refit))
        elif isinstance(event, RunStarted) and self.wall_clock:
            run_id, run_s, wall_s = event.run_id, event.at_s, time.time()
            self.database.put(lambda storage: storage.record_clock(run_id, run_s, wall_s))

    def _round(self, event: RoundAggregated) -> None:
        record, choices = event.record, event.choices
        checkpoint = None
        if self.checkpoints is not None:
            # The scheduler goes on learning in place: its state is copied now, as the round left it.
            state = copy.deepcopy(resumable(event.scheduler).state())
            checkpoint = JobCheckpoint(record.round, dict(event.weights), state, event.best_accuracy, event.stopped)
        checkpoints = self.checkpoints

        def save(storage: Storage) -> None:
            try:
                if checkpoints is not None and checkpoint is not None:
                    checkpoints.save(record.job, checkpoint)
                storage.record_round(record, choices)
            except DuplicateRoundError:
                raise
            except (OSError, StorageError) as exc:
                raise _unsaved(record, exc, storage, checkpoints) from None

        self.database.put(save)


def _unsaved(record: RoundRecord, exc: OSError | StorageError, storage: Storage, checkpoints: Checkpoints | None) -> RunError:
    """The one error of a round that could not be saved: the output folder became unwritable or full.

    Round r was not committed, so resume redoes it; rounds before it are all kept.
    """
    if isinstance(exc, OSError) and exc.strerror:
        where = exc.filename or (checkpoints.root if checkpoints is not None else storage.path)
        reason = f"{exc.strerror}: {where}"
    else:
        reason = str(exc)
    return RunError(
        f"cannot save round {record.round} of job {record.job} ({reason}); every round before it is"
        f" saved in {storage.path}: make room or fix the folder's permissions, then continue"
        f" by resuming the run (run {record.run_id})"
    )


class FleetRecorder:
    """The device registry's word on who came, who went and who was refused, as ``FleetEvent``s.

    A listener of the registry (``Membership``): each event is stamped on the
    run's clock (``now``), kept in the run database (``database``, on its own
    thread; None for a profiling session, which records no run) and handed to ``also`` (the live
    dashboard). A fleet event that cannot be saved only warns, and a view
    that fails on one is logged: the run's rounds are what must not be lost,
    and a registry listener must not raise into the server that serves every
    device.
    """

    def __init__(
        self, run_id: str, now: Callable[[], float], members: Membership, *, database: RunDatabase | None = None,
        also: Callable[[FleetEvent, DeviceProfileView | None], None] | None = None,
    ) -> None:
        self.run_id = run_id
        self.now = now
        self.members = members
        self.database = database
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
        if self.database is not None:
            self.database.put(lambda storage: _keep_fleet_event(storage, event))
        if self.also is not None:
            try:
                self.also(event, profile)
            except Exception:  # our bug, in a view: it must not stop the run, nor end a device's connection
                log.exception("the live view failed on a %s event of %s", event.kind, event.device or "a connection")


def _keep_fleet_event(storage: Storage, event: FleetEvent) -> None:
    """One fleet event in the run database; one that cannot be saved only warns (the rounds must not be lost)."""
    try:
        storage.record_fleet_event(event)
    except (OSError, StorageError) as exc:
        log.warning("%s event of %s not saved: %s", event.kind, event.device or "a connection", exc)
