"""The run driver: the one path from a configuration to recorded, reported runs.

`mjfl simulate`, `mjfl testbed run` and `mjfl profile` differ only in the
devices they run on and the clock those keep: each command chooses its
``Devices`` (simulated devices on the virtual clock, ``simulated.py``; devices
that connect over the network on the wall clock, ``testbed.py``) and hands it
to a ``Driver``. Everything else happens here, once:

    output folder and its log -> the run database -> a run id (or the run to
    resume) -> the fleet, ready -> job preparation (data, partitions,
    programs) -> round budgets (Formula 10) -> checkpoints restored -> the
    engine, observed by the recorder (every round checkpointed and recorded)
    and the live view -> the final report (``results/report.py``)

or, for a profiling session, the fleet and the prepared jobs -> calibration
tasks (``calibration.py``) -> Formula 4 fits -> profiles.json,
observations.csv, the profile table and CDF plots.

Where devices can come and go (a testbed's registry, ``ReadyFleet.members``),
the driver is the one who tells the engine: a device that joins gets a free
shard of every job (the ``Assignment``, saved for ``--resume``), the fleet
its data, and the engine an explicit ``Engine.join``; one that leaves, an
``Engine.leave``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import io
import json
import logging
import time
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from concurrent.futures import Executor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from rich.console import Console
from rich.progress import Progress

from mjfl import logs, seeds
from mjfl.coordinator.config import RunConfig, config_to_dict
from mjfl.coordinator.dashboard.catalog import Catalog
from mjfl.coordinator.dashboard.live import LiveRun
from mjfl.coordinator.dashboard.server import live_dashboard
from mjfl.coordinator.dashboard.state import epochs_of
from mjfl.coordinator.engine.budget import round_budget
from mjfl.coordinator.engine.clock import Clock
from mjfl.coordinator.engine.engine import Engine, EngineJob, EngineSettings, Evaluator
from mjfl.coordinator.engine.events import DeviceJoined, Observer, StopReason, TaskSent
from mjfl.coordinator.engine.fleet import Fleet
from mjfl.coordinator.engine.occupancy import Occupancy
from mjfl.coordinator.results.live import LiveView
from mjfl.coordinator.results.report import report_run
from mjfl.coordinator.run.calibration import calibration_jobs, run_session
from mjfl.coordinator.run.coverage import explain, shortfalls
from mjfl.coordinator.run.database import RunDatabase
from mjfl.coordinator.run.preparation import (
    PROGRAM_CACHE,
    Assignment,
    PreparedJob,
    evaluate_job,
    prepare_jobs,
    shard_count,
)
from mjfl.coordinator.run.progress import RoundLines
from mjfl.coordinator.run.provenance import Admissions, run_provenance, source_text
from mjfl.coordinator.run.recorder import FleetRecorder, Membership, Recorder
from mjfl.coordinator.storage.checkpoints import Checkpoints, JobCheckpoint, write_atomically
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import checkpoints_path, database_path
from mjfl.coordinator.storage.records import (
    JobInfo,
    RoundRecord,
    RunInfo,
    RunMode,
    SchedulerChoice,
    Score,
)
from mjfl.errors import ConfigError, MjflError, RunError, StorageError, UserError
from mjfl.ids import DeviceId, JobId
from mjfl.profiling.observations import Observation, fit_profiles, write_observations
from mjfl.profiling.profiles import DeviceProfile, save_profiles
from mjfl.profiling.report import show_profiles
from mjfl.schedulers.base import CostWeights
from mjfl.schedulers.registry import make_scheduler
from mjfl.seeds import Purpose

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class Output:
    """Where a command's results, log and progress go."""

    out_dir: Path
    console: Console
    live: bool = True
    verbose: bool = False
    # Real-time runs serve the live dashboard on this address and port (0: any free one); None: no dashboard.
    # A host other machines reach needs the token (docs/security.md).
    dashboard_port: int | None = None
    dashboard_host: str = "127.0.0.1"
    dashboard_token: str | None = None
    # Send this process's log to the output folder's mjfl.log; False where the process logs elsewhere (the lab
    # service: its own log, and each run's lines in its folder).
    log_here: bool = True
    # Draw each run's plots into its folder; False where many runs are gathered (a study: `mjfl report RUN --plots DIR`).
    plots: bool = True
    # Where the jobs' exported programs are kept between runs (the lab's: under LAB_DIR).
    program_cache: Path = PROGRAM_CACHE

    @property
    def log_file(self) -> Path:
        return self.out_dir / logs.LOG_FILE


