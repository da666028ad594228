"""A study: a grid of simulations (variants x seeds) ending with the report of each variant.

A study file names a run configuration, the methods to compare, the seeds,
and variants of the configuration, each a set of overrides by dotted key::

    config = "quickstart.toml"        # relative to the study file
    methods = ["meta-greedy", "genetic", "random"]
    seeds = 3

    [[variants]]
    name = "both"                     # the configuration as it is

    [[variants]]
    name = "time only"
    set = { "scheduler.beta" = 0.0 }

    [[variants]]
    name = "iid"
    set = { "jobs.*.partition" = "iid" }   # jobs.* : every job

A variant may name a configuration of its own (``config = "suite/iid.toml"``,
relative to the study file), so one study covers several configurations (a
suite: ``examples/suite/study.toml``); the top-level ``config`` is then only
the default, and may be left out when every variant names one.

A ``[ratio]`` table asks for one method's group time to target over the best
of the others', per variant, and their geometric mean over the study, each
with its standard error over the seeds
(``results.comparison``, whose docstring holds the rules)::

    [ratio]
    method = "meta-greedy"
    best_of = ["random", "fedcs", "genetic", "greedy", "bods", "rlds"]

Each (variant, seed) is one simulation of every method (the run driver on
``SimulatedDevices``, as `mjfl simulate`) into ``OUT/<variant>/seed-<s>``;
one already finished there (its summary.json written) is not run again, so an
interrupted study continues where it stopped. The study ends with one
gathered report per variant (``results.report.report_runs``, as `mjfl
report`) and ``OUT/study.json``; with ``[ratio]``, the ratio table, its
geometric mean, and ``study.json``'s ``"ratio"``.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
import re
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl.coordinator.config import parse_config, read_toml
from mjfl.coordinator.results.comparison import compare, comparison_lines, comparison_table
from mjfl.coordinator.results.files import write_json
from mjfl.coordinator.results.report import SUMMARY_FILE, report_runs
from mjfl.coordinator.results.tables import NOT_REACHED
from mjfl.coordinator.run.driver import Driver, Output
from mjfl.coordinator.run.simulated import SimulatedDevices
from mjfl.errors import ConfigError, UserError
from mjfl.schedulers.registry import METHODS

__all__ = ["Ratio", "Study", "Variant", "apply", "load_study", "run_study"]


@dataclasses.dataclass(frozen=True)
class Variant:
    """A named set of dotted-key overrides of a run configuration (the study's, or its own)."""

    name: str
    overrides: dict[str, Any]
    config: Path

    @property
    def folder(self) -> str:
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.name).strip("-") or "variant"


@dataclasses.dataclass(frozen=True)
class Ratio:
    """One method's group time to target over the best of ``best_of``'s (``results.comparison``)."""

    method: str
    best_of: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Study:
    """A checked study file: the methods, the seeds, the variants (each with its configuration) and the ratio asked for."""

    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    variants: tuple[Variant, ...]
    ratio: Ratio | None = None


def load_study(path: Path, seeds: int | None = None, *, first_seed: int = 0, methods: list[str] | None = None) -> Study:
    """Read and check a study file.

    ``seeds`` overrides its count and ``first_seed`` where the seeds start
    (seeds ``first_seed .. first_seed + N - 1``: held-out seeds for settings
    chosen on 0..N-1); ``methods`` runs only these of its methods (a
    ``[ratio]`` table then needs its method and at least one of its
    ``best_of`` among them, and keeps those).
    """
    raw = read_toml(path)
    unknown = set(raw) - {"config", "methods", "seeds", "variants", "ratio"}
    if unknown:
        raise ConfigError(f"{path}: {min(unknown)}", "unknown key (config, methods, seeds, variants, ratio)")
    default = raw.get("config")
    if default is not None and not isinstance(default, str):
        raise ConfigError(f"{path}: config", "the run configuration's path")
    if first_seed < 0:
        raise UserError(f"--first-seed must be >= 0, got {first_seed}")
    only = methods
    methods = raw.get("methods", ["meta-greedy", "random"])
    if not isinstance(methods, list) or not methods or any(m not in METHODS for m in methods):
        raise ConfigError(f"{path}: methods", f"a list of methods from {', '.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise ConfigError(f"{path}: methods", f"each method once, got {', '.join(methods)}")
    if only is not None:
        if not only or any(m not in methods for m in only):
            raise UserError(f"--methods: choose among the study's methods ({', '.join(methods)}), got {', '.join(only) or 'none'}")
        methods = [m for m in methods if m in only]  # the study's order
        ratio = raw.get("ratio")
        if isinstance(ratio, dict):  # the ratio needs its method and one of best_of among those run
            best_of = [m for m in ratio.get("best_of", []) if m in methods]
            keep = ratio.get("method", "meta-greedy") in methods and best_of
            raw = {**raw, "ratio": {**ratio, "best_of": best_of} if keep else None}
    count = seeds if seeds is not None else raw.get("seeds", 3)
    if not isinstance(count, int) or count < 1:
        raise ConfigError(f"{path}: seeds", "a number of seeds >= 1")
    variants = []
    for i, v in enumerate(raw.get("variants", [{"name": "as configured"}])):
        if not isinstance(v, dict) or not isinstance(v.get("name"), str) or set(v) - {"name", "set", "config"}:
            raise ConfigError(
                f"{path}: variants[{i}]", "a table with a name, an optional config and an optional set = { key = value }",
            )
        overrides = v.get("set", {})
        if not isinstance(overrides, dict):
            raise ConfigError(f"{path}: variants[{i}].set", "a table of dotted keys and values")
        config = v.get("config", default)
        if not isinstance(config, str):
            raise ConfigError(f"{path}: variants[{i}].config", "give the run configuration's path (here or as the study's config)")
        variants.append(Variant(v["name"], overrides, (path.parent / config).resolve()))
    folders = [v.folder for v in variants]
    if len(set(folders)) != len(folders):
        raise ConfigError(f"{path}: variants", f"names must differ (as folders: {folders})")
    seeds_run = tuple(range(first_seed, first_seed + count))
    return Study(tuple(methods), seeds_run, tuple(variants), _ratio(path, raw.get("ratio"), methods))


def _ratio(path: Path, raw: Any, methods: list[str]) -> Ratio | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"method", "best_of"}:
        raise ConfigError(f"{path}: ratio", "a table with method and best_of")
    method = raw.get("method", "meta-greedy")
    if method not in methods:
        raise ConfigError(f"{path}: ratio.method", f"one of the study's methods ({', '.join(methods)}), got {method!r}")
    best_of = raw.get("best_of")
    if not isinstance(best_of, list) or not best_of or any(m not in methods or m == method for m in best_of):
        raise ConfigError(f"{path}: ratio.best_of", f"a list of the study's other methods ({', '.join(methods)}), got {best_of!r}")
    return Ratio(method, tuple(best_of))


