"""What a scheduler sees and returns: plans, planning contexts, decisions, round outcomes.

Devices are addressed by their index in the fleet (``FleetModel.ids[i]``), jobs
by their index in ``PlanContext.jobs``; a plan is a sorted tuple of device
indices (Formula 9's V_m^r). Schedulers never see weights, sockets or clocks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from mjfl.ids import DeviceId, JobId

Plan = tuple[int, ...]
Omega = Literal["sqrt", "linear", "log"]
# Algorithm 4's six members, in the paper's order (the registry builds them by these names).
META_MEMBERS = ("bods", "rlds", "random", "fedcs", "genetic", "greedy")


@dataclass(frozen=True, eq=False)
class FleetModel:
    """Every device's round-time parameters (Formula 4): ``a`` and ``mu`` per device."""

    ids: tuple[DeviceId, ...]
    a: NDArray[np.float64]
    mu: NDArray[np.float64]

    def __post_init__(self) -> None:
        if not (len(self.ids) == self.a.shape[0] == self.mu.shape[0]):
            raise ValueError("ids, a and mu must have one entry per device")
        if np.any(self.a <= 0) or np.any(self.mu <= 0):
            raise ValueError("a and mu must be positive (Formula 4)")

    @property
    def size(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Objective:
    """What a job's run is judged by, carried once for every scheduler that asks.

    A job with a target (a test ``accuracy`` to reach, higher is better, a
    test ``loss`` to reach, lower is better, or both: it stops at the first
    met) is judged by its time to target, and ``rounds`` is its round limit
    R_m, the rounds it has to get there. A job without a target runs
    ``rounds`` rounds and is judged by its TotalCost summed over them, the
    paper's objective (Formula 8 summed over the run). ``rounds`` None: not
    known, and every round is judged on its own.
    """

    accuracy: float | None = None
    loss: float | None = None
    rounds: int | None = None

    def __post_init__(self) -> None:
        if self.rounds is not None and self.rounds < 1:
            raise ValueError("a job's round limit or budget must be >= 1")

    @property
    def has_target(self) -> bool:
        """Whether the job stops at a target (else it runs its rounds)."""
        return self.accuracy is not None or self.loss is not None

    def rounds_left(self, round_: int) -> int | None:
        """The rounds from ``round_`` to the limit, ``round_`` included (at least 1); None if unknown."""
        return None if self.rounds is None else max(1, self.rounds - round_ + 1)


@dataclass(frozen=True, eq=False)
class JobModel:
    """What the cost model needs of a job: tau_m, D_k^m for every device, C_m, and what the job is judged by."""

    name: JobId
    epochs: int
    samples: NDArray[np.int64]
    fraction: float
    objective: Objective = field(default_factory=Objective)

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError("epochs must be >= 1")
        if np.any(self.samples < 1):
            raise ValueError("every device needs at least one sample of the job")
        if not 0 < self.fraction <= 1:
            raise ValueError("fraction C_m must lie in (0, 1]")


@dataclass(frozen=True)
class CostWeights:
    """alpha and beta of Formula 2, Omega of Formula 13, and the weight of statistical utility.

    Both terms are normalised (see ``mjfl.schedulers.cost``) so the defaults
    mean the same on any fleet. ``utility`` (beyond the paper): the exponent
    gamma of a plan's learning share in its time term, ``T(V) / L(V)^gamma``
    (``CostModel.learning_share``, docs/cost-model.md); 0 is the paper's cost.
    """

    alpha: float = 1.0
    beta: float = 0.05
    omega: Omega = "sqrt"
    utility: float = 1.0

    def __post_init__(self) -> None:
        if self.alpha < 0 or self.beta < 0 or self.utility < 0:
            raise ValueError("alpha, beta and utility must be >= 0")
        if self.omega not in ("sqrt", "linear", "log"):
            raise ValueError("omega must be one of sqrt, linear, log")


def plan_size(fraction: float, fleet_size: int, free: int, minimum: int = 1) -> int:
    """``ceil(C_m * |K|)`` devices, capped by the free ones; 0 if fewer than ``minimum`` are free."""
    wanted = max(minimum, math.ceil(fraction * fleet_size - 1e-9))
    size = min(wanted, free)
    return size if size >= minimum else 0


@dataclass(frozen=True, eq=False)
class PlanContext:
    """Everything one plan call may use (the inputs of Algorithms 1-4), as plain data.

    ``frequencies[m, k]`` is s_{k,m} of Formula 6 counting every plan already
    issued to job m, in-flight ones included; ``current_plans[m]`` is job m's
    plan in flight (None when it is between rounds). ``free`` marks the
    devices this plan may use; the engine leaves out every device another
    job holds or has claimed, so plans keep devices exclusive across jobs.

    ``wait[k]`` (seconds, None = all zero): how long device k stays busy with
    another job's task before it can start this one. The engine fills it when
    jobs may plan devices that others will release soon (the paper's BODS and
    RLDS weigh that chance); the device then starts late, and every expected
    round time of the cost model counts the wait. What follows from these
    (round times, costs) is computed by the cost model:
    ``mjfl.schedulers.cost.cost_model(ctx)``.

    ``losses[k]`` (None = none known): the mean training loss device k
    reported with its last update of this job, NaN where it has not returned
    one. The cost model turns it into the device's statistical utility (Oort's,
    Lai et al. 2021), so that devices whose updates do not learn are not
    preferred for their speed.
    """

    job: int
    round: int
    fleet: FleetModel
    jobs: tuple[JobModel, ...]
    free: NDArray[np.bool_]
    frequencies: NDArray[np.int64]
    current_plans: tuple[Plan | None, ...]
    size: int
    weights: CostWeights = field(default_factory=CostWeights)
    wait: NDArray[np.float64] | None = None
    losses: NDArray[np.float64] | None = None

    def __post_init__(self) -> None:
        K, M = self.fleet.size, len(self.jobs)
        if self.free.shape != (K,) or self.frequencies.shape != (M, K):
            raise ValueError("free must be (K,) and frequencies (M, K)")
        if len(self.current_plans) != M or not 0 <= self.job < M:
            raise ValueError("one current plan per job, and a valid job index")
        if not 1 <= self.size <= int(self.free.sum()):
            raise ValueError(f"plan size {self.size} needs 1..{int(self.free.sum())} free devices")
        if self.round < 1:
            raise ValueError("rounds count from 1")
        if self.wait is not None and (
            self.wait.shape != (K,) or not np.all(np.isfinite(self.wait)) or np.any(self.wait < 0)
        ):
            raise ValueError("wait must be (K,), finite and >= 0")
        if self.losses is not None and self.losses.shape != (K,):
            raise ValueError("losses must be (K,)")

    @property
    def job_model(self) -> JobModel:
        return self.jobs[self.job]

    @property
    def free_indices(self) -> NDArray[np.intp]:
        return np.flatnonzero(self.free)


@dataclass(frozen=True)
class Decision:
    """A scheduler's answer for one round: the plan, and how it was reached.

    A scheduler made of schedulers (Meta-Greedy, Algorithm 4) names the member
    whose plan it kept in ``chosen_by`` and each member's cost under its
    selector in ``candidates`` (ReCost, Formula 12, for the paper's); a
    single method leaves both empty.
    The engine records them with the round without knowing which scheduler
    it asked.
    """

    plan: Plan
    chosen_by: str | None = None
    candidates: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RoundOutcome:
    """What happened to a planned round: who answered, how long each took, who failed (failures are data).

    ``durations`` holds the round time of each device that returned a valid
    update; ``failed`` the devices that did not return or were rejected;
    ``round_time`` is when the round closed (Formula 3 as observed: the slowest
    returned device, or the deadline when one failed); ``accuracy`` and
    ``loss`` the job's test accuracy and test loss after the round (None
    where nothing is trained, as in the scheduler benchmark); ``losses`` the
    mean training loss of each returned device's update (empty where nothing
    is trained).
    """

    job: int
    round: int
    plan: Plan
    durations: Mapping[int, float]
    failed: frozenset[int]
    round_time: float
    accuracy: float | None = None
    loss: float | None = None
    losses: Mapping[int, float] = field(default_factory=dict)


class Scheduler(Protocol):
    """Plans one job's rounds and learns from their outcomes."""

    name: str

    def plan(self, ctx: PlanContext) -> Decision:
        """A plan of exactly ``ctx.size`` free devices for ``ctx.job`` in ``ctx.round``."""
        ...

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        """The outcome of the round planned from ``ctx`` (by this or another scheduler)."""
        ...


@runtime_checkable
class Resumable(Protocol):
    """A scheduler (or a part of one) whose learned state a checkpoint keeps as plain data.

    ``state`` holds what the object learned or drew so far, never what its
    configuration gives: dicts with string keys, lists, numbers, strings,
    None and numpy arrays (a numpy Generator's ``bit_generator.state`` is such
    a dict). ``load_state`` puts it into an object built with the same
    configuration, which then plans exactly as the one that gave it would have
    (``storage/checkpoints.py`` stores it; no class name is part of it).
    """

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: Mapping[str, Any]) -> None: ...


class Stateless:
    """A scheduler (or a part of one) that learns nothing from the rounds: nothing to observe, nothing to keep."""

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {}

    def load_state(self, state: Mapping[str, Any]) -> None:
        pass


def resumable(scheduler: object) -> Resumable:
    """``scheduler`` as a Resumable; TypeError (our bug) for one a checkpoint cannot keep."""
    if not isinstance(scheduler, Resumable):
        raise TypeError(f"{getattr(scheduler, 'name', scheduler)!r} keeps no state a checkpoint could hold")
    return scheduler


def as_plan(devices: NDArray[np.integer] | list[int]) -> Plan:
    """A plan in canonical form: sorted, unique device indices."""
    return tuple(sorted(int(d) for d in set(np.asarray(devices).tolist())))
