"""Checkpoints of a run: each job's global model and scheduler state after every round.

Layout: ``<dir>/<job>/round-<r>.npz`` holds the arrays, the global weights
(``weights/<name>``) and every array of the scheduler's state
(``scheduler/<n>``); ``<dir>/<job>/round-<r>.json`` holds the rest: the
job's counters, the order of its weights and the scheduler's state
(``Resumable.state``: dicts, lists, numbers, strings, None) with each array
replaced by ``{"__array__": "scheduler/<n>"}``. Plain data only, no class
name, so renaming code never breaks a resume; the arrays are read without
pickle. Both files are written to a temporary file and renamed, the .json
last, so a checkpoint whose .json exists is whole. JSON writes every float
exactly (its shortest round-trip form, NaN as ``NaN``).

Checkpoints of format 0 (mjfl until the scheduler's state became plain
data) held the pickled scheduler object in ``round-<r>.pkl`` and the weights
under their own names in the .npz. ``load`` still reads them: every mjfl
class in the pickle is stood in for by a placeholder that keeps only its
class's name and its attributes (``Pickled``), which
``mjfl.schedulers.pickled`` turns into today's state, so no class needs its
old name or layout.

Ordering with the database makes resume exact. The engine writes round r's
checkpoint *before* the round is committed to the database, and the two
newest checkpoints are kept: after a crash the database's last round is
either r (its checkpoint exists) or r - 1 (a crash between the two writes;
checkpoint r - 1 still exists). ``load`` returns the checkpoint of exactly the
database's last round, so no finished round is lost or repeated.
"""

from __future__ import annotations

import json
import os
import pickle
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mjfl.errors import RunError
from mjfl.schedulers.base import resumable
from mjfl.schedulers.pickled import state_of

KEEP = 2
FORMAT = 1
ARRAY = "__array__"  # the key of a reference to an array of the .npz


@dataclass
class JobCheckpoint:
    """What a job needs to continue after ``round``; ``scheduler_state`` is its scheduler's ``Resumable.state``."""

    round: int
    weights: dict[str, np.ndarray]
    scheduler_state: dict[str, Any]
    best_accuracy: float
    stopped: str | None

    def restore_scheduler(self, scheduler: object) -> None:
        """Put the saved state into ``scheduler``, built afresh from the run's configuration."""
        try:
            resumable(scheduler).load_state(self.scheduler_state)
        except (KeyError, ValueError, TypeError) as exc:
            name = getattr(scheduler, "name", type(scheduler).__name__)
            raise RunError(
                f"the checkpoint after round {self.round} does not fit the configured {name} scheduler ({exc});"
                " resume with the run's own configuration"
            ) from None


