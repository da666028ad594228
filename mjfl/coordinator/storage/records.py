"""What a run leaves behind: runs, rounds and device-rounds as plain records, and the run clock's anchors.

The engine produces these; storage (SQLite) persists them and the reports
(summary.json, rounds.csv, plots, tables) are computed from them, so a report
can be rebuilt from the database alone.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any, Literal, TypeAlias

from mjfl.ids import DeviceId, JobId

DeviceStatus = Literal["ok", "failed", "rejected"]
RunMode = Literal["virtual", "real"]
FleetEventKind = Literal["joined", "left", "refused"]


Score: TypeAlias = tuple[float, float]
"""A job's (test accuracy, test loss) after one of its rounds."""

ClockAnchor: TypeAlias = tuple[float, float]
"""(run_s, wall_s): at run-clock time ``run_s`` the wall clock read ``wall_s`` (Unix seconds); ``Storage.clocks``."""


def wall_time(anchors: Sequence[ClockAnchor], run_s: float) -> float | None:
    """The wall clock (Unix seconds) at run-clock time ``run_s``, by the latest anchor at or before it.

    The one rule for putting a run's times on the wall clock. ``anchors`` are by ``run_s`` ascending, as
    ``Storage.clocks`` gives them; of several at one ``run_s`` (a run resumed before a round ended) the last
    holds. None for a time before the first anchor, or a run with none (one recorded before anchors were kept).
    """
    at = bisect.bisect_right(anchors, run_s, key=lambda anchor: anchor[0])
    if at == 0:
        return None
    anchor_run_s, anchor_wall_s = anchors[at - 1]
    return anchor_wall_s + (run_s - anchor_run_s)


@dataclass(frozen=True)
class Target:
    """When a job is done: a test accuracy to reach, a test loss to reach, or both.

    The one definition of "target reached", for the engine (when to stop a
    job) and the reports (time to target): a round reaches the target when
    the mean accuracy or the mean loss of the last ``window`` rounds up to it
    meets any target set (docs/config.md). A window of 1 is the round alone;
    a longer one keeps a noisy job from stopping on one lucky round. A window
    holding a NaN meets none; a job without a target never reaches it and
    runs to its round budget.
    """

    accuracy: float | None = None
    loss: float | None = None
    window: int = 1  # rounds averaged (jobs.*.target_window)

    @property
    def is_set(self) -> bool:
        """Whether the job has a target at all (else it runs to its round budget)."""
        return self.accuracy is not None or self.loss is not None

    def reached(self, scores: Sequence[Score]) -> bool:
        """Whether the last of ``scores`` (a job's rounds so far, oldest first) reaches the target.

        Only the last ``window`` scores count; fewer than that reach nothing.
        """
        if len(scores) < self.window:
            return False
        recent = scores[len(scores) - self.window :]
        accuracy, loss = fmean(a for a, _ in recent), fmean(x for _, x in recent)  # NaN if any is: meets nothing
        if self.accuracy is not None and accuracy >= self.accuracy:
            return True
        return self.loss is not None and loss <= self.loss

    def first_reached(self, scores: Sequence[Score]) -> int | None:
        """The index of the first of ``scores`` that reaches the target (``reached``), or None: a stored run's scan."""
        return next(
            (i for i in range(len(scores)) if self.reached(scores[max(0, i + 1 - self.window) : i + 1])), None
        )

    def __str__(self) -> str:
        parts = []
        if self.accuracy is not None:
            parts.append(f"acc >= {self.accuracy:g}")
        if self.loss is not None:
            parts.append(f"loss <= {self.loss:g}")
        mean = f", mean of {self.window} rounds" if self.window > 1 else ""
        return " or ".join(parts) + mean


@dataclass(frozen=True)
class RunInfo:
    """One run of a group of jobs under one scheduling method."""

    run_id: str
    method: str
    mode: RunMode
    seed: int
    config_json: str
    started_at: str  # wall-clock ISO 8601 time the run started


@dataclass(frozen=True)
class JobInfo:
    """A job of a run, with what defines "done" for it."""

    run_id: str
    job: JobId
    model: str
    dataset: str
    target_accuracy: float | None
    target_loss: float | None
    max_rounds: int
    job_key: str  # identifies "the same job" across runs (for Formula 10's history)
    target_window: int = 1  # rounds whose mean must meet the target (Target.window); 1 before it was kept

    @property
    def target(self) -> Target:
        return Target(self.target_accuracy, self.target_loss, self.target_window)


@dataclass(frozen=True)
class DeviceRound:
    """One device's part in one round (times are on the run's clock, seconds)."""

    device: DeviceId
    status: DeviceStatus
    samples: int
    mean_loss: float | None
    duration_s: float
    download_s: float | None = None
    compute_s: float | None = None
    upload_s: float | None = None
    error: str | None = None
    device_state: Mapping[str, Any] | None = None  # battery, charging, thermal status (protocol.md 5.5)
    wait_s: float = 0.0  # from the round's start until the task started (a device another job released)
    energy_j: float | None = None  # the task's energy, joules (protocol.md 5.5); None: not known


