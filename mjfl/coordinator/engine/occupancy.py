"""Which job each device serves now: one device, one job at a time, across every engine over one fleet.

A run's engine plans its jobs over the free devices and marks the chosen
ones busy until their tasks end (``engine.py``). The lab service runs one
engine per running run over one fleet of devices; they share one
``Occupancy``, so that a device serves one job at a time whichever run the
job belongs to, and a release by any run wakes the jobs of every run.

Holders are ``(run, job)`` pairs: two runs may each have a job called
``lenet``. A job whose last plan got fewer devices than it wanted (none, if
it waits) is ``short``. With a ``share`` (the lab's policy between runs,
``FairShare``), a run may hold at most its share of the devices while a job
of another run is short; alone, or with nobody short, it may use them all.
Without one (a single run) nothing but the devices' being free limits a
plan.

Pure bookkeeping on the event loop: no awaits but the condition's.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Protocol

from mjfl.ids import DeviceId, JobId

Holder = tuple[str, JobId]  # (run id, job)


class Share(Protocol):
    """How many devices a run may hold at once while others wait (the policy between runs)."""

    def limit(self, run: str, occupancy: Occupancy) -> int | None:
        """The most devices ``run`` may hold now (busy or claimed by its jobs); None: no limit."""
        ...


class Occupancy:
    """Which job holds each device (``busy``), which job will take it once released (``claimed``), and since when."""

    def __init__(self, share: Share | None = None) -> None:
        self.share = share
        self.busy: dict[DeviceId, Holder] = {}
        self.claimed: dict[DeviceId, Holder] = {}
        self.task_started: dict[DeviceId, float] = {}  # clock time each busy device's task began
        self.released = asyncio.Condition()  # notified whenever a device is released or a job ends
        self.short: dict[Holder, int] = {}  # jobs whose last plan got fewer devices than they wanted, by how many

    def held_by(self, run: str) -> int:
        """Devices ``run``'s jobs hold: busy with or claimed by one of them."""
        held = {d for d, (holder, _) in self.busy.items() if holder == run}
        return len(held | {d for d, (holder, _) in self.claimed.items() if holder == run})

    def allowance(self, run: str) -> int | None:
        """How many more devices ``run`` may take now (None: as many as are free)."""
        if self.share is None:
            return None
        limit = self.share.limit(run, self)
        return None if limit is None else max(limit - self.held_by(run), 0)

    def planned(self, holder: Holder, missing: int) -> None:
        """``holder``'s plan got ``missing`` fewer devices than it wanted (0: all it wanted, or it ended)."""
        if missing > 0:
            self.short[holder] = missing
        else:
            self.short.pop(holder, None)

    def others_short(self, run: str) -> bool:
        """Whether a job of a run other than ``run`` got fewer devices than it wanted."""
        return any(holder[0] != run for holder in self.short)


class FairShare:
    """Each running run's share of the fleet: an equal part of the devices present, rounded up.

    A run may go past its share while no other run is short of devices, so
    the fleet is never idle for the policy's sake; once another run is
    short, the run plans no further device until it holds less than its
    share. Rounds end often, so a short run gets its share within a round or
    so of the others' (no run starves: the others cannot grow while it is
    short).
    ``devices`` and ``runs`` count the fleet's devices and the running runs now.
    """

    def __init__(self, devices: Callable[[], int], runs: Callable[[], int]) -> None:
        self.devices = devices
        self.runs = runs

    def limit(self, run: str, occupancy: Occupancy) -> int | None:
        if not occupancy.others_short(run):
            return None
        return math.ceil(self.devices() / max(self.runs(), 1))

