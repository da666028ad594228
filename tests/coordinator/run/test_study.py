"""`mjfl study`: a grid of real simulations (variants x seeds) that ends with the report, and continues."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from processes import mjfl_args, query

from mjfl.coordinator.run.study import apply
from mjfl.coordinator.storage.layout import database_path

CONFIG = """
seed = 0
out_dir = "unused"
[fleet]
size = 6
runtime = "torch"
workers = 1
[scheduler]
beta = 0.05
[[jobs]]
name = "lenet"
model = "lenet5"
image_size = 12
partition = "noniid"
batch_size = 16
fraction = 0.5
target_accuracy = 0.3
max_rounds = 4
"""

STUDY = """
config = "run.toml"
methods = ["greedy", "random"]
seeds = 2

[[variants]]
name = "both"

[[variants]]
name = "time only"
set = { "scheduler.beta" = 0.0, "jobs.*.partition" = "iid" }
"""


def test_overrides_reach_every_job_and_nested_tables():
    raw = {"scheduler": {"beta": 0.05}, "jobs": [{"name": "a"}, {"name": "b"}]}
    out = apply(raw, {"scheduler.beta": 0.0, "jobs.*.partition": "iid", "scheduler.options.rlds.horizon": 3})
    assert out["scheduler"] == {"beta": 0.0, "options": {"rlds": {"horizon": 3}}}
    assert [j["partition"] for j in out["jobs"]] == ["iid", "iid"]
    assert raw["scheduler"] == {"beta": 0.05}  # the original is untouched


@pytest.mark.slow
def test_a_study_runs_its_grid_reports_each_variant_and_continues(tmp_path: Path):
    (tmp_path / "run.toml").write_text(CONFIG)
    (tmp_path / "study.toml").write_text(STUDY)
    out = tmp_path / "study"

    def study() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            mjfl_args("study", str(tmp_path / "study.toml"), "--out", str(out)),
            capture_output=True, text=True, timeout=600, check=False,
        )

    first = study()
    assert first.returncode == 0, first.stderr
    for variant in ("both", "time-only"):
        for seed in (0, 1):
            for method in ("greedy", "random"):  # a run of its own, in a folder of its own
                run = json.loads((out / variant / f"seed-{seed}" / method / "summary.json").read_text())
                assert set(run["methods"]) == {method}
    figures = json.loads((out / "study.json").read_text())["variants"]
    assert set(figures) == {"both", "time only"}
    for name, suffix in (("both", ""), ("time only", " (beta=0.0)")):  # the report names non-default weights
        assert {m: (v["runs"], v["seeds"]) for m, v in figures[name]["methods"].items()} == {
            f"greedy{suffix}": (2, [0, 1]), f"random{suffix}": (2, [0, 1]),
        }
    # The variant's overrides reached the runs it made.
    config = json.loads(query(database_path(out / "time-only" / "seed-1" / "random"), "SELECT config_json FROM runs LIMIT 1")[0][0])
    assert config["scheduler"]["beta"] == 0.0 and config["jobs"][0]["partition"] == "iid"
    assert "both: Time to target accuracy" in first.stderr and "time only: Time to target" in first.stderr
    # Run again: nothing is simulated twice, the same report comes back.
    again = study()
    assert again.returncode == 0 and "4 of 4 (variant, seed)s done before" in again.stderr
    assert json.loads((out / "study.json").read_text())["variants"] == figures
    # A method's run gone (or a method added): that run alone is simulated again.
    shutil.rmtree(out / "both" / "seed-1" / "random")
    third = study()
    assert third.returncode == 0 and "3 of 4 (variant, seed)s done before" in third.stderr
    assert "[1/1] both, seed 1: group time to target random" in third.stderr
    assert json.loads((out / "study.json").read_text())["variants"]["time only"] == figures["time only"]


def test_a_bad_study_is_named_before_anything_runs(tmp_path: Path):
    (tmp_path / "run.toml").write_text(CONFIG)
    (tmp_path / "study.toml").write_text(STUDY.replace('"jobs.*.partition" = "iid"', '"jobs.*.partition" = "zipf"'))
    result = subprocess.run(
        mjfl_args("study", str(tmp_path / "study.toml"), "--out", str(tmp_path / "out")),
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 2 and "partition" in result.stderr
    assert not (tmp_path / "out").exists()
