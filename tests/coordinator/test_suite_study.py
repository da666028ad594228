"""The scheduling suite: one study over several configurations, a method's ratio to the best single method, its geomean."""

import dataclasses
import io
import json
import math
from pathlib import Path

import pytest
from repository import ROOT
from rich.console import Console

from mjfl.coordinator.results.comparison import (
    compare,
    comparison_lines,
    comparison_table,
    geometric_mean,
    mean_time,
)
from mjfl.coordinator.run.study import Ratio, load_study, run_study
from mjfl.errors import ConfigError, UserError

SINGLES = ["random", "greedy", "fedcs"]


def test_a_methods_time_is_its_mean_over_the_seeds_only_when_every_seed_reached():
    assert mean_time([2.0, 4.0, 6.0]) == 4.0
    assert mean_time([2.0, None, 6.0]) is None
    assert mean_time([]) is None


def test_the_geometric_mean_of_ratios():
    assert geometric_mean([2.0, 0.5]) == pytest.approx(1.0)
    assert geometric_mean([1.0, 8.0, 1.0]) == pytest.approx(2.0)
    assert geometric_mean([]) is None
    with pytest.raises(ValueError):
        geometric_mean([1.0, 0.0])


def test_the_ratio_is_against_the_best_of_the_singles_and_unreached_configurations_are_left_out():
    times = {
        "a": {"meta-greedy": [3.0, 5.0], "meta-greedy-paper": [1.0, 1.0], "random": [8.0, 8.0], "greedy": [4.0, 6.0],
              "fedcs": [1.0, None]},
        "b": {"meta-greedy": [9.0, 9.0], "random": [2.0, 4.0], "greedy": [None, None], "fedcs": [6.0, 6.0]},
        "c": {"meta-greedy": [1.0, 1.0], "random": [None, 1.0], "greedy": [None, None], "fedcs": [None, None]},
        "d": {"meta-greedy": [None, 1.0], "random": [1.0, 1.0], "greedy": [2.0, 2.0], "fedcs": [3.0, 3.0]},
    }
    figures = compare(times, method="meta-greedy", best_of=SINGLES)
    rows = figures["configurations"]
    # meta-greedy-paper is faster on "a" but is not a single method; fedcs missed a seed.
    assert (rows["a"]["best"], rows["a"]["ratio"]) == ("greedy", pytest.approx(4.0 / 5.0))
    assert rows["a"]["methods"]["fedcs"] == {"mean_s": None, "sd_s": None, "reached": 1, "runs": 2}
    # Standard errors, times paired by seed: on "a" both methods were 1 s slower in seed 1 (covariance
    # 2/(4*5)), so the ratio barely moves: (2/16 + 2/25 - 2*2/20) / 2 seeds; on "b" only random varied.
    assert rows["a"]["ratio_se"] == pytest.approx(0.8 * math.sqrt((2 / 16 + 2 / 25 - 2 * 2 / 20) / 2))
    assert rows["b"]["ratio_se"] == pytest.approx(3.0 * math.sqrt((0 + 2 / 9 - 0) / 2))
    # Opposite moves (one seed favours each method) widen it: the covariance counts against.
    opposite = compare({"c": {"meta-greedy": [3.0, 5.0], "greedy": [6.0, 4.0]}}, method="meta-greedy", best_of=["greedy"])
    assert opposite["configurations"]["c"]["ratio_se"] == pytest.approx(0.8 * math.sqrt((2 / 16 + 2 / 25 + 2 * 2 / 20) / 2))
    assert (rows["b"]["best"], rows["b"]["ratio"]) == ("random", pytest.approx(9.0 / 3.0))
    assert rows["c"]["ratio"] is None and rows["d"]["ratio"] is None
    assert figures["left_out"] == {
        "c": "no method of best_of reached in every seed", "d": "meta-greedy did not reach in every seed",
    }
    assert figures["counted"] == 2 and figures["geomean"] == pytest.approx(math.sqrt(0.8 * 3.0))
    se_a, se_b = rows["a"]["ratio_se"], rows["b"]["ratio_se"]
    assert figures["geomean_se"] == pytest.approx(math.sqrt(0.8 * 3.0) * math.hypot(se_a / 0.8, se_b / 3.0) / 2)
    assert comparison_lines(figures)[0].endswith(f"{math.sqrt(2.4):.3f} ± {figures['geomean_se']:.3f} (standard error over the seeds)")
    one_seed = compare({"a": {"meta-greedy": [3.0], "greedy": [4.0]}}, method="meta-greedy", best_of=["greedy"])
    assert one_seed["configurations"]["a"]["ratio_se"] is None and one_seed["geomean_se"] is None  # no spread from one seed
    printed = io.StringIO()
    Console(file=printed, width=200).print(comparison_table(figures, ["meta-greedy", "greedy"]))
    assert "0.800 ± 0.04" in printed.getvalue() and "left out" in printed.getvalue()


