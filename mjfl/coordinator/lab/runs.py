"""The lab's runs: submitted, queued, admitted when they can run, run side by side on the lab's fleet, ended.

``LabRuns`` owns every run's task (in the service's task group) and moves
its state forward in the lab's database (``store.py``):

* **submit**: a researcher's config is checked at once (``admission.py``);
  a refused one leaves nothing behind. Otherwise it is queued, in
  submission order, with why it waits.
* **admit**: whenever something changes (a submission, a run's end, a
  device that comes or goes, a cancel), queued runs are admitted in order
  while a place is free (``limits.max_running``), the devices a run needs
  are connected, and (``equal``) the fleet holds the smallest plan of its
  jobs beside every running run's (``sharing.py``). A run that must wait
  says why in its ``reason``.
* **run**: an admitted run trains through the run driver, exactly as
  `mjfl testbed run` would, in its own folder (``runs/<run>``), on the
  lab's devices through its own views (``fleet.py``, ``LabDevices``), its
  log lines in its folder's ``mjfl.log`` (one a round of each job, and why
  it waits when it waits). Every running run's engine shares the lab's
  ``Occupancy``: one job per device at a time, each running run's share of
  the devices while others wait (``sharing.py``). A running run whose jobs
  wait for devices says so in its ``reason``. Its preparation and report
  run in the service's child process (``work``), its database on a thread
  of its own: nothing of a run blocks the loop that carries the others.
* **end**: completed (with whether every job reached its target, as the
  run's engine decided), failed (why, also the last line of its log), cancelled (by its owner or an admin, in any state; again is the
  same answer), or abandoned (its config no longer loads where it did).

A service that stops (Ctrl-C, SIGTERM, a crash) leaves running runs
``running``: ``reconcile``, when it starts again, resumes each from its
checkpoints, without losing or repeating a round (the run driver's resume).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor
from pathlib import Path

from rich.console import Console

from mjfl.coordinator.engine.events import JobWaiting, RoundAggregated, RunEvent, RunStarted
from mjfl.coordinator.lab.admission import CODE, Submission, check, check_data, keep_code, placed
from mjfl.coordinator.lab.config import LabConfig
from mjfl.coordinator.lab.fleet import LabDevices, LabFleet
from mjfl.coordinator.lab.memory import give_back_free_memory
from mjfl.coordinator.lab.runlogs import RunLogs
from mjfl.coordinator.lab.sandbox import CodeLimits, Sandbox
from mjfl.coordinator.lab.sharing import RunNeeds, run_needs
from mjfl.coordinator.lab.store import LabRun, LabStore, RunState
from mjfl.coordinator.run.driver import Driver, Output
from mjfl.coordinator.run.preparation import PROGRAM_CACHE, validate_models
from mjfl.coordinator.storage.database import Storage
from mjfl.errors import Refusal, ours
from mjfl.ids import JobId

log = logging.getLogger(__name__)

RUNS = "runs"  # LAB_DIR's folder of run folders
INCOMING = "incoming"  # LAB_DIR's folder of the files of submissions being checked
# Models of researchers' own checked at once, each in a child that imports torch (some 400 MB): a burst of
# submissions waits its turn here rather than filling the lab's memory.
CODE_CHECKS_AT_ONCE = 2


class LabRuns:
    """Every run of the lab, from submission to its end (see the module docstring)."""

    def __init__(
        self, store: LabStore, lab: LabConfig, out_dir: Path, fleet: LabFleet, logs: RunLogs,
        spawn: Callable[..., asyncio.Task[None]], said: Callable[[LabRun], None] = lambda run: None,
        keeps: Callable[[Path], contextlib.AbstractContextManager[object]] = lambda folder: contextlib.nullcontext(),
        *, work: Executor | None = None, program_cache: Path = PROGRAM_CACHE,
        sandbox: Callable[[CodeLimits, str], Sandbox] = lambda limits, what: Sandbox(limits, what=what),
    ) -> None:
        self.store = store
        self.lab = lab
        self.out_dir = out_dir
        self.fleet = fleet
        self.logs = logs
        self.spawn = spawn  # starts a task in the service's task group
        self.said = said  # told of every run's change of state
        self.keeps = keeps  # what else a run's folder gets while the run runs (its phones' log lines)
        self.work = work  # where runs prepare and report (the service's child process; None: a thread)
        self.program_cache = program_cache
        self.sandbox = sandbox  # a bounded child for a researcher's own model (sandbox.py): its check, its run
        self.draining = False
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._cancelled: set[str] = set()
        self._changed = asyncio.Event()
        self._idle = asyncio.Event()  # set whenever a run ends or the lab starts draining
        self._checking = asyncio.Semaphore(CODE_CHECKS_AT_ONCE)

    def folder(self, run_id: str) -> Path:
        return self.out_dir / RUNS / run_id

    def running(self) -> int:
        """Runs admitted and not yet ended (each holds a place among ``limits.max_running``)."""
        return len(self._tasks)

    # -- what researchers do ----------------------------------------------------

    async def submit(
        self, owner: str, text: str, key: str | None, files: dict[str, bytes] | None = None, *, admin: bool = False,
    ) -> tuple[LabRun, bool]:
        """Check and queue a run (or return the run ``key`` names already); a Refusal says why not.

        The config is checked at once (``admission.check``), then its data
        sets are read (``check_data``, off the event loop): a run the lab could
        never start is refused, not queued. A model of the researcher's own
        (sent in ``files``) is then imported, built and converted in a bounded
        child of its own (``sandbox.py``), and refused with its reason when it
        fails or goes past a limit. A queued run's files are kept verbatim in
        its folder (``code/``, with ``code.json``).
        """
        if key is not None and (known := self._keyed(owner, key)) is not None:
            return known, False
        self._open_to(owner)
        with self._staged(files or {}) as code:
            submission = check(text, self.lab, code=code, admin=admin)
            await asyncio.to_thread(check_data, submission.config)
            if submission.own_code:
                await self._check_code(submission, f"{owner}'s model")
            self._open_to(owner)  # again: the lab may have started draining while the data was read
            run, new = self.store.submit(owner, method=submission.method, needs=submission.needs, config_toml=text, key=key)
            folder = self.folder(run.run_id)
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "config.toml").write_text(text, encoding="utf-8")
            if files:
                await asyncio.to_thread(keep_code, files, folder)
        self.changed()
        return run, new

    @contextlib.contextmanager
    def _staged(self, files: dict[str, bytes]) -> Iterator[Path | None]:
        """A folder of LAB_DIR holding ``files`` while they are checked, gone after (None: no file was sent)."""
        if not files:
            yield None
            return
        incoming = self.out_dir / INCOMING
        incoming.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=incoming))
        try:
            keep_code(files, staging)
            yield staging / CODE
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    async def _check_code(self, submission: Submission, what: str) -> None:
        """The quick model check (``validate_models``) of a submission's own model, in a bounded child (at most
        ``CODE_CHECKS_AT_ONCE`` at a time)."""
        async with self._checking:
            sandbox = await asyncio.to_thread(self.sandbox, self.lab.limits.code(checking=True), what)
            try:
                await asyncio.to_thread(sandbox.call, validate_models, submission.config)
            finally:
                await asyncio.to_thread(sandbox.shutdown)

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
        if self.fleet.share is not None:
            return self.fleet.share.room(self._needs(run, connected))
        if self.fleet.policy == "reserved" and self.fleet.reserve(run.run_id, run.needs) is None:
            return f"waiting for devices: needs {run.needs} of its own (limits.share = \"reserved\"), {len(self.fleet.unreserved())} are free"
        return None

    def _needs(self, run: LabRun, connected: int) -> RunNeeds:
        """What ``run``'s jobs ask of the shared fleet (``sharing.py``), from its config as the lab loads it."""
        config = self._checked(run).config
        return run_needs(config.scheduler.min_plan, [job.fraction for job in config.jobs], max(connected, run.needs))

    async def reconcile(self) -> list[LabRun]:
        """After a restart, before any device is answered: runs admitted or running resume (returned).

        Under ``reserved``, a resumed run takes its devices once they connect (``LabDevices``).
        """
        resumed = self.store.runs("admitted", "running")
        for run in resumed:
            self._start(run, resume=await asyncio.to_thread(self._recorded, run.run_id))
        return resumed

    # -- one run ---------------------------------------------------------------

    def _start(self, run: LabRun, *, resume: bool) -> None:
        if self.fleet.share is not None:
            try:
                needs = self._needs(run, self.fleet.connected())
            except Refusal:  # its config no longer loads: it is abandoned as it starts (``_loaded``)
                needs = RunNeeds(1, 1)
            self.fleet.share.admit(run.run_id, needs)
        task = self.spawn(self._run(run, resume=resume), name=f"run {run.run_id}")
        self._tasks[run.run_id] = task
        task.add_done_callback(lambda _: self._ended(run.run_id))

    def _ended(self, run_id: str) -> None:
        self._tasks.pop(run_id, None)
        self.fleet.release(run_id)
        if self.fleet.share is not None:
            self.fleet.share.end(run_id, self.fleet.occupancy)
        self._cancelled.discard(run_id)
        self.spawn(give_back_free_memory(), name=f"memory after {run_id}")
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
                output = Output(folder, console, live=False, log_here=False, program_cache=self.program_cache)
                driver = Driver(placed(submission, folder), output, config_text=run.config_toml)
                follower = RunFollower(self, run.run_id)
                devices = LabDevices(self.fleet, run.run_id, submission.needs, [follower], waiting=follower.waiting)
                async with self._code_of(run, submission) as sandbox:
                    with self.keeps(folder):  # ended before the run's final state is said
                        outcome = await driver.train_one(
                            submission.method, devices, run_id=run.run_id, resume=resume,
                            work=sandbox or self.work, evaluate=sandbox.evaluate if sandbox is not None else None,
                        )
                why = "every job reached its target" if outcome.reached else "a job stopped short of its target"
                console.print(f"run {run.run_id} completed: {why}", highlight=False)
                self._move(run.run_id, "completed", why, reached=outcome.reached)
            except asyncio.CancelledError:
                if run.run_id in self._cancelled:  # by a researcher; else the service stops and it resumes later
                    console.print(f"run {run.run_id} cancelled: its rounds so far are kept", highlight=False)
                    self._move(run.run_id, "cancelled", "cancelled while it ran; its rounds so far are kept")
                raise
            except Exception as exc:  # noqa: BLE001 - one run's failure, or our bug, must not end the lab's other runs
                self._failed(run, exc, console)

    def _failed(self, run: LabRun, exc: Exception, console: Console) -> None:
        """The run failed: why, in its log (the last line) and its state; our bug's traceback in the logs too."""
        error = ours(exc)
        if error is not None:
            why = str(error)
        else:
            log.error("run %s failed", run.run_id, exc_info=exc)
            why = f"internal error: {type(exc).__name__}: {exc} (see lab.log)"
        console.print(f"run {run.run_id} failed: {why}", highlight=False, soft_wrap=True)
        self._move(run.run_id, "failed", why)

    @contextlib.asynccontextmanager
    async def _code_of(self, run: LabRun, submission: Submission) -> AsyncIterator[Sandbox | None]:
        """For a run of a researcher's own model, the bounded child where its preparation, evaluations and report
        run, for the run's life (None: a zoo run, which uses the lab's shared child)."""
        if not submission.own_code:
            yield None
            return
        sandbox = await asyncio.to_thread(self.sandbox, self.lab.limits.code(checking=False), f"run {run.run_id}'s model")
        try:
            yield sandbox
        finally:
            await asyncio.to_thread(sandbox.shutdown)

    def _checked(self, run: LabRun) -> Submission:
        """The run's config checked again now, with the files it was sent (a Refusal if it no longer loads here)."""
        code = self.folder(run.run_id) / CODE
        owner = self.store.researcher(run.owner)
        return check(run.config_toml, self.lab, code=code if code.is_dir() else None, admin=owner is not None and owner.admin)

    def _loaded(self, run: LabRun) -> Submission | None:
        """The run's config as checked again now; a run whose config no longer loads here is abandoned."""
        try:
            return self._checked(run)
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


