"""The runs a dashboard serves: the interface (``RunCatalog``) and `mjfl dashboard`'s, the runs of output folders.

``RunCatalog`` is what the server asks of any catalog (this module's
``Catalog``, and the lab's ``lab/pages.py: LabCatalog``), always in a
worker thread: each call opens the databases it reads with
``Storage.read_only`` (nothing is created or written, and a run another
process writes is never blocked), so no connection is held between calls.

``Catalog`` lists the runs of some output folders that ended, finished or
interrupted (Ctrl-C, a lab's cancel: ``interrupted``, as its status says);
a running or failed one is left out, as `mjfl report` leaves it out. A run
is named ``<folder index>:<run id>``: run ids are unique within a folder,
not across. A finished run never changes again (``Storage.resume_run``
refuses one), so its line of the runs list is computed once and kept, and
its view and its timeline's JSON for the newest few opened (``KEPT``); an
interrupted run may be resumed and is read afresh.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from mjfl.coordinator.dashboard.device_logs import device_log
from mjfl.coordinator.dashboard.state import (
    RunView,
    Speed,
    epochs_of,
    round_devices,
    run_entry,
    run_view,
)
from mjfl.coordinator.dashboard.timeline import PlacedRun, TimelineBars, shared_busy, timeline
from mjfl.coordinator.results.provenance import provenance_document
from mjfl.coordinator.results.runs import run_label
from mjfl.coordinator.storage.database import Storage
from mjfl.coordinator.storage.layout import DATABASE_FILE, database_path
from mjfl.coordinator.storage.records import JobInfo, RoundRecord, RunInfo
from mjfl.errors import UserError

__all__ = [
    "KEPT", "SHOWN", "Catalog", "Kept", "OneRead", "RunCatalog", "encoded", "entry_of", "timeline_of", "view_of",
]

SHOWN = ("finished", "interrupted")  # the statuses of the runs `mjfl dashboard` lists
KEPT = 4  # the ended runs whose view and timeline stay ready (a timeline of 100,000 bars is about 6 MB)
T = TypeVar("T")


class RunCatalog(Protocol):
    """What the dashboard's server asks of the runs it serves (called in a worker thread); None: no such run."""

    def runs(self) -> list[dict[str, Any]]:
        """The runs list: a ``state.run_entry`` each."""
        ...

    def run(self, key: str) -> RunView | None:
        """All the page shows of run ``key`` (``state.run_view``)."""
        ...

    def round_devices(self, key: str, job: str, number: int) -> dict[str, Any] | None:
        """``state.round_devices`` of round ``number`` of ``job`` in run ``key`` (None: no such round either)."""
        ...

    def timeline(self, key: str, since: int = 0) -> bytes | None:
        """Run ``key``'s device timeline (``timeline.timeline``'s shape) from its ``since``-th bar on, as JSON."""
        ...

    def device_log(self, key: str, device: str) -> dict[str, Any] | None:
        """``device_logs.device_log`` of ``device`` in run ``key``'s folder."""
        ...


class Kept:
    """The answers of the newest ``most`` ended runs asked for, by key (an ended run's never change); thread-safe.

    A key is built outside the lock (two threads asking for one key at once
    may both build it; either answer is the same).
    """

    def __init__(self, most: int = KEPT) -> None:
        self.most = most
        self._found: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str, build: Callable[[], tuple[T | None, bool]]) -> T | None:
        """The kept answer of ``key``, else ``build()``'s (the answer, and whether to keep it)."""
        with self._lock:
            if key in self._found:
                self._found.move_to_end(key)
                return self._found[key]  # type: ignore[no-any-return]
        answer, keep = build()
        if keep and answer is not None:
            with self._lock:
                self._found[key] = answer
                while len(self._found) > self.most:
                    self._found.popitem(last=False)
        return answer


