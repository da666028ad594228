"""Oort's guided participant selection (Lai et al., OSDI 2021), as one more method.

Oort scores every device it has tried by the product of two utilities (the
paper's Formulas 1-2 and its Algorithm 1):

* statistical utility ``|B_i| * sqrt(mean_{k in B_i} Loss(k)^2)`` (Formula 1)
  from the device's last participation. Devices report only their mean
  training loss (``RoundOutcome.losses``), so that mean stands in for the
  root mean square (a lower bound of it, tight when the per-sample losses
  are alike), and ``|B_i|`` is the device's shard size ``D_k^m``. Utilities
  are divided by the largest among the candidates, so they lie in [0, 1] on
  any data set;
* a staleness bonus ``sqrt(0.1 * log(R) / L_i)`` added to it (R the current
  round, L_i the round the device last took part in), so devices left out
  for long come back;
* system utility ``(T / t_i)^alpha`` multiplying the sum when the device's
  round time ``t_i`` exceeds the preferred round duration ``T`` (Formula 2;
  1 otherwise).

``t_i`` is the device's last observed round time plus its wait in this
context, or, never tried, its expected time from the cost model
(``device_times``). ``T`` is the ``preferred_quantile`` of ``t_i`` over the
devices the plan may use; the *pacer* raises that quantile by
``pacer_step`` whenever the statistical utility collected over the last
``pacer_window`` rounds fell below that of the window before.

A plan is split between exploration and exploitation: a share ``epsilon``
(from 0.9, times 0.98 a round, floor 0.2) goes to devices never tried, drawn
with probability proportional to their system utility (fast ones first);
the rest to tried devices whose utility is at least ``cutoff`` (95%) of that
of the last device a top-utility plan would take, drawn with probability
proportional to utility.

Where nothing is trained (the scheduler benchmark's synthetic driver) rounds
carry no losses: every device that returned then counts as statistical
utility 1, so Oort falls back to system utility and staleness alone, and the
pacer never moves. A device that failed counts as statistical utility 0 and
its round time as the round's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mjfl.ids import DeviceId
from mjfl.schedulers.base import Decision, PlanContext, RoundOutcome, as_plan
from mjfl.schedulers.baselines import Seed, as_generator
from mjfl.schedulers.cost import cost_model

FloatArray = NDArray[np.float64]


class OortScheduler:
    """Oort: exploit devices of high statistical x system utility, explore untried fast ones.

    What it learns of each device (utility, last round, round time) is kept by
    device id, so devices leaving and joining keep their own.
    """

    name = "oort"

    def __init__(
        self,
        seed: Seed = 0,
        *,
        alpha: float = 2.0,
        epsilon: float = 0.9,
        epsilon_decay: float = 0.98,
        min_epsilon: float = 0.2,
        cutoff: float = 0.95,
        staleness: float = 0.1,
        preferred_quantile: float = 0.5,
        pacer_step: float = 0.1,
        pacer_window: int = 5,
    ) -> None:
        if alpha < 0 or staleness < 0:
            raise ValueError("alpha and staleness must be >= 0")
        if not 0 <= min_epsilon <= epsilon <= 1 or not 0 < epsilon_decay <= 1:
            raise ValueError("need 0 <= min_epsilon <= epsilon <= 1 and 0 < epsilon_decay <= 1")
        if not 0 < cutoff <= 1 or not 0 < preferred_quantile <= 1 or pacer_step < 0:
            raise ValueError("cutoff and preferred_quantile must lie in (0, 1], pacer_step >= 0")
        if pacer_window < 1:
            raise ValueError("pacer_window must be >= 1")
        self.rng = as_generator(seed)
        self.alpha, self.staleness, self.cutoff = alpha, staleness, cutoff
        self.epsilon, self.epsilon_decay, self.min_epsilon = epsilon, epsilon_decay, min_epsilon
        self.preferred_quantile, self.pacer_step, self.pacer_window = preferred_quantile, pacer_step, pacer_window
        self._utility: dict[DeviceId, float | None] = {}  # |B_i| x loss; None: returned, no loss known
        self._last_round: dict[DeviceId, int] = {}
        self._duration: dict[DeviceId, float] = {}
        self._collected: list[float] = []  # statistical utility each round with losses brought (the pacer's)

    def exploration(self, round_: int) -> float:
        """epsilon of ``round_``: the share of the plan given to devices never tried."""
        return max(self.min_epsilon, self.epsilon * self.epsilon_decay ** (round_ - 1))

    def plan(self, ctx: PlanContext) -> Decision:
        free = ctx.free_indices
        ids = [ctx.fleet.ids[k] for k in free]
        times = cost_model(ctx).device_times[free].copy()
        wait = ctx.wait[free] if ctx.wait is not None else np.zeros(free.size)
        tried = np.array([d in self._last_round for d in ids], dtype=bool)
        for i in np.flatnonzero(tried):
            times[i] = self._duration[ids[i]] + wait[i]
        preferred = float(np.quantile(times, self.preferred_quantile))
        system = self._system_utility(times, preferred)

        wanted = round(self.exploration(ctx.round) * ctx.size)
        explore = min(max(wanted, ctx.size - int(tried.sum())), int((~tried).sum()))
        untried = np.flatnonzero(~tried)
        explored = self._draw(untried, system[untried], explore)
        known = np.flatnonzero(tried)
        utility = self._utility_of([ids[i] for i in known], ctx.round) * system[known]
        exploited = self._exploit(known, utility, ctx.size - explore)
        return Decision(as_plan(free[np.concatenate([explored, exploited])]))

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        samples = ctx.jobs[outcome.job].samples
        collected = 0.0
        for k in outcome.plan:
            device = ctx.fleet.ids[k]
            self._last_round[device] = outcome.round
            if k in outcome.durations:
                self._duration[device] = outcome.durations[k]
                loss = outcome.losses.get(k)
                self._utility[device] = None if loss is None else float(samples[k]) * loss
                collected += 0.0 if loss is None else float(samples[k]) * loss
            else:
                self._duration[device] = outcome.round_time
                self._utility[device] = 0.0
        if outcome.losses:
            self._pace(collected)

    def state(self) -> dict[str, Any]:
        """What it learned of each device, the pacer's record and quantile, and its generator."""
        return {
            "rng": self.rng.bit_generator.state,
            "preferred_quantile": self.preferred_quantile,
            "utility": dict(self._utility),
            "last_round": dict(self._last_round),
            "duration": dict(self._duration),
            "collected": list(self._collected),
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.preferred_quantile = float(state["preferred_quantile"])
        self._utility = {DeviceId(d): u for d, u in state["utility"].items()}
        self._last_round = {DeviceId(d): int(r) for d, r in state["last_round"].items()}
        self._duration = {DeviceId(d): float(t) for d, t in state["duration"].items()}
        self._collected = [float(c) for c in state["collected"]]

    def _pace(self, collected: float) -> None:
        """The pacer: relax T when the last window collected less utility than the one before."""
        self._collected.append(collected)
        W, seen = self.pacer_window, len(self._collected)
        stalled = seen % W == 0 and seen >= 2 * W and sum(self._collected[-W:]) < sum(self._collected[-2 * W : -W])
        if stalled:
            self.preferred_quantile = min(1.0, self.preferred_quantile + self.pacer_step)

    def _system_utility(self, times: FloatArray, preferred: float) -> FloatArray:
        """Formula 2's system term: ``(T / t_i)^alpha`` where ``t_i > T``, else 1."""
        ratio = np.divide(preferred, times, out=np.ones_like(times), where=times > preferred)
        return np.asarray(ratio**self.alpha, dtype=np.float64)

    def _utility_of(self, devices: list[DeviceId], round_: int) -> FloatArray:
        """Statistical utility over the candidates' largest, plus the staleness bonus."""
        raw = np.array([np.nan if self._utility[d] is None else self._utility[d] for d in devices], dtype=np.float64)
        known = raw[np.isfinite(raw)]
        top = float(known.max()) if known.size and known.max() > 0 else 1.0
        statistical = np.where(np.isfinite(raw), raw / top, 1.0)
        last = np.array([self._last_round[d] for d in devices], dtype=np.float64)
        bonus = np.sqrt(self.staleness * math.log(max(round_, 1)) / np.maximum(last, 1.0))
        return np.asarray(statistical + bonus, dtype=np.float64)

    def _exploit(self, candidates: NDArray[np.intp], utility: FloatArray, count: int) -> NDArray[np.intp]:
        """``count`` candidates within ``cutoff`` of the count-th best utility, drawn by utility.

        Oort's exploitation: the clients above ``c`` times the utility of
        the last one a top-k plan would take, sampled by their utility.
        """
        if count == 0:
            return np.empty(0, dtype=np.intp)
        order = np.argsort(-utility, kind="stable")
        admitted = utility >= self.cutoff * utility[order[count - 1]]
        pool = np.flatnonzero(admitted)
        return candidates[self._draw(pool, utility[pool], count)]

    def _draw(self, pool: NDArray[np.intp], weight: FloatArray, count: int) -> NDArray[np.intp]:
        """``count`` of ``pool`` without replacement, with probability proportional to ``weight``."""
        if count == 0:
            return np.empty(0, dtype=np.intp)
        total = float(weight.sum())
        p = weight / total if total > 0 and np.count_nonzero(weight) >= count else None
        return np.asarray(self.rng.choice(pool, size=count, replace=False, p=p), dtype=np.intp)
