"""The lab's runs: submitted, queued, admitted when they can run, run side by side on the lab's fleet, ended.

``LabRuns`` owns every run's task (in the service's task group) and moves
its state forward in the lab's database (``store.py``):

* **submit**: a researcher's config is checked at once (``admission.py``);
  a refused one leaves nothing behind. Otherwise it is queued, in
  submission order, with why it waits.
* **admit**: whenever something changes (a submission, a run's end, a
  device that comes or goes, a cancel), queued runs are admitted in order
  while a place is free (``limits.max_running``) and the devices a run
  needs are connected. A run that must wait says why in its ``reason``.
* **run**: an admitted run trains through the run driver, exactly as
  `mjfl testbed run` would, in its own folder (``runs/<run>``), on the
  lab's devices through its own views (``fleet.py``, ``LabDevices``), its
  log lines in its folder's ``mjfl.log``. Every running run's engine shares
  the lab's ``Occupancy``: one job per device at a time, each running run's
  share of the devices while others are short (``FairShare``).
* **end**: completed (with whether every job reached its target), failed
  (why), cancelled (by its owner or an admin, in any state; again is the
  same answer), or abandoned (its config no longer loads where it did).

A service that stops (Ctrl-C, SIGTERM, a crash) leaves running runs
``running``: ``reconcile``, when it starts again, resumes each from its
checkpoints, without losing or repeating a round (the run driver's resume).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mjfl.coordinator.engine.clock import RealClock
from mjfl.coordinator.engine.occupancy import Occupancy
from mjfl.coordinator.lab.admission import Submission, check, check_data, placed
from mjfl.coordinator.lab.config import LabConfig
from mjfl.coordinator.lab.fleet import Lobby, RunFleet
from mjfl.coordinator.lab.runlogs import RunLogs
from mjfl.coordinator.lab.store import LabRun, LabStore, RunState
from mjfl.coordinator.remote.fleet import RemoteFleet
from mjfl.coordinator.results.targets import job_rounds
from mjfl.coordinator.run.driver import Driver, Output, ReadyFleet
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.records import RunMode
from mjfl.errors import MjflError, Refusal
from mjfl.ids import DeviceId

log = logging.getLogger(__name__)

RUNS = "runs"  # LAB_DIR's folder of run folders


@dataclass
class LabFleet:
    """The lab's devices, as every run shares them: the registry's lobby, the remote fleet, the occupancy.

    Under the ``reserved`` policy (``limits.share``) a run holds its own
    devices, as many as it needs, for its life (``reserve``/``release``);
    under ``equal`` every run plans over every device.
    """

    lobby: Lobby
    remote: RemoteFleet
    occupancy: Occupancy
    device_wait_s: float
    policy: str = "equal"
    reserved: dict[str, list[DeviceId]] = field(default_factory=dict)
    apps: Mapping[str, str | None] = field(default_factory=dict)  # the attached phones' app builds (``Phones.apps``)

    def connected(self) -> int:
        return len(self.lobby.registry.connected())

    def unreserved(self) -> list[DeviceId]:
        """Connected devices no run holds, in a stable order."""
        held = {d for devices in self.reserved.values() for d in devices}
        return sorted(d for d in self.lobby.registry.connected() if d not in held)

    def reserve(self, run_id: str, needs: int) -> list[DeviceId] | None:
        """``needs`` devices of its own for ``run_id`` (None: not enough are free); only under ``reserved``."""
        if self.policy != "reserved":
            return None
        free = self.unreserved()
        if len(free) < needs:
            return None
        self.reserved[run_id] = free[:needs]
        return self.reserved[run_id]

    def release(self, run_id: str) -> None:
        self.reserved.pop(run_id, None)

    def devices(self) -> list[dict[str, Any]]:
        """The lobby as the API shows it: each connected device, since when (wall clock), and what it serves."""
        to_wall = time.time() - asyncio.get_running_loop().time()
        rows = []
        for device, info in self.lobby.registry.connected().items():
            holder = self.occupancy.busy.get(device)
            rows.append({
                "device": device, "connected_at": info.connected_at + to_wall, "address": info.address,
                "serving": None if holder is None else {"run": holder[0], "job": holder[1]},
            })
        return rows


class LabDevices:
    """One run's devices in the lab (the run driver's ``Devices``): every device of the lab, shared."""

    mode: RunMode = "real"
    kind = "lab"

    def __init__(self, fleet: LabFleet, run_id: str, needs: int) -> None:
        self.lab = fleet
        self.run_id = run_id
        self.needs = needs

    def run(self, main: Any) -> Any:
        raise AssertionError("a lab run goes on the service's event loop (Driver.train_one)")

    @contextlib.asynccontextmanager
    async def fleet(self) -> AsyncIterator[ReadyFleet]:
        registry = self.lab.lobby.registry
        await registry.wait_until(lambda connected: len(connected) >= self.needs, None, needed=self.needs)
        if self.lab.policy == "reserved" and self.run_id not in self.lab.reserved:  # resumed after a restart
            await registry.wait_until(lambda _: self.lab.reserve(self.run_id, self.needs) is not None, None)
        reserved = self.lab.reserved.get(self.run_id) if self.lab.policy == "reserved" else None
        members, view = self.lab.lobby.members(), RunFleet(self.lab.remote, self.run_id, reserved)
        try:
            connected = registry.connected()
            present = sorted(connected) if reserved is None else sorted(d for d in reserved if d in connected)
            yield ReadyFleet(
                view, RealClock(), present, device_wait_s=self.lab.device_wait_s,
                hardware={d: dict(c.hello.hardware) for d, c in connected.items()},
                members=members, occupancy=self.lab.occupancy, apps=self.lab.apps,
            )
        finally:
            members.close()
            view.close()


class LabRuns:
    """Every run of the lab, from submission to its end (see the module docstring)."""

    def __init__(
        self, store: LabStore, lab: LabConfig, out_dir: Path, fleet: LabFleet, logs: RunLogs,
        spawn: Callable[..., asyncio.Task[None]], said: Callable[[LabRun], None] = lambda run: None,
        keeps: Callable[[Path], contextlib.AbstractContextManager[object]] = lambda folder: contextlib.nullcontext(),
    ) -> None:
        self.store = store
        self.lab = lab
        self.out_dir = out_dir
        self.fleet = fleet
        self.logs = logs
        self.spawn = spawn  # starts a task in the service's task group
        self.said = said  # told of every run's change of state
        self.keeps = keeps  # what else a run's folder gets while the run runs (its phones' log lines)
        self.draining = False
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._cancelled: set[str] = set()
        self._changed = asyncio.Event()
        self._idle = asyncio.Event()  # set whenever a run ends or the lab starts draining

    def folder(self, run_id: str) -> Path:
        return self.out_dir / RUNS / run_id

    def running(self) -> int:
        """Runs admitted and not yet ended (each holds a place among ``limits.max_running``)."""
        return len(self._tasks)

    # -- what researchers do ----------------------------------------------------

    async def submit(self, owner: str, text: str, key: str | None) -> tuple[LabRun, bool]:
        """Check and queue a run (or return the run ``key`` names already); a Refusal says why not.

        The config is checked at once (``admission.check``), then its data
        sets are read (``check_data``, off the event loop): a run the lab could
        never start is refused, not queued.
        """
        if key is not None and (known := self._keyed(owner, key)) is not None:
            return known, False
        self._open_to(owner)
        submission = check(text, self.lab)
        await asyncio.to_thread(check_data, submission.config)
        self._open_to(owner)  # again: the lab may have started draining while the data was read
        run, new = self.store.submit(owner, method=submission.method, needs=submission.needs, config_toml=text, key=key)
        self.folder(run.run_id).mkdir(parents=True, exist_ok=True)
        (self.folder(run.run_id) / "config.toml").write_text(text, encoding="utf-8")
        self.changed()
        return run, new

    def _open_to(self, owner: str) -> None:
        """Whether ``owner`` may queue a run now: the lab not draining, the researcher under the queue's limit."""
        if self.draining:
            raise Refusal("draining", "the lab is draining: it admits no new run", status=503)
        queued = sum(1 for r in self.store.runs("queued") if r.owner == owner)
        if queued >= self.lab.limits.max_queued_per_researcher:
            raise Refusal(
                "too_many_queued", f"{owner} has {queued} runs queued, the lab's limit"
                " (limits.max_queued_per_researcher); wait for one to start or cancel one", status=429,
            )

    def cancel(self, run_id: str) -> LabRun:
        """Cancel a run in any state: queued ones at once, running ones once their engine has stopped."""
        run = self.store.run(run_id)
        assert run is not None
        if run.final:
            return run
        task = self._tasks.get(run_id)
        if task is None:
            return self._move(run_id, "cancelled", "cancelled before it started")
        self._cancelled.add(run_id)
        task.cancel()
        return run

    async def ended(self, run_id: str) -> LabRun:
        """Wait for a run's task to end (its state then final, or still running when the service stops)."""
        task = self._tasks.get(run_id)
        if task is not None:
            await asyncio.wait([task])
        run = self.store.run(run_id)
        assert run is not None
        return run

    def _move(self, run_id: str, state: RunState, reason: str | None = None, *, reached: bool | None = None) -> LabRun:
        run = self.store.move(run_id, state, reason, reached=reached)
        self.said(run)
        return run

    def _keyed(self, owner: str, key: str) -> LabRun | None:
        return next((r for r in self.store.runs() if r.owner == owner and r.submit_key == key), None)

    # -- admission --------------------------------------------------------------

    def changed(self) -> None:
        """Something that may let a queued run in happened: look again."""
        self._changed.set()

    def drain(self) -> None:
        """Admit no new run; the runs going finish (the service exits once none is left, ``drained``)."""
        self.draining = True
        self._idle.set()
        self.changed()

    async def drained(self) -> None:
        """Wait until the lab drains and no run is left going."""
        while not (self.draining and not self._tasks):
            self._idle.clear()
            await self._idle.wait()

    async def keep(self) -> None:
        """Admit queued runs whenever something changes, until cancelled."""
        while True:
            self._admit()
            await self._changed.wait()
            self._changed.clear()

    def _admit(self) -> None:
        # Counted once a pass: counting a thousand connections for each of hundreds of queued runs was most of a
        # submit's time (mjfl bench serve). A pass admits none while devices are short of every run's needs.
        connected = self.fleet.connected()
        for position, run in enumerate(self.store.runs("queued"), start=1):
            reason = self._wait_reason(run, connected)
            if reason is None:
                self._move(run.run_id, "admitted")
                self._start(run, resume=False)
            elif reason != run.reason:
                self.store.note(run.run_id, reason)
            log.debug("run %s queued at %d: %s", run.run_id, position, reason)

    def _wait_reason(self, run: LabRun, connected: int) -> str | None:
        """Why a queued run cannot start now, ``connected`` devices connected (None: it can)."""
        if self.draining:
            return "the lab is draining: it admits no new run"
        if self.running() >= self.lab.limits.max_running:
            return (
                f"waiting for a place: the lab runs at most {_runs(self.lab.limits.max_running)} at once"
                f" (limits.max_running), {self.running()} running now"
            )
        if connected < run.needs:
            return f"waiting for devices: needs {run.needs} connected, {connected} are"
        if self.fleet.policy == "reserved" and self.fleet.reserve(run.run_id, run.needs) is None:
            return f"waiting for devices: needs {run.needs} of its own (limits.share = \"reserved\"), {len(self.fleet.unreserved())} are free"
        return None

    def reconcile(self) -> list[LabRun]:
        """After a restart, before any device is answered: runs admitted or running resume (returned).

        Under ``reserved``, a resumed run takes its devices once they connect (``LabDevices``).
        """
        resumed = self.store.runs("admitted", "running")
        for run in resumed:
            self._start(run, resume=self._recorded(run.run_id))
        return resumed

    # -- one run ---------------------------------------------------------------

    def _start(self, run: LabRun, *, resume: bool) -> None:
        task = self.spawn(self._run(run, resume=resume), name=f"run {run.run_id}")
        self._tasks[run.run_id] = task
        task.add_done_callback(lambda _: self._ended(run.run_id))

    def _ended(self, run_id: str) -> None:
        self._tasks.pop(run_id, None)
        self.fleet.release(run_id)
        self._cancelled.discard(run_id)
        give_back_free_memory()
        self._idle.set()
        self.changed()

    async def _run(self, run: LabRun, *, resume: bool) -> None:
        """The run, from admitted to its end; never raises but to be cancelled (the service's task group goes on)."""
        folder = self.folder(run.run_id)
        with self.logs.of(run.run_id, folder) as console:
            try:
                submission = self._loaded(run)
                if submission is None:
                    return
                if run.state != "running":
                    self._move(run.run_id, "running")
                output = Output(folder, console, live=False, log_here=False)
                driver = Driver(placed(submission, folder), output, config_text=run.config_toml)
                devices = LabDevices(self.fleet, run.run_id, submission.needs)
                with self.keeps(folder):  # ended before the run's final state is said
                    await driver.train_one(submission.method, devices, run_id=run.run_id, resume=resume)
                reached = self._targets_reached(folder, run.run_id)
                why = "every job reached its target" if reached else "a job stopped short of its target"
                self._move(run.run_id, "completed", why, reached=reached)
            except asyncio.CancelledError:
                if run.run_id in self._cancelled:  # by a researcher; else the service stops and it resumes later
                    self._move(run.run_id, "cancelled", "cancelled while it ran; its rounds so far are kept")
                raise
            except MjflError as exc:
                self._move(run.run_id, "failed", str(exc))
            except Exception as exc:  # one run's bug must not end the lab's other runs
                log.exception("run %s failed", run.run_id)
                self._move(run.run_id, "failed", f"internal error: {type(exc).__name__}: {exc} (see lab.log)")

    def _loaded(self, run: LabRun) -> Submission | None:
        """The run's config as checked again now; a run whose config no longer loads here is abandoned."""
        try:
            return check(run.config_toml, self.lab)
        except Refusal as exc:
            self._move(run.run_id, "abandoned", f"its config no longer loads in this lab: {exc.message}")
            return None

    def _recorded(self, run_id: str) -> bool:
        """Whether the run's folder records a run to resume (a crash may come before its first record)."""
        database = self.folder(run_id) / "mjfl.db"
        if not database.is_file():
            return False
        with Storage(database) as storage:
            return any(info.run_id == run_id and status != "finished" for info, status in storage.runs())

    @staticmethod
    def _targets_reached(folder: Path, run_id: str) -> bool:
        with Storage(folder / "mjfl.db") as storage:
            rounds = storage.rounds(run_id)
            return all(job_rounds(job, rounds).reached_at is not None for job in storage.jobs(run_id))


def give_back_free_memory() -> None:
    """Hand the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere it does nothing).

    What a run allocates for its life (its data, programs, evaluations, plots) is freed when it ends, but glibc
    keeps freed pages inside its arenas: `mjfl bench serve`'s service grew from 628 to 695 MiB between its 10th
    and 100th tiny run with no object of an ended run left (gc and tracemalloc: under 2 KiB a run). Collected
    and trimmed after each run, it held 602 MiB after 10 runs and 605 after 100 (trimmed without the collection,
    617 and 685: the run's cycles were freed after the trim). Once a run, a full collection (0.1-0.3 s) and a trim (ms).
    """
    trim = _malloc_trim()
    if trim is not None:
        gc.collect()  # the ended run's reference cycles first, or what they hold is freed after the trim
        trim(0)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name is not None else None
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to hand back this way
        return None


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"
