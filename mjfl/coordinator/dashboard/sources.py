"""Where the API's answers about one run come from: the live run, or a finished run of the catalog.

A run's resources (its view, one round's devices, a device's log) have one
handler each in ``server.py``; the handler asks the run's source, whichever
it is. ``/api/live/...`` names the live run (``LiveSource``),
``/api/runs/{id}/...`` a finished one (``FinishedSource``): ``Runs.source``
picks it. A source that does not hold what was asked raises ``NotHere`` with
the line the page gets (a 404), so each error names its run as it always did.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from mjfl.coordinator.dashboard.catalog import Catalog
from mjfl.coordinator.dashboard.live import LiveRun
from mjfl.coordinator.dashboard.state import RunView

__all__ = ["NO_LIVE_RUN", "FinishedSource", "LiveSource", "NotHere", "RunSource", "Runs"]

NO_LIVE_RUN = "no live run here"  # the error of every live endpoint when the dashboard shows finished runs only


class NotHere(LookupError):
    """The run, or the part of it asked for, is not here: its message is the 404's ``error``."""


class RunSource(Protocol):
    """One run as the API serves it."""

    @property
    def name(self) -> str:
        """How an error names the run ("the live run", "a finished run '0:mg-0'")."""
        ...

    async def view(self) -> RunView:
        """Everything the page shows of the run (``state.run_view``'s shape); ``NotHere`` if there is no such run."""
        ...

    async def round_devices(self, job: str, number: int) -> dict[str, Any] | None:
        """``state.round_devices`` of round ``number`` of ``job``; None if the run has no such round."""
        ...

    async def timeline(self, since: int) -> dict[str, Any]:
        """The run's device timeline (``state.timeline``), its bars from the ``since``-th on; ``NotHere`` if there is no such run."""
        ...

    def folder(self) -> Path:
        """The run's output folder (its devices' logs); ``NotHere`` if there is none."""
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

    def folder(self) -> Path:
        if self.live is None or self.out is None:
            raise NotHere(NO_LIVE_RUN)
        return self.out


@dataclass(frozen=True)
class FinishedSource:
    """The finished run ``key`` of ``catalog`` (read in a worker thread: the catalog opens databases)."""

    catalog: Catalog | None
    key: str

    @property
    def name(self) -> str:
        return f"a finished run {self.key!r}"

    async def view(self) -> RunView:
        found = None if self.catalog is None else await asyncio.to_thread(self.catalog.run, self.key)
        if found is None:
            raise NotHere(f"no finished run {self.key!r}")
        return found

    async def round_devices(self, job: str, number: int) -> dict[str, Any] | None:
        if self.catalog is None:
            return None
        return await asyncio.to_thread(self.catalog.round_devices, self.key, job, number)

    async def timeline(self, since: int) -> dict[str, Any]:
        found = None if self.catalog is None else await asyncio.to_thread(self.catalog.timeline, self.key, since)
        if found is None:
            raise NotHere(f"no finished run {self.key!r}")
        return found

    def folder(self) -> Path:
        found = None if self.catalog is None else self.catalog.folder(self.key)
        if found is None:  # the key's folder only: a device's log is the folder's, not one run's
            raise NotHere(f"no run {self.key!r}")
        return found


@dataclass(frozen=True)
class Runs:
    """The runs a dashboard serves: ``catalog``'s finished ones and the ``live`` one, either possibly absent."""

    catalog: Catalog | None
    live: LiveSource

    def source(self, key: str | None) -> RunSource:
        """The run named ``key`` (a finished run's id), or the live run for None."""
        return self.live if key is None else FinishedSource(self.catalog, key)

    async def listed(self) -> list[dict[str, Any]]:
        """The runs list (``Catalog.runs``): every finished run; the live run has its own endpoint."""
        return [] if self.catalog is None else await asyncio.to_thread(self.catalog.runs)
