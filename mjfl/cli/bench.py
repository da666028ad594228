"""`mjfl bench ...`: the benchmarks, each printing a table and writing JSON figures (the code: ``mjfl.bench``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mjfl import logs
from mjfl.cli import options
from mjfl.cli.options import console
from mjfl.cli.syntax import Typer, comma_list

bench_app = Typer(help="Benchmarks that print a table and write JSON figures (the code: mjfl/bench).", no_args_is_help=True)

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

    logs.setup(log_path(json_path), verbose=options.verbose())


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
    config: Annotated[Path | None, typer.Option(help="Also the models of this run config's own (factories), at its jobs' input shapes; alone, only those.")] = None,
    operators: Annotated[int, typer.Option(metavar="STEPS", help="Also profile each ExecuTorch step operator by operator over this many steps (0: not).")] = 0,
) -> None:
    """Training-step time in ExecuTorch's runtime vs eager PyTorch (1 thread), per model; device trainings per second."""
    from mjfl.bench.trainers import custom_specs, run_trainers_bench

    _bench_log(json_path)
    run_trainers_bench(
        models=comma_list("--models", models) if models else None, steps=steps, batch=batch, json_path=json_path,
        console=console, devices_per_step=comma_list("--devices-per-step", devices_per_step, int),
        custom=custom_specs(config) if config is not None else None, operators=operators,
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
    parts: Annotated[str, typer.Option(metavar="PART,...", help=(
        "The parts to measure: makespan, submit, memory, capacity (more runs than the fleet holds at their min_plan),"
        " loop (the event loop's lag and the heartbeats while runs share the devices)."))] = "makespan,submit,memory,capacity,loop",
    capacity_devices: Annotated[int, typer.Option(help="The capacity part's lab: its devices.")] = 8,
    capacity_min_plan: Annotated[int, typer.Option(help="The capacity part's runs: the smallest plan of their jobs.")] = 3,
    capacity_runs: Annotated[int, typer.Option(help="The capacity part's runs, submitted at once.")] = 5,
    loop_runs: Annotated[int, typer.Option(help="The loop part's runs, at once on --devices devices.")] = 4,
    baseline: Annotated[Path | None, typer.Option(help=(
        "Another mjfl checkout whose service the loop part measures too, in the same run (before / after)."))] = None,
) -> None:
    """The lab service: makespan of shared vs reserved devices vs one testbed run after another; submit latency;
    memory; a lab at capacity; its event loop under load."""
    from mjfl.bench.serve import Settings, run_serve_bench

    _bench_log(json_path)
    settings = Settings(
        devices=devices, runs=runs, researchers=researchers, sizes=tuple(comma_list("--sizes", sizes, int)),
        methods=tuple(comma_list("--methods", methods)), max_running=max_running, rounds=rounds,
        connections=connections, submits=submits, memory_runs=tuple(comma_list("--memory-runs", memory_runs, int)),
        seed=seed, profiles=None if profiles is None else str(profiles), timeout_s=timeout_s,
        parts=tuple(comma_list("--parts", parts)), capacity_devices=capacity_devices,
        capacity_min_plan=capacity_min_plan, capacity_runs=capacity_runs, loop_runs=loop_runs,
        baseline=None if baseline is None else str(baseline),
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