def apply(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A copy of a configuration document with dotted-key overrides (``jobs.*.key``: every job)."""
    document = copy.deepcopy(raw)
    for key, value in overrides.items():
        parts = key.split(".")
        targets: list[Any] = [document]
        for part in parts[:-1]:
            step = []
            for target in targets:
                if part == "*" and isinstance(target, list):
                    step.extend(target)
                elif isinstance(target, dict):
                    step.append(target.setdefault(part, {}))
                else:
                    raise ConfigError(key, f"cannot follow {part!r} into a {type(target).__name__}")
            targets = step
        for target in targets:
            if not isinstance(target, dict):
                raise ConfigError(key, "does not name a table's key")
            target[parts[-1]] = value
    return document


def run_study(study: Study, out: Path, *, console: Console) -> dict[str, Any]:
    """Run every (variant, seed) not yet done, then report each variant; returns the study's figures."""
    raws = {path: read_toml(path) for path in dict.fromkeys(v.config for v in study.variants)}
    configs = {v.name: parse_config(apply(raws[v.config], v.overrides), base=v.config.parent, source=v.config)
               for v in study.variants}  # every variant checked before anything runs
    total = len(study.variants) * len(study.seeds)
    done = 0
    for variant in study.variants:
        for seed in study.seeds:
            done += 1
            folder = out / variant.folder / f"seed-{seed}"
            where = f"[{done}/{total}] {variant.name}, seed {seed}"
            if (folder / SUMMARY_FILE).is_file():
                ran = json.loads((folder / SUMMARY_FILE).read_text()).get("methods", {})
                missing = [m for m in study.methods if m not in ran]
                if missing:  # run before with fewer methods (--methods): reusing it would leave them out
                    raise UserError(
                        f"{folder} holds a run of {', '.join(ran) or 'no method'}, not of {', '.join(missing)}:"
                        " give another --out, or remove that folder to run it again"
                    )
                console.print(f"{where}: done before ({folder})", highlight=False)
                continue
            config = dataclasses.replace(configs[variant.name], seed=seed, out_dir=folder)
            quiet = Console(file=io.StringIO(), width=160)  # each run's own table: in its folder, not here
            output = Output(folder, quiet, live=False)
            with console.status(f"{where}: {', '.join(study.methods)} ..."):
                driver = Driver(config, output)
                with SimulatedDevices(config, output) as devices:
                    summary = driver.train(study.methods, devices)
            times = {m: s["total_time_s"] for m, s in summary["methods"].items()}
            console.print(
                f"{where}: group time to target " + ", ".join(
                    f"{m} {NOT_REACHED if t is None else f'{t:.1f} s'}" for m, t in times.items()
                ),
                highlight=False,
            )
    figures: dict[str, Any] = {}
    for variant in study.variants:
        folders = [out / variant.folder / f"seed-{seed}" for seed in study.seeds]
        # Each run's provenance stays in its folder (`mjfl report FOLDER` shows it), not in the study's summary.
        figures[variant.name] = report_runs(folders, console=console, title=f"{variant.name}: ", provenance=False)
    document: dict[str, Any] = {"variants": figures}
    if study.ratio is not None:
        document["ratio"] = _compare(study, out, console)
    path = write_json(out / "study.json", document)
    console.print(f"wrote {path}", highlight=False)
    return figures


def _compare(study: Study, out: Path, console: Console) -> dict[str, Any]:
    """The ratio the study asked for, from each run's summary: printed, and returned for study.json."""
    assert study.ratio is not None
    times = {}
    for variant in study.variants:
        summaries = [json.loads((out / variant.folder / f"seed-{seed}" / SUMMARY_FILE).read_text()) for seed in study.seeds]
        times[variant.name] = {m: [s["methods"][m]["total_time_s"] for s in summaries] for m in study.methods}
    ratio = compare(times, method=study.ratio.method, best_of=study.ratio.best_of)
    console.print(comparison_table(ratio, study.methods))
    for line in comparison_lines(ratio):
        console.print(line, highlight=False)
    return ratio
