"""The engine's round loop over a test-double fleet (the trainers are exercised elsewhere).

The double is a real Fleet on the virtual clock: each device sleeps a round
time drawn from its Formula 4 profile and returns the global model plus one,
so a job's model after r aggregated rounds is r and "accuracy" is r / 10.
"""

import asyncio
import dataclasses
import itertools
import threading
from collections import defaultdict

import numpy as np
import pytest

from mjfl.coordinator.config import JobConfig
from mjfl.coordinator.engine.clock import VirtualClock, run_virtual
from mjfl.coordinator.engine.engine import Engine, EngineJob, EngineSettings, energy_j
from mjfl.coordinator.engine.events import (
    DeviceJoined,
    DeviceLeft,
    DeviceResult,
    JobStopped,
    ProfileRefitted,
    RoundAggregated,
    RunFinished,
    RunStarted,
    TaskSent,
)
from mjfl.coordinator.engine.fleet import DeviceProfileView, TaskResult
from mjfl.coordinator.engine.occupancy import Occupancy
from mjfl.coordinator.lab.sharing import FairShare, run_needs
from mjfl.coordinator.results.outcomes import job_outcomes
from mjfl.coordinator.storage.records import JobInfo
from mjfl.errors import DeviceFailure
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import ModelSpec
from mjfl.schedulers import round_time
from mjfl.schedulers.base import CostWeights, Objective
from mjfl.schedulers.registry import make_scheduler

SPEC = ModelSpec("lenet5", (1, 16, 16), 10)


class StepFleet:
    def __init__(self, size, clock, seed=0, fail=(), bad=(), misprofiled=1.0, energy=False):
        rng = np.random.default_rng(seed)
        self.truth = [DeviceProfileView(DeviceId(f"d{k}"), float(rng.uniform(0.01, 0.05)), float(rng.uniform(10, 50))) for k in range(size)]
        # What the engine is told: every device ``misprofiled`` times slower than it is.
        self.views = [DeviceProfileView(v.device, v.a * misprofiled, v.mu / misprofiled) for v in self.truth]
        self.clock = clock
        self.rng = {v.device: np.random.default_rng([seed, k]) for k, v in enumerate(self.views)}
        self.fail, self.bad = set(fail), set(bad)  # (device, job, round) that fail / send garbage
        self.training = defaultdict(set)  # device -> jobs it is training right now
        self.overlaps = []
        self.started = {}  # (device, job, round) -> clock time its task started
        self.energy = energy  # even devices tell a modelled 2 W energy, odd ones none

    def profiles(self):
        return self.views

    def prepare(self, jobs):
        pass

    async def run_task(self, device, task):
        view = next(v for v in self.truth if v.device == device)
        if self.training[device]:
            self.overlaps.append((device, task.job, set(self.training[device])))
        self.training[device].add(task.job)
        self.started[(device, task.job, task.round)] = self.clock.now()
        try:
            shift, rate = round_time.shift_and_rate(view.a, view.mu, task.training.epochs, 20)
            duration = float(round_time.sample(self.rng[device], shift, rate))
            await self.clock.sleep(duration)
            if (device, task.job, task.round) in self.fail:
                raise DeviceFailure(device, "lost connection")
            weights = {"w": task.weights["w"] + 1}
            if (device, task.job, task.round) in self.bad:
                weights = {"w": np.full(1, np.nan, np.float32)}
            state = None
            if self.energy and int(device[1:]) % 2 == 0:
                state = {"energy_j": 2.0 * duration, "energy_source": "modelled"}
            return TaskResult(device, weights, 20, loss_of(device), duration, device_state=state)
        finally:
            self.training[device].discard(task.job)


def loss_of(device):
    """Each test device reports its own mean training loss: d3 reports 0.4."""
    return 0.1 * (1 + int(device[1:]))


def evaluate(spec, weights, x, y):
    return min(1.0, float(weights["w"][0]) / 10), 1.0 / (1 + float(weights["w"][0]))


