"""`mjfl bench programs` (mjfl.bench.programs): the paper's jobs, and the figures it reports."""

from __future__ import annotations

import json

import pytest
from repository import EXAMPLES, ROOT
from rich.console import Console

from mjfl.bench.programs import PAPER_JOBS, run_programs_bench
from mjfl.coordinator.config import load_config
from mjfl.errors import UserError
from mjfl.jobs.base import MAX_BATCH, MODEL_NAMES, ModelSpec
from mjfl.jobs.export import cached_program, planned_memory

CACHE = ROOT / ".mjfl-cache" / "programs"


def test_every_zoo_model_has_the_batch_size_of_its_paper_job():
    assert set(PAPER_JOBS) == set(MODEL_NAMES)
    for group in ("paper-group-a.toml", "paper-group-b.toml"):
        for job in load_config(EXAMPLES / group).jobs:
            assert PAPER_JOBS[job.model].batch_size == job.training.batch_size, (group, job.name)


def test_the_figures_are_the_cached_programs_own(tmp_path):
    out = tmp_path / "programs.json"
    console = Console(record=True, width=200)
    report = run_programs_bench(models=["lenet5"], cache_dir=CACHE, json_path=out, console=console)
    rows = report["results"]
    assert [r["max_batch"] for r in rows] == [64, MAX_BATCH]
    for row in rows:
        path, _ = cached_program(ModelSpec("lenet5", (1, 28, 28), 10), CACHE, max_batch=row["max_batch"])
        data = path.read_bytes()
        assert (row["program_bytes"], row["planned_bytes"]) == (len(data), planned_memory(data))
    assert rows[0]["planned_bytes"] < rows[1]["planned_bytes"]
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    text = console.export_text()
    assert f"{rows[0]['planned_bytes'] / 1e6:.1f}" in text and "EMNIST digits" in text


def test_unknown_models_name_the_option():
    with pytest.raises(UserError, match="--models: unknown vgg19"):
        run_programs_bench(models=["lenet5", "vgg19"], console=Console(quiet=True))
