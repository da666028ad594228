"""Exported training programs: format, dynamic batch, caching, corruption.

Programs are cached under the repository's `.mjfl-cache/programs` (like the
rest of the suite), so only the first run pays for an export.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from repository import ROOT

from mjfl.errors import ProgramError
from mjfl.jobs import export as export_mod
from mjfl.jobs.base import LocalTraining
from mjfl.jobs.export import cached_program, planned_memory, program_key, validate_program
from mjfl.jobs.models import ModelSpec

CACHE = ROOT / ".mjfl-cache" / "programs"
LENET = ModelSpec("lenet5", (1, 16, 16), 10)
MAX_BATCH = 64
SMALL_BATCH = 8


@pytest.fixture(scope="module")
def lenet_program() -> tuple[Path, str]:
    return cached_program(LENET, CACHE, max_batch=MAX_BATCH)


@pytest.fixture(scope="module")
def small_lenet_program() -> Path:
    return cached_program(LENET, CACHE, max_batch=SMALL_BATCH)[0]


@pytest.fixture(scope="module")
def runtime_planned_memory(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path, str], list[int]]:
    """The C++ runtime's own figures (tests/jobs/planned_memory.cpp, built against the executorch wheel)."""
    import executorch

    wheel = Path(next(iter(executorch.__path__)))  # a namespace package: no __file__
    include, lib = wheel / "include", wheel / "lib"
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if compiler is None or not (include / "executorch/runtime/executor/program.h").exists() or not any(lib.glob("libexecutorch.*")):
        pytest.skip("needs a C++ compiler and the executorch wheel's headers and libexecutorch")
    binary = tmp_path_factory.mktemp("runtime") / "planned_memory"
    built = subprocess.run(
        [
            compiler, "-std=c++17", "-o", str(binary), str(Path(__file__).with_name("planned_memory.cpp")),
            f"-I{include}", f"-I{include / 'executorch/runtime/core/portable_type/c10'}",
            # The wheel's c10 copy lacks torch/headeronly/macros/cmake_macros.h; torch ships it.
            f"-I{Path(torch.__file__).parent / 'include'}",
            f"-L{lib}", "-lexecutorch", f"-Wl,-rpath,{lib}",
        ],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert built.returncode == 0, built.stderr

    def sizes(program: Path, method: str = "forward") -> list[int]:
        done = subprocess.run([str(binary), str(program), method], capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, (done.returncode, done.stderr)
        return [int(line) for line in done.stdout.split()]

    return sizes


def _operators(data: bytes) -> set[str]:
    from executorch.exir._serialize._program import deserialize_pte_binary

    parsed = deserialize_pte_binary(data)
    program = getattr(parsed, "program", parsed)
    return {op.name for op in program.execution_plan[0].operators}


def test_program_avoids_the_runtime_defects_and_slow_kernels(lenet_program: tuple[Path, str]) -> None:
    path, sha = lenet_program
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == sha
    validate_program(data, sha256=sha)
    ops = _operators(data)
    # Known-bad or naive kernels must not appear (docs/models.md).
    for bad in ("convolution", "convolution_backward", "max_pool2d_with_indices",
                "max_pool2d_with_indices_backward", "avg_pool2d", "addmm", "constant_pad_nd",
                "native_batch_norm_legit", "_native_batch_norm_legit"):
        assert f"aten::{bad}" not in ops
    # The passes turned weight-gradient transposes into BLAS `linear`.
    assert "aten::linear" in ops and "aten::mm" in ops


def test_program_has_a_dynamic_batch_and_loss_first(lenet_program: tuple[Path, str]) -> None:
    from executorch.extension.pybindings.portable_lib import _load_for_executorch_from_buffer

    data = lenet_program[0].read_bytes()
    module = _load_for_executorch_from_buffer(data)
    assert tuple(module.method_meta("forward").input_tensor_meta(0).sizes()) == (MAX_BATCH, 1, 16, 16)
    grad_start = module.run_method("__et_training_gradients_index_forward", ())[0]
    param_start = module.run_method("__et_training_parameters_index_forward", ())[0]
    assert grad_start == 2  # loss, logits; no batch norm in LeNet
    for n in (1, 7, MAX_BATCH):
        x = torch.randn(n, 1, 16, 16)
        y = torch.randint(0, 10, (n,))
        outs = module.run_method("forward", (x, y))
        logits = outs[1]
        assert logits.shape == (n, 10)
        torch.testing.assert_close(outs[0], F.cross_entropy(logits, y), rtol=1e-5, atol=1e-6)
        for g, p in zip(outs[grad_start:param_start], outs[param_start:]):
            assert g.shape == p.shape and torch.isfinite(g).all()


def test_planned_memory_grows_with_the_batch_bound(lenet_program: tuple[Path, str], small_lenet_program: Path) -> None:
    small = planned_memory(small_lenet_program.read_bytes())
    large = planned_memory(lenet_program[0].read_bytes())
    # Every sample of the bound has at least its input planned: 1x16x16 float32.
    assert 0 < small and large - small >= (MAX_BATCH - SMALL_BATCH) * 16 * 16 * 4


def test_planned_memory_is_what_the_runtime_allocates(
    lenet_program: tuple[Path, str], small_lenet_program: Path, runtime_planned_memory: Callable[..., list[int]]
) -> None:
    for path in (lenet_program[0], small_lenet_program):
        runtime = runtime_planned_memory(path)
        assert runtime and planned_memory(path.read_bytes()) == sum(runtime)
    # The training metadata methods, which a TrainingModule loads too, plan nothing.
    for method in ("__et_training_fqn_forward", "__et_training_gradients_index_forward"):
        assert planned_memory(lenet_program[0].read_bytes(), method=method) == sum(runtime_planned_memory(lenet_program[0], method)) == 0


@pytest.mark.parametrize("batch_size", [1, 2])
def test_a_program_for_the_smallest_batch_sizes_trains_a_shard_with_a_shorter_last_batch(batch_size: int) -> None:
    """Runs export a job's program for its batch_size, and 1 is a static batch (no dynamic dimension)."""
    from mjfl.jobs.models import initial_weights
    from mjfl.jobs.trainers import ExecuTorchTrainer

    spec = ModelSpec("cnn-b", (1, 8, 8), 4)  # dropout: noise inputs batched too
    path, _ = cached_program(spec, CACHE, max_batch=batch_size)
    trainer = ExecuTorchTrainer(path.read_bytes(), spec)
    assert trainer.max_batch == batch_size
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(5, 1, 8, 8)).astype(np.float32), rng.integers(0, 4, 5)
    result = trainer.train(initial_weights(spec, 0), x, y, LocalTraining(epochs=1, batch_size=batch_size, lr=0.1), seed=1)
    assert len(result.step_times_s) == -(-5 // batch_size) and np.isfinite(result.mean_loss)


def test_planned_memory_refuses_what_is_not_a_program_and_never_crashes(lenet_program: tuple[Path, str]) -> None:
    data = lenet_program[0].read_bytes()
    for blob in (b"", b"not a program at all" * 10, data[:4] + b"ET13" + data[8:], b"\xff\xff\xff\x7f" + data[4:], data[:200]):
        with pytest.raises(ProgramError):
            planned_memory(blob)
    with pytest.raises(ProgramError, match="no method 'backward'"):
        planned_memory(data, method="backward")
    # Corrupt tables give some figure or a ProgramError, nothing else (and no hang).
    (program_size,) = np.frombuffer(data[16:24], "<u8")
    rng = np.random.default_rng(0)
    for _ in range(300):
        bad = bytearray(data)
        for at in rng.integers(8, int(program_size), size=16):
            bad[at] = int(rng.integers(256))
        try:
            planned_memory(bytes(bad))
        except ProgramError:
            pass


def test_validate_program_rejects_corrupt_bytes(lenet_program: tuple[Path, str]) -> None:
    data = lenet_program[0].read_bytes()
    rng = np.random.default_rng(0)
    flipped = bytearray(data)
    for i in rng.integers(64, 2000, size=40):
        flipped[i] ^= 0xFF
    bad = {
        "empty": b"",
        "text": b"not a program at all" * 10,
        "truncated": data[: len(data) // 2],
        "random body": data[:40] + rng.bytes(len(data) - 40),
        "bit flips": bytes(flipped),
    }
    for blob in bad.values():
        with pytest.raises(ProgramError):
            validate_program(blob)
        with pytest.raises(ProgramError):  # and with the digest of the good program
            validate_program(blob, sha256=lenet_program[1])
    # A single flipped bit in the constant data still parses: only the digest catches it.
    one_bit = bytearray(data)
    one_bit[-100] ^= 0x01
    validate_program(bytes(one_bit))
    with pytest.raises(ProgramError, match="sha256"):
        validate_program(bytes(one_bit), sha256=lenet_program[1])


def test_cached_program_exports_once(tmp_path: Path, lenet_program: tuple[Path, str], monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_export(spec: ModelSpec, *, max_batch: int) -> bytes:
        calls.append((spec, max_batch))
        return lenet_program[0].read_bytes()

    monkeypatch.setattr(export_mod, "export_training_program", fake_export)
    p1, s1 = cached_program(LENET, tmp_path, max_batch=MAX_BATCH)
    p2, s2 = cached_program(LENET, tmp_path, max_batch=MAX_BATCH)
    assert (p1, s1) == (p2, s2) and len(calls) == 1
    assert s1 == hashlib.sha256(p1.read_bytes()).hexdigest()
    assert sorted(f.name for f in tmp_path.iterdir()) == [f".{p1.name}.lock", p1.name]  # no temp files left
    # Another spec or batch bound is another program.
    assert program_key(LENET, max_batch=MAX_BATCH) != program_key(LENET, max_batch=32)
    other = ModelSpec("lenet5", (1, 16, 16), 26)
    assert program_key(other) != program_key(LENET)
    cached_program(other, tmp_path, max_batch=MAX_BATCH)
    assert len(calls) == 2


def test_a_model_file_is_known_to_the_cache_by_its_content_not_where_it_lies(tmp_path: Path) -> None:
    source = "from torch import nn\n\ndef net(shape, classes):\n    return nn.Linear(shape[0], classes)\n"
    here, there = tmp_path / "a" / "m.py", tmp_path / "b" / "m.py"
    for path in (here, there):
        path.parent.mkdir()
        path.write_text(source)
    digest = hashlib.sha256(source.encode()).hexdigest()
    one, two = (ModelSpec(f"{path}:net", (4, 1, 1), 3, sha256=digest) for path in (here, there))
    assert program_key(one) == program_key(two)  # a lab's runs each hold a copy: one program
    assert program_key(one) != program_key(ModelSpec(f"{here}:net", (4, 1, 1), 3, sha256="0" * 64))
    assert program_key(one) != program_key(ModelSpec(f"{here}:net", (4, 1, 1), 3, args='{"w": 2}', sha256=digest))
    assert program_key(one) != program_key(ModelSpec(f"{here}:other", (4, 1, 1), 3, sha256=digest))


def test_two_threads_export_at_once_each_its_own_program(tmp_path: Path) -> None:
    """Runs a lab prepares side by side export in threads of one process (torch.export alone fails so)."""
    from concurrent.futures import ThreadPoolExecutor

    specs = [ModelSpec("lenet5", (1, 12, 12), 4), ModelSpec("cnn-b", (1, 8, 8), 4)]
    with ThreadPoolExecutor(max_workers=2) as pool:
        programs = list(pool.map(lambda spec: cached_program(spec, tmp_path, max_batch=8), specs))
    assert len({path for path, _ in programs}) == 2
    for path, _ in programs:
        validate_program(path.read_bytes())


def test_export_rejects_bad_max_batch() -> None:
    with pytest.raises(ValueError):
        export_mod.export_training_program(LENET, max_batch=0)


def test_export_command_writes_a_loadable_program_and_names_bad_arguments(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mjfl.cli import app
    from mjfl.errors import UserError
    from mjfl.jobs.trainers import ExecuTorchTrainer

    out = tmp_path / "lenet.pte"
    result = CliRunner().invoke(app, ["export", "lenet5", "--input-shape", "1,12,12", "--classes", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    assert hashlib.sha256(data).hexdigest() in result.output
    trainer = ExecuTorchTrainer(data, ModelSpec("lenet5", (1, 12, 12), 4))
    # By default, the bound of a job with the default batch size; the output says what it costs.
    assert trainer.max_batch == LocalTraining().batch_size
    memory = planned_memory(data)
    assert f"batches up to {trainer.max_batch}: the runtime plans {memory:,} bytes ({memory / 1e6:.1f} MB)" in result.output

    for args, named in [
        (["nope"], "MODEL"),
        (["lenet5", "--input-shape", "1,8,8"], "--input-shape"),
        (["lenet5", "--input-shape", "1,x,8"], "--input-shape"),
        (["lenet5", "--classes", "1"], "--classes"),
        (["lenet5", "--max-batch", "0"], "--max-batch"),
    ]:
        bad = tmp_path / "bad.pte"
        result = CliRunner().invoke(app, ["export", *args, "--out", str(bad)])
        assert isinstance(result.exception, UserError), (args, result.output)
        assert named in str(result.exception)
        assert not bad.exists()
