"""The scheduling suite's statistics (pilot and test seeds, paired log ratios, the random-effects bound) and its studies."""

import dataclasses
import io
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from repository import ROOT
from rich.console import Console

from mjfl.coordinator.results.comparison import (
    Outcome,
    comparator,
    compare,
    comparison_lines,
    comparison_table,
    geometric_mean,
    miss_rate_bound,
    paired_misses,
    single_best,
    t_quantile,
    upper_bound,
)
from mjfl.coordinator.run.grid import outcome
from mjfl.coordinator.run.study import Ratio, load_study, run_study
from mjfl.errors import ConfigError, UserError


def times(*seconds: float, first: int = 0) -> dict[int, Outcome]:
    return {first + k: Outcome(float(t)) for k, t in enumerate(seconds)}


def test_the_statistics_match_a_table_worked_by_hand():
    """Two configurations; the method ``m`` against ``x`` and ``y``; pilot seeds 0-1, test seeds 10-12; times in s.

    Pilot, choosing with a miss at its budget's time (``penalty=1``; the default's 10x is the next test's): on A,
    x 4 4 (mean 4), y 2 3 (2.5): the comparator is y. On B, x 10 10 (10), y 5 and a miss whose run ended at 17
    (mean 11): the comparator is x (with the miss left out it would be y). The single best solver: geometric means
    x sqrt(4 x 10) = 6.32, y sqrt(2.5 x 11) = 5.24: y.

    Test, on A: m 2 4 3, y 2 2 3: log ratios 0, log 2, 0; mean log(2)/3 = 0.2310, ratio 2^(1/3) = 1.2599; sd
    log(2)/sqrt(3) = 0.4002; t(0.975, 2) = 4.3027; interval exp(0.2310 -+ 4.3027 x 0.4002 / sqrt 3) = [0.4662,
    3.4048]. On B, m 8 10 and a miss at 16, x 8 8 8 (y 16 16 16): log ratios 0, log 1.25, log 2; mean 0.3054,
    ratio 1.3572; sd 0.3538; interval [0.5635, 3.2687].

    Over the configurations: the mean of 0.2310 and 0.3054 is 0.2682, G = 1.3077; the sd of the two means
    0.05260; t(0.95, 1) = 6.3138; bound exp(0.2682 + 6.3138 x 0.05260 / sqrt 2) = 1.6538. The single best
    solver's mean log ratio to the comparators: (0 + log 2) / 2 = 0.3466 (x sqrt 2 = 1.414); m closes 1 - 0.2682 / 0.3466 =
    22.6% of it. One miss of m; worst 1.3572: every verdict fails.
    """
    assert t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4) and t_quantile(0.95, 1) == pytest.approx(6.3138, abs=1e-4)
    pilot = {
        "A": {"x": times(4, 4), "y": times(2, 3)},
        "B": {"x": times(10, 10), "y": {0: Outcome(5.0), 1: Outcome(17.0, ("job",))}},
    }
    test = {
        "A": {"m": times(2, 4, 3, first=10), "y": times(2, 2, 3, first=10)},
        "B": {"m": {10: Outcome(8.0), 11: Outcome(10.0), 12: Outcome(16.0, ("job",))}, "x": times(8, 8, 8, first=10),
              "y": times(16, 16, 16, first=10)},
    }
    assert comparator(pilot["A"], ["x", "y"], penalty=1) == "y" and comparator(pilot["B"], ["x", "y"], penalty=1) == "x"
    assert single_best(pilot, ["x", "y"], penalty=1) == "y"
    figures = compare(pilot, test, method="m", best_of=["x", "y"], penalty=1)
    a, b = (figures["configurations"][c]["ratio"] for c in "AB")
    assert (a["ratio"], a["low"], a["high"], a["sd_log"]) == pytest.approx((1.2599, 0.4662, 3.4048, 0.4002), abs=1e-4)
    assert (b["ratio"], b["low"], b["high"], b["sd_log"]) == pytest.approx((1.3572, 0.5635, 3.2687, 0.3538), abs=1e-4)
    assert (figures["geomean"], figures["upper_bound"]) == pytest.approx((1.3077, 1.6538), abs=1e-4)
    assert upper_bound([a["mean_log"], b["mean_log"]]) == pytest.approx(1.6538, abs=1e-4)
    assert figures["single_best"] == "y"
    assert (figures["single_best_gap"], figures["gap_share"]) == pytest.approx((math.sqrt(2), 0.2260), abs=1e-4)
    assert figures["misses"] == 1 and figures["configurations"]["B"]["methods"]["m"]["missed"] == {"12": ["job"]}
    assert figures["worst"] == pytest.approx(1.3572, abs=1e-4) and not figures["hindsight"]
    assert figures["verdicts"] == {"bound": False, "worst": False, "reached": False}
    lines = comparison_lines(figures)
    assert "FAIL: upper bound <= 1.05 (1.654)" in lines and "FAIL: no configuration above 1.20 (worst 1.357)" in lines
    assert "single best solver: y, 1.414x the per-configuration best; m closes 23% of that gap" in lines
    printed = io.StringIO()
    Console(file=printed, width=240).print(comparison_table(figures, ["m", "x", "y"]))
    assert "1.260 [0.466, 3.405]" in printed.getvalue() and "(1/3 missed)" in printed.getvalue()


