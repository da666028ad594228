"""`mjfl bench schedulers` (mjfl.bench.schedulers): the figures it writes, as docs/cost-model.md documents them."""

import json

import pytest

from mjfl.errors import UserError
from mjfl.schedulers.registry import MEMBERS


def test_bench_schedulers_cli_writes_the_documented_shape(tmp_path):
    from typer.testing import CliRunner

    from mjfl.cli import app

    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        app, ["bench", "schedulers", "--fleet-sizes", "30,40", "--jobs", "2", "--rounds", "3",
              "--methods", "random,greedy,meta-greedy", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert set(report) == {"results"}
    assert [(r["method"], r["devices"]) for r in report["results"]] == [
        (m, d) for d in (30, 40) for m in ("random", "greedy", "meta-greedy")
    ]
    for row in report["results"]:
        assert set(row) == {"method", "devices", "jobs", "median_ms", "p95_ms", "mean_cost", "wins"}
        assert row["jobs"] == 2 and row["median_ms"] >= 0 and row["p95_ms"] >= row["median_ms"]
        assert row["mean_cost"] > 0
    # Meta-Greedy's row: each member's share of its decisions; a member's row repeats its own.
    for devices in (30, 40):
        rows = {r["method"]: r for r in report["results"] if r["devices"] == devices}
        wins = rows["meta-greedy"]["wins"]
        assert list(wins) == list(MEMBERS["meta-greedy"]) and sum(wins.values()) == pytest.approx(1, abs=1e-3)
        assert rows["random"]["wins"] == wins["random"] and rows["greedy"]["wins"] == wins["greedy"]


def test_unknown_methods_and_impossible_sizes_name_the_option():
    from mjfl.bench.schedulers import run_schedulers_bench

    with pytest.raises(UserError, match="--methods: unknown"):
        run_schedulers_bench(devices=[10], jobs=1, rounds=1, methods=["oracle"])
    with pytest.raises(UserError, match="--fleet-sizes"):
        run_schedulers_bench(devices=[1], jobs=1, rounds=1)