class Events(list):
    """Every event of a run, in order (an observer)."""

    def __call__(self, event):
        self.append(event)

    def of(self, kind):
        return [e for e in self if isinstance(e, kind)]

    @property
    def records(self):
        return [e.record for e in self.of(RoundAggregated)]

    @property
    def refits(self):
        return [e.refit for e in self.of(ProfileRefitted)]


def make_jobs(count, method="random", target=0.5, max_rounds=30, fraction=0.3, size=10, target_loss=None):
    return [
        EngineJob(
            JobConfig(
                JobId(f"job{m}"), "lenet5", fraction=fraction, target_accuracy=target, target_loss=target_loss,
                max_rounds=max_rounds,
            ),
            spec=SPEC, scheduler=make_scheduler(method, seed=m, options={"rlds": {"pretrain_rounds": 3}}),
            samples={DeviceId(f"d{k}"): 20 for k in range(size)}, test_x=np.zeros((1, 1, 16, 16), np.float32),
            test_y=np.zeros(1, np.int64), weights={"w": np.zeros(1, np.float32)},
        )
        for m in range(count)
    ]


def run(jobs, size=10, seed=0, settings=None, events=None, losses=None, **fleet_kw):
    events = Events() if events is None else events

    async def main():
        clock = VirtualClock()
        fleet = StepFleet(size, clock, seed, **fleet_kw)
        engine = Engine(
            jobs, fleet, clock, evaluate, run_id="t", settings=settings or EngineSettings(seed=seed), observers=[events], losses=losses,
        )
        await engine.run()
        return fleet

    fleet = run_virtual(main())
    return events.records, fleet


@pytest.mark.parametrize("method", ["random", "greedy", "oort", "meta-greedy"])
def test_concurrent_jobs_never_share_a_device(method):
    records, fleet = run(make_jobs(3, method, target=0.8), size=10)
    assert fleet.overlaps == []
    # Check from the records too: intervals of one device never overlap across jobs.
    spans = defaultdict(list)
    for r in records:
        for d in r.devices:
            spans[d.device].append((r.started_s + d.wait_s, r.started_s + d.wait_s + d.duration_s, r.job))
    for device, intervals in spans.items():
        intervals.sort()
        for (s1, e1, j1), (s2, e2, j2) in itertools.pairwise(intervals):
            assert s2 >= e1 - 1e-9, f"{device} served {j1} and {j2} at once"
    assert {r.job for r in records} == {"job0", "job1", "job2"}


@pytest.mark.parametrize("method", ["random", "genetic", "meta-greedy"])
def test_jobs_may_plan_devices_other_jobs_release_soon(method):
    # 3 jobs of 4 devices each on 10 devices: planning over free devices only,
    # a job starting while the others train would get fewer than 4.
    records, fleet = run(make_jobs(3, method, target=0.8, fraction=0.4), size=10)  # plan_busy is the default
    assert fleet.overlaps == []
    assert all(len(r.plan) == 4 for r in records), "every plan has its full size"
    claimed = [(r.job, r.round, d.device) for r in records for d in r.devices if d.wait_s > 0]
    assert claimed, "no plan used a device another job was still training"
    for r in records:
        for d in r.devices:
            # The record says when the task started, and the round waited for it.
            assert fleet.started[(d.device, r.job, r.round)] == pytest.approx(r.started_s + d.wait_s)
            assert r.started_s + d.wait_s + d.duration_s <= r.ended_s + 1e-9
    assert {r.job for r in records} == {"job0", "job1", "job2"}

    free_only, _ = run(make_jobs(3, method, target=0.8, fraction=0.4), size=10, settings=EngineSettings(plan_busy=False))
    assert any(len(r.plan) < 4 for r in free_only)
    assert all(d.wait_s == 0 for r in free_only for d in r.devices)


def test_single_job_fl_runs_the_jobs_one_after_another_each_with_the_whole_fleet():
    records, _ = run(make_jobs(3, "random", target=0.5, fraction=0.4), size=10, settings=EngineSettings(parallel=False))
    assert [r.job for r in records] == ["job0"] * 5 + ["job1"] * 5 + ["job2"] * 5
    for before, after in itertools.pairwise(records):
        assert after.started_s >= before.ended_s - 1e-9  # one round at a time
    assert all(len(r.plan) == 4 and all(d.wait_s == 0 for d in r.devices) for r in records)


