"""`mjfl profile` and `mjfl profile show`: run a profiling session, inspect its profiles."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from mjfl.coordinator.config import JobConfig, RunConfig, TestbedConfig
from mjfl.errors import UserError
from mjfl.ids import DeviceId, JobId
from mjfl.profiling.profiles import DeviceProfile, load_profiles, save_profiles
from mjfl.profiling.session import (
    Observation,
    calibration_jobs,
    fit_profiles,
    read_observations,
    run_session,
    write_observations,
)

# Without a config: one small calibration job (LeNet-5 on digits).
DEFAULT_JOB = JobConfig(name=JobId("lenet5"), model="lenet5", image_size=12, batch_size=8, lr=0.05, partition="iid")


def default_config(emulate: int) -> RunConfig:
    from mjfl.coordinator.config import FleetConfig

    return RunConfig(jobs=(DEFAULT_JOB,), fleet=FleetConfig(size=max(emulate, 1)), out_dir=Path("runs/profile"))


def profile_run(
    config: RunConfig,
    *,
    emulate: int = 0,
    devices: Sequence[str] = (),
    rounds: int = 10,
    out_dir: Path,
    console: Console,
) -> list[DeviceProfile]:
    """Profile connected (or emulated) devices; writes profiles.json, observations.csv, table and plots."""
    if rounds < 3:
        raise UserError("--rounds must be >= 3 (a fit needs at least 3 observations per device)")
    out_dir.mkdir(parents=True, exist_ok=True)
    truth: dict[str, DeviceProfile] = {}
    observations, _hardware, profiles, skipped = asyncio.run(
        _session(config, emulate, list(devices), rounds, console, truth)
    )
    created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    write_observations(out_dir / "observations.csv", observations)
    if not profiles:
        raise UserError(f"no device could be profiled: {skipped}")
    save_profiles(out_dir / "profiles.json", profiles, created=created)
    from mjfl.coordinator.storage import Storage

    with Storage(config.database_path) as storage:
        storage.save_profiles(profiles, updated_at=created)
    for device, why in skipped.items():
        console.print(f"[yellow]{device}[/]: not profiled ({why})")
    show(out_dir / "profiles.json", console=console, truth=truth)
    console.print(f"wrote {out_dir}/profiles.json, observations.csv and plots; profiles saved in {config.database_path}")
    return profiles


async def _session(
    config: RunConfig, emulate: int, wanted: list[str], rounds: int, console: Console, truth: dict[str, DeviceProfile]
) -> tuple[list[Observation], dict[str, dict[str, object]], list[DeviceProfile], dict[str, str]]:
    from mjfl.android_bridge.emulator import run_emulated_fleet
    from mjfl.coordinator.server import CoordinatorServer, ServerSettings
    from mjfl.coordinator.setup import fleet_profiles, prepare_jobs
    from mjfl.jobs.models import initial_weights

    tb: TestbedConfig = config.testbed
    settings = ServerSettings(heartbeat_interval=tb.heartbeat_interval_s, heartbeat_timeout=tb.heartbeat_timeout_s)
    async with CoordinatorServer(tb.host, tb.port, settings=settings) as server:
        emulated = None
        if emulate:
            impersonate = fleet_profiles(dataclasses.replace(config, fleet=dataclasses.replace(config.fleet, size=emulate, profiles=config.fleet.profiles)))
            emulated = run_emulated_fleet(server.url, emulate, runtime=config.fleet.runtime, profiles=impersonate, seed=config.seed)  # type: ignore[arg-type]
            ids = [f"{_prefix()}-{i}" for i in range(emulate)]
            truth.update({d: dataclasses.replace(p, device_id=d) for d, p in zip(ids, impersonate)})
        try:
            needed = len(wanted) or emulate or tb.min_devices or 1
            with console.status(f"waiting for devices on {server.url} ...") as status:
                def progress(connected: int, n: int) -> None:
                    status.update(f"waiting for devices on {server.url}: {connected}/{n} connected")

                if wanted:
                    await _wait_for_ids(server, wanted, tb.wait_timeout_s, progress)
                else:
                    await server.wait_for_devices(needed, timeout=tb.wait_timeout_s, progress=progress)
            devices = [DeviceId(d) for d in (wanted or sorted(server.connected()))]
            hardware = {str(d): dict(server.connected()[d].hello.hardware) for d in devices if d in server.connected()}
            prepared = await asyncio.to_thread(prepare_jobs, config, devices)
            jobs = calibration_jobs(
                [(p.artifacts, initial_weights(p.spec, config.seed), p.config.batch_size, p.config.lr) for p in prepared]
            )
            total = len(devices) * rounds * len(prepared)
            with Progress(console=console, transient=True) as bar:
                task = bar.add_task(f"profiling {len(devices)} devices", total=total)
                observations = await run_session(
                    server.fleet, jobs, devices, rounds,
                    on_observation=lambda _: bar.advance(task),
                    on_failure=lambda d, why: (bar.advance(task), console.print(f"[yellow]{d}[/]: task failed ({why})")),
                )
        finally:
            if emulated is not None:
                await emulated.aclose()
    profiles, skipped = fit_profiles(observations, hardware)
    return observations, hardware, profiles, skipped


def _prefix() -> str:
    from mjfl.android_bridge.emulator import default_id_prefix

    return default_id_prefix()


async def _wait_for_ids(server: object, wanted: list[str], timeout: float, progress: object) -> None:
    async def poll() -> None:
        while True:
            connected = server.connected()  # type: ignore[attr-defined]
            progress(sum(d in connected for d in wanted), len(wanted))  # type: ignore[operator]
            if all(d in connected for d in wanted):
                return
            await asyncio.sleep(0.2)

    try:
        await asyncio.wait_for(poll(), timeout)
    except TimeoutError:
        connected = server.connected()  # type: ignore[attr-defined]
        missing = [d for d in wanted if d not in connected]
        raise UserError(f"--devices: {', '.join(missing)} did not connect within {timeout:g} s") from None


def show(path: Path, *, console: Console, out_dir: Path | None = None, truth: dict[str, DeviceProfile] | None = None) -> list[Path]:
    """Print a profile file as a table and plot each device's empirical vs fitted CDF."""
    profiles = load_profiles(path)
    truth = truth or {}
    table = Table(title=f"Device profiles ({path})")
    for column in ("device", "rounds", "a (ms/sample)", "a 95% CI", "mu", "mu 95% CI", "KS", "compute a", "comm. (s/round)", "source"):
        table.add_column(column, justify="left" if column in ("device", "source") else "right")
    if truth:
        table.add_column("emulated a", justify="right")
    for p in profiles:
        row = [
            p.device_id, str(p.n), f"{p.a * 1e3:.3f}", _interval(p.a_ci, 1e3), f"{p.mu:.1f}", _interval(p.mu_ci, 1),
            "—" if p.ks_statistic is None else f"{p.ks_statistic:.3f}",
            "—" if p.compute is None else f"{p.compute.a * 1e3:.3f}",
            "—" if p.communication is None else f"{p.communication.a + 1 / p.communication.mu:.3f}",
            p.source,
        ]
        if truth:
            row.append(f"{truth[p.device_id].a * 1e3:.3f}" if p.device_id in truth else "—")
        table.add_row(*row)
    console.print(table)
    observations_file = path.parent / "observations.csv"
    observations = read_observations(observations_file) if observations_file.exists() else []
    if not observations:
        console.print(f"no {observations_file.name} next to {path.name}: fitted CDFs are plotted without data")
    return plot_cdfs(profiles, observations, out_dir or path.parent / "plots")


