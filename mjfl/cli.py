"""The `mjfl` command line: parses, calls a command (``mjfl.commands``), prints.

Heavy imports (torch, executorch) happen inside the commands, so `mjfl --help`
stays fast. How options are spelled (one comma-separated value for a list,
earlier spellings refused with the new one) is ``mjfl.cli_syntax``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Collection, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from mjfl import logs
from mjfl.cli_syntax import DefaultRun, Typer, comma_list
from mjfl.errors import MjflError, UserError

if TYPE_CHECKING:
    from mjfl.coordinator.config import RunConfig
    from mjfl.coordinator.run.driver import Output
    from mjfl.device.emulated.ray_cluster import RayOptions
    from mjfl.device.phones.attached import PhoneOptions

app = Typer(name="mjfl", no_args_is_help=True, pretty_exceptions_enable=False)
bench_app = Typer(help="Benchmarks that print a table and write JSON figures (the code: mjfl/bench).", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
device_app = Typer(help="Devices: attached phones (over adb) and emulated ones.", no_args_is_help=True)
app.add_typer(device_app, name="devices")
app.add_typer(device_app, name="device", hidden=True)  # its old name
certs_app = Typer(help="TLS certificates for the coordinator's wss://.", no_args_is_help=True)
app.add_typer(certs_app, name="certs")
profile_app = Typer(cls=DefaultRun, help="""Profile devices: fit each one's round-time model, show a profile file.

`mjfl profile [CONFIG] [OPTIONS]` is short for `mjfl profile run [CONFIG] [OPTIONS]`.
""")
app.add_typer(profile_app, name="profile")

# Logs and CI are not terminals: rich would squeeze tables into 80 columns.
console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
_verbose = False


@app.callback()
def _options(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show every log line (third-party ones too) on the terminal.")] = False,
) -> None:
    """A testbed for multi-job federated learning on real and emulated phones.

    An option that takes several values takes them as one comma-separated
    list: --fleet-sizes 100,1000, --models lenet5,vgg6.
    """
    global _verbose
    _verbose = verbose
    logs.setup(verbose=verbose)


def _output(
    out_dir: Path, live: bool = True, dashboard_port: int | None = None, dashboard_host: str = "127.0.0.1"
) -> Output:
    """Where a command's results go; with ``dashboard_port``, its live dashboard (a token made up for a host others reach)."""
    from mjfl.coordinator.run.driver import Output

    token = None
    if dashboard_port is not None:
        from mjfl.coordinator.dashboard.server import needs_token, new_token

        if not 0 <= dashboard_port <= 65535:
            raise UserError(f"--dashboard-port {dashboard_port}: must be 0 to 65535 (0: any free port)")
        if needs_token(dashboard_host):
            token = new_token()
            console.print(f"--dashboard-host {dashboard_host} is reachable from other machines: the dashboard's"
                          " address carries a token made for this run", highlight=False)
    return Output(out_dir, console, live=live, verbose=_verbose, dashboard_port=dashboard_port,
                  dashboard_host=dashboard_host, dashboard_token=token)


DashboardOption = Annotated[bool, typer.Option(help="Serve the live dashboard (docs/dashboard.md).")]
DashboardPortOption = Annotated[int, typer.Option(help="The live dashboard's port (0 picks a free one).")]
DashboardHostOption = Annotated[
    str, typer.Option(help="The live dashboard's address; anything but loopback gets a token (docs/security.md).")
]


@app.command()
def simulate(
    config: Annotated[Path, typer.Argument(help="Run configuration (TOML).", exists=False)],
    methods: Annotated[str, typer.Option(metavar="METHOD,...", help="Scheduling methods to compare.")] = "meta-greedy,random",
    out: Annotated[Path | None, typer.Option(help="Output directory (default: the config's out_dir).")] = None,
    seed: Annotated[int | None, typer.Option(help="Override the config's seed.")] = None,
    live: Annotated[bool, typer.Option(help="Show the live per-job view.")] = True,
    ray: RayOption = False,
    address: AddressOption = None,
) -> None:
    """Compare scheduling methods on identical jobs, fleet and seed, in virtual time."""
    from mjfl.commands.simulate import simulate as run_simulation

    run_config = _config(config, out=out, seed=seed)
    method_list = comma_list("--methods", methods)
    run_simulation(run_config, method_list, _output(run_config.out_dir, live), ray=_ray(ray, address))


@app.command("report")
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run output folders (each holding mjfl.db), e.g. one per seed.")],
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the gathered figures here.")] = None,
    plots: Annotated[Path | None, typer.Option(help="Write accuracy-vs-time and member-wins plots to this folder.")] = None,
) -> None:
    """The paper's Tables 4-5 over the finished runs of these folders: mean and spread per method.

    The paper's own figures follow, marked "(paper)", for the jobs whose set-up matches one of its (docs/results.md).
    """
    from mjfl.commands.report import report as run_report

    run_report(run_dirs, console=console, json_path=json_path, plots=plots)


@app.command("dashboard")
def dashboard(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run output folders (each holding mjfl.db).")],
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 8080,
    host: Annotated[str, typer.Option(help="Address to listen on; anything but loopback needs a token.")] = "127.0.0.1",
    token: Annotated[str | None, typer.Option(help="Every request must carry it (made up for a non-loopback --host if not given).")] = None,
) -> None:
    """The finished runs of these folders in a browser, read-only: accuracy curves, devices, scheduler choices."""
    from mjfl.commands.dashboard import dashboard as run_dashboard

    run_dashboard(run_dirs, host=host, port=port, token=token, console=console)


