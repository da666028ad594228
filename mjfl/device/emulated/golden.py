"""Golden cases: short training tasks of every zoo model with the Python runtime's answers.

The phones' first-day check (``mjfl devices check``, docs/phones.md) hands each
phone these tasks and compares what it trains with what the Python runtime
(``ExecuTorchTrainer``, the runtime emulated devices use) trained from the
same program, weights, shard and seed. The app's instrumented test trains the
same set on an Android emulator in CI.

A case is a folder of four files in the wire protocol's own binary encoding
(docs/protocol.md, section 4), which client-core already decodes on the phone:

    program.pte      the training program, exported at the case's batch size
    provision.mjfl   a ``provision``: the model spec (batch-norm pixels, dropout
                     shapes), the program's sha256, the shard inline (x, y)
    task.mjfl        a ``task``: initial weights, epochs, batch size, lr,
                     momentum, weight decay and the task generator's seed
    expected.mjfl    a ``result``: the Python runtime's trained weights and mean loss

and a set is a folder of cases with ``manifest.json`` (``format``, ``key``,
``tolerance``, ``cases``: their folder names in order, and what made them). A
set is kept under ``.mjfl-cache/golden/<key>``: exporting seven programs takes
minutes, and the key changes whenever the programs, the trainer or the cases
would.

Why these tasks: every case has a short last batch (20 samples in batches of
8), two epochs (two permutations), momentum and weight decay (every term of
SGD), and the paper's dropout where the model has some (the noise inputs);
six steps keep float rounding differences between two machines far below the
tolerance, while a defect moves the weights far above it (``TOLERANCE``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from mjfl.device.protocol import messages as wire
from mjfl.device.protocol.codec import encode
from mjfl.errors import ConfigError
from mjfl.ids import JobId
from mjfl.jobs.base import MODEL_NAMES, LocalTraining, ModelSpec, TrainResult

__all__ = [
    "FORMAT",
    "GOLDEN_CACHE",
    "PROGRAM_CACHE",
    "TOLERANCE",
    "ZOO_CASES",
    "GoldenCase",
    "cached_set",
    "golden_set",
    "relative_difference",
    "write_case",
    "write_manifest",
]

FORMAT = 1
"""Bump when the files of a case change meaning; the app refuses a set of another format."""

TOLERANCE = 1e-4
"""Largest relative difference per tensor, ``max|phone - python| / max|python|``, that passes.

