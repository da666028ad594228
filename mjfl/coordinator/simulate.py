"""`mjfl simulate`: every method on identical jobs, fleet and seed, in virtual time.

This is how the paper's tables were produced: devices train for real, their
round times are sampled from their profiles (Formula 4), and the virtual clock
makes an experiment of hours on phones take minutes here. Each method's run is
recorded in the SQLite database; the summary, CSV, plots and table are
computed from those records.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl.coordinator import report
from mjfl.coordinator.clock import VirtualClock, run_virtual
from mjfl.coordinator.config import RunConfig, config_to_dict
from mjfl.coordinator.engine import Engine, EngineJob, EngineSettings
from mjfl.coordinator.records import JobInfo, ProfileRefit, RoundRecord, RunInfo, SchedulerChoice
from mjfl.coordinator.setup import (
    PreparedJob,
    engine_jobs,
    evaluate_job,
    fleet_profiles,
    prepare_jobs,
)
from mjfl.coordinator.simulated import SimulatedDevice, SimulatedFleet, _init_worker
from mjfl.coordinator.storage import Storage
from mjfl.errors import UserError
from mjfl.ids import DeviceId
from mjfl.schedulers.base import CostWeights
from mjfl.schedulers.registry import METHODS

log = logging.getLogger(__name__)


class RecordingSink:
    """Sends every finished round to the database and the live view."""

    def __init__(self, storage: Storage, method: str, view: report.LiveView | None) -> None:
        self.storage = storage
        self.method = method
        self.view = view

    def round_finished(self, job: EngineJob, record: RoundRecord, choices: Mapping[str, float] | None) -> None:
        self.storage.record_round(record, choices)
        if self.view is not None:
            self.view.update(record, self.method)
            if job.stopped == "budget" or (job.stopped is None and record.round >= job.max_rounds):
                self.view.set_status(self.method, job.name, "stopped")

    def profile_refitted(self, refit: ProfileRefit) -> None:
        self.storage.record_refit(refit)


def settings_for(config: RunConfig) -> EngineSettings:
    s = config.scheduler
    return EngineSettings(
        weights=CostWeights(alpha=s.alpha, beta=s.beta, omega=s.omega),  # type: ignore[arg-type]
        min_plan=s.min_plan, min_returns=s.min_returns, seed=config.seed, profile_window=s.profile_window,
    )


def apply_round_budgets(storage: Storage, jobs: Sequence[EngineJob], infos: Sequence[JobInfo], run_id: str) -> None:
    """R_m from earlier runs of the same job (Formula 10), capped by the configured maximum."""
    from mjfl.coordinator.budget import round_budget

    for job, info in zip(jobs, infos):
        histories = storage.loss_history(info.job_key, exclude_run=run_id)
        budget, curve = round_budget(histories, job.target_loss, cap=job.max_rounds)
        if curve is not None:
            log.info("job %s: R_m = %d rounds from %d earlier runs (%s)", job.name, budget, len(histories), curve)
        job.max_rounds = budget


def simulate(
    config: RunConfig,
    methods: Sequence[str],
    out_dir: Path,
    *,
    console: Console | None = None,
    live: bool = True,
) -> dict[str, Any]:
    """Run every method in virtual time and write summary.json, rounds.csv and the plots to ``out_dir``."""
    console = console or Console(stderr=True)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise UserError(f"--methods: unknown {unknown}; choose from {', '.join(METHODS)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    profiles = fleet_profiles(config)
    devices = [DeviceId(p.device_id) for p in profiles]
    with console.status(f"preparing {len(config.jobs)} jobs over {len(devices)} devices (data, partitions, programs) ..."):
        prepared = prepare_jobs(config, devices)
    fleet_devices = [SimulatedDevice(DeviceId(p.device_id), p.a, p.mu, config.fleet.dropout) for p in profiles]
    workers = config.fleet.workers or os.cpu_count() or 1
    stamp = dt.datetime.now(dt.UTC)
    results: dict[str, tuple[list[JobInfo], list[RoundRecord]]] = {}
    choices: list[SchedulerChoice] = []
    with Storage(config.database_path) as storage, ProcessPoolExecutor(workers, initializer=_init_worker) as pool:
        view = report.LiveView(enabled=live, console=console)
        with view:
            for method in methods:
                run_id = f"{stamp:%Y%m%dT%H%M%S}-{method}"
                infos = [job.info(run_id) for job in prepared]
                config_json = json.dumps(config_to_dict(config) | {"method": method})
                storage.start_run(RunInfo(run_id, method, "virtual", config.seed, config_json, stamp.isoformat()), infos)
                view.add_jobs(method, infos)
                jobs = engine_jobs(config, prepared, method)
                apply_round_budgets(storage, jobs, infos, run_id)
                status = "failed"
                try:
                    run_virtual(_run(config, prepared, jobs, fleet_devices, pool, run_id, RecordingSink(storage, method, view)))
                    status = "finished"
                except KeyboardInterrupt:
                    status = "interrupted"
                    raise
                finally:
                    storage.finish_run(run_id, status, dt.datetime.now(dt.UTC).isoformat())
                results[method] = (infos, storage.rounds(run_id))
                if method == "meta-greedy":
                    choices = storage.choices(run_id)
        summary = report.summary(results)
    report.write_summary(out_dir / "summary.json", summary)
    report.write_rounds_csv(out_dir / "rounds.csv", results)
    report.plot_accuracy(out_dir, results)
    report.plot_meta_greedy_wins(out_dir / "meta-greedy-wins.png", choices)
    console.print(report.results_table(summary, [info for info in next(iter(results.values()))[0]]))
    console.print(f"wrote {out_dir}/summary.json, rounds.csv and plots; records in {config.database_path}")
    return summary


async def _run(
    config: RunConfig,
    prepared: Sequence[PreparedJob],
    jobs: list[EngineJob],
    devices: list[SimulatedDevice],
    pool: ProcessPoolExecutor,
    run_id: str,
    sink: RecordingSink,
) -> None:
    clock = VirtualClock()
    fleet = SimulatedFleet(devices, clock, seed=config.seed, runtime=config.fleet.runtime, executor=pool)
    try:
        await fleet.prepare([job.artifacts for job in prepared])
        engine = Engine(jobs, fleet, clock, evaluate_job, run_id=run_id, settings=settings_for(config), sink=sink)
        await engine.run()
    finally:
        fleet.close()