@dataclass(frozen=True)
class RoundRecord:
    """One finished round of one job: who trained, what it cost, where the model stands."""

    run_id: str
    job: JobId
    round: int
    started_s: float
    ended_s: float
    devices: tuple[DeviceRound, ...]
    accuracy: float
    loss: float
    aggregated: bool  # False when too few devices returned and the model was kept
    expected_time_s: float  # Formula 3's expectation for the plan when it was made
    cost: float  # Formula 8 with the observed round time
    winner: str | None = None  # the Meta-Greedy member whose plan ran

    @property
    def plan(self) -> tuple[DeviceId, ...]:
        return tuple(d.device for d in self.devices)

    @property
    def duration_s(self) -> float:
        return self.ended_s - self.started_s


@dataclass(frozen=True)
class ProfileRefit:
    """An online refit of a device's profile from its observed rounds (Formula 4)."""

    run_id: str
    device: DeviceId
    at_s: float
    a: float
    mu: float
    observations: int
    ks_statistic: float


@dataclass(frozen=True)
class JobOutcome:
    """How a job ended in a run: the row of the paper's Tables 4-5."""

    job: JobId
    rounds: int
    final_accuracy: float
    time_to_target_s: float | None  # None when the target was never reached
    reached_target: bool


@dataclass(frozen=True)
class SchedulerChoice:
    """One Meta-Greedy candidate of one round: a member, its plan's cost under the selector, and whether it won.

    Every member proposes a plan each round (Algorithm 4 line 3) and the
    least ``selector_cost`` wins (line 4): ReCost (Formulas 12-13) under the
    paper's selector, the plan's return or its expected time under mjfl's
    (``schedulers/meta_greedy.py``). Members that never win still appear
    here, so "how often did each member win" has an honest denominator.
    """

    run_id: str
    job: JobId
    round: int
    member: str
    selector_cost: float
    won: bool


@dataclass(frozen=True)
class FleetEvent:
    """A device connected to a real-time run (``joined``), its connection ended (``left``), or one was refused.

    ``device`` is None for a connection refused before it said who it is
    (no hello in time, too many from one address); ``detail`` is why it left
    or was refused, or, for ``joined``, where it connected from. ``hardware``
    is what a joining device said of itself (its hello's facts), else None.
    Failures and refused updates are not here: they are parts of the rounds
    (``DeviceRound.status``).
    """

    run_id: str
    at_s: float
    kind: FleetEventKind
    device: DeviceId | None
    detail: str
    hardware: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class ProgramBuild:
    """A job's training program as its devices got it, and the sizes of the shards its data was cut into."""

    job: JobId
    sha256: str  # of the .pte bytes sent to devices (protocol.md 6: a program is named by it)
    size: int  # bytes
    file: str | None  # where the coordinator read it (the program cache), None when not from a file
    shard_samples: tuple[int, ...]  # samples of shard k, k = 0 .. shards - 1
    model: str | None = None  # the job's model as given: a zoo name or a factory ("models.py:Net"); None: before version 10
    model_sha256: str | None = None  # a factory's source file's sha256; None for the zoo
    model_files: Mapping[str, str] = field(default_factory=dict)  # each helper file (config's `files`) -> its sha256


@dataclass(frozen=True)
class RunProvenance:
    """What a run ran on, kept once when it starts (a resumed run keeps the first): docs/storage.md, provenance.

    ``config_text`` is the configuration file's text as given (a credential's
    value replaced, see ``redacted``), ``config_sha256`` the sha256 of the
    text as given; ``versions``: mjfl's (and its commit), Python's, torch's,
    ExecuTorch's.
    """

    run_id: str
    recorded_at: str  # ISO 8601, UTC
    config_text: str | None  # None: the configuration came from no file
    config_file: str | None
    config_sha256: str | None
    redacted: tuple[str, ...]  # fields whose values config_text leaves out
    versions: Mapping[str, Any]
    programs: tuple[ProgramBuild, ...]


@dataclass(frozen=True)
class DeviceAdmission:
    """A device as a run admitted it: its hello, the profile it is planned with, its shard, its app build.

    Kept at each admission that differs from the device's earlier ones in the
    run (a phone back with another app build is kept twice). ``hello`` is its
    hello (no credential, no battery state), None for a simulated device;
    ``profile``: ``a``, ``mu`` and where they came from; ``shard``: the shard
    of every job's data it holds, None when none was left; ``app``: the
    installed app's sha256 and where it was read (``sha256``, ``source``),
    what runs instead of an app (``absent``: simulated, emulated, the JVM
    client), or why the build is not known (``missing``).
    """

    run_id: str
    device: DeviceId
    admitted_at: str  # ISO 8601, UTC
    shard: int | None
    hello: Mapping[str, Any] | None
    profile: Mapping[str, Any]
    app: Mapping[str, Any]