def test_misses_are_counted_with_the_rates_bound_and_paired_run_for_run_as_worked_by_hand():
    """The method m missed 1 of 6 test runs; its rate's one-sided 95% upper bound u solves P(X <= 1) = 0.05 for X ~
    Binomial(6, u), that is (1 - u)^6 + 6u(1 - u)^5 = 0.05: u = 0.5818. Against the single best solver y (and the
    comparators, x on B) run for run: only m missed, once: p = 2 x P(X <= 0 | 1, 1/2) = 1, capped at 1.

    Paired by hand: 8 pairs, m missed in pairs 1 and 2, the other in 2 to 6: only m 1, only the other 4, discordant
    5; p = 2 x P(X <= 1 | 5, 1/2) = 2 x 6/32 = 0.375. No pair differs: p = 1. 0 of 3: u = 1 - 0.05^(1/3) = 0.6316.
    """
    pilot = {"A": {"x": times(4, 4), "y": times(2, 3)}, "B": {"x": times(10, 10), "y": times(12, 12)}}
    test = {
        "A": {"m": times(2, 4, 3, first=10), "y": times(2, 2, 3, first=10)},
        "B": {"m": {10: Outcome(8.0), 11: Outcome(10.0), 12: Outcome(16.0, ("job",))}, "x": times(8, 8, 8, first=10),
              "y": times(16, 16, 16, first=10)},
    }
    figures = compare(pilot, test, method="m", best_of=["x", "y"], penalty=1)
    reliability = figures["reliability"]
    u = reliability["rate_bound"]
    assert (reliability["runs"], reliability["misses"]) == (6, 1) and u == pytest.approx(0.5818, abs=1e-4)
    assert (1 - u) ** 6 + 6 * u * (1 - u) ** 5 == pytest.approx(0.05, abs=1e-9)
    assert reliability["single_best"] == {"runs": 6, "own": 1, "other": 0, "only_own": 1, "only_other": 0, "p": 1.0}
    assert reliability["comparators"] == reliability["single_best"]  # x and y both reached every target
    lines = comparison_lines(figures)
    assert "m missed its targets in 1 of 6 test run(s) (counted at their budget's time); the miss rate's one-sided 95%" \
        " upper bound 0.582" in lines
    assert "misses run for run against the single best solver (y): 1 and 0 of 6; 1 missed by m alone, 0 by the other" \
        " alone (exact McNemar p = 1.00)" in lines

    def run(missed: bool) -> Outcome:
        return Outcome(1.0, ("job",) if missed else ())

    pairs = [(run(own), run(other)) for own, other in
             [(True, False), (True, True), (False, True), (False, True), (False, True), (False, True), (False, False), (False, False)]]
    assert paired_misses(pairs) == {"runs": 8, "own": 2, "other": 5, "only_own": 1, "only_other": 4, "p": pytest.approx(0.375)}
    assert paired_misses([(run(True), run(True)), (run(False), run(False))])["p"] == 1.0
    assert miss_rate_bound(0, 3) == pytest.approx(1 - 0.05 ** (1 / 3)) and miss_rate_bound(2, 2) == 1.0
    assert miss_rate_bound(0, 0) is None
    y_misses = {s: Outcome(1.0, ("job",)) for s in range(8)}  # y misses all 8, m none: p = 2 / 2^8 = 0.0078
    lines = comparison_lines(compare(None, {"A": {"m": times(*[1] * 8), "y": y_misses}}, method="m", best_of=["y"]))
    assert "misses run for run against the comparators: 0 and 8 of 8; 0 missed by m alone, 8 by the other alone" \
        " (exact McNemar p < 0.01)" in lines