def test_jobs_stop_at_their_target_and_at_their_budget():
    jobs = make_jobs(2, target=0.5)
    jobs[1].config = dataclasses.replace(jobs[1].config, target_accuracy=None)
    jobs[1].max_rounds = 7
    records, _ = run(jobs)
    by_job = defaultdict(list)
    for r in records:
        by_job[r.job].append(r)
    assert [r.round for r in by_job["job0"]] == [1, 2, 3, 4, 5]  # accuracy 0.5 after round 5
    assert by_job["job0"][-1].accuracy == pytest.approx(0.5)
    assert [r.round for r in by_job["job1"]] == list(range(1, 8))
    assert jobs[0].stopped == "target" and jobs[1].stopped == "budget"
    # The clock is the run's: rounds follow each other in time.
    for rs in by_job.values():
        assert all(a.ended_s <= b.started_s + 1e-9 for a, b in itertools.pairwise(rs))


def test_a_run_is_one_stream_of_events_and_the_engine_alone_says_why_a_job_stopped():
    jobs = make_jobs(2, target=0.5)
    jobs[1].config = dataclasses.replace(jobs[1].config, target_accuracy=None)
    jobs[1].max_rounds = 7
    events = Events()
    run(jobs, events=events)
    started, finished = events[0], events[-1]
    assert isinstance(started, RunStarted) and started.jobs == ("job0", "job1")
    assert set(started.devices) == {f"d{k}" for k in range(10)}
    assert isinstance(finished, RunFinished) and finished.stopped == {"job0": "target", "job1": "budget"}
    stops = events.of(JobStopped)
    assert [(s.job, s.reason, s.rounds) for s in sorted(stops, key=lambda s: s.job)] == [
        ("job0", "target", 5), ("job1", "budget", 7)
    ]
    for stop in stops:  # after the job's last round, which carries the same verdict
        rounds = [e for e in events.of(RoundAggregated) if e.job == stop.job]
        assert events.index(stop) > events.index(rounds[-1])
        assert [e.stopped for e in rounds] == [None] * (len(rounds) - 1) + [stop.reason]
    sent = {(e.job, e.round, e.device): events.index(e) for e in events.of(TaskSent)}
    answered = {(e.job, e.round, e.result.device): events.index(e) for e in events.of(DeviceResult)}
    for aggregated in events.of(RoundAggregated):
        r = aggregated.record
        for d in r.devices:  # every device of the round was sent its task and answered before the round ended
            key = (r.job, r.round, d.device)
            assert sent[key] < answered[key] < events.index(aggregated)
    assert len(sent) == len(answered) == sum(len(r.devices) for r in events.records)


def test_a_device_reaches_the_engine_only_by_an_explicit_join():
    def with_latecomer(join):
        jobs = make_jobs(1, target=None, max_rounds=12, fraction=0.5)
        for job in jobs:
            del job.samples[DeviceId("d9")]  # d9 holds no shard yet: the fleet offers it, no job may plan it
        events = Events()

        async def main():
            clock = VirtualClock()
            engine = Engine(jobs, StepFleet(10, clock), clock, evaluate, run_id="t", observers=[events])
            if join:
                engine.join(DeviceId("d9"), {JobId("job0"): 20})
            engine.leave(DeviceId("d3"), "unplugged")  # said; the fleet still offers it here
            await engine.run()

        run_virtual(main())
        return jobs[0], events

    job, events = with_latecomer(join=False)
    assert all(d.device != "d9" for r in events.records for d in r.devices)
    job, events = with_latecomer(join=True)
    assert job.samples[DeviceId("d9")] == 20
    assert any(d.device == "d9" for r in events.records for d in r.devices)
    assert [e.device for e in events.of(DeviceJoined)] == ["d9"]
    assert [(e.device, e.reason) for e in events.of(DeviceLeft)] == [("d3", "unplugged")]


