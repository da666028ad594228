"""Exported training programs: format, dynamic batch, caching, corruption.

Programs are cached under the repository's `.mjfl-cache/programs` (like the
rest of the suite), so only the first run pays for an export.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from repository import ROOT

from mjfl.errors import ProgramError
from mjfl.jobs import export as export_mod
from mjfl.jobs.export import cached_program, program_key, validate_program
from mjfl.jobs.models import ModelSpec

CACHE = ROOT / ".mjfl-cache" / "programs"
LENET = ModelSpec("lenet5", (1, 16, 16), 10)
MAX_BATCH = 64


@pytest.fixture(scope="module")
def lenet_program() -> tuple[Path, str]:
    return cached_program(LENET, CACHE, max_batch=MAX_BATCH)


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
    assert [f.name for f in tmp_path.iterdir()] == [p1.name]  # no temp files left
    # Another spec or batch bound is another program.
    assert program_key(LENET, max_batch=MAX_BATCH) != program_key(LENET, max_batch=32)
    other = ModelSpec("lenet5", (1, 16, 16), 26)
    assert program_key(other) != program_key(LENET)
    cached_program(other, tmp_path, max_batch=MAX_BATCH)
    assert len(calls) == 2


def test_export_rejects_bad_max_batch() -> None:
    with pytest.raises(ValueError):
        export_mod.export_training_program(LENET, max_batch=0)


def test_export_command_writes_a_loadable_program_and_names_bad_arguments(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from mjfl.cli import app
    from mjfl.errors import UserError
    from mjfl.jobs.trainers import ExecuTorchTrainer

    out = tmp_path / "lenet.pte"
    result = CliRunner().invoke(
        app, ["export", "lenet5", "--input-shape", "1,12,12", "--classes", "4", "--max-batch", "8", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    data = out.read_bytes()
    assert hashlib.sha256(data).hexdigest() in result.output
    trainer = ExecuTorchTrainer(data, ModelSpec("lenet5", (1, 12, 12), 4))
    assert trainer.max_batch == 8

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
