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

from mjfl.coordinator.dashboard.state import RunView, epochs_of, round_devices, run_entry, run_view
from mjfl.coordinator.results.provenance import provenance_document
from mjfl.coordinator.results.runs import run_label
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import DATABASE_FILE, database_path
from mjfl.coordinator.storage.records import JobInfo, RoundRecord, RunInfo
from mjfl.errors import UserError

__all__ = ["Catalog"]


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
        index, folder, run_id = found
        with self._open(folder) as storage:
            info = _finished(storage, run_id)
            if info is None:
                return None
            jobs, rounds = storage.jobs(run_id), storage.rounds(run_id)
            profiles = {p.device_id: p for p in storage.load_profiles()}
            entry = _entry(index, folder, info, "finished", jobs, rounds)
            return run_view(entry, jobs, rounds, storage.choices(run_id), profiles,
                            epochs_of(json.loads(info.config_json)), storage.fleet_events(run_id),
                            provenance_document(*storage.provenance(run_id)))

    def round_devices(self, key: str, job: str, number: int) -> dict[str, Any] | None:
        """Who round ``number`` of ``job`` planned in the finished run ``key``, and what each answered; None if no such round."""
        found = self._locate(key)
        if found is None:
            return None
        _, folder, run_id = found
        with self._open(folder) as storage:
            if _finished(storage, run_id) is None:
                return None
            rounds = [r for r in storage.rounds(run_id, job) if r.round == number]
        return round_devices(rounds[0]) if rounds else None

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
    label = run_label(info.method, json.loads(info.config_json).get("scheduler", {}))
    return run_entry(f"{index}:{info.run_id}", str(folder), label, info, status, jobs, rounds)