class OneRead:
    """One read of a key at a time, thread-safe: a caller asking for a key another is reading waits for that read's
    answer (a page asks for a run's view and its timeline together; 100,000 device rounds are read once for both).
    Nothing is kept once the read is answered."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reading: dict[str, Future[Any]] = {}

    def get(self, key: str, read: Callable[[], T]) -> T:
        with self._lock:
            found = self._reading.get(key)
            if found is None:
                mine = self._reading[key] = Future()
        if found is not None:
            return found.result()  # type: ignore[no-any-return]
        try:
            answer = read()
            mine.set_result(answer)
            return answer
        except BaseException as exc:
            mine.set_exception(exc)
            raise
        finally:
            with self._lock:
                del self._reading[key]


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
        self._views, self._timelines = Kept(), Kept()
        self._rounds = OneRead()  # a run's rounds, read once for its view and its timeline asked for together
        # The newest ended run's rounds, read for its line of the runs list and kept for its page, which the
        # browser opens next: 100,000 device rounds are read once, not twice.
        self._ended_rounds = Kept(most=1)

    def runs(self) -> list[dict[str, Any]]:
        """Every finished or interrupted run of the folders (folder order, then start order): ``state.run_entry``."""
        entries = []
        for index, folder in enumerate(self.folders):
            with _open(folder) as storage:
                for info, status in storage.runs():
                    if status not in SHOWN:
                        continue
                    key = f"{index}:{info.run_id}"
                    entry = self._entries.get(key)
                    if entry is None:
                        rounds = self._read_rounds(storage, key, info.run_id, status)
                        entry = entry_of(key, folder, info, status, storage.jobs(info.run_id), rounds)
                        if status == "finished":
                            self._entries[key] = entry
                    entries.append(entry)
        return entries

    def run(self, key: str) -> RunView | None:
        """One run, all the page shows of it (``state.run_view``; kept for a finished run: do not change it)."""
        return self._views.get(key, lambda: self._built(key, lambda storage, folder, info, status, rounds: view_of(
            storage, key, folder, info, status, rounds)))

    def round_devices(self, key: str, job: str, number: int) -> dict[str, Any] | None:
        """Who round ``number`` of ``job`` planned in run ``key``, and what each answered; None if no such round."""
        with self._shown(key) as found:
            if found is None:
                return None
            rounds = [r for r in found[0].rounds(found[2].run_id, job) if r.round == number]
        return round_devices(rounds[0]) if rounds else None

    def timeline(self, key: str, since: int = 0) -> bytes | None:
        """The device timeline of run ``key`` (``timeline_of``) as JSON, its bars from the ``since``-th on.

        Kept, whole, for a finished run (a page opening one asks for all of it).
        """

        def build() -> tuple[bytes | None, bool]:
            return self._built(key, lambda storage, folder, info, status, rounds: encoded(
                timeline_of(storage, info.run_id, since, rounds=rounds)))

        return self._timelines.get(key, build) if since == 0 else build()[0]

    def device_log(self, key: str, device: str) -> dict[str, Any] | None:
        """``device``'s log lines in the folder of run ``key`` (a folder's, not one run's); None for no such folder."""
        found = self._locate(key)
        return None if found is None else device_log(found[1], device)

    def folder(self, key: str) -> Path | None:
        """The output folder of the run named ``key``; None for a key naming no folder."""
        found = self._locate(key)
        return None if found is None else found[1]

    def _locate(self, key: str) -> tuple[int, Path, str] | None:
        """``<folder index>:<run id>`` as the folder's index, the folder and the run id; None for a key naming no folder."""
        index_text, _, run_id = key.partition(":")
        if not index_text.isdigit() or int(index_text) >= len(self.folders):
            return None
        return int(index_text), self.folders[int(index_text)], run_id

    def _built(self, key: str, make: Callable[[Storage, Path, RunInfo, str, Sequence[RoundRecord]], T]) -> tuple[T | None, bool]:
        """``make``'s answer of run ``key`` (None: no such run here) and whether the run finished (its answer never
        changes); its rounds read once however many ask at once (``OneRead``)."""
        with self._shown(key) as found:
            if found is None:
                return None, False
            storage, folder, info, status = found
            rounds = self._read_rounds(storage, key, info.run_id, status)
            return make(storage, folder, info, status, rounds), status == "finished"

    def _read_rounds(self, storage: Storage, key: str, run_id: str, status: str) -> Sequence[RoundRecord]:
        """Run ``key``'s rounds: read once however many ask at once, and kept for the newest ended run."""
        def read() -> Sequence[RoundRecord]:
            return self._rounds.get(key, lambda: storage.rounds(run_id))

        found = self._ended_rounds.get(key, lambda: (read(), status == "finished"))
        return found if found is not None else read()

    @contextmanager
    def _shown(self, key: str) -> Iterator[tuple[Storage, Path, RunInfo, str] | None]:
        """The database holding run ``key``, open, its folder, the run and its status; None unless it finished or was
        interrupted."""
        found = self._locate(key)
        if found is None:
            yield None
            return
        with _open(found[1]) as storage:
            run = next(((i, s) for i, s in storage.runs() if i.run_id == found[2] and s in SHOWN), None)
            yield None if run is None else (storage, found[1], *run)


