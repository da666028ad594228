"""The `mjfl` command line.

Heavy imports (torch, executorch) happen inside the commands, so `mjfl --help`
stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from mjfl.errors import UserError

app = typer.Typer(
    name="mjfl",
    help="A testbed for multi-job federated learning on real and emulated phones.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks that print a table and write JSON figures.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

console = Console(stderr=True)


@app.command()
def simulate(
    config: Annotated[Path, typer.Argument(help="Run configuration (TOML).", exists=False)],
    methods: Annotated[str, typer.Option(help="Comma-separated scheduling methods to compare.")] = "meta-greedy,random",
    out: Annotated[Optional[Path], typer.Option(help="Output directory (default: the config's out_dir).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Override the config's seed.")] = None,
    live: Annotated[bool, typer.Option(help="Show the live per-job view.")] = True,
) -> None:
    """Compare scheduling methods on identical jobs, fleet and seed, in virtual time."""
    import dataclasses

    from mjfl.coordinator.config import load_config
    from mjfl.coordinator.simulate import simulate as run_simulation

    run_config = load_config(config)
    if seed is not None:
        run_config = dataclasses.replace(run_config, seed=seed)
    out_dir = out or run_config.out_dir
    if out is not None and run_config.database is None:
        run_config = dataclasses.replace(run_config, out_dir=out_dir)
    run_simulation(run_config, [m.strip() for m in methods.split(",") if m.strip()], out_dir, console=console, live=live)


@bench_app.command("schedulers")
def bench_schedulers(
    devices: Annotated[list[int], typer.Option(help="Fleet sizes to measure (repeatable or space-separated).")] = [100, 1000],
    jobs: Annotated[int, typer.Option(help="Jobs planned concurrently.")] = 3,
    rounds: Annotated[int, typer.Option(help="Plan calls per job and method.")] = 30,
    fraction: Annotated[float, typer.Option(help="C_m: fraction of the fleet per plan.")] = 0.1,
    methods: Annotated[Optional[str], typer.Option(help="Comma-separated methods (default: all).")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic fleet and schedulers.")] = 0,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the figures here.")] = None,
) -> None:
    """Plan latency and cost of every scheduler on a synthetic heterogeneous fleet."""
    from mjfl.schedulers.bench import run_scheduler_bench

    method_list = methods.split(",") if methods else None
    run_scheduler_bench(
        devices=devices, jobs=jobs, rounds=rounds, fraction=fraction,
        methods=method_list, seed=seed, json_path=json_path, console=console,
    )


# Options that take several values after one flag (`--devices 100 1000`);
# click wants the flag repeated, so main() spells it out.
MULTI_VALUE_OPTIONS = frozenset({"--devices"})


def expand_multi_value_options(argv: list[str]) -> list[str]:
    """Rewrite ``--devices 100 1000`` as ``--devices 100 --devices 1000``."""
    out: list[str] = []
    current: str | None = None
    for token in argv:
        if token in MULTI_VALUE_OPTIONS:
            current = token
            out.append(token)
            continue
        if token.startswith("-"):
            current = None
        elif current is not None and out[-1] != current:
            out.append(current)
        out.append(token)
    return out


def main() -> None:
    """Console-script entry point: user errors print one clear line, exit 2."""
    import sys

    try:
        app(args=expand_multi_value_options(sys.argv[1:]))
    except UserError as exc:
        console.print(f"[bold red]error:[/] {exc}")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
