"""`mjfl bench trainers` (mjfl.bench.trainers): the figures it writes, and a terminal with mjfl's lines only."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
from processes import mjfl_args
from rich.console import Console

from mjfl.bench.trainers import run_trainers_bench
from mjfl.errors import UserError


def test_the_command_prints_only_its_own_lines_and_logs_the_rest_beside_the_json(tmp_path):
    out = tmp_path / "bench" / "trainers.json"
    done = subprocess.run(
        mjfl_args("bench", "trainers", "--models", "lenet5", "--steps", "2", "--batch", "4", "--devices-per-step", "2",
                  "--json", str(out)),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, timeout=300, check=False,
    )
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout
    # ExecuTorch's runtime prints cpuinfo_utils.cpp lines on its first step, torchao and torch warn on import:
    # none of it on the terminal. Before the table: mjfl's progress, line by line; then the table; last, where.
    title = next(n for n, line in enumerate(lines) if "Training step, batch 4, median of 2" in line)
    assert [re.sub(r"\d+(\.\d+)?", "N", line) for line in lines[:title]] == [
        "lenetN: exporting (cached after the first run) ...",
        "lenetN executorch: N ms/step (N s)",
        "lenetN torch: N ms/step (N s)",
    ], done.stdout
    fleet = next(n for n, line in enumerate(lines) if line.strip().startswith("Device trainings per second"))
    assert [line.split(":")[0] for line in lines[title:fleet] if line.endswith("}")] == ["lenet5", "cnn-a-noniid", "vgg6"]
    assert any(line.split()[:2] == ["│", "lenet5"] for line in lines[title:]), done.stdout
    log = out.with_suffix(".log")
    assert lines[-1] == f"wrote {out}; log in {log}"
    assert not any("cpuinfo" in line or "torchao" in line for line in lines)
    assert "cpuinfo" in log.read_text() or "torchao" in log.read_text()  # the noise is kept, in the log
    figures = json.loads(out.read_text())
    assert [(r["model"], r["runtime"], r["steps"], r["batch"]) for r in figures["results"]] == [
        ("lenet5", "executorch", 2, 4), ("lenet5", "torch", 2, 4),
    ]
    assert figures["ratios"]["lenet5"] > 0 and figures["settings"]["goals"] == {"lenet5": 1.5}
    # Device trainings per second: each path on each quickstart job, the batched trainer at K = 2.
    trainings = figures["device_trainings"]
    assert list(trainings) == ["lenet5", "cnn-a-noniid", "vgg6"]
    for entry in trainings.values():
        assert entry["executorch"] > 0 and entry["torch"] > 0 and list(entry["batched"]) == ["2"]
        assert entry["batched"]["2"] > 0 and entry["batched_32_over_executorch"] == 0  # no K = 32 measured


def test_unknown_models_and_empty_runs_name_the_option():
    with pytest.raises(UserError, match="--models: unknown vgg19"):
        run_trainers_bench(models=["lenet5", "vgg19"], console=Console(quiet=True))
    with pytest.raises(UserError, match="--steps and --batch"):
        run_trainers_bench(models=["lenet5"], steps=0, console=Console(quiet=True))
    with pytest.raises(UserError, match="--devices-per-step '8,0'"):
        run_trainers_bench(models=["lenet5"], devices_per_step=[8, 0], console=Console(quiet=True))


def test_a_configs_own_models_are_measured_beside_the_zoos(tmp_path):
    """--config adds each job's model of its own (a factory), at its job's input shape, with the custom goal."""
    from repository import ROOT

    from mjfl.bench.trainers import CUSTOM_GOAL, custom_specs

    models = ROOT / "tests" / "commands" / "custom_models" / "models.py"
    config = tmp_path / "run.toml"
    config.write_text(f'[fleet]\nsize = 2\n[[jobs]]\nname = "mlp"\nmodel = "{models}:SensorMLP"\nimage_size = 8\n'
                      '[[jobs]]\nname = "zoo"\nmodel = "lenet5"\nimage_size = 12\n')
    specs = custom_specs(config)
    assert list(specs) == ["mlp (SensorMLP)"] and specs["mlp (SensorMLP)"].input_shape == (1, 8, 8)
    figures = run_trainers_bench(models=["lenet5"], custom=specs, steps=2, batch=4, devices_per_step=[],
                                 console=Console(quiet=True))
    assert set(figures["ratios"]) == {"lenet5", "mlp (SensorMLP)"}
    assert figures["settings"]["goals"] == {"lenet5": 1.5, "mlp (SensorMLP)": CUSTOM_GOAL}
    no_custom = tmp_path / "zoo.toml"
    no_custom.write_text('[fleet]\nsize = 2\n[[jobs]]\nname = "zoo"\nmodel = "lenet5"\nimage_size = 12\n')
    with pytest.raises(UserError, match="no job names a model of its own"):
        custom_specs(no_custom)


def test_the_operator_profile_splits_a_step_into_the_programs_kernels():
    """--operators: the runtime's own timings of each kernel. LeNet-5's convolutions became mm over an im2col
    (docs/models.md), so mm is among the kernels that take its time; every row's share adds up to the program."""
    figures = run_trainers_bench(models=["lenet5"], steps=2, batch=4, devices_per_step=[], operators=3,
                                 console=Console(quiet=True))
    profile = figures["operators"]["lenet5"]
    assert profile["program_ms"] > 0 and profile["step_ms"] > 0
    names = [row["name"] for row in profile["top"]]
    assert "mm" in names and "convolution" not in names and names[-1].startswith("between kernels")
    assert sum(row["ms"] for row in profile["top"]) == pytest.approx(profile["program_ms"], rel=1e-3, abs=1e-3)