@app.command("study")
def study(
    study_file: Annotated[Path, typer.Argument(help="A study file (TOML): config, methods, seeds, variants.")],
    out: Annotated[Path, typer.Option(help="Where the runs go: OUT/<variant>/seed-<s>/<method>.")] = Path("runs/study"),
    seeds: Annotated[int | None, typer.Option(help="Score on N seeds (default: the study file's test seeds or seeds).")] = None,
    first_seed: Annotated[int | None, typer.Option(help="The first scoring seed: seeds S..S+N-1 (default 0, or the file's).")] = None,
    methods: Annotated[str | None, typer.Option(metavar="METHOD,...", help="Only these of the study's methods (the ratio keeps those run).")] = None,
    pilot_only: Annotated[bool, typer.Option(help="Only the study's pilot seeds, every method (the comparators chosen on them).")] = False,
    workers: Annotated[int | None, typer.Option(help="Simulations at once (default: one per core).")] = None,
) -> None:
    """A grid of simulations (variants x seeds x methods) that ends with the report of each variant."""
    from mjfl.commands.study import study as run_study

    only = None if methods is None else comma_list("--methods", methods)
    run_study(study_file, out, seeds=seeds, first_seed=first_seed, methods=only, pilot_only=pilot_only,
              workers=workers, console=console)


testbed_app = Typer(help="The real-time testbed: coordinator, phones and emulated devices.", no_args_is_help=True)
app.add_typer(testbed_app, name="testbed")