def test_a_study_may_name_a_configuration_per_variant_and_a_ratio(tmp_path: Path):
    (tmp_path / "a.toml").write_text(CONFIG)
    (tmp_path / "study.toml").write_text(STUDY)
    study = load_study(tmp_path / "study.toml")
    assert [v.config for v in study.variants] == [tmp_path / "a.toml", tmp_path / "b.toml"]
    assert study.ratio is not None and study.ratio.best_of == ("random", "greedy")
    for good, bad, field in (
        ('best_of = ["random", "greedy"]', 'best_of = ["random", "bods"]', "ratio.best_of"),  # not a study method
        ('best_of = ["random", "greedy"]', 'best_of = ["random", "meta-greedy"]', "ratio.best_of"),
        ('method = "meta-greedy"', 'method = "rlds"', "ratio.method"),
    ):
        (tmp_path / "bad.toml").write_text(STUDY.replace(good, bad))
        with pytest.raises(ConfigError, match=field):
            load_study(tmp_path / "bad.toml")
    (tmp_path / "bad.toml").write_text(STUDY.replace('config = "a.toml"\n', "", 1))
    with pytest.raises(ConfigError, match=r"variants\[0\].config"):
        load_study(tmp_path / "bad.toml")


def test_a_study_runs_held_out_seeds_and_a_subset_of_its_methods(tmp_path: Path):
    (tmp_path / "study.toml").write_text(STUDY)
    study = load_study(tmp_path / "study.toml", 3, first_seed=3, methods=["greedy", "meta-greedy"])
    assert study.seeds == (3, 4, 5)
    assert study.methods == ("meta-greedy", "greedy")  # the study's order
    assert study.ratio is not None and study.ratio.best_of == ("greedy",)  # random was not run
    assert load_study(tmp_path / "study.toml", methods=["random", "greedy"]).ratio is None  # its method was not
    for bad, message in (({"methods": ["bods"]}, "--methods"), ({"methods": []}, "--methods"), ({"first_seed": -1}, "--first-seed")):
        with pytest.raises(UserError, match=message):
            load_study(tmp_path / "study.toml", **bad)


def test_a_seed_run_before_with_fewer_methods_is_not_taken_for_done(tmp_path: Path):
    # A study run with --methods, then in full into the same folder, would otherwise report without the rest.
    (tmp_path / "a.toml").write_text(CONFIG)
    (tmp_path / "b.toml").write_text(CONFIG)
    (tmp_path / "study.toml").write_text(STUDY)
    folder = tmp_path / "out" / "iid" / "seed-0"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"methods": {"meta-greedy": {"total_time_s": 1.0}}}))
    with pytest.raises(UserError, match=r"seed-0 holds a run of meta-greedy, not of random, greedy"):
        run_study(load_study(tmp_path / "study.toml"), tmp_path / "out", console=Console(file=io.StringIO()))


def test_the_suite_is_a_valid_study_of_every_method_over_at_least_eight_configurations():
    study = load_study(ROOT / "examples" / "suite" / "study.toml")
    assert len(study.variants) >= 8 and len(study.seeds) == 3
    assert study.ratio is not None and study.ratio.method == "meta-greedy"
    assert set(study.ratio.best_of) == {"random", "fedcs", "genetic", "greedy", "bods", "rlds"}
    assert {"meta-greedy", "meta-greedy-paper", *study.ratio.best_of} == set(study.methods)


CONFIG = """
seed = 0
out_dir = "unused"
[fleet]
size = 6
runtime = "batched"
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
partition = "iid"
batch_size = 16
fraction = 0.5
target_accuracy = 0.3
max_rounds = 4
"""

STUDY = """
config = "a.toml"
methods = ["meta-greedy", "random", "greedy"]
seeds = 2

[ratio]
method = "meta-greedy"
best_of = ["random", "greedy"]

[[variants]]
name = "iid"

[[variants]]
name = "two jobs, slow tail"
config = "b.toml"
set = { "fleet.slow_fraction" = 0.5, "jobs.*.partition" = "noniid" }
"""