@dataclass(frozen=True, eq=False)
class ReadyFleet:
    """A fleet whose devices are there, and the clock they keep."""

    fleet: Fleet
    clock: Clock
    devices: list[DeviceId]  # the devices present, in a stable order
    device_wait_s: float = 0.0  # how long a job waits for devices to (re)connect before giving up
    hardware: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # by device (hello's facts)
    impersonated: Mapping[str, DeviceProfile] = field(default_factory=dict)  # emulated devices' own profiles
    # Fleets that devices can join and leave while a run goes (the registry of a testbed).
    members: Membership | None = None
    # Which job holds each device, shared with the other runs on the same fleet (the lab service's); None: this
    # run's alone.
    occupancy: Occupancy | None = None
    # Each phone's installed app (sha256 of its base.apk, None: unreadable) by device id, as the adb bridge read it
    # (``Phones.apps``); kept with the run's provenance.
    apps: Mapping[str, str | None] = field(default_factory=dict)
    # Who else follows the run's events (the lab's: its policy hears the run start and its jobs wait).
    observers: Sequence[Observer] = ()


class Devices(Protocol):
    """The devices a run trains on and their clock: all a command (or the lab) chooses."""

    mode: RunMode  # "virtual" or "real"
    kind: str  # in run ids: "simulate", "testbed", "lab"

    def fleet(self) -> AbstractAsyncContextManager[ReadyFleet]:
        """The fleet, once its devices are there (started, connected); closed on exit."""
        ...


class OwnLoop(Devices, Protocol):
    """Devices a command runs on an event loop of their own (``Driver.train``): the lab's run on its loop instead."""

    def run(self, main: Coroutine[Any, Any, T]) -> T:
        """Run ``main`` on an event loop that keeps these devices' time."""
        ...


@dataclass(frozen=True)
class RunOutcome:
    """How a run of one method ended, as its engine decided, and what it recorded (what its report reads)."""

    run_id: str
    method: str
    stopped: Mapping[JobId, StopReason | None]  # each job's verdict (None: stopped by no verdict)
    jobs: list[JobInfo]
    rounds: list[RoundRecord]
    choices: list[SchedulerChoice]
    summary: Mapping[str, Any] = field(default_factory=dict)  # the report's summary.json, once written

    @property
    def reached(self) -> bool:
        """Whether every job reached its target."""
        return all(reason == "target" for reason in self.stopped.values())


