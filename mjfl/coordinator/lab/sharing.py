"""The policy between a lab's running runs (``limits.share = "equal"``): shares in devices a job can use.

Every running run plans over the lab's whole fleet, round by round (the
runs' engines share one ``Occupancy``). While no other run waits for
devices, a run may use as many as are free, so no device idles for the
policy's sake. Once another run waits (a job of it got fewer devices than it
wanted, or it is admitted and still preparing), a run plans no further device
while it holds its *share*:

- each run's *floor* is the smallest plan its jobs train a round on
  (``scheduler.min_plan``): no running run's share is ever below it, so a run
  held to its share can always plan a round;
- the devices above the floors are shared out one at a time to the run that
  holds the smallest share, earliest admitted first (max-min fairness), no
  run above what its jobs want (the sum of their last plans' wants, or, before
  they plan, the plans their fractions ask of the fleet): what a run does not
  want goes to the others.

Admission keeps the floors whole: a queued run is admitted only when the
connected devices hold its floor besides every running run's (``room``),
else it waits in the queue with the reason. Shares follow the runs: a run
counts from its admission (a preparing run waits, so the runs that started
first are held to their shares from their first round) to its end, and
``Occupancy.wake`` tells every waiting job when the shares change.

Pure bookkeeping on the event loop, like the occupancy it reads.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mjfl.coordinator.engine.occupancy import Occupancy


@dataclass(frozen=True)
class RunNeeds:
    """What a run asks of the fleet: the smallest plan its jobs train on, and the devices all its jobs' plans want."""

    floor: int  # scheduler.min_plan (at least 1)
    wants: int  # sum over its jobs of max(min_plan, ceil(fraction * fleet)): its demand before it plans


def run_needs(min_plan: int, fractions: Sequence[float], fleet: int) -> RunNeeds:
    """A run's needs on a fleet of ``fleet`` devices, from its jobs' fractions C_m and its ``min_plan``."""
    floor = max(min_plan, 1)
    return RunNeeds(floor, sum(max(floor, math.ceil(f * fleet - 1e-9)) for f in fractions))


def shares(devices: int, floors: Sequence[int], wants: Sequence[int]) -> list[int]:
    """Each run's share of ``devices``, runs in admission order (see the module docstring).

    Floors first, in admission order while the devices last (a fleet that
    lost devices may not hold every floor: the latest runs then get less);
    then one device at a time to the run holding the fewest that wants more.
    """
    given, left = [], devices
    for floor in floors:
        given.append(min(floor, left))
        left -= given[-1]
    heap = [(given[i], i) for i in range(len(floors)) if given[i] < wants[i]]
    heapq.heapify(heap)
    while left > 0 and heap:
        _, i = heapq.heappop(heap)
        given[i] += 1
        left -= 1
        if given[i] < wants[i]:
            heapq.heappush(heap, (given[i], i))
    return given


class FairShare:
    """The ``equal`` policy (see the module docstring): the engine's ``Share``, told of runs as they come and go.

    ``devices`` counts the fleet's connected devices now.
    """

    def __init__(self, devices: Callable[[], int]) -> None:
        self.devices = devices
        self._runs: dict[str, RunNeeds] = {}  # running runs, in admission order
        self._preparing: set[str] = set()

    # -- runs come and go ------------------------------------------------------------

    def room(self, needs: RunNeeds) -> str | None:
        """Why a run with ``needs`` cannot be admitted now (None: the fleet holds its floor beside the others')."""
        devices = self.devices()
        held = sum(n.floor for n in self._runs.values())
        if held + needs.floor <= devices:
            return None
        return (
            f"waiting for devices to share: needs {needs.floor} devices a job (scheduler.min_plan);"
            f" {devices} devices hold {devices // needs.floor} such runs, and the {len(self._runs)} running"
            f" need {held} of them"
        )

    def admit(self, run: str, needs: RunNeeds) -> None:
        """``run`` is admitted: it counts (and waits, while it prepares) from now on."""
        self._runs[run] = needs
        self._preparing.add(run)

    def ready(self, run: str, occupancy: Occupancy) -> None:
        """``run``'s jobs plan from now on: its own word on what it waits for replaces "preparing"."""
        self._preparing.discard(run)
        occupancy.wake()

    def end(self, run: str, occupancy: Occupancy) -> None:
        """``run`` ended: its share goes to the others."""
        self._runs.pop(run, None)
        self._preparing.discard(run)
        occupancy.wake()

    # -- the engine's Share ----------------------------------------------------------

    def limit(self, run: str, occupancy: Occupancy) -> int | None:
        if not any(self.waiting(other, occupancy) for other in self._runs if other != run):
            return None
        return self.of(occupancy).get(run, 0)

    def waiting(self, run: str, occupancy: Occupancy) -> bool:
        """Whether ``run`` waits for devices: still preparing, or a job of it short at its last plan."""
        return run in self._preparing or occupancy.short(run)

    def of(self, occupancy: Occupancy) -> Mapping[str, int]:
        """Every running run's share now."""
        runs = list(self._runs)
        wants = []
        for run in runs:
            wanted = occupancy.wanted(run)
            wants.append(self._runs[run].wants if wanted is None else max(wanted, self._runs[run].floor))
        return dict(zip(runs, shares(self.devices(), [self._runs[r].floor for r in runs], wants)))
