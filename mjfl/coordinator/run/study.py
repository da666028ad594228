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

A ``[ratio]`` table asks how one method's group time to target compares
with the best of others', per variant and over the study (``results.comparison``,
whose docstring holds the statistics)::

    [ratio]
    method = "meta-greedy"
    best_of = ["random", "fedcs", "genetic", "greedy", "bods", "rlds"]
    miss_penalty = 10                 # choosing, a miss costs 10x its budget's time (the default)

Its seeds may be split, as a reviewer would have it: the pilot seeds choose
each variant's comparator (and the single best solver), the test seeds score::

    pilot_seeds = [0, 1, 2]           # the methods of best_of
    test_seeds = [10, 11, 12, 13]     # only the method, the comparators and the single best solver

(``seeds = N`` instead: seeds 0..N-1, every method, the comparator chosen on
the seeds it is scored on.)

Each (variant, seed, method) is one simulation (the run driver on
``SimulatedDevices``, as `mjfl simulate`) into
``OUT/<variant>/seed-<s>/<method>``, several at once (``run.grid``); one
already finished there is not run again, so an interrupted study continues
where it stopped. The study ends with one gathered report per variant
(``results.report.report_runs``, as `mjfl report`) and ``OUT/study.json``;
with ``[ratio]``, the comparison's table, its verdicts, and ``study.json``'s
``"ratio"``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from mjfl.coordinator.config import RunConfig, parse_config, read_toml
from mjfl.coordinator.results.comparison import (
    MISS_PENALTY,
    Outcome,
    Runs,
    comparator,
    compare,
    comparison_lines,
    comparison_table,
    single_best,
)
from mjfl.coordinator.results.files import write_json
from mjfl.coordinator.results.report import report_runs
from mjfl.coordinator.run.grid import Cell, outcome, run_cells
from mjfl.errors import ConfigError
from mjfl.schedulers.registry import METHODS

__all__ = ["Ratio", "Study", "Variant", "apply", "load_study", "run_study"]

Methods = Callable[[str], tuple[str, ...]]  # a variant's name -> the methods its seeds run

KEYS = ("config", "methods", "seeds", "pilot_seeds", "test_seeds", "variants", "ratio")


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
    miss_penalty: float = MISS_PENALTY  # choosing, a miss counts at this multiple of its budget's time


@dataclasses.dataclass(frozen=True)
class Study:
    """A checked study file: the methods, the seeds that score, the variants, the ratio asked for, the pilot seeds.

    ``pilot_seeds``: the seeds that choose the ratio's comparators (the
    methods of its ``best_of`` run on them); none: chosen on ``seeds``.
    """

    methods: tuple[str, ...]
    seeds: tuple[int, ...]
    variants: tuple[Variant, ...]
    ratio: Ratio | None = None
    pilot_seeds: tuple[int, ...] = ()


def load_study(
    path: Path, seeds: int | None = None, *, first_seed: int | None = None, methods: list[str] | None = None,
    pilot_only: bool = False,
) -> Study:
    """Read and check a study file.

    ``seeds`` and ``first_seed`` replace its scoring seeds (its test seeds,
    or its ``seeds``) by ``first_seed .. first_seed + N - 1``; ``methods``
    runs only these of its methods (a ``[ratio]`` table then needs its method
    and at least one of its ``best_of`` among them, and keeps those; without
    them the study has no ratio and its pilot seeds do not run);
    ``pilot_only``: only its pilot seeds, every method, the comparators
    chosen on them.
    """
    raw = read_toml(path)
    unknown = set(raw) - set(KEYS)
    if unknown:
        raise ConfigError(f"{path}: {min(unknown)}", f"unknown key ({', '.join(KEYS)})")
    chosen = _methods(path, raw, methods)
    if methods is not None and isinstance(raw.get("ratio"), dict):
        ratio = raw["ratio"]  # the ratio needs its method and one of best_of among those run
        best_of = [m for m in ratio.get("best_of", []) if m in chosen]
        keep = ratio.get("method", "meta-greedy") in chosen and best_of
        raw = {**raw, "ratio": {**ratio, "best_of": best_of} if keep else None}
    ratio = _ratio(path, raw.get("ratio"), chosen)
    pilot, test = _seeds(path, raw, seeds, first_seed)
    if pilot and ratio is None and methods is None:
        raise ConfigError(f"{path}: pilot_seeds", "choose a [ratio] table's comparators: give one")
    if pilot_only:
        if not pilot:
            raise ConfigError("pilot_only", f"{path} declares no pilot_seeds")
        pilot, test = (), pilot
    elif ratio is None:
        pilot = ()  # --methods left the ratio out: its pilot seeds have nothing to choose
    return Study(tuple(chosen), test, _variants(path, raw), ratio, pilot)