class Driver:
    """Runs a configuration's jobs (``train``) or profiles its devices (``profile``).

    Creating a driver checks the output folder and sends the log there
    (``mjfl.log``, docs: ``mjfl.logs``); nothing else is written before a run.
    """

    def __init__(self, config: RunConfig, output: Output, *, config_text: str | None = None) -> None:
        if output.out_dir.exists() and not output.out_dir.is_dir():
            raise ConfigError("out_dir", f"{output.out_dir}: a file is in the way; give a folder (it is created if missing)")
        try:
            output.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError("out_dir", f"{output.out_dir}: cannot create the folder: {exc.strerror or exc}") from None
        if output.log_here:
            logs.setup(output.log_file, verbose=output.verbose, stream=None)
        self.config = config
        self.output = output
        # The configuration as given, kept with each run (``provenance.py``): read now, before any wait.
        self.config_text = config_text if config_text is not None else source_text(config)
        self._prepared: dict[int, list[PreparedJob]] = {}
        self.work: Executor | None = None  # where preparation and reports run (None: a thread of this process)
        self.evaluate: Evaluator = evaluate_job  # the engine's evaluator (train_one may give another)
        self._current: _Run | None = None  # the run going, for what Ctrl-C says
        self._warned: set[str] = set()  # coverage warnings already shown (once a command, not once a method)

    # -- training runs --------------------------------------------------------

    def train(
        self, methods: Sequence[str], devices: OwnLoop, *, resume: bool = False, force: bool = False
    ) -> dict[str, Any]:
        """One run per scheduling method on identical jobs and seed, each on its devices' own event loop;
        returns the summary also written.

        Before the first round, devices too few for the jobs' data refuse the
        run unless ``force`` (``coverage.py``).
        """
        outcomes: list[RunOutcome] = []
        with RunDatabase(self.config.database_path) as database:
            clock = "virtual" if devices.mode == "virtual" else "wall"
            view = LiveView(enabled=self.output.live, console=self.output.console, clock=clock)
            with view:
                for method in methods:
                    try:
                        outcomes.append(devices.run(self._train_one(database, method, devices, view, resume=resume, force=force)))
                    except KeyboardInterrupt:
                        self._interrupted()
                        raise
        return self._report(outcomes)

    async def train_one(
        self, method: str, devices: Devices, *, run_id: str, resume: bool = False, work: Executor | None = None,
        evaluate: Evaluator | None = None,
    ) -> RunOutcome:
        """One run of ``method`` as ``run_id``, on the event loop already going (the lab service's), reported.

        ``resume`` continues the run recorded in the output folder. A
        cancelled run is recorded as interrupted, and can be resumed. The
        database is read and written on its own thread (``database.py``), and
        the run's preparation and report go to ``work`` (the lab's child
        process; None: a thread), so nothing of the run blocks the loop; its
        evaluations go to ``evaluate`` (default: ``evaluate_job`` on a thread;
        a researcher's own model's: its bounded child, ``lab/sandbox.py``).
        """
        self.work = work
        self.evaluate = evaluate or evaluate_job
        database = await RunDatabase.open(self.config.database_path)
        try:
            view = LiveView(enabled=False, console=self.output.console, clock="wall")
            outcome = await self._train_one(database, method, devices, view, resume=resume, run_id=run_id)
        finally:
            await asyncio.to_thread(database.close)
        try:
            summary, text = await asyncio.get_running_loop().run_in_executor(work, report_text, self._report_of([outcome]))
        except OSError as exc:
            raise self._unreported(exc) from None
        self.output.console.out(text, highlight=False)
        return dataclasses.replace(outcome, summary=summary)

    async def _train_one(
        self, database: RunDatabase, method: str, devices: Devices, view: LiveView, *, resume: bool,
        force: bool = False, run_id: str | None = None,
    ) -> RunOutcome:
        """The one path of a run: begun (or resumed), trained, its end recorded whatever happens, its outcome."""
        config, out = self.config, self.output.out_dir
        run = await database.call(lambda storage: _Run.begin(storage, config, out, method, devices, resume, run_id=run_id))
        self._current = run
        if run.resumed:
            self.output.console.print(f"resuming run {run.info.run_id} after {await database.call(run.progress)}")
        with self._ending(database, run):
            engine_jobs = await self._train(database, run, devices, view, force=force)
            await database.drain()
        rid = run.info.run_id
        infos, rounds, choices = await database.call(lambda s: (s.jobs(rid), s.rounds(rid), s.choices(rid)))
        return RunOutcome(rid, method, {job.name: job.stopped for job in engine_jobs}, infos, rounds, choices)

    def _interrupted(self) -> None:
        """Ctrl-C during a run: say what is kept and how to go on."""
        run = self._current
        if run is not None and run.checkpoints is not None and run.recorded:
            self.output.console.print(
                f"[yellow]interrupted[/]: every finished round is saved;"
                f" continue with --resume (run {run.info.run_id})"
            )

    @contextlib.contextmanager
    def _ending(self, database: RunDatabase, run: _Run) -> Iterator[None]:
        """Mark the run's end in its database whatever happens: finished, interrupted (Ctrl-C, cancelled) or failed."""
        status = "failed"
        try:
            yield
            status = "finished"
        except (KeyboardInterrupt, asyncio.CancelledError):
            status = "interrupted"
            raise
        finally:
            if run.recorded:
                run_id = run.info.run_id
                # After a write that failed nothing more is written (the run stays resumable); its failure is
                # what the run raises, not this.
                with contextlib.suppress(MjflError):
                    database.put(lambda storage: self._finish(storage, run_id, status))

    @staticmethod
    def _finish(storage: Storage, run_id: str, status: str) -> None:
        """Mark the run's end; a database that refuses it (full) must not hide why the run ended."""
        try:
            storage.finish_run(run_id, status, _now())  # type: ignore[arg-type]
        except StorageError as exc:
            log.info("could not mark run %s %s (resume still finds it): %s", run_id, status, exc)

    async def _train(
        self, database: RunDatabase, run: _Run, devices: Devices, view: LiveView, *, force: bool
    ) -> list[EngineJob]:
        """The run's steps: the dashboard (real time) -> the fleet ready -> shards and jobs -> the run recorded ->
        the engine's jobs (resumed where the checkpoints say) -> the engine, observed, with the fleet's comings
        and goings; its jobs as the engine left them."""
        live = self._live_run(run) if devices.mode == "real" else None
        transfers = _Transfers()
        async with self._dashboard(live, transfers), devices.fleet() as ready:
            transfers.members = ready.members
            assignment, prepared = await self._shards_and_jobs(run, ready, real_time=devices.mode == "real", force=force)
            infos = await database.call(lambda storage: self._record_start(storage, run, prepared, assignment))
            admitted = self._keep_provenance(database, run, prepared, assignment, ready)
            names = [job.config.name for job in prepared]
            resumed, budgets = await database.call(
                lambda storage: (run.resumed_state(storage, names), self._budgets(storage, run, infos))
            )
            jobs = self._engine_jobs(prepared, run.info.method, assignment, budgets, resumed)
            view.add_jobs(run.info.method, infos)
            ready.fleet.prepare([job.artifacts(assignment) for job in prepared])
            recorder = Recorder(database, run.checkpoints, wall_clock=devices.mode == "real")
            observers: list[Observer] = [recorder, view.observer(run.info.method), RoundLines(), *ready.observers]
            if live is not None:
                await self._show_jobs(live, database, run, infos, ready)
                observers.append(live)
            engine = Engine(
                jobs, ready.fleet, ready.clock, self.evaluate, run_id=run.info.run_id, observers=observers,
                settings=self._settings(ready.device_wait_s, time_offset=resumed.time_offset),
                frequencies=resumed.frequencies, losses=resumed.losses, occupancy=ready.occupancy,
            )
            if ready.members is not None:

                def joined(device: DeviceId) -> None:
                    run.joined(engine, ready.fleet, prepared, assignment, device)
                    admitted(device)

                self._follow_fleet(database, run, engine, ready, joined, live, set(assignment.slot_of))
            await engine.run()
        if all(job.stopped == "no devices" for job in jobs):
            raise RunError("no job could run: too few devices")
        return jobs

    async def _shards_and_jobs(
        self, run: _Run, ready: ReadyFleet, *, real_time: bool, force: bool
    ) -> tuple[Assignment, list[PreparedJob]]:
        """Who holds which shard (saved for ``--resume``) and the jobs prepared for that many shards.

        Devices too few for the jobs' data refuse the run here, unless
        ``force`` or a resumed run, which was let start before.
        """
        slots = shard_count(self.config, len(ready.devices), real_time=real_time)
        assignment = run.assignment(ready.devices, slots)
        prepared = await self._prepare(ready.clock, assignment.slots)
        self._check_fleet(prepared, assignment, force=force or run.resumed)
        run.save(assignment)
        return assignment, prepared

    def _record_start(
        self, storage: Storage, run: _Run, prepared: Sequence[PreparedJob], assignment: Assignment
    ) -> list[JobInfo]:
        """The run and its jobs in the database, with the configuration it ran (once: a resumed run is there)."""
        infos = [job.info(run.info.run_id) for job in prepared]
        if not run.recorded:
            ran = {"method": run.info.method, "devices": len(assignment.slot_of), "shards": assignment.slots}
            run.info = dataclasses.replace(run.info, config_json=json.dumps(config_to_dict(self.config) | ran))
            storage.start_run(run.info, infos)
            run.recorded = True
        return infos

    def _keep_provenance(
        self, database: RunDatabase, run: _Run, prepared: Sequence[PreparedJob], assignment: Assignment,
        ready: ReadyFleet,
    ) -> Admissions:
        """What the run runs on, kept as it starts, and the devices present admitted; returns who admits the others.

        A resumed run keeps what it had; a device whose hello, profile, shard or app changed is kept again.
        """
        run_id, config, text = run.info.run_id, self.config, self.config_text
        database.put(lambda storage: storage.record_provenance(run_provenance(run_id, config, text, prepared)))
        admitted = Admissions(database, run_id, assignment, ready.fleet, members=ready.members, apps=ready.apps)
        admitted.admit(sorted(assignment.slot_of))
        return admitted

    @staticmethod
    def _budgets(storage: Storage, run: _Run, infos: Sequence[JobInfo]) -> dict[JobId, int]:
        """R_m of each job from earlier runs of the same job (Formula 10), capped by the configured maximum."""
        budgets = {}
        for info in infos:
            histories = storage.loss_history(info.job_key, exclude_run=run.info.run_id)
            budgets[info.job], curve = round_budget(histories, info.target.loss, cap=info.max_rounds)
            if curve is not None:
                log.info("job %s: R_m = %d rounds from %d earlier runs (%s)", info.job, budgets[info.job], len(histories), curve)
        return budgets

    def _live_run(self, run: _Run) -> LiveRun | None:
        """What the live dashboard shows of this run (None without a dashboard), from before its devices are there."""
        return None if self.output.dashboard_port is None else LiveRun(run.info, [])

    async def _show_jobs(
        self, live: LiveRun, database: RunDatabase, run: _Run, infos: Sequence[JobInfo], ready: ReadyFleet
    ) -> None:
        """The live dashboard's jobs once prepared, with each device's planned speed; a resumed run's rounds so far."""
        profiles = {str(p.device): p for p in ready.fleet.profiles()}
        live.begin(infos, profiles=profiles, epochs=epochs_of(config_to_dict(self.config)))
        if run.resumed:
            rid = run.info.run_id
            live.recorded(*await database.call(lambda s: (s.rounds(rid), s.choices(rid), s.fleet_events(rid))))

    @staticmethod
    def _follow_fleet(
        database: RunDatabase, run: _Run, engine: Engine, ready: ReadyFleet, joined: Callable[[DeviceId], None],
        live: LiveRun | None, holding: Collection[DeviceId],
    ) -> None:
        """Devices that come, go or are refused while the run goes (the registry's word), kept and shown live.

        A device that drops is offline at once, whatever the engine knew; one
        that joins, or connected while the jobs were prepared, takes a free
        shard and is planned like the others (``joined``); one ``holding`` a
        shard that comes back is offered to its jobs again.
        """
        assert ready.members is not None
        also = None if live is None else live.fleet
        FleetRecorder(run.info.run_id, engine.now, ready.members, database=database, also=also).present()
        ready.members.on_join(joined)
        ready.members.on_leave(engine.leave)
        for profile in ready.fleet.profiles():
            if profile.device not in holding:  # connected while the jobs were prepared
                joined(profile.device)

    @contextlib.asynccontextmanager
    async def _dashboard(self, live: LiveRun | None, transfers: _Transfers) -> AsyncIterator[None]:
        """The live dashboard on this event loop while the run goes (docs/dashboard.md); a busy port only warns.

        It opens first, so its address is printed before the devices are
        waited for and the jobs prepared.
        """
        if live is None:
            yield
            return
        console, port = self.output.console, self.output.dashboard_port
        assert port is not None
        warn = lambda line: console.print(f"[yellow]warning:[/] {line}", highlight=False)
        # The finished runs beside it: those of the run database in the output folder (not a database kept
        # elsewhere), once there is one (a profiling session writes its database at its end).
        database = self.config.database_path
        catalog = Catalog([self.output.out_dir]) if database == database_path(self.output.out_dir) and database.exists() else None
        async with live_dashboard(
            catalog, live, host=self.output.dashboard_host, port=port, token=self.output.dashboard_token,
            folder=self.output.out_dir, transfer=transfers, warn=warn,
        ) as url:
            if url is not None:
                console.print(f"dashboard: {url}", highlight=False, soft_wrap=True)
                log.info("dashboard: %s", url.split("?")[0])  # the token stays out of the log
            yield

    def _engine_jobs(
        self, prepared: Sequence[PreparedJob], method: str, assignment: Assignment, budgets: Mapping[JobId, int],
        resumed: _Resumed,
    ) -> list[EngineJob]:
        """The engine's jobs for one method: fresh (initial model, new scheduler), or as a resumed run's checkpoints left them."""
        jobs = []
        for m, job in enumerate(prepared):
            s = self.config.scheduler
            seed = seeds.integer(self.config.seed, Purpose.SCHEDULER, m)
            scheduler = make_scheduler(method, seed=seed, options=s.options, members=s.members)
            fresh = EngineJob(
                config=job.config, spec=job.spec, samples=job.samples(assignment), test_x=job.test_x,
                test_y=job.test_y, weights=dict(job.initial), scheduler=scheduler, max_rounds=budgets[job.config.name],
            )
            saved = resumed.checkpoints.get(job.config.name)
            jobs.append(fresh if saved is None else _continued(fresh, saved, resumed.scores.get(job.config.name, ())))
        return jobs

    def _settings(self, device_wait_s: float, *, time_offset: float = 0.0) -> EngineSettings:
        s = self.config.scheduler
        return EngineSettings(
            weights=CostWeights(alpha=s.alpha, beta=s.beta, omega=s.omega, utility=s.utility),  # type: ignore[arg-type]
            min_plan=s.min_plan, min_returns=s.min_returns, seed=self.config.seed, time_offset=time_offset,
            profile_window=s.profile_window, device_wait_s=device_wait_s, plan_busy=s.plan_busy,
            parallel=s.parallel,
            max_update_norm_ratio=s.max_update_norm_ratio,
        )

    def _check_fleet(self, prepared: Sequence[PreparedJob], assignment: Assignment, *, force: bool) -> None:
        """Up front, once a command: what the devices present lack for the jobs (``coverage.py``).

        Classes that no device present holds refuse the run (a UserError)
        unless ``force``; few classes a round only warn.
        """
        present = len(assignment.slot_of)
        key = f"{present}/{assignment.slots}"
        if key in self._warned:
            return
        self._warned.add(key)
        found = shortfalls(prepared, assignment, min_plan=self.config.scheduler.min_plan)
        if not found:
            return
        config = self.config
        cut_for = (
            "testbed.min_devices" if assignment.slots == config.testbed.min_devices
            else "fleet.size" if config.fleet.size else "fleet.profiles"
        )
        text = explain(found, present=present, slots=assignment.slots, cut_for=cut_for)
        if any(s.blocking for s in found) and not force:
            raise UserError(text)
        self.output.console.print(f"[yellow]warning:[/] {text}", highlight=False)

    async def _prepare(self, clock: Clock, slots: int) -> list[PreparedJob]:
        """The jobs' data cut into ``slots`` shards and their programs (cached), prepared once per shard count,
        off the event loop (in ``work``, else a thread); the time it took is said and logged."""
        if slots not in self._prepared:
            what = f"{len(self.config.jobs)} jobs over {slots} shards (data, partitions, programs)"
            log.info("preparing %s", what)
            started = time.monotonic()
            with self.output.console.status(f"preparing {what} ..."):
                self._prepared[slots] = await clock.run_blocking(
                    self.work, prepare_jobs, self.config, slots, self.output.program_cache
                )
            for job in self._prepared[slots]:
                # What a device must hold to train the job: the program, and the memory
                # the runtime plans for it at the job's batch size (docs/models.md).
                self.output.console.print(
                    f"job {job.config.name}: program {len(job.program) / 1e6:.1f} MB, planned memory"
                    f" {job.planned_memory / 1e6:.1f} MB (batches up to {job.config.training.batch_size})",
                    highlight=False,
                )
            self.output.console.print(f"prepared {what} in {time.monotonic() - started:.1f} s", highlight=False)
        return self._prepared[slots]

    def _report(self, outcomes: Sequence[RunOutcome]) -> dict[str, Any]:
        """The runs' report files and tables (``results/report.py``), on the console; the summary."""
        try:
            return written_report(self._report_of(outcomes), self.output.console)
        except OSError as exc:
            raise self._unreported(exc) from None

    def _unreported(self, exc: OSError) -> RunError:
        return RunError(
            f"cannot write the report in {self.output.out_dir} ({exc.strerror or exc}: {exc.filename});"
            f" every round is saved in {self.config.database_path}; `mjfl report` writes it again"
        )

    def _report_of(self, outcomes: Sequence[RunOutcome]) -> Report:
        results = {o.method: (o.jobs, o.rounds) for o in outcomes}
        choices = [c for o in outcomes for c in o.choices]
        return Report(self.output.out_dir, results, choices, self.output.plots, self.config.database_path, self.output.log_file)

    # -- profiling sessions ---------------------------------------------------

    def profile(self, devices: Devices, *, rounds: int) -> list[DeviceProfile]:
        """Calibration tasks on every device, a Formula 4 fit per device; writes and shows the profiles."""
        if rounds < 3:
            raise ConfigError("rounds", f"must be >= 3 (a fit needs at least 3 observations per device), not {rounds}")
        out, console = self.output.out_dir, self.output.console
        observations, ready = devices.run(self._calibrate(devices, rounds))
        created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        write_observations(out / "observations.csv", observations)
        profiles, skipped = fit_profiles(observations, ready.hardware)
        if not profiles:
            raise UserError(f"no device could be profiled: {skipped}")
        save_profiles(out / "profiles.json", profiles, created=created)
        with Storage(self.config.database_path) as storage:
            storage.save_profiles(profiles, updated_at=created)
        for device, why in skipped.items():
            console.print(f"[yellow]{device}[/]: not profiled ({why})")
        show_profiles(out / "profiles.json", console=console, truth=ready.impersonated)
        console.print(
            f"wrote {out}/profiles.json, observations.csv and plots; profiles saved in"
            f" {self.config.database_path}; log in {self.output.log_file}", highlight=False, soft_wrap=True,
        )
        return profiles

    async def _calibrate(self, devices: Devices, rounds: int) -> tuple[list[Observation], ReadyFleet]:
        live = self._calibration_view()
        transfers = _Transfers()
        async with self._dashboard(live, transfers), devices.fleet() as ready:
            transfers.members = ready.members
            assignment = Assignment(len(ready.devices), ready.devices)
            prepared = await self._prepare(ready.clock, assignment.slots)
            jobs = calibration_jobs([(p.artifacts(assignment), p.initial, p.config.training) for p in prepared])
            if live is not None:
                self._show_devices(live, ready)
            with Progress(console=self.output.console, transient=True) as bar:
                tasks = len(ready.devices) * rounds * len(prepared)
                shown = _CalibrationProgress(bar, ready, tasks, live, self.output.console)
                observations = await run_session(
                    ready.fleet, jobs, ready.devices, rounds,
                    on_observation=shown.observed, on_failure=shown.failed, on_task=shown.sent,
                )
            if live is not None:
                live.status = "finished"
        return observations, ready

    def _calibration_view(self) -> LiveRun | None:
        """What the live dashboard shows of a profiling session: its devices, their tasks and the fleet's events.

        A session runs no engine and records no run: the view is told of each
        calibration task (``run_session``'s callbacks) and of the registry's
        fleet events, and keeps them in memory only.
        """
        if self.output.dashboard_port is None:
            return None
        stamp = dt.datetime.now(dt.UTC)
        info = RunInfo(f"{stamp:%Y%m%dT%H%M%S}-profile", "profiling session", "real", self.config.seed, "{}", stamp.isoformat())
        return LiveRun(info, [])

    @staticmethod
    def _show_devices(live: LiveRun, ready: ReadyFleet) -> None:
        """A profiling session's devices on its dashboard once they are there, and the fleet's events from then on."""
        for device in ready.devices:
            live(DeviceJoined(device, 0.0))
        if ready.members is not None:
            started = ready.clock.now()
            FleetRecorder(live.info.run_id, lambda: ready.clock.now() - started, ready.members, also=live.fleet).present()


