"""The multi-job FL engine: the one round loop of mjfl (the paper's Figure 1, steps 1-6).

Every job runs its own loop, concurrently with the others:

    plan (its scheduler) over the free devices -> mark them busy -> send the
    global model -> local training -> collect -> FedAvg by sample counts ->
    evaluate on the job's test set -> record -> stop at the target or R_m

A device serves one job at a time and is released as soon as its own task
ends, so a fast device can join another job's next round while this round
waits for its stragglers. Planning is synchronous, so two jobs can never plan
over the same free device. With ``plan_busy`` a job may also plan a device
another job will release soon: the plan claims it, its expected wait enters
the plan's round time (``PlanContext.wait``), and its task starts the moment
the other job releases it. Failures are data: a device that does not return,
or returns an invalid update, is recorded and fed to the scheduler; the round
completes with the rest when at least ``min_returns`` came back.

The engine knows devices only through a Fleet and time only through a Clock,
so the same code runs phones in wall-clock time and simulations in virtual
time. It tells everything else what happens through one stream of events
(``events.py``): storage, the live view and any later observer follow it.
It alone decides whether a job stopped and why (``_verdict``), and it learns
of devices that join or leave a running run only by an explicit ``join`` /
``leave`` from the run driver.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mjfl import seeds
from mjfl.coordinator.config import JobConfig, SchedulerConfig
from mjfl.coordinator.engine.clock import Clock
from mjfl.coordinator.engine.events import (
    DeviceJoined,
    DeviceLeft,
    DeviceResult,
    JobStopped,
    JobWaiting,
    Observer,
    ProfileRefitted,
    RoundAggregated,
    RunEvent,
    RunFinished,
    RunStarted,
    StopReason,
    TaskSent,
)
from mjfl.coordinator.engine.fedavg import (
    check_update,
    fedavg,
    model_norm,
    norm_outliers,
    update_sizes,
)
from mjfl.coordinator.engine.fleet import Fleet, Task, TaskResult, Weights
from mjfl.coordinator.engine.occupancy import Occupancy
from mjfl.coordinator.storage.records import DeviceRound, ProfileRefit, RoundRecord, Score
from mjfl.errors import DeviceFailure
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import ModelSpec
from mjfl.profiling.fit import ProfileRefiner
from mjfl.schedulers import round_time
from mjfl.schedulers.base import (
    CostWeights,
    Decision,
    FleetModel,
    JobModel,
    Objective,
    PlanContext,
    RoundOutcome,
    Scheduler,
    plan_size,
)
from mjfl.schedulers.cost import cost_model
from mjfl.seeds import Purpose

log = logging.getLogger(__name__)

# How many of a job's recently accepted update sizes make its typical update (norm check).
RECENT_UPDATES = 32
# An update that changed the global model by less than this fraction of its norm
# barely moved it (a device that does not learn): it never counts as an outlier or as typical.
STILL = 1e-4

Evaluator = Callable[[ModelSpec, Weights, NDArray[np.float32], NDArray[np.int64]], tuple[float, float]]


@dataclass(eq=False)
class EngineJob:
    """One FL job as the engine runs it: its configuration (``config``) and its state.

    ``max_rounds`` is R_m, the job's round budget: the configured cap unless
    Formula 10 set a smaller one from earlier runs.
    """

    config: JobConfig  # what the job trains and how (epochs, lr, C_m, target, deadline ...)
    spec: ModelSpec
    scheduler: Scheduler
    samples: dict[DeviceId, int]  # D_k^m: the devices holding a shard of this job (``Engine.join`` adds one)
    test_x: NDArray[np.float32]
    test_y: NDArray[np.int64]
    weights: Weights  # the global model; replaced after every aggregated round
    max_rounds: int = 0  # R_m; 0 takes config.max_rounds
    rounds_done: int = 0  # > 0 when resuming
    best_accuracy: float = 0.0
    # (accuracy, loss) of its last rounds, as many as its target averages (Target.window); rebuilt on resume
    scores: tuple[Score, ...] = ()
    stopped: StopReason | None = None  # why the job ended: the engine's verdict (``JobStopped``)
    # the sizes of the updates its recent rounds accepted (fedavg.norm_outliers' typical update)
    accepted_sizes: deque[float] = field(default_factory=lambda: deque(maxlen=RECENT_UPDATES))

    def __post_init__(self) -> None:
        self.max_rounds = self.max_rounds or self.config.max_rounds

    @property
    def name(self) -> JobId:
        return self.config.name


@dataclass
class EngineSettings:
    """Knobs of the engine that are not per job."""

    weights: CostWeights = field(default_factory=CostWeights)
    min_plan: int = SchedulerConfig.min_plan  # the smallest plan worth a round
    min_returns: int = SchedulerConfig.min_returns  # fewer updates than this: the round keeps the old model
    seed: int = 0
    time_offset: float = 0.0  # run-clock time already spent (when resuming)
    profile_window: int = SchedulerConfig.profile_window  # > 0: refit device profiles online from that many recent rounds
    profile_min_observations: int = 5
    # With no device free and none busy, how long to wait for devices to
    # (re)connect before a job gives up; 0 for fleets that never change.
    device_wait_s: float = 0.0
    # Plan devices busy with another job too, charging their expected wait.
    plan_busy: bool = SchedulerConfig.plan_busy
    # False: the jobs run one after another, each with the whole fleet (single-job FL).
    parallel: bool = SchedulerConfig.parallel
    # Updates that moved the model more than this x a typical update are
    # rejected before FedAvg (fedavg.norm_outliers); None turns the check off.
    max_update_norm_ratio: float | None = SchedulerConfig.max_update_norm_ratio


class Engine:
    """Runs M jobs concurrently over one fleet, telling ``observers`` what happens (``events.py``).

    The design's "one engine, two clocks" (docs/architecture.md): the same
    loop runs phones on the wall clock and simulations on a virtual one.
    """

    def __init__(
        self,
        jobs: Sequence[EngineJob],
        fleet: Fleet,
        clock: Clock,
        evaluate: Evaluator,
        *,
        run_id: str,
        settings: EngineSettings | None = None,
        observers: Sequence[Observer] = (),
        frequencies: Mapping[JobId, Mapping[DeviceId, int]] | None = None,
        losses: Mapping[JobId, Mapping[DeviceId, float]] | None = None,
        occupancy: Occupancy | None = None,
    ) -> None:
        if len({job.name for job in jobs}) != len(jobs):
            raise AssertionError("job names must be unique (the config checks it)")
        self.jobs = list(jobs)
        self.fleet = fleet
        self.clock = clock
        self.evaluate = evaluate
        self.run_id = run_id
        self.settings = settings or EngineSettings()
        self.observers = list(observers)
        # Which job holds each device, shared with the engines of other runs over the same fleet (the lab
        # service's); devices planned while another job held them are claimed, and start when released.
        self.occupancy = occupancy or Occupancy()
        self._in_flight: dict[JobId, set[DeviceId]] = {job.name: set() for job in self.jobs}
        # s_{k,m} of Formula 6, counting every plan issued (in flight included).
        self.frequencies: dict[JobId, dict[DeviceId, int]] = {
            job.name: dict((frequencies or {}).get(job.name, {})) for job in self.jobs
        }
        # Each device's mean training loss with its last accepted update of each job (its statistical
        # utility's source); a resumed run starts from the recorded ones.
        self.losses: dict[JobId, dict[DeviceId, float]] = {job.name: dict((losses or {}).get(job.name, {})) for job in self.jobs}
        self._start: float | None = None  # the clock's time when run() started
        self._refiner = None
        if self.settings.profile_window > 0:
            self._refiner = ProfileRefiner(
                window=self.settings.profile_window, min_observations=self.settings.profile_min_observations
            )
        self._refined: dict[DeviceId, tuple[float, float]] = {}

    def now(self) -> float:
        """Run-clock time: seconds since the run started (resumed runs continue their clock); before ``run``, its start."""
        if self._start is None:
            return self.settings.time_offset
        return self.clock.now() - self._start + self.settings.time_offset

    async def run(self) -> None:
        """Run every job until it stops: at its target, at its budget, or with no device to train it."""
        self._start = self.clock.now()
        devices = tuple(dict.fromkeys(d for job in self.jobs for d in job.samples))
        self._emit(RunStarted(self.run_id, tuple(job.name for job in self.jobs), devices, self.now()))
        for job in self.jobs:
            if job.stopped is not None:  # resumed after it had stopped
                self._emit(JobStopped(job.name, job.stopped, job.rounds_done, self.now()))
        if not self.settings.parallel:
            for job in self.jobs:  # in the config's order; a resumed run skips the finished ones
                await self._run_job(job)
        else:
            async with asyncio.TaskGroup() as group:
                for job in self.jobs:
                    group.create_task(self._run_job(job), name=f"job {job.name}")
        stopped = {job.name: job.stopped for job in self.jobs if job.stopped is not None}
        self._emit(RunFinished(self.run_id, stopped, self.now()))

    def join(self, device: DeviceId, samples: Mapping[JobId, int]) -> None:
        """``device`` may train these jobs from now on, holding ``samples[job]`` samples of each (D_k^m).

        The run driver calls this when a device joins a run that is under way
        (or before it starts); the device is planned as soon as the fleet
        offers it.
        """
        for job in self.jobs:
            if job.name in samples:
                job.samples[device] = samples[job.name]
        self._emit(DeviceJoined(device, self.now()))
        self.occupancy.wake()  # a job waiting for devices may plan it

    def returned(self, device: DeviceId) -> None:
        """``device``, which holds its shards already, is offered again (it reconnected): waiting jobs plan again."""
        self._emit(DeviceJoined(device, self.now()))
        self.occupancy.wake()

    def leave(self, device: DeviceId, reason: str) -> None:
        """``device`` is gone (the fleet no longer offers it); a task it had fails on its own."""
        self._emit(DeviceLeft(device, reason, self.now()))

    def _emit(self, event: RunEvent) -> None:
        for observer in self.observers:
            observer(event)

    # -- one job ----------------------------------------------------------

    async def _run_job(self, job: EngineJob) -> None:
        if job.stopped is None and job.rounds_done >= job.max_rounds:
            self._stop(job, "budget")  # resumed with a budget already spent
        while job.stopped is None:
            ctx = await self._wait_and_plan(job)
            if ctx is None:
                self._stop(job, "no devices")
                break
            await self._run_round(job, ctx)
        self.occupancy.ended((self.run_id, job.name))

    def _stop(self, job: EngineJob, reason: StopReason) -> None:
        job.stopped = reason
        self._emit(JobStopped(job.name, reason, job.rounds_done, self.now()))

    @staticmethod
    def _verdict(job: EngineJob) -> StopReason | None:
        """Whether ``job`` stops after the round its ``scores`` end with, and why.

        The one decision of a job's end: its target (``Target.reached`` over
        its last rounds, docs/config.md), else its round budget R_m.
        """
        if job.config.target.reached(job.scores):
            return "target"
        if job.rounds_done >= job.max_rounds:
            return "budget"
        return None

    async def _wait_and_plan(self, job: EngineJob) -> tuple[PlanContext, Decision, list[DeviceId]] | None:
        """Wait until enough devices are free, then plan and occupy them (under the occupancy's planning lock).

        The occupancy wakes the job whenever a device is released, a job ends
        or a device joins (``Occupancy.changed``). While no device is busy
        anywhere, nothing will be released: the job waits ``device_wait_s``
        for devices to (re)connect, then gives up (None).
        """
        deadline: float | None = None
        occupancy, waiting = self.occupancy, False
        while True:
            async with occupancy.planning:  # one plan at a time over the fleet, from its look to its take
                planned = await self._plan(job)
            if planned is not None:
                return planned
            if not waiting:
                waiting = True
                self._emit(self._waiting(job))
            if occupancy.any_busy():
                deadline = None
                await occupancy.changed()
                continue
            now = self.clock.now()
            deadline = now + self.settings.device_wait_s if deadline is None else deadline
            timed_out = now >= deadline or not await occupancy.changed(timeout=deadline - now)
            if timed_out and not occupancy.any_busy():
                return None  # nothing busy, nobody came: this job cannot run

    def _waiting(self, job: EngineJob) -> JobWaiting:
        """What keeps ``job`` from planning now, as its ``JobWaiting`` event says it."""
        devices = [p.device for p in self.fleet.profiles() if p.device in job.samples]
        minimum = self.settings.min_plan
        wanted = plan_size(job.config.fraction, len(devices), len(devices), minimum)
        free = sum(1 for d in devices if self.occupancy.free(d))
        return JobWaiting(
            job.name, job.rounds_done + 1, wanted, minimum, free, self.occupancy.allowance(self.run_id), self.now()
        )

    async def _plan(self, job: EngineJob) -> tuple[PlanContext, Decision, list[DeviceId]] | None:
        """Plan ``job`` over the devices free now and take them; None when it gets none. Under ``occupancy.planning``.

        The scheduler runs off the loop (``clock.run_blocking``: a thread, or
        virtual time standing still), on a context built here; what it chose
        is taken here, on the loop.
        """
        ctx = self._context(job)
        if ctx is None:
            return None
        decision = await self.clock.run_blocking(None, job.scheduler.plan, ctx)
        return ctx, decision, self._take(job, ctx, decision)

    def _context(self, job: EngineJob) -> PlanContext | None:
        """What ``job``'s scheduler plans from, as the fleet stands now; None when the job gets no device."""
        profiles = [p for p in self.fleet.profiles() if p.device in job.samples]
        if not profiles:
            return None
        devices = [p.device for p in profiles]
        a = np.array([self._refined.get(p.device, (p.a, p.mu))[0] for p in profiles])
        mu = np.array([self._refined.get(p.device, (p.a, p.mu))[1] for p in profiles])
        fleet = FleetModel(tuple(devices), np.maximum(a, 1e-12), np.maximum(mu, 1e-12))
        occupancy, holder = self.occupancy, (self.run_id, job.name)
        free = np.array([occupancy.free(d) for d in devices])
        wait = None
        if self.settings.plan_busy:
            wait = self._expected_waits(fleet)
            free = np.isfinite(wait)
            wait = np.where(free, wait, 0.0)
        offered = int(free.sum())
        allowance = occupancy.allowance(self.run_id)  # the run's share, when another run is short of devices
        if allowance is not None:
            offered = min(offered, allowance)
        size = plan_size(job.config.fraction, len(devices), offered, self.settings.min_plan)
        wanted = plan_size(job.config.fraction, len(devices), len(devices), self.settings.min_plan)
        occupancy.planned(holder, wanted, size)
        if size == 0:
            return None
        index = {d: k for k, d in enumerate(devices)}
        jobs, frequencies, current = [], [], []
        for other in self.jobs:
            # Devices without a shard of another job still need a D for its cost
            # terms; they never train it, so any positive count will do.
            counts = np.array([other.samples.get(d, 1) for d in devices], dtype=np.int64)
            target = other.config.target
            jobs.append(JobModel(
                other.name, other.config.training.epochs, counts, other.config.fraction,
                Objective(target.accuracy, target.loss, other.max_rounds),
            ))
            frequencies.append([self.frequencies[other.name].get(d, 0) for d in devices])
            in_flight = tuple(sorted(index[d] for d in self._in_flight[other.name] if d in index))
            current.append(in_flight or None)
        m = self.jobs.index(job)
        reported = self.losses[job.name]
        losses = np.array([reported.get(d, np.nan) for d in devices]) if reported else None
        return PlanContext(
            job=m, round=job.rounds_done + 1, fleet=fleet, jobs=tuple(jobs), free=free,
            frequencies=np.asarray(frequencies, dtype=np.int64), current_plans=tuple(current),
            size=size, weights=self.settings.weights, wait=wait, losses=losses,
        )

    def _take(self, job: EngineJob, ctx: PlanContext, decision: Decision) -> list[DeviceId]:
        """Occupy the devices ``decision`` chose for ``job`` (taken, or claimed where another job still holds one)."""
        occupancy, holder, devices = self.occupancy, (self.run_id, job.name), ctx.fleet.ids
        chosen = [devices[k] for k in decision.plan]
        if len(chosen) != ctx.size or any(not ctx.free[k] for k in decision.plan):
            raise AssertionError(f"{job.scheduler.name} planned unavailable or too many devices: {chosen}")
        for device in chosen:
            if occupancy.free(device):
                occupancy.take(device, holder, self.clock.now())
            else:
                occupancy.claim(device, holder)  # its task starts when the other job releases it
            self.frequencies[job.name][device] = self.frequencies[job.name].get(device, 0) + 1
        self._in_flight[job.name] = set(chosen)
        return chosen

    async def _run_round(self, job: EngineJob, planned: tuple[PlanContext, Decision, list[DeviceId]]) -> None:
        ctx, decision, devices = planned
        plan, costs = decision.plan, cost_model(ctx)
        round_ = job.rounds_done + 1
        started = self.now()
        expected = float(costs.time(np.asarray(plan)) * costs.reference_time)
        task_for = {d: self._task(job, round_, d) for d in devices}
        results = await asyncio.gather(*(self._train(job, d, task_for[d], started) for d in devices))
        ended = self.now()
        results = await self._reject_outliers(job, results)

        updates, device_rounds, durations, losses, failed = [], [], {}, {}, set()
        for k, device, (outcome, task_started) in zip(plan, devices, results):
            device_rounds.append(_device_round(device, outcome, wait_s=task_started - started))
            if isinstance(outcome, TaskResult):
                updates.append((outcome.weights, outcome.samples))
                durations[k] = outcome.duration_s
                losses[k] = outcome.mean_loss
                if math.isfinite(outcome.mean_loss):
                    self.losses[job.name][device] = outcome.mean_loss
                self._observe_profile(job, device, outcome)
            else:
                failed.add(k)

        aggregated = len(updates) >= max(1, self.settings.min_returns)
        if aggregated:
            job.weights = await self.clock.run_blocking(None, fedavg, updates)  # the model's size, off the loop
        accuracy, loss = await self.clock.run_blocking(None, self.evaluate, job.spec, job.weights, job.test_x, job.test_y)
        job.rounds_done = round_
        job.best_accuracy = max(job.best_accuracy, accuracy)
        job.scores = (*job.scores, (accuracy, loss))[-job.config.target.window :]

        round_outcome = RoundOutcome(
            ctx.job, ctx.round, plan, durations, frozenset(failed), ended - started,
            accuracy=accuracy, loss=loss, losses=losses,
        )
        cost = costs.observed_cost(round_outcome)
        await self.clock.run_blocking(None, job.scheduler.observe, ctx, round_outcome)  # BODS refits, RLDS learns
        record = RoundRecord(
            self.run_id, job.name, round_, started, ended, tuple(device_rounds), accuracy, loss,
            aggregated, expected, cost, decision.chosen_by,
        )
        job.stopped = self._verdict(job)
        self._emit(RoundAggregated(
            record, decision.candidates or None, job.stopped, job.weights, job.scheduler, job.best_accuracy
        ))
        if job.stopped is not None:
            self._emit(JobStopped(job.name, job.stopped, job.rounds_done, self.now()))
        self._refit_profiles(devices)

    async def _reject_outliers(
        self, job: EngineJob, results: Sequence[tuple[TaskResult | DeviceFailure, float]]
    ) -> list[tuple[TaskResult | DeviceFailure, float]]:
        """Valid updates too far from a typical one become rejections (failures are data).

        Typical: the round's median update size, or the median of the sizes the
        job's recent rounds accepted when larger; updates that barely moved the
        model (``STILL``) are neither (``fedavg.norm_outliers``).
        """
        ratio = self.settings.max_update_norm_ratio
        if ratio is None:
            return list(results)
        valid = [(k, r) for k, (r, _) in enumerate(results) if isinstance(r, TaskResult)]
        sizes = await self.clock.run_blocking(None, update_sizes, job.weights, [r.weights for _, r in valid])
        still = STILL * await self.clock.run_blocking(None, model_norm, job.weights)
        typical = float(np.median(job.accepted_sizes)) if job.accepted_sizes else None
        outliers = set(norm_outliers(sizes, max_ratio=ratio, typical=typical, still=still))
        job.accepted_sizes.extend(float(x) for i, x in enumerate(sizes) if i not in outliers and x > still)
        out = list(results)
        for k, result in (valid[i] for i in sorted(outliers)):
            failure = DeviceFailure(
                result.device, f"update norm over {ratio:g} x a typical update's", status="rejected",
                after_s=result.duration_s,
            )
            out[k] = (failure, results[k][1])
        return out

    def _task(self, job: EngineJob, round_: int, device: DeviceId) -> Task:
        seed = seeds.integer(self.settings.seed, Purpose.TASK, job.name, round_, device)
        c = job.config
        return Task(
            job.name, round_, job.weights, c.training, c.deadline_s, seed=seed,
        )

    async def _train(
        self, job: EngineJob, device: DeviceId, task: Task, round_started: float
    ) -> tuple[TaskResult | DeviceFailure, float]:
        """One device's task and when it started; always releases the device, never raises for its faults.

        A device claimed while another job held it starts when that job releases it.
        """
        outcome: TaskResult | DeviceFailure
        try:
            async with self.occupancy.hold(device, (self.run_id, job.name), self.clock.now):
                started = self.now()
                self._emit(TaskSent(job.name, task.round, device, started))
                try:
                    outcome = await self.fleet.run_task(device, task)
                    problem = check_update(job.weights, outcome.weights)
                    if problem is None and outcome.samples <= 0:
                        problem = f"reported {outcome.samples} samples"
                    if problem is not None:
                        outcome = DeviceFailure(device, problem, status="rejected", after_s=self.now() - started)
                except DeviceFailure as failure:
                    failure.after_s = failure.after_s or self.now() - started
                    outcome = failure
        finally:
            self._in_flight[job.name].discard(device)
        self._emit(DeviceResult(job.name, task.round, _device_round(device, outcome, started - round_started), self.now()))
        return outcome, started

    def _expected_waits(self, fleet: FleetModel) -> np.ndarray:
        """Seconds until each device of ``fleet`` can start a new task; inf where it cannot be planned.

        Free devices wait 0. A device training another job's task (and claimed
        by nobody) waits for what remains of that task: under Formula 4, a task
        that has run e seconds has ``max(shift - e, 0) + 1/rate`` left in
        expectation (the exponential part is memoryless). Devices already
        claimed by a job are not offered, nor are those another run's job
        holds (whose task this engine does not know).
        """
        wait = np.zeros(fleet.size)
        names = {job.name: job for job in self.jobs}
        now = self.clock.now()
        occupancy = self.occupancy
        for k, device in enumerate(fleet.ids):
            holder = occupancy.holder(device)
            if occupancy.claimed(device) or (holder is not None and holder[0] != self.run_id):
                wait[k] = np.inf
            elif holder is not None:
                other = names[holder[1]]
                shift, rate = round_time.shift_and_rate(
                    fleet.a[k], fleet.mu[k], other.config.training.epochs, other.samples.get(device, 1)
                )
                started = occupancy.started_at(device)
                elapsed = now - (now if started is None else started)
                wait[k] = max(float(shift) - elapsed, 0.0) + 1.0 / float(rate)
        return wait

    # -- online profile refinement ---------------------------------------

    def _observe_profile(self, job: EngineJob, device: DeviceId, result: TaskResult) -> None:
        if self._refiner is not None:
            self._refiner.observe(device, result.duration_s, job.config.training.epochs, job.samples[device])

    def _refit_profiles(self, devices: Sequence[DeviceId]) -> None:
        if self._refiner is None:
            return
        for device in devices:
            fit = self._refiner.fit(device)
            if fit is None or fit.a <= 0:
                continue
            self._refined[device] = (fit.a, fit.mu)
            self._emit(ProfileRefitted(
                ProfileRefit(self.run_id, device, self.now(), fit.a, fit.mu, fit.n, fit.ks_statistic)
            ))


def energy_j(device_state: Mapping[str, Any] | None) -> float | None:
    """The task's energy a device told in its ``device_state`` (protocol.md 5.5), joules.

    Phones measure it from their battery, emulated and simulated devices model it; either way it
    is ``energy_j``. Anything but a finite number >= 0 (absent, null, a string) is not known: None.
    """
    value = None if device_state is None else device_state.get("energy_j")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


def _device_round(device: DeviceId, outcome: TaskResult | DeviceFailure, wait_s: float) -> DeviceRound:
    """A device's part in a round as the records keep it."""
    if isinstance(outcome, TaskResult):
        t = outcome.timing
        return DeviceRound(
            device, "ok", outcome.samples, outcome.mean_loss, outcome.duration_s, t.download_s, t.compute_s,
            t.upload_s, device_state=outcome.device_state, wait_s=wait_s,
            energy_j=energy_j(outcome.device_state),
        )
    return DeviceRound(device, outcome.status, 0, None, outcome.after_s, error=outcome.reason, wait_s=wait_s)