def test_choosing_a_miss_costs_ten_times_its_budgets_time_and_scoring_its_budgets_time():
    """A fast method that misses is not the comparator, nor the single best solver; scoring keeps misses at x1.

    Pilot, on C: f misses twice, its budgets over at 1.2 and 1.0 s, and reaches at 1.4 s; s takes 2.5 2.7 2.6. At
    the budget's time f's mean is 1.2 < 2.6; at 10x it is (12 + 10 + 1.4) / 3 = 7.8 > 2.6: the comparator is s. On
    D, f 1 1 1, s 2 2 2: f. The single best solver at 10x: f sqrt(7.8 x 1) = 2.79, s sqrt(2.6 x 2) = 2.28: s (at
    x1, f: sqrt(1.2) = 1.10).

    Test, on C: m 2.6 2.6; s 2.6 and a miss at 3.0, counted at 3.0: log ratios 0 and log(2.6 / 3.0); the ratio
    sqrt(2.6 / 3.0) = 0.9309.
    """
    pilot = {
        "C": {"f": {0: Outcome(1.2, ("job",)), 1: Outcome(1.0, ("job",)), 2: Outcome(1.4)}, "s": times(2.5, 2.7, 2.6)},
        "D": {"f": times(1, 1, 1), "s": times(2, 2, 2)},
    }
    assert comparator(pilot["C"], ["f", "s"]) == "s" and comparator(pilot["C"], ["f", "s"], penalty=1) == "f"
    assert comparator(pilot["D"], ["f", "s"]) == "f"
    assert single_best(pilot, ["f", "s"]) == "s" and single_best(pilot, ["f", "s"], penalty=1) == "f"
    test = {"C": {"m": times(2.6, 2.6, first=10), "s": {10: Outcome(2.6), 11: Outcome(3.0, ("job",))}},
            "D": {"m": times(1, 1, first=10), "f": times(1, 1, first=10), "s": times(2, 2, first=10)}}
    figures = compare(pilot, test, method="m", best_of=["f", "s"])
    assert [c["comparator"] for c in figures["configurations"].values()] == ["s", "f"] and figures["single_best"] == "s"
    assert figures["configurations"]["C"]["ratio"]["ratio"] == pytest.approx(0.9309, abs=1e-4)
    assert figures["miss_penalty"] == 10 and any("a miss counted at 10x its budget's time" in line
                                                   for line in comparison_lines(figures))


def test_without_pilot_seeds_the_comparator_is_chosen_in_hindsight_and_one_seed_has_no_interval():
    test = {"A": {"m": times(3), "x": times(4), "y": times(6)}, "B": {"m": times(2), "x": times(2), "y": times(1)}}
    figures = compare(None, test, method="m", best_of=["x", "y"])
    assert figures["hindsight"] and [c["comparator"] for c in figures["configurations"].values()] == ["x", "y"]
    a = figures["configurations"]["A"]["ratio"]
    assert a["ratio"] == pytest.approx(0.75) and a["low"] is None and a["sd_log"] is None
    assert figures["geomean"] == pytest.approx(math.sqrt(0.75 * 2.0)) and figures["upper_bound"] is not None
    assert any("in hindsight" in line for line in comparison_lines(figures))
    assert compare(None, {"A": test["A"]}, method="m", best_of=["x"])["upper_bound"] is None  # one configuration
    assert geometric_mean([2.0, 0.5]) == pytest.approx(1.0) and geometric_mean([]) is None