Two float32 implementations of one program differ by their summation
orders, and six steps of SGD with momentum carry those differences on
(through ReLU kinks, batch norm). Measured on these cases (docs/phones.md,
"First-day check"): the ExecuTorch runtime against eager PyTorch (im2col +
Eigen against oneDNN), and the runtime against itself from weights and
inputs moved by one ulp, differ by at most 3.4e-6 (resnet13's batch-norm
biases; 5e-7 for the nets without batch norm). The bugs this check is for
move some tensor of every model by far more: another seed (batch order,
noise) by 9e-3 or more, momentum left out by 2.7e-3 or more, an epoch
short by 1.7e-2, untrained weights by 2.9e-2. 1e-4 sits 30 times above
the rounding and 27 times below the smallest of those, so a phone whose
rounding is a few times worse than x86's still passes, and a real defect
still fails.
"""

GOLDEN_CACHE = Path(".mjfl-cache") / "golden"
PROGRAM_CACHE = Path(".mjfl-cache") / "programs"

_DEFAULT_TRAINING = LocalTraining(epochs=2, batch_size=8, lr=0.05, momentum=0.9, weight_decay=5e-4)


@dataclass(frozen=True)
class GoldenCase:
    """One golden task: a zoo model on a small input, a seeded shard, and how it is trained."""

    model: str
    input_shape: tuple[int, int, int]
    seed: int
    classes: int = 10
    samples: int = 20
    training: LocalTraining = field(default=_DEFAULT_TRAINING)
    # A model of a config's own (`custom_cases`): the case's name, the factory's model_args and source sha256.
    name: str = ""
    args: str = ""
    sha256: str = ""

    @property
    def spec(self) -> ModelSpec:
        return ModelSpec(self.model, self.input_shape, self.classes, args=self.args, sha256=self.sha256)

    @property
    def key(self) -> str:
        """The case's folder and name in the set: the zoo model's name, or ``custom-<job>``."""
        return self.name or self.model

    def document(self) -> dict[str, object]:
        """What names the case in the set's key (a zoo case as before custom cases existed)."""
        return {k: v for k, v in asdict(self).items() if k not in ("name", "args", "sha256") or v}

    @property
    def steps(self) -> int:
        per_epoch = -(-self.samples // self.training.batch_size)
        return per_epoch * self.training.epochs

    def shard(self) -> tuple[np.ndarray, np.ndarray]:
        """The case's data: x uniform in [0, 1), labels uniform over the classes, from its seed."""
        rng = np.random.default_rng(self.seed)
        x = rng.random((self.samples, *self.input_shape), dtype=np.float32)
        y = rng.integers(0, self.classes, self.samples, dtype=np.int64)
        return x, y


def _zoo_case(index: int, name: str) -> GoldenCase:
    # LeNet-5 needs 12x12 at least; the nets the paper trains on CIFAR take three channels.
    shape = (1, 12, 12) if name == "lenet5" else (3, 8, 8) if name in ("vgg6", "resnet13", "alexnet") else (1, 8, 8)
    return GoldenCase(name, shape, seed=20260 + index)


ZOO_CASES: tuple[GoldenCase, ...] = tuple(_zoo_case(i, name) for i, name in enumerate(MODEL_NAMES))
"""One case per zoo model, in the order of ``MODEL_NAMES``."""



def relative_difference(actual: np.ndarray, expected: np.ndarray) -> float:
    """``max|actual - expected| / max|expected|``: 0 when equal, inf when only ``expected`` is all zeros.

    The app computes the same (org.mjfl.app.selftest.Comparison), in double.
    """
    a = np.asarray(actual, dtype=np.float64)
    b = np.asarray(expected, dtype=np.float64)
    diff = float(np.max(np.abs(a - b), initial=0.0))
    scale = float(np.max(np.abs(b), initial=0.0))
    if diff == 0.0:
        return 0.0
    return diff / scale if scale > 0 else float("inf")


# -- writing a set (no torch: tests write sets of their own) -----------------------------


def write_case(
    folder: Path,
    *,
    name: str,
    model: wire.ModelSpec,
    program: bytes,
    weights: Mapping[str, np.ndarray],
    x: np.ndarray,
    y: np.ndarray,
    training: LocalTraining,
    seed: int,
    expected: TrainResult,
) -> None:
    """Write one case's four files into ``folder`` (created)."""
    folder.mkdir(parents=True, exist_ok=True)
    job = JobId(f"golden-{name}")
    shard = wire.Shard(x, y)
    program_sha256 = hashlib.sha256(program).hexdigest()
    provision = wire.Provision(job, model, program_sha256, shard.sha256, None, shard)
    task = wire.Task(
        wire.TaskId(f"golden-{name}"), job, 0, {k: np.asarray(v, np.float32) for k, v in weights.items()},
        training.epochs, training.batch_size, training.lr, training.momentum, training.weight_decay,
        None, program_sha256, shard.sha256, seed,
    )  # fmt: skip
    result = wire.Result(
        task.task_id, job, 0, {k: np.asarray(v, np.float32) for k, v in expected.weights.items()},
        expected.samples, expected.mean_loss, wire.Timing(0.0, expected.compute_s, None),
    )  # fmt: skip
    (folder / "program.pte").write_bytes(program)
    for file, message in (("provision.mjfl", provision), ("task.mjfl", task), ("expected.mjfl", result)):
        data = encode(message)
        assert isinstance(data, bytes)
        (folder / file).write_bytes(data)


def write_manifest(folder: Path, *, key: str, cases: Iterable[Mapping[str, object]], made_by: Mapping[str, str]) -> None:
    """``manifest.json`` of a set whose case folders are already in ``folder``."""
    cases = list(cases)
    manifest = {
        "format": FORMAT,
        "key": key,
        "tolerance": TOLERANCE,
        "cases": [c["name"] for c in cases],
        "details": cases,
        "made_by": dict(made_by),
    }
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")


# -- the zoo's set ---------------------------------------------------------------------


def _sources_digest() -> str:
    """What decides the expected weights besides the programs: the trainer, the generator, the codec, this file."""
    from mjfl.device.protocol import codec, tensors
    from mjfl.jobs import randomness, trainers

    h = hashlib.sha256()
    for module in (trainers, randomness, codec, tensors):
        h.update(Path(module.__file__ or "").read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()


def _set_key(cases: list[GoldenCase]) -> str:
    from mjfl.jobs.export import program_key

    blob = json.dumps(
        {
            "format": FORMAT,
            "cases": [c.document() | {"program": program_key(c.spec, max_batch=c.training.batch_size)} for c in cases],
            "sources": _sources_digest(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def _made_by() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("mjfl", "executorch", "torch"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "?"
    return out


def _cases(models: Iterable[str] | None, extra: Sequence[GoldenCase] = ()) -> list[GoldenCase]:
    names = list(MODEL_NAMES) if models is None else list(dict.fromkeys(models))
    unknown = [n for n in names if n not in MODEL_NAMES]
    if unknown or not names:
        raise ConfigError("models", f"unknown model(s) {unknown or names}; known: {', '.join(MODEL_NAMES)}")
    return [c for c in ZOO_CASES if c.model in names] + list(extra)


def cached_set(
    models: Iterable[str] | None = None, *, cache: Path = GOLDEN_CACHE, extra: Sequence[GoldenCase] = ()
) -> Path | None:
    """The folder of the golden set for ``models`` (and the ``extra`` cases) if it is made already, else None."""
    folder = cache / _set_key(_cases(models, extra))
    return folder if (folder / "manifest.json").is_file() else None


def golden_set(
    models: Iterable[str] | None = None,
    *,
    cache: Path = GOLDEN_CACHE,
    programs: Path = PROGRAM_CACHE,
    workers: int = 1,
    extra: Sequence[GoldenCase] = (),
) -> Path:
    """The folder of the golden set for ``models`` (all of the zoo by default), made on a cache miss.

    Exports the cases' programs (``cached_programs``: ``workers`` at once) and
    trains each case in the Python runtime. ``extra``: more cases
    (a config's own models: `mjfl.commands.device_check.custom_cases`), after the zoo's.
    """
    cases = _cases(models, extra)
    key = _set_key(cases)
    folder = cache / key
    if (folder / "manifest.json").is_file():
        return folder
    from mjfl.jobs.export import cached_programs

    by_batch: dict[int, list[ModelSpec]] = {}
    for c in cases:
        by_batch.setdefault(c.training.batch_size, []).append(c.spec)
    found = {}
    for batch, specs in by_batch.items():
        found.update({(s, batch): p for s, (p, _) in cached_programs(specs, programs, max_batch=batch, workers=workers).items()})
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache, prefix=".tmp-"))
    try:
        details = [_make_case(tmp / c.key, c, found[(c.spec, c.training.batch_size)].read_bytes()) for c in cases]
        write_manifest(tmp, key=key, cases=details, made_by=_made_by())
        try:
            os.replace(tmp, folder)
        except OSError:  # another process made it first
            if not (folder / "manifest.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _make_case(folder: Path, case: GoldenCase, program: bytes) -> dict[str, object]:
    """Train ``case`` in the Python runtime and write it; returns its manifest entry."""
    from mjfl.jobs.models import batch_norm_pixels, build_model, dropout_shapes, initial_weights
    from mjfl.jobs.trainers import ExecuTorchTrainer

    spec = case.spec
    model = build_model(spec)
    wire_model = wire.ModelSpec(
        spec.label, spec.input_shape, spec.num_classes,
        tuple(batch_norm_pixels(model, spec.input_shape).values()),
        tuple(dropout_shapes(model, spec.input_shape)),
    )  # fmt: skip
    weights = initial_weights(spec, case.seed)
    x, y = case.shard()
    expected = ExecuTorchTrainer(program, spec).train(weights, x, y, case.training, seed=case.seed)
    write_case(
        folder, name=case.key, model=wire_model, program=program, weights=weights, x=x, y=y,
        training=case.training, seed=case.seed, expected=expected,
    )  # fmt: skip
    return {
        "name": case.key,
        "input_shape": list(spec.input_shape),
        "classes": spec.num_classes,
        "samples": case.samples,
        "steps": expected.steps,
        "seed": case.seed,
        "training": asdict(case.training),
        "program_bytes": len(program),
    }
