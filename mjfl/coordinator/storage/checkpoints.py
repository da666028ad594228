"""Checkpoints of a run: each job's global model and scheduler after every round.

Layout: ``<dir>/<job>/round-<r>.npz`` (the global weights) and
``<dir>/<job>/round-<r>.pkl`` (the scheduler object and the job's counters),
both written to a temporary file and renamed, so a file that exists is whole.

Ordering with the database makes resume exact. The engine writes round r's
checkpoint *before* the round is committed to the database, and the two
newest checkpoints are kept: after a crash the database's last round is
either r (its checkpoint exists) or r - 1 (a crash between the two writes;
checkpoint r - 1 still exists). ``load`` returns the checkpoint of exactly the
database's last round, so no finished round is lost or repeated.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mjfl.errors import RunError

KEEP = 2


@dataclass
class JobCheckpoint:
    """What a job needs to continue after ``round``."""

    round: int
    weights: dict[str, np.ndarray]
    scheduler: Any
    best_accuracy: float
    stopped: str | None


class Checkpoints:
    """The checkpoints of one run."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def save(self, job: str, checkpoint: JobCheckpoint) -> None:
        folder = self.root / job
        folder.mkdir(parents=True, exist_ok=True)
        stem = f"round-{checkpoint.round:06d}"
        write_atomically(folder / f"{stem}.npz", lambda f: np.savez(f, **checkpoint.weights))
        state = {
            "round": checkpoint.round,
            "scheduler": checkpoint.scheduler,
            "best_accuracy": checkpoint.best_accuracy,
            "stopped": checkpoint.stopped,
            "order": list(checkpoint.weights),
        }
        write_atomically(folder / f"{stem}.pkl", lambda f: pickle.dump(state, f))
        for old in sorted(folder.glob("round-*.pkl"))[:-KEEP]:
            old.unlink(missing_ok=True)
            old.with_suffix(".npz").unlink(missing_ok=True)

    def load(self, job: str, round_: int) -> JobCheckpoint:
        """The checkpoint written after ``round_``; RunError if it is missing."""
        stem = self.root / job / f"round-{round_:06d}"
        if not stem.with_suffix(".pkl").exists() or not stem.with_suffix(".npz").exists():
            raise RunError(f"no checkpoint of job {job!r} after round {round_} in {self.root}; cannot resume")
        with open(stem.with_suffix(".pkl"), "rb") as f:
            state = pickle.load(f)  # our own file, written by save()
        with np.load(stem.with_suffix(".npz")) as data:
            weights = {name: data[name] for name in state["order"]}
        return JobCheckpoint(state["round"], weights, state["scheduler"], state["best_accuracy"], state["stopped"])


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