@contextmanager
def _open(folder: Path) -> Iterator[Storage]:
    with Storage.read_only(database_path(folder)) as storage:
        yield storage


def entry_of(
    key: str, folder: Path, info: RunInfo, status: str, jobs: Sequence[JobInfo], rounds: Sequence[RoundRecord]
) -> dict[str, Any]:
    """Run ``info``'s line of the runs list (``state.run_entry``), named ``key``, labelled by its scheduler."""
    label = run_label(info.method, json.loads(info.config_json).get("scheduler", {}))
    return run_entry(key, str(folder), label, info, status, jobs, rounds)


def view_of(
    storage: Storage, key: str, folder: Path, info: RunInfo, status: str, rounds: Sequence[RoundRecord] | None = None,
) -> RunView:
    """All the page shows of run ``info`` of ``storage`` (``state.run_view``), named ``key``, in ``status``
    (``rounds``: its rounds, where the caller read them already).

    A device's expected round time is by its stored profile, else by the
    one it was planned with (its latest online refit, else its admission's:
    a testbed's or a lab's run stores no profile of its own); what it is, by
    its hello (a ``joined`` event's, else its admission's).
    """
    run_id = info.run_id
    jobs, rounds = storage.jobs(run_id), storage.rounds(run_id) if rounds is None else rounds
    provenance, admissions = storage.provenance(run_id)
    entry = entry_of(key, folder, info, status, jobs, rounds)
    hellos = {str(a.device): a.hello["hardware"] for a in admissions if a.hello and "hardware" in a.hello}
    return run_view(entry, jobs, rounds, storage.choices(run_id), _planned(storage, run_id),
                    epochs_of(json.loads(info.config_json)), storage.fleet_events(run_id),
                    provenance_document(provenance, admissions), hardware=hellos)


@dataclass(frozen=True)
class _Profile:
    a: float
    mu: float


def _planned(storage: Storage, run_id: str) -> dict[str, Speed]:
    """Each device's Formula 4 parameters: stored, else its latest refit in the run, else its admission's."""
    _, admissions = storage.provenance(run_id)
    found: dict[str, Speed] = {}
    for admission in admissions:
        profile = admission.profile
        if isinstance(profile.get("a"), int | float) and isinstance(profile.get("mu"), int | float):
            found[str(admission.device)] = _Profile(float(profile["a"]), float(profile["mu"]))
    found.update({str(r.device): _Profile(r.a, r.mu) for r in storage.refits(run_id)})
    found.update({str(p.device_id): p for p in storage.load_profiles()})
    return found


def timeline_of(
    storage: Storage, run_id: str, since: int = 0, *, others: Sequence[PlacedRun] | None = None,
    rounds: Sequence[RoundRecord] | None = None,
) -> dict[str, Any]:
    """The device timeline of ``run_id`` in ``storage`` (``timeline.timeline``), its bars from the ``since``-th on.

    Its rows: the devices of its rounds and those that joined and were never
    planned. ``others``: the runs that shared its devices (a lab's), each
    placed on the wall clock; its busy fractions then count their tasks too
    (``timeline.shared_busy``). ``rounds``: its rounds, where the caller read them already.
    """
    info, _ = storage.run(run_id)
    jobs = [str(j.job) for j in storage.jobs(run_id)]
    rounds = storage.rounds(run_id) if rounds is None else rounds
    joined = [str(e.device) for e in storage.fleet_events(run_id) if e.kind == "joined" and e.device is not None]
    devices = list(dict.fromkeys(joined))
    bars = TimelineBars(jobs).extend(rounds)
    busy = None
    if others is not None:
        busy = shared_busy(PlacedRun(run_id, bars, tuple(storage.clocks(run_id)), info.started_at), others, devices)
    return timeline(jobs, rounds, devices, bars=bars, since=since, busy=busy)


def encoded(data: Any) -> bytes:
    """``data`` as the JSON the server sends (compact; NaN refused: ``state.py`` makes each one null)."""
    return json.dumps(data, allow_nan=False, separators=(",", ":")).encode()
