"""`mjfl export`: write a model's ExecuTorch training program (the zoo's or a factory's), the `.pte` a phone runs."""

from __future__ import annotations

import hashlib
from pathlib import Path

from rich.console import Console

from mjfl import logs
from mjfl.coordinator.config import resolve_model
from mjfl.errors import ConfigError, UserError


def export_program(
    model: str, out: Path, *, input_shape: tuple[int, ...], classes: int, max_batch: int, console: Console,
    model_args: str = "",
) -> Path:
    """Check the arguments (naming the bad one), export, write ``out``; returns it."""
    from mjfl.jobs.base import ModelSpec
    from mjfl.jobs.export import export_training_program, planned_memory
    from mjfl.jobs.models import build_model

    shape = tuple(input_shape)
    if len(shape) != 3:
        raise UserError(f"--input-shape must be C,H,W, got {','.join(map(str, shape))!r}")
    if not 1 <= max_batch <= 65536:
        raise UserError("--max-batch must be in [1, 65536]")
    if out.is_dir():
        raise UserError(f"--out {out}: a folder; give the .pte file to write")
    try:
        args = _model_args(model, model_args)
        name, sha256 = resolve_model(model, "model", Path.cwd())  # a file factory: its absolute path and digest
        spec = ModelSpec(name, shape, classes, args=args, sha256=sha256)  # type: ignore[arg-type]
        build_model(spec)  # checks the input is large enough for the architecture, and a factory's result
    except ConfigError as exc:  # name the argument, not a config field
        arg = {"model": "MODEL", "input_shape": "--input-shape", "num_classes": "--classes",
               "model_args": "--model-args"}.get(exc.field, exc.field)
        raise UserError(f"{arg}: {exc.problem}") from None
    console.print(f"exporting {model} for {shape}, {classes} classes (this takes a while) ...")
    with logs.native_output():  # torch's and ExecuTorch's own lines: dropped, or shown with --verbose
        data = export_training_program(spec, max_batch=max_batch)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    memory = planned_memory(data)
    console.print(f"wrote {out} ({len(data):,} bytes, sha256 {hashlib.sha256(data).hexdigest()})")
    # What a phone allocates on loading it, beside the program's own bytes (docs/models.md).
    console.print(
        f"batches up to {max_batch}: the runtime plans {memory:,} bytes ({memory / 1e6:.1f} MB) of memory for it",
        highlight=False, soft_wrap=True,
    )
    return out


def _model_args(model: str, text: str) -> str:
    """``--model-args`` as the canonical JSON a ModelSpec holds ("" for none)."""
    import json

    from mjfl.jobs.base import MODEL_NAMES, model_args_json

    if not text:
        return ""
    if model in MODEL_NAMES:
        raise ConfigError("model_args", f"zoo model {model!r} takes no arguments")
    try:
        table = json.loads(text)
    except ValueError as exc:
        raise ConfigError("model_args", f"not JSON: {exc}") from None
    if not isinstance(table, dict):
        raise ConfigError("model_args", f"must be a JSON object, got {text!r}")
    return model_args_json(table)