class RunFollower:
    """What the lab follows of a running run's events: its start (the policy between runs hears it plan from now
    on) and its jobs' waits for devices, said in the run's ``reason`` while they last (`mjfl runs`, its page)."""

    def __init__(self, runs: LabRuns, run_id: str) -> None:
        self.runs = runs
        self.run_id = run_id
        self._waiting: dict[JobId, str] = {}
        self._before: str | None = None  # why the run waits before its fleet is ready

    def waiting(self, why: str | None) -> None:
        """Why the run waits before its jobs plan (None: it no longer does); in its log and its reason."""
        if why is not None:
            log.info("run %s: %s", self.run_id, why)
        if why != self._before:
            self._before = why
            self._say()

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RunStarted):
            if self.runs.fleet.share is not None:
                self.runs.fleet.share.ready(self.run_id, self.runs.fleet.occupancy)
        elif isinstance(event, JobWaiting):
            self._waiting[event.job] = event.why()
            self._say()
        elif isinstance(event, RoundAggregated) and self._waiting.pop(event.job, None) is not None:
            self._say()

    def _say(self) -> None:
        waits = "; ".join(f"job {job} waits for devices: {why}" for job, why in sorted(self._waiting.items()))
        self.runs.store.note(self.run_id, "; ".join(w for w in (self._before, waits) if w) or None)


def _runs(count: int) -> str:
    return f"{count} run" if count == 1 else f"{count} runs"
