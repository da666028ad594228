"""Which job each device serves now: one device, one job at a time, across every engine over one fleet.

A run's engine plans its jobs over the free devices and holds the chosen
ones until their tasks end (``engine.py``). The lab service runs one engine
per running run over one fleet of devices; they share one ``Occupancy``, so
that a device serves one job at a time whichever run the job belongs to, and
a release by any run wakes the jobs of every run.

Holders are ``(run, job)`` pairs: two runs may each have a job called
``lenet``. A device is *busy* with at most one holder, and *claimed* by at
most one other (a plan that took a device another job will release soon: its
task starts when that job releases it). A job also says, each time it plans,
how many devices it wanted and how many it got: a job that got fewer is
*short*. With a ``share`` (the lab's policy between runs, ``lab/sharing.py``),
a run may hold at most its share of the devices while another run waits;
alone, or with nobody waiting, it may use them all. Without one (a single
run) nothing but the devices' being free limits a plan.

Every change goes through a verb (``take``, ``claim``, ``hold``, ``planned``,
``ended``) that keeps those invariants and wakes whoever waits for a change
(``changed``); so does ``wake``, which the run driver calls when a device
joins. Nobody polls. The object belongs to the event loop: no thread touches
it, and no verb awaits but ``hold`` and ``changed``. Waiters wake in the
order they began to wait, so a virtual-time run wakes its jobs the same way
every time.

A scheduler plans off the loop (``engine.py``): a plan of Meta-Greedy's six
members takes a tenth of a second, which the loop that carries every run's
heartbeats must not wait out. ``planning`` is held from a job's look at the
free devices to its taking them, so one job plans at a time over the fleet
and the devices a plan chose are still where the scheduler saw them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Protocol

from mjfl.ids import DeviceId, JobId

Holder = tuple[str, JobId]  # (run id, job)


class Share(Protocol):
    """How many devices a run may hold at once while others wait (the policy between runs)."""

    def limit(self, run: str, occupancy: Occupancy) -> int | None:
        """The most devices ``run`` may hold now (busy with or claimed by its jobs); None: no limit."""
        ...


class Occupancy:
    """Which job holds each device, which job will take it once released, since when; who is short."""

    def __init__(self, share: Share | None = None) -> None:
        self.share = share
        self._busy: dict[DeviceId, Holder] = {}
        self._claimed: dict[DeviceId, Holder] = {}
        self._started: dict[DeviceId, float] = {}  # clock time each busy device's task began
        self._wanted: dict[Holder, int] = {}  # each job's last plan: the devices it wanted
        self._short: dict[Holder, int] = {}  # jobs whose last plan got fewer devices than they wanted, by how many
        self._waiters: dict[asyncio.Future[None], None] = {}  # in the order they began to wait
        self.planning = asyncio.Lock()
        """Held from a job's look at the free devices to its taking the ones its scheduler chose (module docstring)."""

    # -- what is known ---------------------------------------------------------------

    def free(self, device: DeviceId) -> bool:
        """Neither busy nor claimed: a plan may take it now."""
        return device not in self._busy and device not in self._claimed

    def holder(self, device: DeviceId) -> Holder | None:
        """The job ``device`` is busy with (None: none)."""
        return self._busy.get(device)

    def claimed(self, device: DeviceId) -> bool:
        return device in self._claimed

    def started_at(self, device: DeviceId) -> float | None:
        """The clock time the task ``device`` is busy with began (None: not busy)."""
        return self._started.get(device)

    def serving(self) -> dict[DeviceId, Holder]:
        """Every busy device and the job it serves."""
        return dict(self._busy)

    def any_busy(self) -> bool:
        """Whether some device is busy, so that a release (and a wake-up) is to come."""
        return bool(self._busy)

    def held_by(self, run: str) -> int:
        """Devices ``run``'s jobs hold: busy with or claimed by one of them, each counted once."""
        held = {d for d, (holder, _) in self._busy.items() if holder == run}
        return len(held | {d for d, (holder, _) in self._claimed.items() if holder == run})

    def wanted(self, run: str) -> int | None:
        """The devices ``run``'s jobs going wanted at their last plans (None: none has planned yet)."""
        plans = [wanted for (holder, _), wanted in self._wanted.items() if holder == run]
        return sum(plans) if plans else None

    def short(self, run: str) -> bool:
        """Whether a job of ``run`` got fewer devices than it wanted at its last plan."""
        return any(holder == run for holder, _ in self._short)

    def allowance(self, run: str) -> int | None:
        """How many more devices ``run`` may take now (None: as many as are free)."""
        if self.share is None:
            return None
        limit = self.share.limit(run, self)
        return None if limit is None else max(limit - self.held_by(run), 0)

    # -- the verbs ---------------------------------------------------------------------

    def take(self, device: DeviceId, holder: Holder, now: float) -> None:
        """``holder``'s task starts on the free ``device`` at clock time ``now``."""
        if not self.free(device):
            raise AssertionError(f"{device} is not free: {self._busy.get(device) or self._claimed.get(device)} holds it")
        self._busy[device] = holder
        self._started[device] = now

    def claim(self, device: DeviceId, holder: Holder) -> None:
        """``holder`` takes ``device`` once the job it is busy with releases it (``hold`` starts the task)."""
        if device not in self._busy or device in self._claimed or self._busy[device] == holder:
            raise AssertionError(f"{device} cannot be claimed by {holder}: busy {self._busy.get(device)}, claimed {self._claimed.get(device)}")
        self._claimed[device] = holder

    @contextlib.asynccontextmanager
    async def hold(self, device: DeviceId, holder: Holder, now: Callable[[], float]) -> AsyncIterator[None]:
        """``holder``'s task on ``device``: taken, or waited for where claimed; released (waking every waiter) on exit.

        A claim whose wait is cancelled is given up, so the device stays free for others.
        """
        if self._claimed.get(device) == holder:
            try:
                while device in self._busy:
                    await self.changed()
            except BaseException:
                self._claimed.pop(device, None)
                self.wake()
                raise
            del self._claimed[device]
        if self._busy.get(device) != holder:
            self.take(device, holder, now())
        else:
            self._started[device] = now()
        try:
            yield
        finally:
            self._busy.pop(device, None)
            self._started.pop(device, None)
            self.wake()

    def planned(self, holder: Holder, wanted: int, got: int) -> None:
        """``holder``'s plan wanted ``wanted`` devices and got ``got`` (0: it waits)."""
        self._wanted[holder] = wanted
        if got < wanted:
            self._short[holder] = wanted - got
        elif self._short.pop(holder, None) is not None:
            self.wake()  # those held back for its sake may grow again

    def ended(self, holder: Holder) -> None:
        """``holder`` will plan no more: it is neither short nor wanting, and its run's share may go to others."""
        self._wanted.pop(holder, None)
        self._short.pop(holder, None)
        self.wake()

    def forget(self, run: str, jobs: Iterable[JobId]) -> None:
        """A run is over: whatever its jobs said of their plans is dropped."""
        for job in jobs:
            self.ended((run, job))

    # -- waiting -----------------------------------------------------------------------

    def wake(self) -> None:
        """Something changed that may let a waiting job plan (a release, a job's end, a device that joined)."""
        waiters, self._waiters = self._waiters, {}
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def changed(self, timeout: float | None = None) -> bool:
        """Wait for the next ``wake``; False if ``timeout`` seconds (of the loop's clock) passed first."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters[waiter] = None
        try:
            if timeout is None:
                await waiter
                return True
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
            return True
        except TimeoutError:
            return False
        finally:
            self._waiters.pop(waiter, None)
