"""Export a zoo model as an ExecuTorch training program (.pte).

The program computes forward + cross-entropy loss + backward in one method,
`forward(x, y, *noise)`, with a dynamic batch dimension (1..max_batch), so a
shard's last short batch runs on the same program. `noise` is one U[0, 1)
tensor per dropout site of the model, shaped (*features, N) (the site's
activation with the batch last; see `mjfl.jobs.models.dropout_shapes`): an
activation is kept where its noise is > p. Whoever runs the program fills
them (a seeded trainer, a phone's RNG); models without dropout take none.
Its outputs are, in order:

    loss, logits, [bn mean, bn biased var for each batch norm layer],
    gradients (one per parameter), parameters (the runtime's own tensors)

which is the layout ExecuTorch's `TrainingModule` expects (user outputs,
then gradients, then parameters; index methods `__et_training_*` say where
each part starts and which parameter it is).

Pipeline: `torch.export.export` -> `_export_forward_backward` (joint graph)
-> `to_edge` -> the graph passes below -> `to_executorch`. Nothing is
delegated: XNNPACK-delegated training programs train on their initial
weights in executorch 1.5.1.

`cached_program` exports once per (spec, max_batch, tool versions) and keeps
the bytes on disk under their content hash, so an engine exports a job's
program once and every device gets the same bytes. A run exports each job's
program for the job's batch_size: the runtime allocates the program's
planned memory (`planned_memory`), which grows with max_batch, when it loads
it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import struct
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mjfl.errors import ProgramError
from mjfl.jobs.base import MAX_BATCH, ModelSpec
from mjfl.jobs.models import dropout_shapes

__all__ = [
    "DEFAULT_MAX_BATCH",
    "PARAM_PREFIX",
    "cached_program",
    "cached_programs",
    "export_training_program",
    "planned_memory",
    "program_key",
    "validate_program",
]

DEFAULT_MAX_BATCH = MAX_BATCH

# torch.export keeps its tracing state in globals: two threads exporting at once
# fail (the lab service prepares runs side by side), so a process exports one
# program at a time. Re-entrant: cached_program holds it around its export.
_EXPORTING = threading.RLock()

# The exported wrapper holds the zoo model as `model`; the runtime names
# parameters "model.<state_dict key>".
PARAM_PREFIX = "model."
# Bump when the export form or the passes change what a program computes.
EXPORT_FORMAT = 2


def _spec_of(
    model: str | ModelSpec,
    input_shape: tuple[int, int, int] | None,
    num_classes: int | None,
    dropout: float | None,
) -> ModelSpec:
    if isinstance(model, ModelSpec):
        return model
    if input_shape is None or num_classes is None:
        raise TypeError("export needs a ModelSpec or (name, input_shape, num_classes)")
    return ModelSpec(model, tuple(input_shape), num_classes, dropout)  # type: ignore[arg-type]


def _training_wrapper(spec: ModelSpec) -> Any:
    """The nn.Module that is exported: the model's export form (`mjfl.jobs.convert`) + loss."""
    import torch
    from torch import nn

    from mjfl.jobs.convert import ExportForm
    from mjfl.jobs.models import build_model

    class TrainingProgram(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = build_model(spec)
            self.model.train()
            self.form = ExportForm(self.model)

        def forward(self, x: torch.Tensor, y: torch.Tensor, *noise: torch.Tensor) -> tuple[torch.Tensor, ...]:
            logits, stats = self.form.run(x, noise)
            # Cross-entropy without F.cross_entropy's ignore_index and
            # weight plumbing: the same value in a third of the operators.
            logp = torch.log_softmax(logits, dim=1)
            loss = -logp.gather(1, y.unsqueeze(1)).sum() * self.form.inv_batch
            # aot_export_joint requires every output but the loss detached.
            return (loss, logits.detach(), *(t.detach() for t in stats))

    return TrainingProgram()


def export_training_program(
    model: str | ModelSpec,
    input_shape: tuple[int, int, int] | None = None,
    num_classes: int | None = None,
    *,
    dropout: float | None = None,
    max_batch: int = DEFAULT_MAX_BATCH,
) -> bytes:
    """The .pte bytes of `model`'s training program (see the module docstring).

    The weights baked into the program are an arbitrary initialisation: the
    trainers always write the global weights into the runtime before training.
    """
    import warnings

    import torch
    from executorch.exir import EdgeCompileConfig, to_edge
    from torch.export import Dim, export
    from torch.export.experimental import _export_forward_backward

    from mjfl.jobs import passes

    spec = _spec_of(model, input_shape, num_classes, dropout)
    if not 1 <= max_batch <= 65536:
        raise ValueError(f"max_batch must be in [1, 65536], got {max_batch}")
    wrapper = _training_wrapper(spec)
    c, h, w = spec.input_shape
    example_n = min(max(2, max_batch // 2), max_batch) if max_batch > 1 else 1
    x = torch.zeros(example_n, c, h, w)
    y = torch.zeros(example_n, dtype=torch.long)
    # One U[0, 1) noise input per dropout site, batch innermost like the
    # export form's activations: (*features, N).
    sites = dropout_shapes(wrapper.model, spec.input_shape)
    wrapper.form.check(spec.input_shape, sites)  # an operator without a rule fails here, by name
    noise = [torch.rand(*shape, example_n) for shape in sites]
    dynamic: tuple[Any, ...] | None = None
    if max_batch > 1:
        batch = Dim("batch", min=1, max=max_batch)
        dynamic = ({0: batch}, {0: batch})
        if sites:  # the varargs are one more (nested) argument
            dynamic += (tuple({len(shape): batch} for shape in sites),)
    with _EXPORTING, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ep = export(wrapper, (x, y, *noise), dynamic_shapes=dynamic, strict=False)
        ep = _export_forward_backward(ep, joint_loss_index=0)
        # The joint graph is already core ATen (decomposed by
        # _export_forward_backward); to_edge would decompose and retrace it
        # once more, a fifth of the export time.
        ep.run_decompositions = lambda *args, **kwargs: ep  # type: ignore[method-assign]
        edge = to_edge(ep, compile_config=EdgeCompileConfig(_check_ir_validity=False))
        edge = edge.transform(passes.TRAINING_PASSES)
        program = edge.to_executorch()
    return bytes(program.buffer)


def _versions() -> dict[str, str]:
    import executorch  # noqa: F401
    import torch

    import mjfl

    try:
        from importlib.metadata import version

        et = version("executorch")
    except Exception:  # noqa: BLE001  # pragma: no cover - metadata missing in odd installs
        et = "unknown"
    return {"torch": torch.__version__, "executorch": et, "mjfl": mjfl.__version__}


def _source_digest() -> str:
    """Hash of the modules that decide what an exported program computes."""
    from mjfl.jobs import convert, layers, models, passes

    h = hashlib.sha256()
    for module in (convert, layers, models, passes):
        h.update(Path(module.__file__ or "").read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def program_key(spec: ModelSpec, *, max_batch: int = DEFAULT_MAX_BATCH) -> str:
    """Content hash naming a program.

    Covers the spec, the batch bound, the tool versions and the source of
    the zoo, the export form and the passes, so a cache never serves a
    program that the current code would export differently. A model file
    counts by its factory's name and the file's sha256, wherever it lies
    (its helper files do not count: docs/models.md).
    """
    known = asdict(spec)
    if spec.custom and spec.sha256:
        # A model file is known by its content, not where it lies: the lab's runs hold their own copies.
        known["name"] = f"{spec.label}@{spec.sha256}"
    blob = json.dumps(
        {
            "spec": known,
            "max_batch": max_batch,
            "format": EXPORT_FORMAT,
            "versions": _versions(),
            "source": _source_digest(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def cached_program(
    spec: ModelSpec, cache_dir: str | os.PathLike[str], *, max_batch: int = DEFAULT_MAX_BATCH
) -> tuple[Path, str]:
    """Path and sha256 of `spec`'s program, exporting it only on a cache miss.

    The file is named by `program_key` (so a new torch/executorch/mjfl
    version re-exports) and written atomically; the sha256 is of the bytes,
    for devices to check what they received.
    """
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"{spec.label}-{program_key(spec, max_batch=max_batch)}.pte"
    if not path.exists():
        # A second thread or process wanting the same program waits for it, not exports it again.
        with _EXPORTING, _locked(cache / f".{path.name}.lock"):
            if not path.exists():
                _write_atomically(cache, path, export_training_program(spec, max_batch=max_batch))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return path, digest


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """Holds an exclusive lock on the file ``lock`` (made if missing) across processes."""
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file closes
        yield


def _write_atomically(cache: Path, path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=cache, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # The first process to export a program publishes it; a later one keeps it. Exports of
        # one spec differ byte for byte, so replacing the file would make a digest another
        # process read from it (and sent to its devices) a lie.
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        Path(tmp).unlink(missing_ok=True)


def _cached_program_job(
    spec: ModelSpec, cache_dir: str, max_batch: int
) -> tuple[str, str]:  # pragma: no cover - runs in worker processes
    path, digest = cached_program(spec, cache_dir, max_batch=max_batch)
    return str(path), digest


def cached_programs(
    specs: list[ModelSpec],
    cache_dir: str | os.PathLike[str],
    *,
    max_batch: int = DEFAULT_MAX_BATCH,
    workers: int = 1,
) -> dict[ModelSpec, tuple[Path, str]]:
    """`cached_program` for several specs, exporting misses in parallel.

    Export is single-threaded Python (seconds to a couple of minutes a
    model), so with `workers` > 1 the misses run in that many spawned
    processes. Hits cost nothing either way.
    """
    unique = list(dict.fromkeys(specs))
    out: dict[ModelSpec, tuple[Path, str]] = {}
    missing = []
    for spec in unique:
        path = Path(cache_dir) / f"{spec.label}-{program_key(spec, max_batch=max_batch)}.pte"
        if path.exists():
            out[spec] = cached_program(spec, cache_dir, max_batch=max_batch)
        else:
            missing.append(spec)
    if workers > 1 and len(missing) > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        ctx = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=min(workers, len(missing)), mp_context=ctx) as pool:
            jobs = {
                spec: pool.submit(_cached_program_job, spec, str(cache_dir), max_batch)
                for spec in missing
            }
            for spec, job in jobs.items():
                path_s, digest = job.result()
                out[spec] = (Path(path_s), digest)
    else:
        for spec in missing:
            out[spec] = cached_program(spec, cache_dir, max_batch=max_batch)
    return out


def validate_program(data: bytes, *, sha256: str | None = None) -> None:
    """Cheap checks that `data` is an intact mjfl training program.

    Raises `ProgramError` unless the bytes carry the ExecuTorch flatbuffer
    identifier and a consistent extended header (which every program this
    module writes has) and, when `sha256` is given, hash to it.

    The bytes are then parsed in Python, which is memory safe. The digest
    is the real defence: the 1.5.1 runtime verifies the flatbuffer but still
    crashes the process (SIGSEGV, or an uncaught UnicodeDecodeError while
    logging a bad identifier) on some corrupted programs, so bytes that
    travelled must be checked before loading.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ProgramError(f"a program is bytes, got {type(data).__name__}")
    data = bytes(data)
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256.lower():
        raise ProgramError("program bytes do not match their sha256 (corrupted in transit?)")
    if len(data) < 32 or data[4:8] != b"ET12":
        raise ProgramError("not an ExecuTorch program (missing the 'ET12' identifier)")
    if data[8:12] != b"eh00":
        raise ProgramError("not an mjfl training program (missing the extended header)")
    (header_len,) = struct.unpack_from("<I", data, 12)
    program_size, segment_base = struct.unpack_from("<QQ", data, 16)
    end = segment_base
    if header_len >= 32:  # the header also records the size of the data segments
        (segment_size,) = struct.unpack_from("<Q", data, 32)
        end = segment_base + segment_size
    if header_len < 24 or not 32 <= program_size <= len(data) or end > len(data):
        raise ProgramError(
            f"program header is inconsistent with its {len(data)} bytes (truncated or corrupt)"
        )
    # A full parse in Python (memory safe) rejects most corrupted bodies
    # that would crash the C++ loader.
    try:
        from executorch.exir._serialize._program import deserialize_pte_binary

        parsed = deserialize_pte_binary(data)
        program = getattr(parsed, "program", parsed)
        if not program.execution_plan:
            raise ValueError("no execution plan")
    except Exception as exc:  # noqa: BLE001 - re-raised as one ProgramError
        raise ProgramError(f"program does not parse ({type(exc).__name__}: {exc})") from None


def planned_memory(data: bytes, *, method: str = "forward") -> int:
    """Bytes of planned memory the runtime allocates for `method` of program `data`.

    The sum of the method's `non_const_buffer_sizes` in its execution plan
    (executorch's schema/program.fbs; entry 0 is reserved and 0), read from
    the flatbuffer without loading or running the program. ExecuTorch's
    loaders (its Module extension, the pybindings, the example runner)
    allocate one buffer of `MethodMeta::memory_planned_buffer_size(i)` bytes
    for each of the others when they load the method, before any step. It
    holds what a step reads and writes, sized for the batch bound: the
    inputs, the activations the backward pass reads, the gradients, the
    outputs and the parameters themselves (the runtime's working copy,
    filled from the program's bytes on loading), so it grows with
    `max_batch` from a floor of about twice the parameters' size. The
    training metadata methods (`__et_training_*`) plan none.

    Raises `ProgramError` when the bytes are not an ExecuTorch program or
    have no such method; it checks nothing else (`validate_program` checks
    bytes that travelled).
    """
    data = bytes(data)
    if len(data) < 8 or data[4:8] != b"ET12":
        raise ProgramError("not an ExecuTorch program (missing the 'ET12' identifier)")
    try:
        root = _FlatTable(data, _FlatTable.uoffset(data, 0))
        for plan in root.tables(_PROGRAM_EXECUTION_PLAN):
            if plan.string(_PLAN_NAME) == method:
                return sum(plan.int64s(_PLAN_NON_CONST_BUFFER_SIZES))
    except ValueError as exc:
        raise ProgramError(f"program does not parse ({exc})") from None
    raise ProgramError(f"program has no method {method!r}")


# Field slots of schema/program.fbs (its declaration order, which flatbuffers
# keeps stable across schema versions): Program.execution_plan and
# ExecutionPlan.name, .non_const_buffer_sizes.
_PROGRAM_EXECUTION_PLAN = 1
_PLAN_NAME = 0
_PLAN_NON_CONST_BUFFER_SIZES = 8


class _FlatTable:
    """One flatbuffer table of `data` at `pos`: the few reads `planned_memory` needs.

    Reads from the flatbuffers format itself (flatbuffers.dev, "Internals")
    rather than executorch's Python deserialiser, which builds every
    instruction of the program (a third of a second for resnet13) and whose
    generated accessors only work once its private loader has patched them.
    Every offset is bounds-checked: corrupt bytes raise ValueError.
    """

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos
        (back,) = self._unpack("<i", pos)
        self.vtable = pos - back
        (self.vtable_len,) = self._unpack("<H", self.vtable)

    @staticmethod
    def uoffset(data: bytes, at: int) -> int:
        """The position an unsigned 32-bit offset stored at `at` points to."""
        if not 0 <= at <= len(data) - 4:
            raise ValueError(f"offset at {at} outside the {len(data)} bytes")
        return at + int(struct.unpack_from("<I", data, at)[0])

    def _unpack(self, fmt: str, at: int) -> tuple[Any, ...]:
        if not 0 <= at <= len(self.data) - struct.calcsize(fmt):
            raise ValueError(f"read at {at} outside the {len(self.data)} bytes")
        return struct.unpack_from(fmt, self.data, at)

    def _field(self, slot: int) -> int | None:
        entry = 4 + 2 * slot
        if entry + 2 > self.vtable_len:
            return None  # a field newer than this table: absent
        (offset,) = self._unpack("<H", self.vtable + entry)
        return self.pos + offset if offset else None

    def _vector(self, slot: int) -> tuple[int, int]:
        """(position of the first element, length) of a vector field; an absent one is empty."""
        at = self._field(slot)
        if at is None:
            return 0, 0
        start = self.uoffset(self.data, at)
        (length,) = self._unpack("<I", start)
        return start + 4, int(length)

    def tables(self, slot: int) -> list[_FlatTable]:
        first, n = self._vector(slot)
        return [_FlatTable(self.data, self.uoffset(self.data, first + 4 * i)) for i in range(n)]

    def int64s(self, slot: int) -> list[int]:
        first, n = self._vector(slot)
        return [int(v) for v in self._unpack(f"<{n}q", first)] if n else []

    def string(self, slot: int) -> str | None:
        if self._field(slot) is None:
            return None
        first, n = self._vector(slot)
        (raw,) = self._unpack(f"<{n}s", first)
        return bytes(raw).decode("utf-8", errors="replace")