def _interval(ci: tuple[float, float] | None, scale: float) -> str:
    return "—" if ci is None else f"[{ci[0] * scale:.3g}, {ci[1] * scale:.3g}]"


def plot_cdfs(profiles: Sequence[DeviceProfile], observations: Sequence[Observation], out_dir: Path) -> list[Path]:
    """One PNG per device: the empirical CDF of t/(tau D) against the fitted Formula 4."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for profile in profiles:
        x = np.sort([o.duration_s / (o.epochs * o.samples) for o in observations if o.device == profile.device_id])
        fig, ax = plt.subplots(figsize=(5, 3.5))
        hi = max(float(x.max()) if x.size else 0.0, profile.a + 5 / profile.mu)
        grid = np.linspace(0, hi * 1.05, 400)
        fitted = np.where(grid >= profile.a, 1 - np.exp(-profile.mu * (grid - profile.a)), 0.0)
        ax.plot(grid * 1e3, fitted, label=f"fitted: a={profile.a * 1e3:.2f} ms, mu={profile.mu:.0f}")
        if x.size:
            ax.step(x * 1e3, np.arange(1, x.size + 1) / x.size, where="post", label=f"observed ({x.size} rounds)")
        ax.set_xlabel("round time per sample and epoch, t / (tau D) [ms]")
        ax.set_ylabel("P[t < x]")
        ax.set_title(f"{profile.device_id} (Formula 4)")
        ax.legend(loc="lower right", fontsize=8)
        fig.tight_layout()
        path = out_dir / f"cdf-{_safe(profile.device_id)}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
