"""The commands at the top of `mjfl` that train or read runs: simulate, report, dashboard, study, export.

``mjfl.cli`` registers them (the lab's own top-level commands are in ``lab.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mjfl.addresses import DASHBOARD_PORT
from mjfl.cli import options
from mjfl.cli.options import AddressOption, RayOption, console
from mjfl.cli.syntax import comma_list


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

    with options.flags_of({"out_dir": "--out", "seed": "--seed"}):
        run_config = options.run_config(config, out=out, seed=seed)
        method_list = comma_list("--methods", methods)
        run_simulation(run_config, method_list, options.output(run_config.out_dir, live), ray=options.ray(ray, address))


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


def dashboard(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run output folders (each holding mjfl.db).")],
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = DASHBOARD_PORT,
    host: Annotated[str, typer.Option(help="Address to listen on; anything but loopback needs a token.")] = "127.0.0.1",
    token: Annotated[str | None, typer.Option(help="Every request must carry it (made up for a non-loopback --host if not given).")] = None,
) -> None:
    """The finished runs of these folders in a browser, read-only: accuracy curves, devices, scheduler choices."""
    from mjfl.commands.dashboard import dashboard as run_dashboard

    run_dashboard(run_dirs, host=host, port=port, token=token, console=console)


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
    with options.flags_of(arguments={"methods": "--methods", "first_seed": "--first-seed", "pilot_only": "--pilot-only"}):
        run_study(study_file, out, seeds=seeds, first_seed=first_seed, methods=only, pilot_only=pilot_only,
                  workers=workers, console=console)


def export_program(
    model: Annotated[str, typer.Argument(help="Zoo model (lenet5, cnn-a-iid, cnn-a-noniid, cnn-b, vgg6, resnet13, alexnet) or a factory of your own: file.py:Net or package.module:factory (docs/models.md).")],
    out: Annotated[Path, typer.Option(help="Where to write the .pte.")],
    input_shape: Annotated[str, typer.Option(metavar="C,H,W", help="The shape of one input.")] = "1,28,28",
    classes: Annotated[int, typer.Option(help="Number of classes.")] = 10,
    model_args: Annotated[str, typer.Option(metavar="JSON", help="A factory's keyword arguments, a JSON object.")] = "",
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
    export(model, out, input_shape=shape, classes=classes, max_batch=max_batch, console=console, model_args=model_args)