class Checkpoints:
    """The checkpoints of one run."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def save(self, job: str, checkpoint: JobCheckpoint) -> None:
        folder = self.root / job
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"round-{checkpoint.round:06d}"
        arrays = {f"weights/{name}": value for name, value in checkpoint.weights.items()}
        scheduler = _plain(checkpoint.scheduler_state, arrays)
        document = {
            "format": FORMAT,
            "round": checkpoint.round,
            "best_accuracy": checkpoint.best_accuracy,
            "stopped": checkpoint.stopped,
            "order": list(checkpoint.weights),
            "scheduler": scheduler,
        }
        write_atomically(folder / f"{stem}.npz", lambda f: np.savez(f, **arrays))
        write_atomically(folder / f"{stem}.json", json.dumps(document))
        rounds = sorted({p.stem for p in folder.glob("round-*.json")} | {p.stem for p in folder.glob("round-*.pkl")})
        for old in rounds[:-KEEP]:
            for suffix in (".json", ".pkl", ".npz"):
                (folder / old).with_suffix(suffix).unlink(missing_ok=True)

    def load(self, job: str, round_: int) -> JobCheckpoint:
        """The checkpoint written after ``round_`` (either format); RunError if it is missing."""
        stem = self.root / job / f"round-{round_:06d}"
        if stem.with_suffix(".npz").exists():
            if stem.with_suffix(".json").exists():
                return _load(stem)
            if stem.with_suffix(".pkl").exists():
                return _load_pickled(stem)
        raise RunError(f"no checkpoint of job {job!r} after round {round_} in {self.root}; cannot resume")


def _load(stem: Path) -> JobCheckpoint:
    document = json.loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
    if document.get("format") != FORMAT:
        raise RunError(f"{stem.with_suffix('.json')}: checkpoint format {document.get('format')!r}, not {FORMAT}; cannot resume")
    with np.load(stem.with_suffix(".npz"), allow_pickle=False) as data:
        arrays = {name: data[name] for name in data.files}
    weights = {name: arrays[f"weights/{name}"] for name in document["order"]}
    scheduler = _unplain(document["scheduler"], arrays)
    return JobCheckpoint(document["round"], weights, scheduler, document["best_accuracy"], document["stopped"])


def _load_pickled(stem: Path) -> JobCheckpoint:
    """A checkpoint of format 0: its scheduler object read as placeholders and turned into today's state."""
    with open(stem.with_suffix(".pkl"), "rb") as f:
        document = _PlaceholderUnpickler(f).load()  # our own file, written by an earlier save()
    with np.load(stem.with_suffix(".npz"), allow_pickle=False) as data:
        weights = {name: data[name] for name in document["order"]}
    try:
        scheduler = state_of(document["scheduler"])
    except ValueError as exc:
        raise RunError(f"{stem.with_suffix('.pkl')}: {exc}; cannot resume") from None
    return JobCheckpoint(document["round"], weights, scheduler, document["best_accuracy"], document["stopped"])


def _plain(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    """``value`` as JSON's data, each array moved to ``arrays`` and referred to by its key."""
    if isinstance(value, np.ndarray):
        key = f"scheduler/{len(arrays)}"
        arrays[key] = value
        return {ARRAY: key}
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"a scheduler state's keys are strings, not {sorted(map(repr, value))}")
        return {k: _plain(v, arrays) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, arrays) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"a scheduler state holds plain data, not {type(value).__name__}")


def _unplain(value: Any, arrays: Mapping[str, np.ndarray]) -> Any:
    """What ``_plain`` gave, with its arrays back (tuples come back as lists)."""
    if isinstance(value, dict):
        if set(value) == {ARRAY}:
            return arrays[value[ARRAY]]
        return {k: _unplain(v, arrays) for k, v in value.items()}
    if isinstance(value, list):
        return [_unplain(v, arrays) for v in value]
    return value


class Pickled:
    """An object of an mjfl class in a checkpoint of format 0: its class's name (``kind``) and its attributes."""

    kind = ""

    def __setstate__(self, state: Any) -> None:
        # (dict, slots) from a class with __slots__, else the instance's dict.
        for part in state if isinstance(state, tuple) else (state,):
            if part:
                self.__dict__.update(part)


class _PlaceholderUnpickler(pickle.Unpickler):
    """Unpickles numpy, scikit-learn and the standard library as they are, and every mjfl class as a ``Pickled``."""

    def __init__(self, file: BinaryIO) -> None:
        super().__init__(file)
        self._stand_ins: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str) -> Any:
        if module != "mjfl" and not module.startswith("mjfl."):
            return super().find_class(module, name)
        key = (module, name)
        if key not in self._stand_ins:
            self._stand_ins[key] = type(name, (Pickled,), {"kind": name, "__module__": __name__})
        return self._stand_ins[key]


def write_atomically(path: Path, write: Callable[[BinaryIO], Any] | bytes | str) -> Path:
    """Write ``path`` through a temporary file and a rename: a file that exists is whole.

    ``write`` is the content (text is UTF-8) or a function that writes it to a binary file.
    """
    if isinstance(write, str):
        write = write.encode("utf-8")
    if isinstance(write, bytes):
        data = write

        def write(f: BinaryIO) -> None:
            f.write(data)

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