@dataclass(eq=False)
class _Run:
    """One run of one method: its record, and (in real time) its checkpoints."""

    info: RunInfo
    resumed: bool
    recorded: bool  # in the database (a resumed run, or once its fleet was ready)
    checkpoints: Checkpoints | None  # real-time runs only: they can crash and resume
    _refused: set[DeviceId] = field(default_factory=set)  # joined with no shard left (warned once)

    @classmethod
    def begin(
        cls, storage: Storage, config: RunConfig, out_dir: Path, method: str, devices: Devices, resume: bool,
        *, run_id: str | None = None,
    ) -> _Run:
        """A new run (named ``run_id``, else by its start, kind and method), or the one to resume."""
        if resume:
            run_id = _resumable_run(storage, out_dir, devices.mode, method)
            info = storage.resume_run(run_id)
        else:
            stamp = dt.datetime.now(dt.UTC)
            run_id = run_id or f"{stamp:%Y%m%dT%H%M%S}-{devices.kind}-{method}"
            info = RunInfo(run_id, method, devices.mode, config.seed, "{}", stamp.isoformat())
        checkpoints = Checkpoints(checkpoints_path(out_dir, run_id)) if devices.mode == "real" else None
        return cls(info, resume, resume, checkpoints)

    def assignment(self, present: Sequence[DeviceId], slots: int) -> Assignment:
        """Who holds which shard: the devices present, or, when resuming, as the run had it (same partition)."""
        if self.checkpoints is None:
            return Assignment(slots, present)
        if self.resumed:
            saved = json.loads(self._assignment_file.read_text())
            return Assignment(saved["shards"], held=saved["held"])
        return Assignment(slots, sorted(present))  # saved once the run may start (``save``)

    def joined(
        self, engine: Engine, fleet: Fleet, prepared: Sequence[PreparedJob], assignment: Assignment, device: DeviceId
    ) -> None:
        """A device connected: give it a shard if it has none (saved, so a resumed run keeps it), and tell the fleet
        and the engine; one that holds a shard already came back, and its jobs may plan it again."""
        if device in assignment.slot_of:
            engine.returned(device)
            return
        slot = assignment.assign(device)
        if slot is None:
            if device not in self._refused:
                self._refused.add(device)
                log.warning("device %s joined, but all %d shards are taken: it gets no task", device, assignment.slots)
            return
        log.info("device %s joined: it holds shard %d of every job", device, slot)
        self.save(assignment)
        fleet.prepare([job.artifacts(assignment, [device]) for job in prepared])
        engine.join(device, {job.config.name: job.samples(assignment, [device])[device] for job in prepared})

    @property
    def _assignment_file(self) -> Path:
        assert self.checkpoints is not None
        return self.checkpoints.root / "devices.json"

    def save(self, assignment: Assignment) -> None:
        """Who holds which shard, with the checkpoints (real time), so ``--resume`` keeps it."""
        if self.checkpoints is None:
            return
        self._assignment_file.parent.mkdir(parents=True, exist_ok=True)
        document = {"shards": assignment.slots, "held": dict(sorted(assignment.slot_of.items()))}
        write_atomically(self._assignment_file, json.dumps(document, indent=1))

    def resumed_state(self, storage: Storage, jobs: Sequence[JobId]) -> _Resumed:
        """Where a resumed run continues (nothing for a new one): each job's checkpoint after its last recorded
        round, the run clock's time spent, and the participation counts and last losses the schedulers had."""
        if not self.resumed:
            return _Resumed()
        assert self.checkpoints is not None
        run_id = self.info.run_id
        done = {job: storage.last_round(run_id, job) for job in jobs}
        return _Resumed(
            checkpoints={job: self.checkpoints.load(job, last) for job, last in done.items() if last},
            scores={job: tuple((r.accuracy, r.loss) for r in storage.rounds(run_id, job)) for job in jobs},
            time_offset=storage.elapsed_s(run_id),
            frequencies=storage.participation(run_id),
            losses=storage.last_losses(run_id),
        )

    def progress(self, storage: Storage) -> str:
        return ", ".join(
            f"{j.job}: round {storage.last_round(self.info.run_id, j.job)}" for j in storage.jobs(self.info.run_id)
        )


