"""The finished runs of some output folders, read back from their run databases, read-only.

Each request opens the databases afresh with ``Storage.read_only`` (nothing
is created or written, and a run another process writes is never blocked),
so the catalog holds no connection between requests. A finished run never
changes again (``Storage.resume_run`` refuses one), so its line of the runs
list is computed once and kept. A run is named
``<folder index>:<run id>``: run ids are unique within a folder, not across.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mjfl.coordinator.dashboard.state import (
    RunView,
    epochs_of,
    round_devices,
    run_entry,
    run_view,
    timeline,
)
from mjfl.coordinator.results.provenance import provenance_document
from mjfl.coordinator.results.runs import run_label
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import DATABASE_FILE, database_path
from mjfl.coordinator.storage.records import JobInfo, RoundRecord, RunInfo
from mjfl.errors import UserError

__all__ = ["Catalog", "entry_of", "view_of"]


class Catalog:
    """The output folders a dashboard serves; ``UserError`` naming a folder without a run database."""

    def __init__(self, folders: Iterable[Path]) -> None:
        self.folders = tuple(Path(f) for f in folders)
        if not self.folders:
            raise UserError(f"give at least one run folder (a run's out_dir, holding {DATABASE_FILE})")
        for folder in self.folders:
            if not database_path(folder).is_file():
                raise UserError(f"{folder}: no run database ({DATABASE_FILE}) here; give a run's output folder")
        self._entries: dict[str, dict[str, Any]] = {}  # finished runs' lines of the runs list, by key

    def runs(self) -> list[dict[str, Any]]:
        """Every finished run of the folders (folder order, then start order): ``state.run_entry``."""
        entries = []
        for index, folder in enumerate(self.folders):
            with self._open(folder) as storage:
                for info, status in storage.runs():
                    if status != "finished":
                        continue
                    key = f"{index}:{info.run_id}"
                    if key not in self._entries:
                        jobs, rounds = storage.jobs(info.run_id), storage.rounds(info.run_id)
                        self._entries[key] = _entry(index, folder, info, status, jobs, rounds)
                    entries.append(self._entries[key])
        return entries

    def run(self, key: str) -> RunView | None:
        """One finished run, all the page shows of it (``state.run_view``); None if no such run."""
        found = self._locate(key)
        if found is None:
            return None
        _, folder, run_id = found
        with self._open(folder) as storage:
            info = _finished(storage, run_id)
            if info is None:
                return None
            return view_of(storage, key, folder, info, "finished")

    def round_devices(self, key: str, job: str, number: int) -> dict[str, Any] | None:
        """Who round ``number`` of ``job`` planned in the finished run ``key``, and what each answered; None if no such round."""
        with self._finished_run(key) as found:
            if found is None:
                return None
            storage, run_id = found
            rounds = [r for r in storage.rounds(run_id, job) if r.round == number]
        return round_devices(rounds[0]) if rounds else None

    def timeline(self, key: str, since: int = 0) -> dict[str, Any] | None:
        """The device timeline of the finished run ``key`` (``state.timeline``), its bars from the ``since``-th on; None if no such run.

        Its rows: the devices of its rounds and those that joined and were never planned.
        """
        with self._finished_run(key) as found:
            if found is None:
                return None
            storage, run_id = found
            return timeline_of(storage, run_id, since)

    def folder(self, key: str) -> Path | None:
        """The output folder of the run named ``key`` (where its logs are); None for a key naming no folder."""
        found = self._locate(key)
        return None if found is None else found[1]

    def _locate(self, key: str) -> tuple[int, Path, str] | None:
        """``<folder index>:<run id>`` as the folder's index, the folder and the run id; None for a key naming no folder."""
        index_text, _, run_id = key.partition(":")
        if not index_text.isdigit() or int(index_text) >= len(self.folders):
            return None
        return int(index_text), self.folders[int(index_text)], run_id

    @contextmanager
    def _finished_run(self, key: str) -> Iterator[tuple[Storage, str] | None]:
        """The database holding the finished run ``key``, open, and its run id; None if there is no such finished run."""
        found = self._locate(key)
        if found is None:
            yield None
            return
        with self._open(found[1]) as storage:
            yield None if _finished(storage, found[2]) is None else (storage, found[2])

    @staticmethod
    @contextmanager
    def _open(folder: Path) -> Iterator[Storage]:
        with Storage.read_only(database_path(folder)) as storage:
            yield storage


def _finished(storage: Storage, run_id: str) -> RunInfo | None:
    """Run ``run_id`` of ``storage`` if it finished (an interrupted or running one may still change)."""
    return next((info for info, status in storage.runs() if info.run_id == run_id and status == "finished"), None)


def _entry(
    index: int, folder: Path, info: RunInfo, status: str, jobs: Sequence[JobInfo], rounds: Sequence[RoundRecord]
) -> dict[str, Any]:
    return entry_of(f"{index}:{info.run_id}", folder, info, status, jobs, rounds)


def entry_of(
    key: str, folder: Path, info: RunInfo, status: str, jobs: Sequence[JobInfo], rounds: Sequence[RoundRecord]
) -> dict[str, Any]:
    """Run ``info``'s line of the runs list (``state.run_entry``), named ``key``, labelled by its scheduler."""
    label = run_label(info.method, json.loads(info.config_json).get("scheduler", {}))
    return run_entry(key, str(folder), label, info, status, jobs, rounds)


def view_of(storage: Storage, key: str, folder: Path, info: RunInfo, status: str) -> RunView:
    """All the page shows of run ``info`` of ``storage`` (``state.run_view``), named ``key``, in ``status``."""
    run_id = info.run_id
    jobs, rounds = storage.jobs(run_id), storage.rounds(run_id)
    profiles = {p.device_id: p for p in storage.load_profiles()}
    entry = entry_of(key, folder, info, status, jobs, rounds)
    return run_view(entry, jobs, rounds, storage.choices(run_id), profiles,
                    epochs_of(json.loads(info.config_json)), storage.fleet_events(run_id),
                    provenance_document(*storage.provenance(run_id)))


def timeline_of(storage: Storage, run_id: str, since: int = 0) -> dict[str, Any]:
    """The device timeline of ``run_id`` in ``storage`` (``state.timeline``), its bars from the ``since``-th on.

    Its rows: the devices of its rounds and those that joined and were never planned.
    """
    jobs, rounds = storage.jobs(run_id), storage.rounds(run_id)
    joined = [str(e.device) for e in storage.fleet_events(run_id) if e.kind == "joined" and e.device is not None]
    return timeline([str(j.job) for j in jobs], rounds, list(dict.fromkeys(joined)), since=since)
