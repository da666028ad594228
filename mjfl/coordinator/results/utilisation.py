"""How busy the fleet was: each device's and the fleet's busy fraction over a run, from its round records.

A device is busy while it holds a task of some round (``busy_interval``):
from its round's start plus the time it waited for another job to free it
(``wait_s``), for its round time (``duration_s``), no later than its round's
end. Every answer counts (used, refused, failed): the device was held by
that job either way. Overlapping intervals of one device (two jobs' rounds
recorded as overlapping) count once: busy time is the length of their union.

The run's span is from its first round's start to its last round's end: the
time the scheduler had work to hand out (a fleet gathering before the first
round is nobody's busy time and nobody's idle time). Each device's busy
fraction is its busy time over that span, the same span for every device,
so one that joined late or left early shows as less busy: what the fleet
lost while it was away. The fleet's fraction is the sum of busy time over
(devices x span), which with one span for all equals the mean of the
devices' fractions; it weighs every device alike (a phone idle the whole
run pulls it down as much as a busy one pushes it up).

Pure: records in, numbers out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mjfl.coordinator.storage.records import DeviceRound, RoundRecord

__all__ = ["Utilisation", "busy_fractions", "busy_interval", "busy_line", "utilisation"]


@dataclass(frozen=True)
class Utilisation:
    """A run's busy fractions: ``devices`` (device -> fraction, in first-seen order), ``fleet``, and the span they are over."""

    span_s: float
    devices: dict[str, float]
    fleet: float | None  # None: no device, or a span of zero

    def least(self) -> tuple[str, float] | None:
        """The least busy device and its fraction (the first one seen among equals); None without devices."""
        return min(self.devices.items(), key=lambda item: item[1]) if self.devices else None

    def most(self) -> tuple[str, float] | None:
        """The busiest device and its fraction (the first one seen among equals); None without devices."""
        return max(self.devices.items(), key=lambda item: item[1]) if self.devices else None

    def figures(self) -> dict[str, Any]:
        """As JSON: ``{"span_s", "fleet", "devices": {id: fraction}, "least", "most"}`` (each ``{"device", "busy"}`` or None)."""
        least, most = self.least(), self.most()
        return {
            "span_s": self.span_s, "fleet": self.fleet, "devices": dict(self.devices),
            "least": None if least is None else {"device": least[0], "busy": least[1]},
            "most": None if most is None else {"device": most[0], "busy": most[1]},
        }


def busy_line(figures: Mapping[str, Any]) -> str:
    """``Utilisation.figures`` as one line for a person: the fleet's fraction over the span, the least and most busy devices."""
    if figures["fleet"] is None:
        return "no device round"
    least, most = figures["least"], figures["most"]
    return (f"the fleet busy {figures['fleet']:.0%} of {figures['span_s']:.1f} s ({len(figures['devices'])} devices);"
            f" least busy {least['device']} {least['busy']:.0%}, most busy {most['device']} {most['busy']:.0%}")


def busy_interval(record: RoundRecord, part: DeviceRound) -> tuple[float, float]:
    """When ``part``'s device held its task of ``record``'s round, on the run's clock: ``(start_s, end_s)``.

    The start is the round's start plus the device's wait; the end its start
    plus its round time, clipped to the round's end (a device that failed by
    the round's deadline was not counted on after it).
    """
    start = record.started_s + part.wait_s
    end = min(record.ended_s, start + part.duration_s)
    return min(start, end), end


def utilisation(rounds: Sequence[RoundRecord], devices: Iterable[str] = ()) -> Utilisation:
    """Each device's and the fleet's busy fraction over the span of ``rounds`` (module docstring).

    ``devices``: devices to count besides those of the rounds (connected,
    never planned: busy 0), first in the order given.
    """
    intervals: dict[str, list[tuple[float, float]]] = {str(d): [] for d in devices}
    for record in rounds:
        for part in record.devices:
            intervals.setdefault(str(part.device), []).append(busy_interval(record, part))
    if not rounds:
        return busy_fractions(intervals, 0.0, 0.0)
    return busy_fractions(intervals, min(r.started_s for r in rounds), max(r.ended_s for r in rounds))


def busy_fractions(intervals: Mapping[str, Sequence[tuple[float, float]]], first: float, last: float) -> Utilisation:
    """Each device's busy fraction of the span from ``first`` to ``last``, its busy ``intervals`` counted once each
    (their union, clipped to the span), and the fleet's; the devices in ``intervals``' order.

    ``utilisation``'s rule for any intervals on one clock: a run's device rounds on its run clock, or
    several runs' on the wall clock (the lab's, where a device busy on any run's job is busy).
    """
    span = last - first
    if span <= 0:
        return Utilisation(0.0, {device: 0.0 for device in intervals}, None)
    busy = {device: _union([(max(s, first), min(e, last)) for s, e in spans if e > first and s < last])
            for device, spans in intervals.items()}
    fractions = {device: seconds / span for device, seconds in busy.items()}
    fleet = sum(busy.values()) / (len(busy) * span) if busy else None
    return Utilisation(span, fractions, fleet)


def _union(spans: list[tuple[float, float]]) -> float:
    """The length of the union of ``spans`` (each ``(start, end)``): overlaps count once."""
    total = 0.0
    reach = -float("inf")
    for start, end in sorted(spans):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total