class _Transfers:
    """What moves on devices' connections (``DeviceRegistry.transfer``), asked by a dashboard that opened before
    the fleet whose registry answers (``members``, once the fleet is ready) existed."""

    members: Membership | None = None

    def __call__(self, device: str) -> str | None:
        return None if self.members is None else self.members.transfer(DeviceId(device))


class _CalibrationProgress:
    """A profiling session's calibration tasks on the progress bar and the live dashboard (``run_session``'s callbacks)."""

    def __init__(self, bar: Progress, ready: ReadyFleet, tasks: int, live: LiveRun | None, console: Console) -> None:
        self.bar, self.live, self.console = bar, live, console
        self.task = bar.add_task(f"profiling {len(ready.devices)} devices", total=tasks)

    def observed(self, obs: Observation) -> None:
        self.bar.advance(self.task)
        if self.live is not None:
            self.live.task_done(obs.device, obs.job, obs.duration_s)

    def failed(self, device: DeviceId, why: str) -> None:
        self.bar.advance(self.task)
        self.console.print(f"[yellow]{device}[/]: task failed ({why})", highlight=False)
        if self.live is not None:
            self.live.task_done(str(device), None, None, why)

    def sent(self, device: DeviceId, job: JobId, number: int) -> None:
        if self.live is not None:
            self.live(TaskSent(job, number, device, 0.0))