@pytest.mark.slow
def test_a_two_configuration_slice_reports_each_methods_time_and_the_ratio_of_its_runs(tmp_path: Path):
    (tmp_path / "a.toml").write_text(CONFIG)
    second = CONFIG.replace("target_accuracy = 0.3", "target_accuracy = 0.2") + CONFIG[CONFIG.index("[[jobs]]"):].replace(
        '"lenet"\nmodel', '"cnn"\nmodel'
    ).replace('"lenet5"', '"cnn-a-noniid"').replace("image_size = 12", "image_size = 8")
    (tmp_path / "b.toml").write_text(second)
    (tmp_path / "study.toml").write_text(STUDY)
    out = tmp_path / "out"
    console = Console(file=io.StringIO(), width=200)
    run_study(load_study(tmp_path / "study.toml"), out, console=console)

    ratio = json.loads((out / "study.json").read_text())["ratio"]
    assert list(ratio["configurations"]) == ["iid", "two jobs, slow tail"]
    counted = []
    for name, folder in (("iid", "iid"), ("two jobs, slow tail", "two-jobs-slow-tail")):
        runs = [json.loads((out / folder / f"seed-{s}" / "summary.json").read_text()) for s in (0, 1)]
        assert len(runs[0]["methods"]["random"]["jobs"]) == (1 if name == "iid" else 2)
        row = ratio["configurations"][name]
        times = {m: [r["methods"][m]["total_time_s"] for r in runs] for m in ("meta-greedy", "random", "greedy")}
        for method, seeds in times.items():  # each method's time is its runs' mean, or none
            reached = [t for t in seeds if t is not None]
            expected = sum(reached) / 2 if len(reached) == 2 else None
            assert row["methods"][method]["mean_s"] == pytest.approx(expected)
            assert (row["methods"][method]["reached"], row["methods"][method]["runs"]) == (len(reached), 2)
        singles = {m: row["methods"][m]["mean_s"] for m in ("random", "greedy") if row["methods"][m]["mean_s"] is not None}
        own = row["methods"]["meta-greedy"]["mean_s"]
        if singles and own is not None:
            assert row["best"] == min(singles, key=lambda m: singles[m])
            assert row["ratio"] == pytest.approx(own / min(singles.values()))
            counted.append(row["ratio"])
        else:
            assert row["ratio"] is None and name in ratio["left_out"]
    assert ratio["counted"] == len(counted)
    assert ratio["geomean"] == (pytest.approx(math.prod(counted) ** (1 / len(counted))) if counted else None)
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    assert "best single" in printed and "geometric mean of meta-greedy's ratio" in printed


# The slice of the suite that `make test` runs (one seed): IID, where the fastest devices
# reach the target, and Dirichlet 0.1, where they plateau below it.
SLICE = ("iid, 20 devices", "dirichlet 0.1, 60 devices")


@pytest.mark.slow
def test_the_suites_slice_keeps_meta_greedy_ahead_of_the_methods_that_ignore_cost_or_data(tmp_path: Path):
    suite = load_study(ROOT / "examples" / "suite" / "study.toml", seeds=1)
    study = dataclasses.replace(
        suite,
        methods=("meta-greedy", "random", "fedcs", "greedy"),
        variants=tuple(v for v in suite.variants if v.name in SLICE),
        ratio=Ratio("meta-greedy", ("random", "fedcs", "greedy")),
    )
    assert [v.name for v in study.variants] == list(SLICE)
    run_study(study, tmp_path, console=Console(file=io.StringIO(), width=200))
    rows = json.loads((tmp_path / "study.json").read_text())["ratio"]["configurations"]
    iid, skewed = ({m: row["methods"][m]["mean_s"] for m in study.methods} for row in (rows[n] for n in SLICE))
    print("suite slice, group time to target (s):", iid, skewed)
    for times in (iid, skewed):  # Meta-Greedy reaches every target, well before the plans that ignore speed
        assert times["meta-greedy"] is not None
        assert times["meta-greedy"] < times["random"] / 3 and times["meta-greedy"] < times["fedcs"]
    assert iid["greedy"] is not None and iid["meta-greedy"] < 1.5 * iid["greedy"]  # IID: near the fastest plans
    assert skewed["greedy"] is None  # Dirichlet 0.1: the fastest devices' data never reach the target; Meta-Greedy's plans do
