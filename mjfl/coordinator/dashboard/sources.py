"""Where the API's answers about one run come from: the live run, or a run of the catalog.

A run's resources (its view, one round's devices, its timeline, a device's
log) have one handler each in ``server.py``; the handler asks the run's
source, whichever it is. ``/api/live/...`` names the live run
(``LiveSource``), ``/api/runs/{id}/...`` one of the catalog's
(``CatalogSource``: an ended run of `mjfl dashboard`'s folders, or any of a
lab's runs): ``Runs.source`` picks it. A source that does not hold what was
asked raises ``NotHere`` with the line the page gets (a 404), so each error
names its run.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from mjfl.coordinator.dashboard.catalog import RunCatalog
from mjfl.coordinator.dashboard.device_logs import device_log
from mjfl.coordinator.dashboard.live import LiveRun
from mjfl.coordinator.dashboard.state import RunView

__all__ = ["NO_LIVE_RUN", "CatalogSource", "LiveSource", "NotHere", "RunSource", "Runs"]

T = TypeVar("T")
NO_LIVE_RUN = "no live run here"  # the error of every live endpoint when the dashboard shows finished runs only


class NotHere(LookupError):
    """The run, or the part of it asked for, is not here: its message is the 404's ``error``."""


class RunSource(Protocol):
    """One run as the API serves it."""

    @property
    def name(self) -> str:
        """How an error names the run ("the live run", "run '0:mg-0'")."""
        ...

    async def view(self) -> RunView:
        """Everything the page shows of the run (``state.run_view``'s shape); ``NotHere`` if there is no such run."""
        ...

    async def round_devices(self, job: str, number: int) -> dict[str, Any] | None:
        """``state.round_devices`` of round ``number`` of ``job``; None if the run has no such round."""
        ...

    async def timeline(self, since: int) -> dict[str, Any] | bytes:
        """The run's device timeline (``timeline.timeline``), its bars from the ``since``-th on, as a dict or as its
        JSON; ``NotHere`` if there is no such run."""
        ...

    async def device_log(self, device: str) -> dict[str, Any]:
        """``device``'s log lines (``device_logs.device_log``); ``NotHere`` if the run has no folder here."""
        ...


@dataclass(frozen=True)
class LiveSource:
    """The run going on now (``live``, writing into ``out``); neither when the dashboard shows finished runs only."""

    live: LiveRun | None
    out: Path | None

    @property
    def name(self) -> str:
        return "the live run"

    async def view(self) -> RunView:
        if self.live is None:
            raise NotHere(NO_LIVE_RUN)
        return self.live.snapshot()

    async def round_devices(self, job: str, number: int) -> dict[str, Any] | None:
        return None if self.live is None else self.live.round_devices(job, number)

    async def timeline(self, since: int) -> dict[str, Any]:
        if self.live is None:
            raise NotHere(NO_LIVE_RUN)
        return self.live.timeline(since)

    async def device_log(self, device: str) -> dict[str, Any]:
        if self.live is None or self.out is None:
            raise NotHere(NO_LIVE_RUN)
        return await asyncio.to_thread(device_log, self.out, device)


@dataclass(frozen=True)
class CatalogSource:
    """Run ``key`` of ``catalog`` (read in a worker thread: the catalog opens databases)."""

    catalog: RunCatalog | None
    key: str

    @property
    def name(self) -> str:
        return f"run {self.key!r}"

    async def view(self) -> RunView:
        return self._found(None if self.catalog is None else await asyncio.to_thread(self.catalog.run, self.key))

    async def round_devices(self, job: str, number: int) -> dict[str, Any] | None:
        if self.catalog is None:
            return None
        return await asyncio.to_thread(self.catalog.round_devices, self.key, job, number)

    async def timeline(self, since: int) -> bytes:
        return self._found(None if self.catalog is None else await asyncio.to_thread(self.catalog.timeline, self.key, since))

    async def device_log(self, device: str) -> dict[str, Any]:
        found = None if self.catalog is None else await asyncio.to_thread(self.catalog.device_log, self.key, device)
        return self._found(found)

    def _found(self, found: T | None) -> T:
        if found is None:
            raise NotHere(f"no run {self.key!r} here")
        return found


@dataclass(frozen=True)
class Runs:
    """The runs a dashboard serves: ``catalog``'s and the ``live`` one, either possibly absent."""

    catalog: RunCatalog | None
    live: LiveSource

    def source(self, key: str | None) -> RunSource:
        """The run named ``key`` (a catalog's run), or the live run for None."""
        return self.live if key is None else CatalogSource(self.catalog, key)

    async def listed(self) -> list[dict[str, Any]]:
        """The runs list (``RunCatalog.runs``); the live run has its own endpoint."""
        return [] if self.catalog is None else await asyncio.to_thread(self.catalog.runs)