def test_the_engine_stops_a_job_where_the_report_says_it_reached_its_target():
    # Accuracy r/10 reaches 0.9 in round 9; loss 1/(1+r) reaches 0.25 in round 3.
    # Both targets set: the first one met ends the job, and the report (one
    # definition of "target reached") dates the job's time to target there.
    jobs = make_jobs(1, target=0.9, target_loss=0.25)
    records, _ = run(jobs)
    assert [r.round for r in records] == [1, 2, 3] and jobs[0].stopped == "target"
    c = jobs[0].config
    info = JobInfo("t", c.name, c.model, c.dataset, c.target_accuracy, c.target_loss, c.max_rounds, "k")
    outcome = job_outcomes([info], records)[c.name]
    assert outcome.reached_target and outcome.time_to_target_s == records[-1].ended_s


def test_a_smoothed_target_stops_a_job_on_its_last_rounds_mean_as_the_report_dates_it():
    # Accuracy r/10 after round r: 0.5 alone in round 5; the mean of rounds r-2..r, (r-1)/10, only in round 6.
    jobs = make_jobs(1, target=0.5)
    jobs[0].config = dataclasses.replace(jobs[0].config, target_window=3)
    records, _ = run(jobs)
    assert [r.round for r in records] == [1, 2, 3, 4, 5, 6] and jobs[0].stopped == "target"
    assert records[4].accuracy == pytest.approx(0.5)  # round 5 alone met it: the window did not stop there
    c = jobs[0].config
    info = JobInfo("t", c.name, c.model, c.dataset, c.target_accuracy, c.target_loss, c.max_rounds, "k", c.target_window)
    assert job_outcomes([info], records)[c.name].time_to_target_s == records[-1].ended_s
    # Resumed after round 4 with its recorded scores (as the driver rebuilds them), it stops in round 6 as well.
    resumed = make_jobs(1, target=0.5)[0]
    resumed.config, resumed.rounds_done, resumed.weights = c, 4, {"w": np.full(1, 4.0, np.float32)}
    resumed.scores = tuple((r.accuracy, r.loss) for r in records[1:4])
    again, _ = run([resumed])
    assert [r.round for r in again] == [5, 6] and resumed.stopped == "target"


def test_same_seed_same_schedule_and_times():
    first, _ = run(make_jobs(3, "meta-greedy", target=0.6), seed=4)
    again, _ = run(make_jobs(3, "meta-greedy", target=0.6), seed=4)
    assert [(r.job, r.round, r.plan, r.started_s, r.ended_s) for r in first] == [
        (r.job, r.round, r.plan, r.started_s, r.ended_s) for r in again
    ]
    other, _ = run(make_jobs(3, "meta-greedy", target=0.6), seed=5)
    assert [r.ended_s for r in other] != [r.ended_s for r in first]


def test_a_failed_device_is_recorded_and_the_job_goes_on():
    jobs = make_jobs(1, "greedy", target=0.3, fraction=0.3)
    # Greedy's first plan is deterministic: fail its first device in round 1,
    # and make another send NaNs in round 2.
    probe, _ = run(make_jobs(1, "greedy", target=0.1, fraction=0.3))
    first, second = probe[0].plan[0], probe[0].plan[1]
    records, _ = run(jobs, fail={(first, "job0", 1)}, bad={(second, "job0", 2)})
    r1, r2 = records[0], records[1]
    assert [d.status for d in r1.devices if d.device == first] == ["failed"]
    assert [d.error for d in r1.devices if d.device == first] == ["lost connection"]
    assert [d.status for d in r2.devices if d.device == second] == ["rejected"]
    assert "non-finite" in next(d.error for d in r2.devices if d.device == second)
    assert r1.aggregated and r2.aggregated
    assert records[-1].accuracy >= 0.3  # the job reached its target anyway