def _methods(path: Path, raw: dict[str, Any], only: list[str] | None) -> list[str]:
    methods = raw.get("methods", ["meta-greedy", "random"])
    if not isinstance(methods, list) or not methods or any(m not in METHODS for m in methods):
        raise ConfigError(f"{path}: methods", f"a list of methods from {', '.join(METHODS)}")
    if len(set(methods)) != len(methods):
        raise ConfigError(f"{path}: methods", f"each method once, got {', '.join(methods)}")
    if only is None:
        return methods
    if not only or any(m not in methods for m in only):
        raise ConfigError("methods", f"choose among the study's methods ({', '.join(methods)}), got {', '.join(only) or 'none'}")
    return [m for m in methods if m in only]  # the study's order


def _seeds(path: Path, raw: dict[str, Any], count: int | None, first: int | None) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The pilot seeds and the seeds that score (the file's, or ``first .. first + count - 1``)."""
    if first is not None and first < 0:
        raise ConfigError("first_seed", f"must be >= 0, got {first}")
    if "seeds" in raw and ("test_seeds" in raw or "pilot_seeds" in raw):
        raise ConfigError(f"{path}: seeds", "give either seeds or pilot_seeds and test_seeds")
    pilot = _seed_list(path, raw, "pilot_seeds", ())
    if "seeds" in raw:
        if not isinstance(raw["seeds"], int) or raw["seeds"] < 1:
            raise ConfigError(f"{path}: seeds", "a number of seeds >= 1")
        test: tuple[int, ...] = tuple(range(raw["seeds"]))
    else:
        test = _seed_list(path, raw, "test_seeds", tuple(range(3)))
    if count is not None or first is not None:
        test = tuple(range(first or 0, (first or 0) + (count if count is not None else len(test))))
    if set(pilot) & set(test):
        raise ConfigError(f"{path}: test_seeds", f"seeds apart from the pilot seeds {list(pilot)}, got {list(test)}")
    return pilot, test


def _seed_list(path: Path, raw: dict[str, Any], key: str, default: tuple[int, ...]) -> tuple[int, ...]:
    if key not in raw:
        return default
    value = raw[key]
    if not isinstance(value, list) or not value or any(not isinstance(s, int) or s < 0 for s in value) or len(set(value)) != len(value):
        raise ConfigError(f"{path}: {key}", "a list of distinct seeds >= 0")
    return tuple(value)


def _variants(path: Path, raw: dict[str, Any]) -> tuple[Variant, ...]:
    default = raw.get("config")
    if default is not None and not isinstance(default, str):
        raise ConfigError(f"{path}: config", "the run configuration's path")
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
    return tuple(variants)


def _ratio(path: Path, raw: Any, methods: list[str]) -> Ratio | None:
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"method", "best_of", "miss_penalty"}:
        raise ConfigError(f"{path}: ratio", "a table with method, best_of and an optional miss_penalty")
    method = raw.get("method", "meta-greedy")
    if method not in methods:
        raise ConfigError(f"{path}: ratio.method", f"one of the study's methods ({', '.join(methods)}), got {method!r}")
    best_of = raw.get("best_of")
    if not isinstance(best_of, list) or not best_of or any(m not in methods or m == method for m in best_of):
        raise ConfigError(f"{path}: ratio.best_of", f"a list of the study's other methods ({', '.join(methods)}), got {best_of!r}")
    penalty = raw.get("miss_penalty", MISS_PENALTY)
    if isinstance(penalty, bool) or not isinstance(penalty, (int, float)) or not 1 <= penalty < math.inf:
        raise ConfigError(f"{path}: ratio.miss_penalty", f"a number at least 1 (a miss's multiple of its budget's time), got {penalty!r}")
    return Ratio(method, tuple(best_of), float(penalty))


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


