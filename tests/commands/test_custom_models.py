"""Your own model, as a researcher brings it: plain `nn.Module`s in files beside a config.

Real export, real ExecuTorch runtime, real training on the digits: `mjfl models
check` on three models of this folder's own (custom_models/models.py) and one
with every supported layer; a run of a custom and a zoo job to both targets;
an operator without a rule stopping a run before any device or record.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from mjfl.commands.simulate import simulate
from mjfl.coordinator.config import load_config
from mjfl.coordinator.run.driver import Output
from mjfl.coordinator.storage.database import Storage

pytestmark = pytest.mark.timeout(900)

HERE = Path(__file__).parent / "custom_models"

JOB = """
[[jobs]]
name = "{name}"
model = "{model}"
image_size = {size}
partition = "iid"
{training}
fraction = 0.5
target_accuracy = {target}
max_rounds = {rounds}
"""


CUSTOM = "epochs = 1\nbatch_size = 16\nlr = 0.05\nmomentum = 0.9"
LENET = "epochs = 2\nbatch_size = 8\nlr = 0.05\nmomentum = 0.0"  # examples/custom/custom.toml's zoo job


def write_config(folder: Path, jobs: list[tuple[str, str]], *, size: int = 4, target: float = 0.5, rounds: int = 2) -> Path:
    """A config beside a copy of this folder's model files, as a researcher's folder holds them."""
    for source in HERE.glob("*.py"):
        shutil.copy(source, folder / source.name)
    text = f'seed = 0\nout_dir = "{folder / "out"}"\n[fleet]\nsize = {size}\nruntime = "executorch"\n'
    text += "[testbed]\nport = 0\nwait_timeout_s = 30\n"
    text += "".join(
        JOB.format(name=name, model=model, target=target, rounds=rounds, size=12 if model == "lenet5" else 8,
                   training=LENET if model == "lenet5" else CUSTOM)
        for name, model in jobs
    )
    path = folder / "run.toml"
    path.write_text(text)
    return path


def mjfl(*args: str, cwd: Path, timeout: float = 800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mjfl.cli", *args], check=False, capture_output=True, text=True, cwd=cwd,
        timeout=timeout, stdin=subprocess.DEVNULL,
    )


def test_models_check_passes_for_three_custom_models_and_every_supported_layer(tmp_path: Path) -> None:
    config = write_config(tmp_path, [
        ("mobilenet", "models.py:MobileNetStyle"), ("resnet", "models.py:SmallResNet"),
        ("mlp", "models.py:SensorMLP"), ("every-layer", "models.py:EveryLayer"),
    ])
    result = mjfl("models", "check", str(config), "--steps", "20", "--json", str(tmp_path / "check.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    checks = {c["job"]: c for c in json.loads((tmp_path / "check.json").read_text())}
    assert set(checks) == {"mobilenet", "resnet", "mlp", "every-layer"}
    for job, check in checks.items():
        # 20 steps of the exported program, each from eager's state, within the zoo's bounds.
        assert check["parity_ok"] and check["parity"].startswith("20 steps"), (job, check["parity"])
        assert check["program_bytes"] > 0 and check["planned_memory_bytes"] > 0, job
        assert check["executorch_step_ms"] > 0 and check["eager_step_ms"] > 0, job
    became = {job: {op: how for op, how, _ in check["operators"]} for job, check in checks.items()}
    assert "nn.ReLU6" in became["mobilenet"] and "nn.AdaptiveAvgPool2d" in became["mobilenet"]
    assert checks["mobilenet"]["batch_norm_layers"] == 5 and checks["mobilenet"]["dropout_sites"] == 1
    assert "+" in became["resnet"] and "nn.BatchNorm2d" in became["resnet"]
    assert {"nn.LayerNorm", "nn.GELU"} <= set(became["mlp"])
    every = set(became["every-layer"])
    for op in ("torch.cat", "torch.sigmoid", "torch.tanh", "nn.LeakyReLU", "nn.MaxPool2d", "nn.AvgPool2d",
               "F.silu", "F.hardswish", "x.mean", "nn.BatchNorm1d", "F.relu6", "nn.LayerNorm", "F.gelu"):
        assert op in every, (op, sorted(every))
    # What the check printed names each job's figures.
    assert "parity ok" in result.stderr + result.stdout


def test_a_custom_and_a_zoo_job_reach_their_targets(tmp_path: Path) -> None:
    path = write_config(tmp_path, [("mobilenet", "models.py:mobilenet"), ("lenet", "lenet5")], size=8, target=0.8, rounds=30)
    config = load_config(path)
    config = dataclasses.replace(config, fleet=dataclasses.replace(config.fleet, workers=2))
    summary = simulate(config, ["meta-greedy"], Output(config.out_dir, Console(quiet=True), live=False))
    for name, row in summary["methods"]["meta-greedy"]["jobs"].items():
        assert row["time_to_target_s"] is not None, (name, row)
    # The custom job's model is recorded with its source's digest; the zoo's by its name.
    with Storage.read_only(config.database_path) as storage:
        ((run, _),) = storage.runs()
        recorded, _ = storage.provenance(run.run_id)
    assert recorded is not None
    programs = {str(p.job): p for p in recorded.programs}
    source = tmp_path / "models.py"
    assert programs["mobilenet"].model == f"{source}:mobilenet"
    assert programs["mobilenet"].model_sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert (programs["lenet"].model, programs["lenet"].model_sha256) == ("lenet5", None)


def test_an_operator_without_a_rule_stops_the_run_before_any_device_or_record(tmp_path: Path) -> None:
    config = write_config(tmp_path, [("up", "unsupported.py:WithUpsample")])
    for args in (("testbed", "run", str(config), "--emulate", "2", "--no-live"), ("simulate", str(config)),
                 ("models", "check", str(config))):
        result = mjfl(*args, cwd=tmp_path, timeout=300)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr
        errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, (args, result.stderr)
        # The operator, the module's qualified name, and what to use instead.
        assert "nn.Upsample" in errors[0] and "features.2" in errors[0] and "instead" in errors[0], errors[0]
        assert "emulated device" not in result.stderr + result.stdout  # no device was started, none contacted
    out = tmp_path / "out"
    assert not out.exists() or not any(out.rglob("*.db")), sorted(out.rglob("*"))


def test_mjfl_export_takes_a_factory_and_its_arguments(tmp_path: Path) -> None:
    write_config(tmp_path, [])
    out = tmp_path / "mlp.pte"
    result = mjfl("export", "models.py:SensorMLP", "--input-shape", "1,8,8", "--classes", "10",
                  "--model-args", '{"hidden": 16}', "--max-batch", "8", "--out", str(out), cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    assert out.stat().st_size > 0 and "sha256" in result.stdout + result.stderr
    refused = mjfl("export", "lenet5", "--model-args", '{"width": 2}', "--out", str(out), cwd=tmp_path, timeout=120)
    assert refused.returncode == 2 and "--model-args" in refused.stderr, refused.stderr