def test_profiles_are_refined_online_from_observed_rounds():
    # The fleet's profiles claim every device is 3x slower than it is; with a
    # window the engine refits them from the rounds it observes.
    jobs = make_jobs(1, "random", target=None, max_rounds=60, fraction=0.5, size=6)
    events = Events()
    _, fleet = run(jobs, size=6, settings=EngineSettings(profile_window=30, profile_min_observations=5), events=events, misprofiled=3.0)
    assert events.refits, "no refit was recorded"
    latest = {r.device: r for r in events.refits}
    for truth in fleet.truth:
        refit = latest[truth.device]
        assert refit.observations >= 10
        # The expected time per sample, a + 1/mu (what plans are scored by),
        # is back near the truth instead of 3x off.
        assert refit.a + 1 / refit.mu == pytest.approx(truth.a + 1 / truth.mu, rel=0.3)
    assert [r.at_s for r in events.refits] == sorted(r.at_s for r in events.refits)


class Recording:
    """A scheduler that keeps every outcome it observes (Random plans)."""

    name = "recording"

    def __init__(self):
        self.inner = make_scheduler("random", seed=0)
        self.outcomes = []

    def plan(self, ctx):
        return self.inner.plan(ctx)

    def observe(self, ctx, outcome):
        self.outcomes.append((ctx, outcome))


def test_schedulers_observe_each_returned_devices_mean_loss():
    jobs = make_jobs(1, target=None, max_rounds=4, fraction=0.5)
    jobs[0].scheduler = Recording()
    probe, _ = run(make_jobs(1, target=None, max_rounds=1, fraction=0.5))
    lost = probe[0].plan[0]
    run(jobs, fail={(lost, "job0", 1)})
    observed = jobs[0].scheduler.outcomes
    assert len(observed) == 4
    for ctx, outcome in observed:
        assert set(outcome.losses) == set(outcome.durations) == set(outcome.plan) - outcome.failed
        for k, loss in outcome.losses.items():
            assert loss == pytest.approx(loss_of(ctx.fleet.ids[k]))
    assert observed[0][1].failed, "the first round's lost device should not report a loss"


def test_plans_see_the_loss_each_device_last_reported_for_the_job():
    # The cost model's statistical utility reads PlanContext.losses: NaN for devices not heard from yet.
    jobs = make_jobs(1, target=None, max_rounds=4, fraction=0.3)
    jobs[0].scheduler = Recording()
    run(jobs)
    contexts = [ctx for ctx, _ in jobs[0].scheduler.outcomes]
    assert contexts[0].losses is None
    heard = set()
    for ctx, outcome in jobs[0].scheduler.outcomes:
        if ctx.losses is not None:
            for k, device in enumerate(ctx.fleet.ids):
                if device in heard:
                    assert ctx.losses[k] == pytest.approx(loss_of(device))
                else:
                    assert np.isnan(ctx.losses[k])
        heard |= {ctx.fleet.ids[k] for k in outcome.losses}
    assert contexts[-1].losses is not None


def test_a_resumed_engine_plans_with_the_losses_recorded_before():
    # Resume hands the engine each device's last recorded loss (Storage.last_losses): the first plan sees them.
    jobs = make_jobs(1, target=None, max_rounds=1, fraction=0.3)
    jobs[0].scheduler = Recording()
    run(jobs, losses={"job0": {"d1": 0.25, "d4": 3.0}, "gone": {"d1": 1.0}})
    ctx = jobs[0].scheduler.outcomes[0][0]
    assert ctx.losses is not None
    recorded = {device: ctx.losses[k] for k, device in enumerate(ctx.fleet.ids) if np.isfinite(ctx.losses[k])}
    assert recorded == {"d1": 0.25, "d4": 3.0}


