"""`mjfl testbed run`: the coordinator in real time, over phones or emulated devices.

Starts the WebSocket server, optionally N local emulated devices (the
embedded default: no phones needed), waits for the fleet, partitions each
job's data over the devices that came, and runs the engine with the wall
clock. Every round is checkpointed (global models, scheduler state) and
recorded in SQLite, so ``--resume`` continues a run that crashed or was
interrupted, and Ctrl-C stops cleanly with everything flushed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl.coordinator import report
from mjfl.coordinator.checkpoint import Checkpoints, JobCheckpoint
from mjfl.coordinator.clock import RealClock
from mjfl.coordinator.config import RunConfig, config_to_dict
from mjfl.coordinator.engine import Engine, EngineJob
from mjfl.coordinator.records import JobInfo, ProfileRefit, RoundRecord, RunInfo
from mjfl.coordinator.setup import engine_jobs, evaluate_job, fleet_profiles, prepare_jobs
from mjfl.coordinator.simulate import apply_round_budgets, settings_for
from mjfl.coordinator.storage import Storage
from mjfl.errors import RunError, UserError
from mjfl.ids import DeviceId

log = logging.getLogger(__name__)


class TestbedSink:
    """Checkpoint first, then commit the round (see checkpoint.py), then show it."""

    def __init__(self, storage: Storage, checkpoints: Checkpoints, method: str, view: report.LiveView) -> None:
        self.storage = storage
        self.checkpoints = checkpoints
        self.method = method
        self.view = view

    def round_finished(self, job: EngineJob, record: RoundRecord, choices: Mapping[str, float] | None) -> None:
        self.checkpoints.save(
            job.name, JobCheckpoint(record.round, dict(job.weights), job.scheduler, job.best_accuracy, job.stopped)
        )
        self.storage.record_round(record, choices)
        self.view.update(record, self.method)
        if job.stopped is None and record.round >= job.max_rounds:
            self.view.set_status(self.method, job.name, "stopped")

    def profile_refitted(self, refit: ProfileRefit) -> None:
        self.storage.record_refit(refit)


def testbed_run(
    config: RunConfig,
    *,
    emulate: int = 0,
    resume: bool = False,
    console: Console | None = None,
    live: bool = True,
) -> dict[str, Any]:
    """Run the config's jobs in real time; returns the summary also written to ``out_dir``."""
    console = console or Console(stderr=True)
    out_dir = config.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    method = config.scheduler.method
    with Storage(config.database_path) as storage:
        if resume:
            run_id = _resumable_run(storage, out_dir)
            info = storage.resume_run(run_id)
            infos = storage.jobs(run_id)
            console.print(f"resuming run {run_id} after {', '.join(f'{j.job}: round {storage.last_round(run_id, j.job)}' for j in infos)}")
            started_at = info.started_at
        else:
            started_at = dt.datetime.now(dt.UTC).isoformat()
            run_id = f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%S}-testbed-{method}"
            infos = []
        view = report.LiveView(enabled=live, console=console, clock="wall")
        status = "failed"
        try:
            with view:
                infos = asyncio.run(_main(config, storage, run_id, started_at, infos, emulate, resume, view, console))
            status = "finished"
        except KeyboardInterrupt:
            status = "interrupted"
            console.print(f"[yellow]interrupted[/]: every finished round is saved; continue with --resume (run {run_id})")
            raise
        finally:
            storage.finish_run(run_id, status, dt.datetime.now(dt.UTC).isoformat())
        results = {method: (infos, storage.rounds(run_id))}
        summary = report.summary(results)
        report.write_summary(out_dir / "summary.json", summary)
        report.write_rounds_csv(out_dir / "rounds.csv", results)
        report.plot_accuracy(out_dir, results)
        report.plot_meta_greedy_wins(out_dir / "meta-greedy-wins.png", storage.choices(run_id))
    console.print(report.results_table(summary, infos))
    console.print(f"wrote {out_dir}/summary.json, rounds.csv and plots; records in {config.database_path} (run {run_id})")
    return summary


def _resumable_run(storage: Storage, out_dir: Path) -> str:
    """The newest unfinished real-time run that wrote to ``out_dir``."""
    for info, status in reversed(storage.runs()):
        if info.mode == "real" and status != "finished" and json.loads(info.config_json).get("out_dir") == str(out_dir):
            return info.run_id
    raise UserError(f"--resume: no unfinished testbed run recorded for {out_dir} in this database")