def run_study(study: Study, out: Path, *, console: Console, workers: int | None = None) -> dict[str, Any]:
    """Run every (variant, seed, method) not yet done, ``workers`` at once, then report; returns the variants' figures.

    The pilot seeds run first, the methods of ``best_of`` (what choosing
    needs), and with them the judged method's test runs, which no choice
    waits on (so the pilot's last, longest runs do not leave cores idle);
    the test seeds then run only what else scoring needs (``_test_methods``).
    """
    raws = {path: read_toml(path) for path in dict.fromkeys(v.config for v in study.variants)}
    configs = {v.name: parse_config(apply(raws[v.config], v.overrides), base=v.config.parent, source=v.config)
               for v in study.variants}  # every variant checked before anything runs
    pilot: Runs | None = None
    choosers = tuple(m for m in study.methods if study.ratio is not None and m in study.ratio.best_of)
    if study.pilot_seeds:
        judged = tuple(m for m in study.methods if study.ratio is not None and m == study.ratio.method)
        console.print(
            f"pilot seeds {list(study.pilot_seeds)}: {', '.join(choosers)}; test seeds {list(study.seeds)}: {', '.join(judged)}",
            highlight=False,
        )
        cells = _cells(study, configs, out, study.pilot_seeds, lambda v: choosers)
        run_cells(cells + _cells(study, configs, out, study.seeds, lambda v: judged), workers=workers, console=console)
        pilot = _outcomes(study, out, study.pilot_seeds, lambda v: choosers)
    methods = _test_methods(study, pilot)
    console.print(f"{'test ' if pilot else ''}seeds {list(study.seeds)}", highlight=False)
    run_cells(_cells(study, configs, out, study.seeds, methods), workers=workers, console=console)
    # Each set of seeds gets its own tables: pooled, the pilot's choosers would blur the test seeds' figures.
    # Each run's provenance stays in its folder (`mjfl report FOLDER` shows it), not in the study's summary.
    figures: dict[str, Any] = {}
    chosen_on: dict[str, Any] = {}
    for variant in study.variants:  # the report names the seeds in each title
        if study.pilot_seeds:
            folders = [out / variant.folder / f"seed-{seed}" / m for seed in study.pilot_seeds for m in choosers]
            chosen_on[variant.name] = report_runs(folders, console=console, title=f"{variant.name}, pilot: ", provenance=False)
        folders = [out / variant.folder / f"seed-{seed}" / m for seed in study.seeds for m in methods(variant.name)]
        title = f"{variant.name}, test: " if study.pilot_seeds else f"{variant.name}: "
        figures[variant.name] = report_runs(folders, console=console, title=title, provenance=False)
    document: dict[str, Any] = {"pilot_seeds": list(study.pilot_seeds), "seeds": list(study.seeds), "variants": figures}
    if chosen_on:
        document["pilot"] = chosen_on  # the pilot seeds' runs, per variant, as "variants" has the scoring seeds'
    if study.ratio is not None:
        test = _outcomes(study, out, study.seeds, methods)
        document["ratio"] = ratio = compare(
            pilot, test, method=study.ratio.method, best_of=study.ratio.best_of, penalty=study.ratio.miss_penalty,
        )
        console.print(comparison_table(ratio, study.methods))
        for line in comparison_lines(ratio):
            console.print(line, highlight=False)
    path = write_json(out / "study.json", document)
    console.print(f"wrote {path}", highlight=False)
    return figures


def _test_methods(study: Study, pilot: Runs | None) -> Methods:
    """Which methods a variant's test seeds run: with pilot seeds, the ratio's method, its comparator and the single best solver."""
    if pilot is None or study.ratio is None:
        return lambda variant: study.methods
    ratio = study.ratio
    best = single_best(pilot, ratio.best_of, penalty=ratio.miss_penalty)

    def methods(variant: str) -> tuple[str, ...]:
        needed = {ratio.method, comparator(pilot[variant], ratio.best_of, penalty=ratio.miss_penalty), best}
        return tuple(m for m in study.methods if m in needed)

    return methods


def _cells(study: Study, configs: dict[str, RunConfig], out: Path, seeds: Sequence[int], methods: Methods) -> list[Cell]:
    return [
        Cell(f"{v.name}, seed {seed}", dataclasses.replace(configs[v.name], seed=seed),
             out / v.folder / f"seed-{seed}", methods(v.name))
        for v in study.variants for seed in seeds
    ]


def _outcomes(study: Study, out: Path, seeds: Sequence[int], methods: Methods) -> Runs:
    """Each variant's runs of the ratio's methods on ``seeds``: their outcomes, by method and seed."""
    assert study.ratio is not None
    wanted = {study.ratio.method, *study.ratio.best_of}
    runs: dict[str, dict[str, dict[int, Outcome]]] = {}
    for v in study.variants:
        runs[v.name] = {
            m: {seed: outcome(out / v.folder / f"seed-{seed}" / m, m) for seed in seeds}
            for m in methods(v.name) if m in wanted
        }
    return runs