def test_schedulers_see_each_jobs_objective_a_target_or_a_round_budget():
    # job0 stops at a target; job1 runs its 6 rounds (Meta-Greedy's horizon follows this); job2's target is a loss.
    jobs = make_jobs(3, target=None, max_rounds=6, fraction=0.2)
    jobs[0] = make_jobs(1, target=0.9, max_rounds=6, fraction=0.2)[0]
    jobs[2].config = dataclasses.replace(jobs[2].config, target_loss=0.01)
    for job in jobs:
        job.scheduler = Recording()
    run(jobs)
    objectives = (Objective(accuracy=0.9, rounds=6), Objective(rounds=6), Objective(loss=0.01, rounds=6))
    for job in jobs:
        seen = {tuple(model.objective for model in ctx.jobs) for ctx, _ in job.scheduler.outcomes}
        assert seen == {objectives}, job.name
        assert all(outcome.loss is not None for _, outcome in job.scheduler.outcomes)  # the test loss, for a loss target
    # A resumed job (2 of its 6 rounds done): Meta-Greedy prices plans over the rounds left, 4 down to 1.
    meta = make_jobs(1, method="meta-greedy", target=None, max_rounds=6, fraction=0.2)[0]
    meta.rounds_done = 2
    run([meta])
    beta = CostWeights().beta
    assert [c.fairness_weight / beta for c in meta.scheduler.choices] == pytest.approx([4.0, 3.0, 2.0, 1.0])


def test_the_engine_records_the_energy_each_device_told_and_none_for_the_rest():
    records, _ = run(make_jobs(2), fail=[("d0", "job0", 1), ("d2", "job1", 1)], energy=True)
    devices = [d for r in records for d in r.devices]
    told = [d for d in devices if d.status == "ok" and int(d.device[1:]) % 2 == 0]
    assert told and all(d.energy_j == pytest.approx(2.0 * d.duration_s) for d in told)
    assert all(d.energy_j is None for d in devices if d not in told)  # silent devices, failed tasks
    assert any(d.status == "failed" for d in devices)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"energy_j": 12.5, "energy_source": "battery"}, 12.5),
        ({"energy_j": 3, "energy_source": "modelled"}, 3.0),
        ({"energy_j": None, "energy_source": "charging"}, None),
        ({"energy_j": -1.0}, None),
        ({"energy_j": float("nan")}, None),
        ({"energy_j": True}, None),
        ({"energy_j": "12"}, None),
        ({"battery_pct": 80}, None),
        (None, None),
    ],
)
def test_a_devices_energy_is_read_from_its_device_state_or_not_known(state, expected):
    assert energy_j(state) == expected


def two_runs(share: bool, late_s: float = 5.0):
    """Two runs' engines over one fleet of 10 and one occupancy, as the lab service runs them: run "a" with two
    jobs that each want every device, run "b" (one such job) starting ``late_s`` later."""
    def jobs(run, count):
        made = make_jobs(count, "random", target=0.8, fraction=1.0)
        for m, job in enumerate(made):
            job.config = dataclasses.replace(job.config, name=JobId(f"{run}{m}"))
        return made

    async def main():
        clock = VirtualClock()
        fleet = StepFleet(10, clock, 0)
        policy = FairShare(devices=lambda: 10)
        occupancy = Occupancy(policy if share else None)
        events = {"a": Events(), "b": Events()}

        def engine(run, count):
            policy.admit(run, run_needs(1, [1.0] * count, 10))
            policy.ready(run, occupancy)
            return Engine(jobs(run, count), fleet, clock, evaluate, run_id=run, settings=EngineSettings(seed=1),
                          observers=[events[run]], occupancy=occupancy)

        async def later():
            await clock.sleep(late_s)
            await engine("b", 1).run()

        async with asyncio.TaskGroup() as group:
            group.create_task(engine("a", 2).run())
            group.create_task(later())
        return fleet, events["a"].records, events["b"].records

    return run_virtual(main())


