"""One stream of run events: what the engine tells everyone else while it runs.

The engine (``engine.py``) is the only source. It emits, in order of
happening on its clock (``at_s``: run-clock seconds, as in the round
records)::

    RunStarted -> (TaskSent -> DeviceResult)* -> RoundAggregated [-> JobStopped] ... -> RunFinished

with ``DeviceJoined`` / ``DeviceLeft`` whenever the run driver tells the engine
that a device came or went, ``JobWaiting`` when a job cannot plan for want of
devices, and ``ProfileRefitted`` after a round whose
devices' profiles were refitted online. Storage (rounds, checkpoints, refits),
the terminal's live view and any later observer (a dashboard) subscribe to
the same stream and never decide anything the engine decided: whether a job
stopped, and why, is ``JobStopped.reason`` and nothing else.

Observers are called synchronously, on the engine's event loop, in the order
they were given; an observer that raises stops the run (storage does that
when it cannot save a round: nothing after an unsaved round may happen).
An observer must not block: it may hand events to a queue for slow work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeAlias

from mjfl.coordinator.storage.records import DeviceRound, ProfileRefit, RoundRecord
from mjfl.ids import DeviceId, JobId

StopReason: TypeAlias = Literal["target", "budget", "no devices"]
"""Why a job ended: it reached its target, used its round budget R_m, or found no device to train it."""


@dataclass(frozen=True)
class RunStarted:
    """The engine starts (or resumes) a run of these jobs over these devices (those holding a shard)."""

    run_id: str
    jobs: tuple[JobId, ...]
    devices: tuple[DeviceId, ...]
    at_s: float


@dataclass(frozen=True)
class DeviceJoined:
    """A device the jobs can plan from now on (it holds a shard of each job it may train)."""

    device: DeviceId
    at_s: float


@dataclass(frozen=True)
class DeviceLeft:
    """A device is gone (disconnected); its task in flight, if any, fails on its own."""

    device: DeviceId
    reason: str
    at_s: float


@dataclass(frozen=True)
class TaskSent:
    """A device starts a job's round: its task is handed to the fleet."""

    job: JobId
    round: int
    device: DeviceId
    at_s: float


@dataclass(frozen=True)
class JobWaiting:
    """A job cannot plan a round now, and waits for devices: once each time it starts waiting.

    It wants ``wanted`` devices and trains no round on fewer than
    ``minimum``; ``free`` of the devices holding its shards are free, and its
    run may take ``allowance`` more of them (None: no limit; else the run is
    at its share of a fleet that other runs wait for). It plans as soon as a
    device is released or joins, or stops with "no devices" once nothing is
    busy and nobody comes (``EngineSettings.device_wait_s``).
    """

    job: JobId
    round: int  # the round it waits to plan
    wanted: int
    minimum: int
    free: int
    allowance: int | None
    at_s: float

    def why(self) -> str:
        """The wait in words, for a log line or a run's state."""
        if self.allowance is not None and self.allowance < min(self.free, self.minimum):
            held = "holds its share of the devices" if self.allowance == 0 else f"may take {self.allowance} more"
            return f"needs {self.minimum} devices, {self.free} free; its run {held} while other runs wait"
        return f"needs {self.minimum} devices, {self.free} free"


@dataclass(frozen=True)
class DeviceResult:
    """What came of a device's task, as the device answered it (``result.status``).

    An answer the round later refuses (an update norm far from the others')
    shows as ``rejected`` in the round's record, not here.
    """

    job: JobId
    round: int
    result: DeviceRound
    at_s: float


@dataclass(frozen=True, eq=False)
class RoundAggregated:
    """A finished round of a job: its record, and the job's state after it.

    ``choices`` are Meta-Greedy's candidates (member -> selector cost; None
    for other schedulers). ``stopped`` is the engine's verdict after this
    round (also sent as ``JobStopped``). ``weights`` (the new global model),
    ``scheduler`` and ``best_accuracy`` are what a checkpoint keeps: they are
    the engine's live objects, so an observer that keeps them copies them.
    """

    record: RoundRecord
    choices: Mapping[str, float] | None
    stopped: StopReason | None
    weights: Mapping[str, Any]
    scheduler: Any
    best_accuracy: float

    @property
    def job(self) -> JobId:
        return self.record.job


@dataclass(frozen=True)
class JobStopped:
    """A job ended, and why: the engine's one decision, which everything downstream reads."""

    job: JobId
    reason: StopReason
    rounds: int  # rounds done
    at_s: float


@dataclass(frozen=True)
class ProfileRefitted:
    """A device's profile refitted online from its recent rounds (Formula 4)."""

    refit: ProfileRefit


@dataclass(frozen=True)
class RunFinished:
    """Every job has stopped; ``stopped`` says why each did."""

    run_id: str
    stopped: Mapping[JobId, StopReason]
    at_s: float


RunEvent: TypeAlias = (
    RunStarted | DeviceJoined | DeviceLeft | JobWaiting | TaskSent | DeviceResult | RoundAggregated | JobStopped
    | ProfileRefitted | RunFinished
)


class Observer(Protocol):
    """Anything that follows a run: called with every event, synchronously (see the module's docstring)."""

    def __call__(self, event: RunEvent) -> None: ...


class RoundLog:
    """An observer that keeps every round's record and every job's stop, in order (benchmarks and tests read a run so)."""

    def __init__(self) -> None:
        self.records: list[RoundRecord] = []
        self.stopped: dict[JobId, StopReason] = {}

    def __call__(self, event: RunEvent) -> None:
        if isinstance(event, RoundAggregated):
            self.records.append(event.record)
        elif isinstance(event, JobStopped):
            self.stopped[event.job] = event.reason


__all__ = [
    "DeviceJoined",
    "DeviceLeft",
    "DeviceResult",
    "JobStopped",
    "JobWaiting",
    "Observer",
    "ProfileRefitted",
    "RoundAggregated",
    "RoundLog",
    "RunEvent",
    "RunFinished",
    "RunStarted",
    "StopReason",
    "TaskSent",
]