@dataclass(frozen=True)
class _Resumed:
    """What a resumed run continues from (``_Run.resumed_state``); empty for a new run."""

    checkpoints: Mapping[JobId, JobCheckpoint] = field(default_factory=dict)
    scores: Mapping[JobId, tuple[Score, ...]] = field(default_factory=dict)  # each job's recorded (accuracy, loss)
    time_offset: float = 0.0
    frequencies: Mapping[Any, Any] | None = None
    losses: Mapping[Any, Any] | None = None


def _continued(job: EngineJob, saved: JobCheckpoint, scores: tuple[Score, ...]) -> EngineJob:
    """``job`` as its checkpoint after round ``saved.round`` left it: the global model, the scheduler's state (put
    into the one built afresh from the run's configuration), the verdict so far, and the recorded ``scores`` its
    target's window still averages (so it stops where an uninterrupted run would)."""
    saved.restore_scheduler(job.scheduler)
    return dataclasses.replace(
        job, weights=saved.weights, rounds_done=saved.round, best_accuracy=saved.best_accuracy, stopped=saved.stopped,
        scores=scores[-job.config.target.window :],
    )


def _resumable_run(storage: Storage, out_dir: Path, mode: RunMode, method: str) -> str:
    """The newest unfinished run of ``method`` in ``mode`` that wrote to ``out_dir``."""
    for info, status in reversed(storage.runs()):
        if (
            info.mode == mode and info.method == method and status != "finished"
            and json.loads(info.config_json).get("out_dir") == str(out_dir)
        ):
            return info.run_id
    raise ConfigError("resume", f"no unfinished {method} run recorded for {out_dir} in {storage.path}")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat()