async def _main(
    config: RunConfig,
    storage: Storage,
    run_id: str,
    started_at: str,
    infos: list[JobInfo],
    emulate: int,
    resume: bool,
    view: report.LiveView,
    console: Console,
) -> list[JobInfo]:
    from mjfl.android_bridge.emulator import run_emulated_fleet
    from mjfl.coordinator.server import CoordinatorServer, ServerSettings

    tb = config.testbed
    checkpoints = Checkpoints(config.out_dir / "checkpoints" / run_id)
    settings = ServerSettings(
        heartbeat_interval=tb.heartbeat_interval_s, heartbeat_timeout=tb.heartbeat_timeout_s,
        max_message_bytes=int(tb.max_message_mb * 2**20), task_timeout=tb.task_timeout_s,
    )
    lab_profiles = []
    if config.fleet.profiles is not None:
        from mjfl.profiling.profiles import load_profiles

        lab_profiles = load_profiles(config.fleet.profiles)
    async with CoordinatorServer(tb.host, tb.port, settings=settings, profiles=lab_profiles) as server:
        emulated = None
        if emulate:
            # Emulated devices impersonate the config's fleet (a profile file,
            # or the synthetic generator), so rounds are as heterogeneous as
            # the devices they stand in for.
            impersonate = fleet_profiles(dataclasses.replace(config, fleet=dataclasses.replace(config.fleet, size=emulate)))
            emulated = run_emulated_fleet(
                server.url, emulate, runtime=config.fleet.runtime, profiles=impersonate,  # type: ignore[arg-type]
                workers=config.fleet.workers, seed=config.seed,
            )
            console.print(f"started {emulate} emulated devices ({config.fleet.runtime}) for {server.url}")
        try:
            return await _run(config, storage, run_id, started_at, infos, resume, server, checkpoints, view, console, emulate)
        finally:
            if emulated is not None:
                await emulated.aclose()


async def _run(
    config: RunConfig,
    storage: Storage,
    run_id: str,
    started_at: str,
    infos: list[JobInfo],
    resume: bool,
    server: Any,
    checkpoints: Checkpoints,
    view: report.LiveView,
    console: Console,
    emulate: int,
) -> list[JobInfo]:
    tb = config.testbed
    wanted = tb.min_devices or emulate or config.fleet.size or 1
    with console.status(f"waiting for {wanted} devices on {server.url} ...") as status:
        def progress(connected: int, needed: int) -> None:
            status.update(f"waiting for devices on {server.url}: {connected}/{needed} connected")

        await server.wait_for_devices(wanted, timeout=tb.wait_timeout_s, progress=progress)
    devices_file = checkpoints.root / "devices.json"
    if resume:
        # The partition must be the one the run started with.
        devices = [DeviceId(d) for d in json.loads(devices_file.read_text())]
    else:
        devices = sorted(server.connected())
        devices_file.parent.mkdir(parents=True, exist_ok=True)
        devices_file.write_text(json.dumps(devices))
    console.print(f"{len(server.connected())} devices connected; preparing {len(config.jobs)} jobs over {len(devices)} devices")
    prepared = await asyncio.to_thread(prepare_jobs, config, devices)
    method = config.scheduler.method
    if not resume:
        infos = [job.info(run_id) for job in prepared]
        config_json = json.dumps(config_to_dict(config) | {"method": method, "devices": len(devices)})
        storage.start_run(RunInfo(run_id, method, "real", config.seed, config_json, started_at), infos)
    jobs = engine_jobs(config, prepared, method)
    apply_round_budgets(storage, jobs, infos, run_id)
    settings = settings_for(config)
    settings.device_wait_s = tb.wait_timeout_s  # phones that drop out may come back
    frequencies = None
    if resume:
        for job in jobs:
            done = storage.last_round(run_id, job.name)
            if done:
                saved = checkpoints.load(job.name, done)
                job.weights, job.scheduler = saved.weights, saved.scheduler
                job.rounds_done, job.best_accuracy, job.stopped = done, saved.best_accuracy, saved.stopped
        settings.time_offset = storage.elapsed_s(run_id)
        frequencies = storage.participation(run_id)
    view.add_jobs(method, infos)
    await server.fleet.prepare([job.artifacts for job in prepared])
    engine = Engine(
        jobs, server.fleet, RealClock(), evaluate_job, run_id=run_id, settings=settings,
        sink=TestbedSink(storage, checkpoints, method, view), frequencies=frequencies,
    )
    await engine.run()
    if all(job.stopped == "no devices" for job in jobs):
        raise RunError("no job could run: too few devices")
    return infos
