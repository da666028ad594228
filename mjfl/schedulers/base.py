"""What a scheduler sees and returns: plans, planning contexts, decisions, round outcomes.

Devices are addressed by their index in the fleet (``FleetModel.ids[i]``), jobs
by their index in ``PlanContext.jobs``; a plan is a sorted tuple of device
indices (Formula 9's V_m^r). Schedulers never see weights, sockets or clocks.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

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


@dataclass(frozen=True, eq=False)
class JobModel:
    """What the cost model needs of a job: tau_m, D_k^m for every device, C_m.

    ``budget``: for a job that runs a fixed number of rounds (no target), that
    number; its run's objective is then the paper's, TotalCost summed over
    those rounds. None for a job that stops at a target (its objective is time).
    ``target_accuracy`` and ``max_rounds``: the job's accuracy target (None if
    it has none) and its round limit R_m (None if unknown), so that a scheduler
    can judge whether the job is on course to reach its target in time.
    """

    name: JobId
    epochs: int
    samples: NDArray[np.int64]
    fraction: float
    budget: int | None = None
    target_accuracy: float | None = None
    max_rounds: int | None = None

    def __post_init__(self) -> None:
        if self.epochs < 1:
            raise ValueError("epochs must be >= 1")
        if np.any(self.samples < 1):
            raise ValueError("every device needs at least one sample of the job")
        if not 0 < self.fraction <= 1:
            raise ValueError("fraction C_m must lie in (0, 1]")
        if self.budget is not None and self.budget < 1:
            raise ValueError("a job's round budget must be >= 1")


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
    whose plan it kept in ``chosen_by`` and each member's score in
    ``candidates`` (ReCost, Formula 12); a single method leaves both empty.
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
    returned device, or the deadline when one failed); ``accuracy`` the job's
    test accuracy after the round (None where nothing is trained, as in the
    scheduler benchmark); ``losses`` the mean training loss of each returned
    device's update (empty where nothing is trained).
    """

    job: int
    round: int
    plan: Plan
    durations: Mapping[int, float]
    failed: frozenset[int]
    round_time: float
    accuracy: float | None = None
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


def as_plan(devices: NDArray[np.integer] | list[int]) -> Plan:
    """A plan in canonical form: sorted, unique device indices."""
    return tuple(sorted(int(d) for d in set(np.asarray(devices).tolist())))