def test_a_run_that_missed_counts_at_the_end_of_its_last_round(tmp_path: Path):
    summary = {"methods": {"greedy": {"total_time_s": None, "jobs": {
        "a": {"time_to_target_s": 1.5}, "b": {"time_to_target_s": None}}}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    (tmp_path / "rounds.csv").write_text(
        "method,job,round,started_s,ended_s,accuracy\ngreedy,a,1,0.0,1.5,0.9\ngreedy,b,1,0.0,2.0,0.1\n"
        "greedy,b,2,2.0,4.25,0.2\n"
    )
    assert outcome(tmp_path, "greedy") == Outcome(4.25, ("b",))
    summary["methods"]["greedy"] = {"total_time_s": 2.0, "jobs": {"a": {"time_to_target_s": 2.0}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    assert outcome(tmp_path, "greedy") == Outcome(2.0) and outcome(tmp_path, "greedy").reached


def test_a_study_may_name_a_configuration_per_variant_and_a_ratio(tmp_path: Path):
    (tmp_path / "a.toml").write_text(CONFIG)
    (tmp_path / "study.toml").write_text(STUDY)
    study = load_study(tmp_path / "study.toml")
    assert [v.config for v in study.variants] == [tmp_path / "a.toml", tmp_path / "b.toml"]
    assert study.ratio is not None and study.ratio.best_of == ("random", "greedy") and study.ratio.miss_penalty == 10
    assert (study.pilot_seeds, study.seeds) == ((0,), (1,))
    (tmp_path / "three.toml").write_text(STUDY.replace('best_of = ["random", "greedy"]', 'best_of = ["random", "greedy"]\nmiss_penalty = 3'))
    assert load_study(tmp_path / "three.toml").ratio == Ratio("meta-greedy", ("random", "greedy"), 3.0)
    for good, bad, field in (
        ('best_of = ["random", "greedy"]', 'best_of = ["random", "bods"]', "ratio.best_of"),  # not a study method
        ('best_of = ["random", "greedy"]', 'best_of = ["random", "meta-greedy"]', "ratio.best_of"),
        ('method = "meta-greedy"', 'method = "rlds"', "ratio.method"),
        ("test_seeds = [1]", "test_seeds = [0]", "test_seeds"),  # a pilot seed
        ("test_seeds = [1]", "test_seeds = [1, 1]", "test_seeds"),
        ("pilot_seeds = [0]", "seeds = 2", "seeds"),  # either seeds or pilot and test seeds
        ('best_of = ["random", "greedy"]', 'best_of = ["random", "greedy"]\nmiss_penalty = 0.5', "ratio.miss_penalty"),
        ('best_of = ["random", "greedy"]', 'best_of = ["random", "greedy"]\nmiss_penalty = "10"', "ratio.miss_penalty"),
    ):
        (tmp_path / "bad.toml").write_text(STUDY.replace(good, bad))
        with pytest.raises(ConfigError, match=field):
            load_study(tmp_path / "bad.toml")
    (tmp_path / "bad.toml").write_text(STUDY.replace('config = "a.toml"\n', "", 1))
    with pytest.raises(ConfigError, match=r"variants\[0\].config"):
        load_study(tmp_path / "bad.toml")


def test_a_study_runs_other_seeds_its_pilot_seeds_alone_or_a_subset_of_its_methods(tmp_path: Path):
    (tmp_path / "study.toml").write_text(STUDY)
    study = load_study(tmp_path / "study.toml", 3, first_seed=3, methods=["greedy", "meta-greedy"])
    assert (study.pilot_seeds, study.seeds) == ((0,), (3, 4, 5))
    assert study.methods == ("meta-greedy", "greedy")  # the study's order
    assert study.ratio is not None and study.ratio.best_of == ("greedy",)  # random was not run
    unscored = load_study(tmp_path / "study.toml", methods=["random", "greedy"])  # the ratio's method was not run:
    assert (unscored.ratio, unscored.pilot_seeds, unscored.seeds) == (None, (), (1,))  # no ratio, nothing to choose
    assert load_study(tmp_path / "study.toml", first_seed=7).seeds == (7,)  # as many test seeds as the file's
    pilot = load_study(tmp_path / "study.toml", pilot_only=True)
    assert (pilot.pilot_seeds, pilot.seeds) == ((), (0,))  # every method, the comparator chosen on them
    alone = load_study(tmp_path / "study.toml", pilot_only=True, methods=["meta-greedy"])
    assert (alone.ratio, alone.pilot_seeds, alone.seeds) == (None, (), (0,))  # one method on the pilot seeds
    (tmp_path / "plain.toml").write_text(STUDY.replace("pilot_seeds = [0]\ntest_seeds = [1]", "seeds = 2"))
    assert load_study(tmp_path / "plain.toml").seeds == (0, 1)
    for bad, message in (({"methods": ["bods"]}, "'methods'"), ({"methods": []}, "'methods'"), ({"first_seed": -1}, "'first_seed'")):
        with pytest.raises(UserError, match=message):
            load_study(tmp_path / "study.toml", **bad)
    with pytest.raises(UserError, match="'pilot_only'"):
        load_study(tmp_path / "plain.toml", pilot_only=True)


def test_the_suite_is_a_valid_study_of_every_method_over_at_least_eight_configurations():
    study = load_study(ROOT / "examples" / "suite" / "study.toml")
    assert len(study.variants) >= 8 and len(study.seeds) == 3
    assert study.ratio is not None and study.ratio.method == "meta-greedy"
    assert set(study.ratio.best_of) == {"random", "fedcs", "genetic", "greedy", "bods", "rlds"}
    assert {"meta-greedy", "meta-greedy-paper", *study.ratio.best_of} == set(study.methods)


def test_the_held_out_study_is_its_generators_output_each_configuration_with_its_own_fleet(tmp_path: Path):
    heldout = ROOT / "examples" / "heldout"
    subprocess.run([sys.executable, str(heldout / "generate.py"), str(tmp_path)], check=True, timeout=60)
    for written in sorted(tmp_path.iterdir()):  # committed as the generator writes it: nothing edited by hand
        assert (heldout / written.name).read_text() == written.read_text(), written.name
    study = load_study(heldout / "study.toml")
    assert len(study.variants) == 18 and (study.pilot_seeds, study.seeds) == ((0, 1, 2), tuple(range(10, 20)))
    assert study.ratio is not None and study.ratio.method == "meta-greedy"
    salts = [v.overrides.get("fleet.salt") for v in study.variants if "fleet.salt" in v.overrides]
    drawn = [v for v in study.variants if v.name.startswith("drawn")]
    assert len(drawn) == 8 and len(salts) == 10 and len(set(salts)) == 10  # the drawn ones carry theirs in their file


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
pilot_seeds = [0]
test_seeds = [1]

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
def test_a_two_configuration_study_chooses_on_its_pilot_seed_and_scores_what_its_test_seed_ran(tmp_path: Path):
    # About 15 s: 2 configurations x (3 methods on the pilot seed + at most 2 on the test seed), 6 devices, 4 rounds.
    (tmp_path / "a.toml").write_text(CONFIG)
    second = CONFIG.replace("target_accuracy = 0.3", "target_accuracy = 0.2") + CONFIG[CONFIG.index("[[jobs]]"):].replace(
        '"lenet"\nmodel', '"cnn"\nmodel'
    ).replace('"lenet5"', '"cnn-a-noniid"').replace("image_size = 12", "image_size = 8")
    (tmp_path / "b.toml").write_text(second)
    (tmp_path / "study.toml").write_text(STUDY)
    out = tmp_path / "out"
    console = Console(file=io.StringIO(), width=240)
    run_study(load_study(tmp_path / "study.toml"), out, console=console, workers=1)

    document = json.loads((out / "study.json").read_text())
    ratio = document["ratio"]
    assert list(ratio["configurations"]) == ["iid", "two jobs, slow tail"] and not ratio["hindsight"]
    for name in ratio["configurations"]:  # each set of seeds reported on its own
        assert {m: v["seeds"] for m, v in document["pilot"][name]["methods"].items()} == {"random": [0], "greedy": [0]}
        assert {tuple(v["seeds"]) for v in document["variants"][name]["methods"].values()} == {(1,)}
    for name, folder in (("iid", "iid"), ("two jobs, slow tail", "two-jobs-slow-tail")):
        pilot = {m: outcome(out / folder / "seed-0" / m, m) for m in ("random", "greedy")}
        row = ratio["configurations"][name]
        assert row["comparator"] == min(pilot, key=lambda m: pilot[m].time_s * (10 if pilot[m].missed else 1))  # chosen there
        ran = {p.name for p in (out / folder / "seed-1").iterdir() if p.is_dir()}
        assert ran == {"meta-greedy", row["comparator"], ratio["single_best"]}  # the test seed ran only those
        own, other = (outcome(out / folder / "seed-1" / m, m) for m in ("meta-greedy", row["comparator"]))
        assert row["ratio"]["ratio"] == pytest.approx(own.time_s / other.time_s)  # one seed: its own ratio
    printed = console.file.getvalue()  # type: ignore[attr-defined]
    assert "comparators chosen on the pilot seeds" in printed and ("PASS: " in printed or "FAIL: " in printed)
    assert "iid, pilot: Time to target accuracy, mean ± sd over runs (seeds 0)" in printed
    assert "iid, test: Time to target accuracy, mean ± sd over runs (seeds 1)" in printed


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
    iid, skewed = ({m: row["methods"][m] for m in study.methods} for row in (rows[n] for n in SLICE))
    print("suite slice, group time to target (s):", iid, skewed)
    for runs in (iid, skewed):  # Meta-Greedy reaches every target, well before the plans that ignore speed
        own = runs["meta-greedy"]["mean_s"]
        assert not runs["meta-greedy"]["missed"]
        assert own < runs["random"]["mean_s"] / 3 and own < runs["fedcs"]["mean_s"]
    assert not iid["greedy"]["missed"] and iid["meta-greedy"]["mean_s"] < 1.5 * iid["greedy"]["mean_s"]  # near the fastest
    # Dirichlet 0.1: the fastest devices' data never reach the target (a miss, at its budget's time); Meta-Greedy's plans do
    assert skewed["greedy"]["missed"]