@testbed_app.command("run")
def testbed_run(
    config: Annotated[Path, typer.Argument(help="Run configuration (TOML).")],
    emulate: Annotated[int, typer.Option(help="Also start N emulated devices on this machine.")] = 0,
    phones: Annotated[bool, typer.Option("--phones", help="Also train on the phones attached over adb (the app started on each).")] = False,
    adb: AdbOption = None,
    connect: ConnectOption = None,
    apk: Annotated[Path | None, typer.Option(help="With --phones: install this app on them first.")] = None,
    host: Annotated[str | None, typer.Option(help="Listen address (default: the config's testbed.host).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default: the config's testbed.port; 0 picks one).")] = None,
    out: Annotated[Path | None, typer.Option(help="Output directory (default: the config's out_dir).")] = None,
    resume: Annotated[bool, typer.Option(help="Continue the last unfinished run of this output directory.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Start even when the devices present hold none of some class of a job (devices that join later take the free shards).")] = False,
    live: Annotated[bool, typer.Option(help="Show the live per-job view.")] = True,
    dashboard: DashboardOption = True,
    dashboard_port: DashboardPortOption = 8780,
    dashboard_host: DashboardHostOption = "127.0.0.1",
    tls_cert: Annotated[Path | None, typer.Option(help="Serve wss:// with this certificate (PEM; mjfl certs create).")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The private key of --tls-cert (PEM).")] = None,
    keys: Annotated[Path | None, typer.Option(help="Key store of the enrolled devices (default: the config's testbed.keys).")] = None,
    ray: RayOption = False,
    address: AddressOption = None,
) -> None:
    """Train the config's jobs over connected phones and/or emulated devices, in real time."""
    from mjfl.commands.testbed import testbed_run as run_testbed

    phone_options = _phones(phones, adb, apk, connect)
    run_config = _config(config, out=out, host=host, port=port, tls_cert=tls_cert, tls_key=tls_key, keys=keys)
    try:
        run_testbed(
            run_config, _output(run_config.out_dir, live, dashboard_port if dashboard else None, dashboard_host),
            emulate=emulate,
            resume=resume, phones=phone_options,
            ray=_ray(ray, address), force=force,
        )
    except KeyboardInterrupt:
        raise SystemExit(130) from None


@profile_app.command("run")
def profile_run(
    config: Annotated[Path | None, typer.Argument(help="Run configuration whose jobs calibrate the devices (default: LeNet-5 on digits).")] = None,
    emulate: Annotated[int, typer.Option(help="Profile N local emulated devices (impersonating the config's fleet).")] = 0,
    phones: Annotated[bool, typer.Option("--phones", help="Profile the phones attached over adb (the app started on each).")] = False,
    adb: AdbOption = None,
    connect: ConnectOption = None,
    apk: Annotated[Path | None, typer.Option(help="With --phones: install this app on them first.")] = None,
    device_ids: Annotated[str | None, typer.Option(metavar="ID,...", help="Only these devices, by id.")] = None,
    rounds: Annotated[int, typer.Option(help="Calibration tasks per device and job.")] = 10,
    out: Annotated[Path | None, typer.Option(help="Output directory (default: <out_dir>/profile).")] = None,
    port: Annotated[int | None, typer.Option(help="Listen port (default: the config's testbed.port).")] = None,
    dashboard: DashboardOption = True,
    dashboard_port: DashboardPortOption = 8780,
    dashboard_host: DashboardHostOption = "127.0.0.1",
) -> None:
    """Run a profiling session: fit each device's Formula 4 round-time model (a, mu)."""
    from mjfl.commands.profile import default_config
    from mjfl.commands.profile import profile_run as run_profile

    if emulate < 0:
        raise UserError("--emulate must be >= 0")
    phone_options = _phones(phones, adb, apk, connect)
    # --out holds all of a session's outputs, its database too; by default they go to <out_dir>/profile and <out_dir>/mjfl.db.
    run_config = _config(config, out=out, port=port) if config is not None else _config(None, out=out, port=port, default=default_config(emulate))
    out_dir = out or run_config.out_dir / "profile"
    output = _output(out_dir, dashboard_port=dashboard_port if dashboard else None, dashboard_host=dashboard_host)
    only = comma_list("--device-ids", device_ids or "")
    run_profile(run_config, output, emulate=emulate, devices=only, rounds=rounds, phones=phone_options)


@profile_app.command("show")
def profile_show(
    file: Annotated[Path, typer.Argument(help="A profile file (profiles.json).")] = Path("runs/profile/profiles.json"),
    out: Annotated[Path | None, typer.Option(help="Where to write the CDF plots (default: next to FILE, in plots/).")] = None,
) -> None:
    """Print a profile file as a table and plot each device's empirical vs fitted CDF."""
    from mjfl.commands.profile import show

    written = show(file, console=console, out_dir=out)
    console.print(f"wrote {len(written)} CDF plots to {written[0].parent if written else out}")


@app.command("profile-show", hidden=True, context_settings={"ignore_unknown_options": True})
def _profile_show_renamed(args: Annotated[list[str] | None, typer.Argument(hidden=True)] = None) -> None:
    """`mjfl profile-show` of earlier versions."""
    raise UserError("mjfl profile-show: now mjfl profile show [FILE]")


def _config(
    path: Path | None,
    *,
    out: Path | None = None,
    seed: int | None = None,
    host: str | None = None,
    port: int | None = None,
    default: RunConfig | None = None,
    **testbed_overrides: Path | None,
) -> RunConfig:
    """The run configuration at ``path`` (or ``default``) with the command line's overrides."""
    from mjfl.coordinator.config import load_config

    config = load_config(path) if path is not None else default
    assert config is not None
    testbed = dataclasses.replace(
        config.testbed,
        host=host if host is not None else config.testbed.host,
        port=port if port is not None else config.testbed.port,
        **{k: v for k, v in testbed_overrides.items() if v is not None},
    )
    return dataclasses.replace(
        config, testbed=testbed, out_dir=out or config.out_dir, seed=seed if seed is not None else config.seed
    )


JsonOption = Annotated[
    Path | None,
    typer.Option(
        "--json",
        help="Write the figures here, and the log (third-party output such as torch's and ExecuTorch's"
        " included) beside them, as .log; without --json that output is dropped. --verbose shows it all.",
    ),
]


def _bench_log(json_path: Path | None) -> None:
    """A bench logs beside its figures: ``<json>.log`` (``mjfl.bench.output.log_path``)."""
    from mjfl.bench.output import log_path

    logs.setup(log_path(json_path), verbose=_verbose)


@bench_app.command("schedulers")
def bench_schedulers(
    fleet_sizes: Annotated[str, typer.Option(metavar="N,...", help="Fleet sizes to measure.")] = "100,1000",
    jobs: Annotated[int, typer.Option(help="Jobs planned concurrently.")] = 3,
    rounds: Annotated[int, typer.Option(help="Plan calls per job and method.")] = 30,
    fraction: Annotated[float, typer.Option(help="C_m: fraction of the fleet per plan.")] = 0.1,
    methods: Annotated[str | None, typer.Option(metavar="METHOD,...", help="Only these methods (default: all).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic fleet and schedulers.")] = 0,
    json_path: JsonOption = None,
) -> None:
    """Plan latency and cost of every scheduler on a synthetic heterogeneous fleet."""
    from mjfl.bench.schedulers import run_schedulers_bench

    _bench_log(json_path)
    method_list = comma_list("--methods", methods) if methods else None
    run_schedulers_bench(
        devices=comma_list("--fleet-sizes", fleet_sizes, int), jobs=jobs, rounds=rounds, fraction=fraction,
        methods=method_list, seed=seed, json_path=json_path, console=console,
    )


@bench_app.command("coordinator")
def bench_coordinator(
    json_path: JsonOption = None,
    devices: Annotated[int, typer.Option(help="Emulated devices for the round-overhead figure.")] = 100,
    rounds: Annotated[int, typer.Option(help="Measured rounds (plus a warm-up and a closing one).")] = 3,
    round_s: Annotated[float, typer.Option(help="The devices' own round time, seconds.")] = 3.0,
    broadcast_mb: Annotated[float, typer.Option(help="Model size of the broadcast figure, MiB.")] = 10.0,
    broadcast_devices: Annotated[int, typer.Option(help="Devices receiving the broadcast.")] = 20,
    connections: Annotated[int, typer.Option(help="Idle device connections to hold.")] = 1000,
    heartbeat_s: Annotated[float | None, typer.Option(help="Heartbeat interval while holding them (default: the one every run uses, 5 s).")] = None,
    hold_s: Annotated[float, typer.Option(help="How long to hold them, seconds.")] = 30.0,
    workers: Annotated[int | None, typer.Option(help="Emulator processes (default: min(2, CPUs)).")] = None,
) -> None:
    """Coordinator overhead per round, the live dashboard's CPU, broadcast throughput, 1,000 connections' heartbeat p99."""
    from mjfl.bench.coordinator import run_coordinator_bench

    _bench_log(json_path)
    run_coordinator_bench(
        devices=devices, rounds=rounds, round_s=round_s, broadcast_mb=broadcast_mb,
        broadcast_devices=broadcast_devices, connections=connections, heartbeat_s=heartbeat_s,
        hold_s=hold_s, workers=workers, json_path=json_path, console=console,
    )


@bench_app.command("scale")
def bench_scale(
    json_path: JsonOption = None,
    fleet_sizes: Annotated[str, typer.Option(metavar="N,...", help="Emulated fleet sizes.")] = "20,100,500",
    rounds: Annotated[int, typer.Option(help="Measured rounds per size (after a warm-up).")] = 3,
    backends: Annotated[str, typer.Option(metavar="NAME,...", help="local (processes), ray (a local Ray).")] = "local,ray",
) -> None:
    """Device-trainings per second and coordinator CPU per training, local pool vs Ray, 20-500 devices."""
    from mjfl.bench.scale import run_scale_bench

    _bench_log(json_path)
    run_scale_bench(
        fleet_sizes=comma_list("--fleet-sizes", fleet_sizes, int), rounds=rounds,
        backends=comma_list("--backends", backends), json_path=json_path, console=console,
    )


@bench_app.command("fuzz")
def bench_fuzz(
    inputs: Annotated[int, typer.Option(help="Mutated inputs to try.")] = 100_000,
    seed: Annotated[int, typer.Option(help="Seed of the mutations (same seed, same inputs).")] = 0,
    json_path: JsonOption = None,
) -> None:
    """Fuzz the protocol decoder and sessions: every input decodes or is a coded protocol error."""
    from mjfl.bench.fuzz import run_fuzz_bench

    _bench_log(json_path)
    figures = run_fuzz_bench(inputs=inputs, seed=seed, json_path=json_path, console=console)
    if figures["unhandled"]:
        raise typer.Exit(1)


@bench_app.command("faults")
def bench_faults(
    json_path: JsonOption = None,
    devices: Annotated[int, typer.Option(help="Emulated devices of the kill and network scenarios.")] = 20,
    coordinator_kills: Annotated[int, typer.Option(help="Times the coordinator is SIGKILLed and resumed.")] = 3,
    rounds: Annotated[int, typer.Option(help="Rounds per job of the killed and the disk-full runs.")] = 8,
    seed: Annotated[int, typer.Option(help="Seed of the faults (victims, moments, the proxy's draws).")] = 0,
    timeout_s: Annotated[float, typer.Option(help="Bound on each scenario, seconds.")] = 600.0,
) -> None:
    """Fault injection: devices killed, a bad network, the coordinator SIGKILLed, the disk full."""
    from mjfl.bench.faults import run_faults_bench

    _bench_log(json_path)
    figures = run_faults_bench(
        devices=devices, coordinator_kills=coordinator_kills, rounds=rounds, seed=seed, timeout_s=timeout_s,
        json_path=json_path, console=console,
    )
    if figures["unhandled"] or figures["rounds_lost"] or figures["rounds_duplicated"]:
        raise typer.Exit(1)


@bench_app.command("trainers")
def bench_trainers(
    json_path: JsonOption = None,
    models: Annotated[str | None, typer.Option(metavar="MODEL,...", help="Only these zoo models (default: all).")] = None,
    steps: Annotated[int, typer.Option(help="Measured steps per model and runtime (after a warm-up).")] = 100,
    batch: Annotated[int, typer.Option(help="Batch size of a step.")] = 32,
    devices_per_step: Annotated[str, typer.Option(metavar="K,...", help="Devices per batched step ('' skips device trainings).")] = "1,8,32,128",
) -> None:
    """Training-step time in ExecuTorch's runtime vs eager PyTorch (1 thread), per zoo model; device trainings per second."""
    from mjfl.bench.trainers import run_trainers_bench

    _bench_log(json_path)
    run_trainers_bench(
        models=comma_list("--models", models) if models else None, steps=steps, batch=batch, json_path=json_path,
        console=console, devices_per_step=comma_list("--devices-per-step", devices_per_step, int),
    )


@bench_app.command("programs")
def bench_programs(
    json_path: JsonOption = None,
    models: Annotated[str | None, typer.Option(metavar="MODEL,...", help="Only these zoo models (default: all).")] = None,
) -> None:
    """Program size and planned memory of each zoo model at the paper's jobs (exports on first use)."""
    from mjfl.bench.programs import run_programs_bench

    _bench_log(json_path)
    model_list = comma_list("--models", models) if models else None
    run_programs_bench(models=model_list, json_path=json_path, console=console)


@bench_app.command("dashboard")
def bench_dashboard(
    json_path: JsonOption = None,
    devices: Annotated[int, typer.Option(help="Devices of the synthetic finished run.")] = 1000,
    jobs: Annotated[int, typer.Option(help="Its jobs.")] = 2,
    rounds: Annotated[int, typer.Option(help="Rounds per job.")] = 30,
    per_round: Annotated[int, typer.Option(help="Devices per round.")] = 60,
    timeline_rounds: Annotated[int, typer.Option(help="Device rounds of each device in the timeline's run.")] = 100,
    loads: Annotated[int, typer.Option(help="Page loads measured (the figure is their median).")] = 5,
) -> None:
    """The dashboard page's load of a finished run of 1,000 devices, and its timeline's render, in headless Debian Chromium."""
    from mjfl.bench.dashboard import run_dashboard_bench

    _bench_log(json_path)
    run_dashboard_bench(
        devices=devices, jobs=jobs, rounds=rounds, per_round=per_round, timeline_rounds=timeline_rounds, loads=loads,
        json_path=json_path, console=console,
    )


@bench_app.command("gpu")
def bench_gpu(
    json_path: JsonOption = None,
    out: Annotated[Path, typer.Option(help="Where its data and simulation go.")] = Path("runs/bench/gpu"),
    scale: Annotated[float, typer.Option(help="The data sets' size, as a fraction of the paper's (1: full size).")] = 1.0,
    rounds: Annotated[int, typer.Option(help="Rounds per job of the simulation.")] = 20,
    devices_per_step: Annotated[str, typer.Option(metavar="K,...", help="Devices per batched step.")] = "1,8,32,128",
    cpu: Annotated[bool, typer.Option("--cpu", help="Without a GPU, run on this CPU anyway (hours at --scale 1).")] = False,
) -> None:
    """On a GPU machine: the batched runtime's device trainings per second and a paper-sized simulation (JSON)."""
    from mjfl.bench.gpu import run_gpu_bench

    _bench_log(json_path)
    run_gpu_bench(
        out, scale=scale, rounds=rounds, devices_per_step=comma_list("--devices-per-step", devices_per_step, int),
        cpu=cpu, json_path=json_path, console=console,
    )


@bench_app.command("serve")
def bench_serve(
    json_path: JsonOption = None,
    devices: Annotated[int, typer.Option(help="Emulated devices of the makespan figure: each lab's, each testbed run's.")] = 20,
    runs: Annotated[int, typer.Option(help="Runs of the makespan figure.")] = 10,
    researchers: Annotated[int, typer.Option(help="Researchers who submit them, in turn.")] = 3,
    sizes: Annotated[str, typer.Option(metavar="N,...", help="The runs' sizes, in turn (fleet.size: the devices each is made for).")] = "8,6,4",
    methods: Annotated[str, typer.Option(metavar="METHOD,...", help="The runs' scheduling methods, in turn.")] = "random,meta-greedy",
    max_running: Annotated[int, typer.Option(help="Runs running at once in both labs (limits.max_running).")] = 4,
    rounds: Annotated[int, typer.Option(help="Each job's most rounds; a job that stops short of its target is a miss.")] = 40,
    connections: Annotated[int, typer.Option(help="Devices connected while submits are timed.")] = 1000,
    submits: Annotated[int, typer.Option(help="Submits timed (after a few not counted).")] = 200,
    memory_runs: Annotated[str, typer.Option(metavar="N,...", help="Tiny runs after which the service's memory is read.")] = "10,100",
    seed: Annotated[int, typer.Option(help="The first run's seed (run n has seed + n) and the labs'.")] = 0,
    profiles: Annotated[Path | None, typer.Option(help=(
        "The phones every lab and run impersonates, drawn from this profile file (docs/profiles.md);"
        " default: the synthetic fleet of --seed."))] = None,
    timeout_s: Annotated[float, typer.Option(help="Bound on each part, seconds.")] = 1800.0,
    out: Annotated[Path | None, typer.Option(help="Keep the labs' and runs' folders here (default: a temporary folder, removed).")] = None,
) -> None:
    """The lab service: makespan of shared vs reserved devices vs one testbed run after another; submit latency; memory."""
    from mjfl.bench.serve import Settings, run_serve_bench

    _bench_log(json_path)
    settings = Settings(
        devices=devices, runs=runs, researchers=researchers, sizes=tuple(comma_list("--sizes", sizes, int)),
        methods=tuple(comma_list("--methods", methods)), max_running=max_running, rounds=rounds,
        connections=connections, submits=submits, memory_runs=tuple(comma_list("--memory-runs", memory_runs, int)),
        seed=seed, profiles=None if profiles is None else str(profiles), timeout_s=timeout_s,
    )
    run_serve_bench(settings, out=out, json_path=json_path, console=console)


@bench_app.command("soak")
def bench_soak(
    json_path: JsonOption = None,
    minutes: Annotated[float, typer.Option(help="How long the soak runs.")] = 60.0,
    jvm: Annotated[int, typer.Option(help="JVM device processes (the phone client's core); the first is never killed.")] = 2,
    emulated: Annotated[int, typer.Option(help="Emulated device processes; the first is never killed.")] = 2,
    per_process: Annotated[int, typer.Option(help="Devices in each device process.")] = 2,
    kill_every_s: Annotated[float, typer.Option(help="Seconds between two kills of a device process.")] = 60.0,
    down_s: Annotated[float, typer.Option(help="Seconds a killed device process stays down before it starts again.")] = 10.0,
    sample_s: Annotated[float, typer.Option(help="Seconds between two readings of memory and descriptors.")] = 15.0,
    warm_up: Annotated[float, typer.Option(help="The warm-up, as a fraction of the time (at least until the first run ends).")] = 0.2,
    max_running: Annotated[int, typer.Option(help="Runs running at once (limits.max_running); one more always waits.")] = 2,
    rounds: Annotated[int, typer.Option(help="Each job's most rounds.")] = 8,
    seed: Annotated[int, typer.Option(help="The lab's seed and the first run's (run n has seed + n).")] = 0,
    out: Annotated[Path | None, typer.Option(help="Keep the lab's folder and the processes' output here (default: a temporary folder, removed).")] = None,
) -> None:
    """The lab service for a long time, device processes killed and back: memory, descriptors, rounds lost, disconnects."""
    from mjfl.bench.soak import Settings, run_soak_bench

    _bench_log(json_path)
    settings = Settings(
        minutes=minutes, jvm=jvm, emulated=emulated, per_process=per_process, kill_every_s=kill_every_s,
        down_s=down_s, sample_s=sample_s, warm_up=warm_up, max_running=max_running, rounds=rounds, seed=seed,
    )
    run_soak_bench(settings, out=out, json_path=json_path, console=console)


@app.command("export")
def export_program(
    model: Annotated[str, typer.Argument(help="Zoo model: lenet5, cnn-a-iid, cnn-a-noniid, cnn-b, vgg6, resnet13, alexnet.")],
    out: Annotated[Path, typer.Option(help="Where to write the .pte.")],
    input_shape: Annotated[str, typer.Option(metavar="C,H,W", help="The shape of one input.")] = "1,28,28",
    classes: Annotated[int, typer.Option(help="Number of classes.")] = 10,
    max_batch: Annotated[int, typer.Option(
        help="Largest batch the program accepts (its batch is dynamic): give the job's batch_size. The runtime"
        " allocates the program's planned memory for this bound when it loads it, about proportional to it"
        " (docs/models.md). Default: a job's default batch_size."
    )] = 32,  # LocalTraining.batch_size, kept literal so `mjfl --help` imports no numpy
) -> None:
    """Export MODEL's ExecuTorch training program (forward, loss, backward) to a .pte.

    Prints its size and the memory the runtime plans for it. What torch and
    ExecuTorch print while exporting is dropped; --verbose shows it.
    """
    from mjfl.commands.export import export_program as export

    shape = tuple(comma_list("--input-shape", input_shape, int))
    export(model, out, input_shape=shape, classes=classes, max_batch=max_batch, console=console)


RayOption = Annotated[bool, typer.Option("--ray", help="Train on a Ray cluster (docs/scale.md); needs pip install 'mjfl\\[ray]'.")]
AddressOption = Annotated[str | None, typer.Option(help="With --ray: the cluster's address, HOST:PORT (default: a local Ray).")]


def _ray(ray: bool, address: str | None) -> RayOptions | None:
    from mjfl.device.emulated.ray_cluster import RayOptions

    if address is not None and not ray:
        raise UserError("--address goes with --ray")
    return RayOptions(address=address) if ray else None


AdbOption = Annotated[str | None, typer.Option("--adb", help="The adb server, HOST:PORT (default: adb's own, 127.0.0.1:5037).")]
ConnectOption = Annotated[list[str] | None, typer.Option("--connect", metavar="HOST:PORT", help="A phone over wireless debugging (paired once with adb pair), connected first and again when it drops; repeat for each (docs/phones.md, energy).")]


def _phones(phones: bool, adb: str | None, apk: Path | None, connect: list[str] | None = None) -> PhoneOptions | None:
    from mjfl.device.phones.attached import PhoneOptions

    if not phones and (adb is not None or apk is not None or connect):
        raise UserError("--adb, --apk and --connect go with --phones")
    return PhoneOptions(adb=adb, apk=apk, connect=tuple(connect or ())) if phones else None


@device_app.command("list")
def devices_list(adb: AdbOption = None, connect: ConnectOption = None) -> None:
    """The phones attached over adb: model, Android, ABI, cores, RAM, battery, thermal, and the mjfl app."""
    from mjfl.commands.devices import list_phones
    from mjfl.device.phones.attached import PhoneOptions

    list_phones(PhoneOptions(adb=adb, connect=tuple(connect or ())), console=console)


@device_app.command("prepare")
def devices_prepare(
    apk: Annotated[Path | None, typer.Option(help="The app to install (default: android/app/build/outputs/apk/debug/app-debug.apk when built).")] = None,
    adb: AdbOption = None,
    connect: ConnectOption = None,
) -> None:
    """Install the mjfl app on every attached phone and set it up to train unattended."""
    from mjfl.commands.devices import prepare_phones
    from mjfl.device.phones.attached import PhoneOptions

    prepare_phones(PhoneOptions(adb=adb, apk=apk, connect=tuple(connect or ())), console=console)


@device_app.command("check")
def devices_check(
    apk: Annotated[Path | None, typer.Option(help="Install this app where it is missing or another build (default: the local build, when there is one).")] = None,
    adb: AdbOption = None,
    connect: ConnectOption = None,
    models: Annotated[str | None, typer.Option(metavar="MODEL,...", help="Only these zoo models (default: all seven).")] = None,
    timeout_s: Annotated[float, typer.Option(help="Seconds a phone's self-test may say nothing before the phone is given up.")] = 300.0,
) -> None:
    """The first-day check: each phone trains every zoo model on golden data, compared with the Python runtime."""
    from mjfl.commands.device_check import check_phones
    from mjfl.device.phones.attached import PhoneOptions
    from mjfl.device.phones.selftest import Waits

    if not timeout_s > 0:
        raise UserError(f"--timeout-s {timeout_s}: must be > 0 seconds")
    only = comma_list("--models", models) if models else None
    check_phones(PhoneOptions(adb=adb, apk=apk, connect=tuple(connect or ())), models=only, waits=Waits(quiet_s=timeout_s), console=console)


@device_app.command("golden")
def devices_golden(
    out: Annotated[Path, typer.Argument(help="Folder to write the set to (replaced), e.g. android/app/src/androidTest/assets/golden.")],
    models: Annotated[str | None, typer.Option(metavar="MODEL,...", help="Only these zoo models (default: all seven).")] = None,
) -> None:
    """Write the first-day check's golden set (what the app's instrumented test trains)."""
    from mjfl.commands.device_check import write_golden

    write_golden(out, models=comma_list("--models", models) if models else None, console=console)


@device_app.command("emulate")
def device_emulate(
    url: Annotated[str, typer.Option(help="The coordinator: ws://HOST:PORT.")],
    count: Annotated[int, typer.Option(help="How many devices to emulate.")] = 1,
    runtime: Annotated[str, typer.Option(help="executorch (the task's .pte), torch (eager model) or batched (the devices of a worker trained together).")] = "executorch",
    profile: Annotated[Path | None, typer.Option(help="Profile file: impersonate its phones, drawn to --count devices.")] = None,
    dropout: Annotated[float, typer.Option(help="Chance that a device's round never comes back (0 <= p < 1).")] = 0.0,
    workers: Annotated[int | None, typer.Option(help="Worker processes (default: one per CPU).")] = None,
    id_prefix: Annotated[str | None, typer.Option(help="Device ids are PREFIX-INDEX (default: emu-<host>).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the drawn profiles and the devices' round times.")] = 0,
    token: Annotated[str, typer.Option(help="The coordinator's shared lab token (instead of enrolled secrets).")] = "",
    secret: Annotated[str | None, typer.Option(help="The enrolled secret of the one device (with --count 1: its id is PREFIX-0).")] = None,
    key_file: Annotated[Path | None, typer.Option(help="Enrolled secrets, one 'NAME SECRET' a line (mjfl devices enroll NAME --save FILE).")] = None,
    ca: Annotated[Path | None, typer.Option(help="With wss://: trust this CA (or pinned server certificate), PEM.")] = None,
    log: Annotated[Path | None, typer.Option(help="Log file of the device processes (default: none; --verbose shows it all).")] = None,
    ray: RayOption = False,
    address: AddressOption = None,
) -> None:
    """Run emulated devices against a coordinator until Ctrl-C (or the coordinator's shutdown)."""
    from mjfl.commands.emulate import emulate

    emulate(
        url, count, runtime=runtime, profile=profile, dropout=dropout, workers=workers, id_prefix=id_prefix,
        seed=seed, token=token, secret=secret, key_file=key_file, ca=ca, log_file=log, verbose=_verbose, console=console,
        ray=_ray(ray, address),
    )


KeysOption = Annotated[Path | None, typer.Option("--keys", help="The key store (default: $XDG_CONFIG_HOME/mjfl/devices.db).")]


@device_app.command("enroll")
def devices_enroll(
    name: Annotated[str, typer.Argument(help="The device id it will connect with (a phone's serial, an emulated id).")],
    keys: KeysOption = None,
    save: Annotated[Path | None, typer.Option(help="Also append 'NAME SECRET' to this key file (0600) for --key-file.")] = None,
) -> None:
    """Issue a device its secret: printed once on stdout, kept in the key store (mode 0600)."""
    from mjfl.commands.devices import enroll_device

    enroll_device(name, keys, save=save, console=console)


@device_app.command("revoke")
def devices_revoke(name: Annotated[str, typer.Argument(help="The enrolled device.")], keys: KeysOption = None) -> None:
    """Erase a device's secret: its hellos get bye unauthorized from now on."""
    from mjfl.commands.devices import revoke_device

    revoke_device(name, keys, console=console)


@device_app.command("keys")
def devices_keys(keys: KeysOption = None) -> None:
    """The enrolled devices: name, enrolled, last seen, revoked."""
    from mjfl.commands.devices import list_keys

    list_keys(keys, console=console)


@certs_app.command("create")
def certs_create(
    out_dir: Annotated[Path, typer.Argument(help="Folder for ca.pem, ca.key, server.pem, server.key (files must not exist).")],
    dns_names: Annotated[str, typer.Option(metavar="NAME,...", help="The coordinator's DNS names.")] = "",
    ip_addresses: Annotated[str, typer.Option(metavar="ADDR,...", help="The coordinator's IP addresses.")] = "",
    days: Annotated[int, typer.Option(help="Validity of both certificates.")] = 825,
) -> None:
    """A local CA and a server certificate for these names and addresses (always also localhost, 127.0.0.1, ::1)."""
    from mjfl.commands.certs import create

    names, addresses = comma_list("--dns-names", dns_names), comma_list("--ip-addresses", ip_addresses)
    create(out_dir, names, addresses, days=days, console=console)



# -- the lab service and its researchers' commands (docs/lab.md) -------------------

lab_app = Typer(help="A lab's researchers and its service (docs/lab.md).", no_args_is_help=True)
app.add_typer(lab_app, name="lab")
researcher_app = Typer(help="Who may submit runs to the lab: a revocable token each (admins only).", no_args_is_help=True)
lab_app.add_typer(researcher_app, name="researcher")

LabOption = Annotated[str | None, typer.Option("--lab", envvar="MJFL_LAB", help="The lab's API, http://HOST:PORT (default: $MJFL_LAB, else http://127.0.0.1:8790).")]
TokenOption = Annotated[str | None, typer.Option("--token", envvar="MJFL_TOKEN", help="Your researcher's token (default: $MJFL_TOKEN).")]
RunArgument = Annotated[str, typer.Argument(help="The run's id, as mjfl submit printed it (mjfl runs lists them).")]


@app.command("serve")
def serve(
    lab_file: Annotated[Path, typer.Argument(help="The lab's configuration (LAB.toml; docs/lab.md).")],
    emulate: Annotated[int, typer.Option(help="Also start N emulated devices on this machine, for the service's life.")] = 0,
    phones: Annotated[bool, typer.Option("--phones", help="Also serve the phones attached over adb, for the service's life (the app started on each, again after a replug).")] = False,
    adb: AdbOption = None,
    connect: ConnectOption = None,
    apk: Annotated[Path | None, typer.Option(help="With --phones: install this app on them first.")] = None,
    out: Annotated[Path | None, typer.Option(help="LAB_DIR: the lab's database and run folders (default: the lab's out_dir).")] = None,
    drain: Annotated[bool, typer.Option("--drain", help="Admit no new run; exit once the runs admitted or running have ended.")] = False,
) -> None:
    """The lab's service: devices stay connected, researchers submit runs that share the fleet round by round."""
    from mjfl.commands.serve import serve as run_service

    phone_options = _phones(phones, adb, apk, connect)
    try:
        run_service(lab_file, out=out, emulate=emulate, drain=drain, verbose=_verbose, console=console, phones=phone_options)
    except KeyboardInterrupt:
        console.print("stopped: running runs resume at the next mjfl serve", highlight=False)
        raise SystemExit(130) from None


@app.command("submit")
def submit(
    config: Annotated[Path, typer.Argument(help="The run's configuration (TOML, as mjfl testbed run takes).")],
    lab: LabOption = None,
    token: TokenOption = None,
    key: Annotated[str | None, typer.Option(help="A retried submit with the same key returns the same run.")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Follow the run; exit 0 when every job reached its target.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run as JSON (docs/lab-api.yaml) instead of lines.")] = False,
) -> None:
    """Submit a run to the lab; prints its id."""
    from mjfl.commands.lab import client
    from mjfl.commands.lab import submit as submit_run

    if not submit_run(client(lab, token), config, key=key, wait=wait, as_json=as_json, console=console):
        raise SystemExit(1)


@app.command("runs")
def runs(
    lab: LabOption = None, token: TokenOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as JSON (docs/lab-api.yaml).")] = False,
) -> None:
    """Every run of the lab: owner, state, queue position and why it waits (or how it ended)."""
    from mjfl.commands.lab import client
    from mjfl.commands.lab import runs as list_runs

    list_runs(client(lab, token), as_json=as_json, console=console)


@app.command("log")
def log(
    run: RunArgument, lab: LabOption = None, token: TokenOption = None,
    follow: Annotated[bool, typer.Option("--follow", help="Keep printing lines until the run has ended.")] = False,
    device: Annotated[str | None, typer.Option(help="Only the lines that name this device.")] = None,
) -> None:
    """A run's log: its coordinator's lines and those naming its devices."""
    from mjfl.commands.lab import client
    from mjfl.commands.lab import log as run_log

    run_log(client(lab, token), run, follow=follow, device=device, out=print)


@app.command("cancel")
def cancel(run: RunArgument, lab: LabOption = None, token: TokenOption = None) -> None:
    """Cancel a run, in any state (its owner or an admin); its devices go back to the lobby."""
    from mjfl.commands.lab import cancel as cancel_run
    from mjfl.commands.lab import client

    cancel_run(client(lab, token), run, console=console)


@app.command("pull")
def pull(
    run: RunArgument,
    out: Annotated[Path, typer.Option(help="A new folder for the run's folder (then mjfl report OUT, mjfl dashboard OUT).")],
    lab: LabOption = None, token: TokenOption = None,
) -> None:
    """Copy a run's folder from the lab, as mjfl testbed run writes it."""
    from mjfl.commands.lab import client
    from mjfl.commands.lab import pull as pull_run

    pull_run(client(lab, token), run, out, console=console)


@researcher_app.command("add")
def researcher_add(
    name: Annotated[str, typer.Argument(help="The researcher's name: 1-32 of a-z, 0-9, _ and -.")],
    admin: Annotated[bool, typer.Option("--admin", help="May add and revoke researchers, cancel anyone's run, drain.")] = False,
    lab: LabOption = None, token: TokenOption = None,
) -> None:
    """Give a researcher a token (printed once on stdout); again gives a new one."""
    from mjfl.commands.lab import add_researcher, client

    add_researcher(client(lab, token), name, admin=admin, console=console)


@researcher_app.command("revoke")
def researcher_revoke(
    name: Annotated[str, typer.Argument(help="The researcher.")], lab: LabOption = None, token: TokenOption = None,
) -> None:
    """Revoke a researcher's token: the lab refuses it from now on."""
    from mjfl.commands.lab import client, revoke_researcher

    revoke_researcher(client(lab, token), name, console=console)


@lab_app.command("drain")
def lab_drain(lab: LabOption = None, token: TokenOption = None) -> None:
    """Admit no new run; the service exits once the running runs end (admins only)."""
    from mjfl.commands.lab import client, drain

    drain(client(lab, token), console=console)

def main() -> None:
    """Console-script entry point: the user's errors (exit 2) and a run's end (exit 1) print one line.

    SIGTERM stops a command as Ctrl-C does, and no worker process outlives it.
    """
    one_blas_thread(os.environ)
    earlier = signal.signal(signal.SIGTERM, _as_ctrl_c)
    children = set(multiprocessing.active_children())
    try:
        app(args=sys.argv[1:])
    except (MjflError, ExceptionGroup) as exc:
        error = _ours(exc)
        if error is None:
            raise
        console.print(f"[bold red]error:[/] {error}", highlight=False, soft_wrap=True)
        raise SystemExit(2 if isinstance(error, UserError) else 1) from None
    finally:
        _end_children(set(multiprocessing.active_children()) - children)
        signal.signal(signal.SIGTERM, earlier)


def one_blas_thread(environ: MutableMapping[str, str]) -> None:
    """numpy's and scipy's BLAS on one thread, in this process and the workers it starts, unless the user says.

    Their default is a thread per core, which mjfl's small products (BODS's process, RLDS's policy) do not
    use, and whose idle threads spin after each product on the cores the training needs: measured, `mjfl
    simulate` of the quickstart (Meta-Greedy and BODS) took 30% more CPU time and 16% more wall time, for the
    same results. It must come before numpy loads (the commands import it, not this module).
    """
    environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # not MKL's or OpenMP's variables: torch reads those as its own


def _as_ctrl_c(signum: int, frame: object) -> None:
    """SIGTERM: what Ctrl-C does, which reaches this process and its worker processes (its process group).

    The workers hear SIGINT (emulator workers ignore it and stop when told,
    pool workers abandon their task); this process gets SIGINT where it has
    a handler (asyncio's cancels the run, which then cleans up), else a
    KeyboardInterrupt.
    """
    for child in multiprocessing.active_children():
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGINT)  # type: ignore[arg-type]
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        raise KeyboardInterrupt
    signal.raise_signal(signal.SIGINT)


def _end_children(children: Collection[multiprocessing.process.BaseProcess], grace_s: float = 5.0) -> None:
    """Terminate ``children``, worker processes still running when a command ends (their owner did not stop
    them), then kill those that are still there after ``grace_s``."""
    for child in children:
        child.terminate()
    deadline = time.monotonic() + grace_s
    for child in children:
        child.join(max(0.0, deadline - time.monotonic()))
        if child.is_alive():
            child.kill()
            child.join(1.0)


def _ours(exc: BaseException) -> MjflError | None:
    """The error to show: ``exc`` itself, or the first of ours in a task group's exceptions."""
    if isinstance(exc, MjflError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _ours(inner)
            if found is not None:
                return found
    return None


if __name__ == "__main__":
    main()
