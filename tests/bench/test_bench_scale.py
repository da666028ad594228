"""`mjfl bench scale` (mjfl.bench.scale) on its smallest fleet, both backends (the ``cluster`` fixture's Ray)."""

import json
import os

import pytest
from rich.console import Console

from mjfl.bench.scale import run_scale_bench
from mjfl.errors import UserError


def test_the_scale_bench_measures_both_backends(tmp_path, cluster):
    out = tmp_path / "scale.json"
    run_scale_bench(fleet_sizes=[3], rounds=1, json_path=out, console=Console(quiet=True))
    rows = json.loads(out.read_text())["results"]
    assert [(r["backend"], r["devices"], r["workers"]) for r in rows] == [
        ("local", 3, min(3, os.cpu_count())), ("ray", 3, 2),  # the fixture's Ray has 2 CPUs
    ]
    for row in rows:
        assert row["trainings_per_s"] > 0 and row["coordinator_ms_per_training"] > 0
        assert 0 < row["coordinator_cpu_share"] < 2


def test_unknown_backends_and_empty_fleets_name_the_option():
    with pytest.raises(UserError, match="--backends: unknown"):
        run_scale_bench(fleet_sizes=[3], backends=["slurm"], console=Console(quiet=True))
    with pytest.raises(UserError, match="--fleet-sizes"):
        run_scale_bench(fleet_sizes=[0], backends=["local"], console=Console(quiet=True))