def test_the_runs_of_a_lab_share_one_fleet_device_by_device_and_none_starves():
    fleet, a, b = two_runs(share=True)
    assert fleet.overlaps == []  # across runs too, a device serves one job at a time
    assert {r.job for r in a} == {"a0", "a1"} and {r.job for r in b} == {"b0"}
    assert max(r.accuracy for r in b) >= 0.8 and max(r.accuracy for r in a) >= 0.8
    # Round by round: b's first round starts within a second of its arrival (run clocks: b's starts at 5 s),
    # its rounds run while a's do, and from its second round on b holds its share, half of the 10 devices.
    a_ends = max(r.ended_s for r in a)
    assert min(r.started_s for r in b) < 1.0 and sum(r.started_s + 5.0 < a_ends for r in b) >= 3
    assert all(len(r.plan) >= 5 for r in b[1:]), [len(r.plan) for r in b]
    # Without a share between runs, b gets what a's jobs leave between their plans.
    fleet, a, b = two_runs(share=False)
    assert fleet.overlaps == []
    assert any(len(r.plan) < 5 for r in b[1:])


def test_a_run_holds_at_most_its_share_while_another_run_is_short():
    policy = FairShare(devices=lambda: 10)
    occupancy = Occupancy(policy)
    for run in "abc":
        policy.admit(run, run_needs(2, [0.5], 10))
        policy.ready(run, occupancy)
    for k in range(6):
        occupancy.take(DeviceId(f"d{k}"), ("a", JobId("a0")), 0.0)
    occupancy.claim(DeviceId("d0"), ("a", JobId("a1")))  # a device counts once however a run holds it
    assert occupancy.held_by("a") == 6 and occupancy.held_by("b") == 0
    assert occupancy.allowance("a") is None  # nobody else is short: a may take every free device
    occupancy.planned(("a", JobId("a1")), 5, 2)
    assert occupancy.allowance("a") is None  # its own short jobs do not limit it
    occupancy.planned(("b", JobId("b0")), 5, 3)
    # a wants 5 + 5, b 5, c 5 before it plans: floors 2 each, then one at a time to the fewest: 4 / 3 / 3
    assert occupancy.allowance("a") == 0  # its share 4 <= the 6 it holds
    assert occupancy.allowance("b") == 3
    occupancy.planned(("b", JobId("b0")), 5, 5)  # b got what it wanted
    assert occupancy.allowance("a") is None
    assert Occupancy().allowance("a") is None  # one run alone: no share at all


class Threaded:
    """A scheduler that notes the thread of each call and how many of its kind's plans were in flight at once."""

    name = "threaded"
    in_flight = 0
    most = 0

    def __init__(self, seed):
        self.inner = make_scheduler("meta-greedy", seed=seed, options={"rlds": {"pretrain_rounds": 3}})
        self.threads = set()

    def plan(self, ctx):
        Threaded.in_flight += 1
        Threaded.most = max(Threaded.most, Threaded.in_flight)
        try:
            self.threads.add(threading.get_ident())
            return self.inner.plan(ctx)
        finally:
            Threaded.in_flight -= 1

    def observe(self, ctx, outcome):
        self.threads.add(threading.get_ident())
        self.inner.observe(ctx, outcome)


def test_schedulers_plan_and_learn_off_the_loop_one_plan_at_a_time_and_the_schedule_stays_the_seeds():
    # Meta-Greedy's plan takes a tenth of a second: the loop that carries the heartbeats must not wait it out.
    # Three jobs' plans go one at a time (the occupancy's planning lock), so none takes a device another took.
    class Noted(Events):
        def __init__(self):
            super().__init__()
            self.threads = set()

        def __call__(self, event):
            self.threads.add(threading.get_ident())  # observers run on the loop
            super().__call__(event)

    def traced():
        jobs = make_jobs(3, target=0.8, max_rounds=8)
        for m, job in enumerate(jobs):
            job.scheduler = Threaded(seed=m)
        events = Noted()
        records, fleet = run(jobs, seed=3, events=events)
        return jobs, records, fleet, events.threads

    Threaded.most = 0
    jobs, records, fleet, loop_threads = traced()
    assert len(loop_threads) == 1
    for job in jobs:
        assert job.scheduler.threads and not job.scheduler.threads & loop_threads
    assert Threaded.most == 1
    assert fleet.overlaps == []
    _, again, _, _ = traced()
    assert [(r.job, r.round, r.plan, r.started_s) for r in again] == [(r.job, r.round, r.plan, r.started_s) for r in records]