@dataclass(frozen=True)
class Report:
    """What a report is made of: plain data, so that it can be written in another process."""

    out_dir: Path
    results: Mapping[str, tuple[list[JobInfo], list[RoundRecord]]]
    choices: Sequence[SchedulerChoice]
    plots: bool
    database: Path
    log_file: Path


def written_report(report: Report, console: Console) -> dict[str, Any]:
    """The report's files written and its tables printed on ``console``; the summary."""
    out = report.out_dir
    summary = report_run(out, report.results, report.choices, console=console, plots=report.plots)
    runs = ", ".join(jobs[0].run_id for jobs, _ in report.results.values() if jobs)
    plots = " and plots" if report.plots else ""
    console.print(
        f"wrote {out}/summary.json, rounds.csv, energy.csv (each device's energy){plots}; records in"
        f" {report.database} (run {runs}); log in {report.log_file}", highlight=False, soft_wrap=True,
    )
    console.print(f"the runs in a browser: mjfl dashboard {report.database.parent}", highlight=False, soft_wrap=True)
    return summary


def report_text(report: Report, width: int = 120) -> tuple[dict[str, Any], str]:
    """``written_report`` where no console is at hand (another process): the summary and the tables as text."""
    console = Console(file=io.StringIO(), width=width, record=True, color_system=None)
    return written_report(report, console), console.export_text()
