"""RLDS: reinforcement-learning-based device scheduling (Algorithms 2-3, Formula 14).

Policy network: an LSTM reads the fleet device by device (features below) and
a linear layer turns each hidden state into a logit, so a device's score can
depend on the devices around it (the "device sharing relationship among
jobs"). Policy converter: a plan is drawn device by device without
replacement; each pick follows the policy's softmax over the remaining free
devices with probability 1 - epsilon, and is uniform with probability epsilon
(epsilon-greedy). The log-probability of a plan under this mixture is exact and
differentiable, which is what Formula 14's REINFORCE update needs.

Reward: -TotalCost (Formula 8), with a moving baseline b_m (Algorithm 2 line 7),
counting only TotalCost's plan-dependent part (``CostModel.marginal``): the rest
is the same for every plan of a round, so the rewards rank plans exactly as
TotalCost does, but it grows from round to round with the unfairness already
accumulated, which a moving baseline cannot follow.
Pre-training (Algorithm 2) runs on the cost model with N > 1 plans a round over
a simulated run of the job; online (Algorithm 3) each executed round updates the
policy once with N = 1 and the observed cost. The baseline starts from the first
batch's mean reward rather than 0, so the first update is not dominated by the
reward's offset.

Device features (per device, for the job being planned): expected round time,
shift and fluctuation over the reference time (Formula 4), the job's scheduling
frequency relative to the mean (Formula 5's deviation), the other jobs'
frequencies, whether the device is free, and whether another job holds it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from mjfl.schedulers.base import Decision, PlanContext, RoundOutcome, as_plan
from mjfl.schedulers.baselines import Seed, as_generator
from mjfl.schedulers.cost import cost_model

FEATURES = 7


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run torch on one thread: the policy is small and sequential (an LSTM over
    devices), and intra-op threads only contend with the trainers for cores
    (measured: a backward pass 20-30x slower with 2 threads on a busy 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def device_features(ctx: PlanContext) -> NDArray[np.float32]:
    """Per-device inputs of the policy network, shape (K, FEATURES)."""
    costs = cost_model(ctx)
    shift, rate = costs.shift_rate(ctx.job)
    reference = costs.reference_time
    freq = ctx.frequencies.astype(np.float64)
    own = freq[ctx.job]
    others = np.delete(freq, ctx.job, axis=0).sum(axis=0) if freq.shape[0] > 1 else np.zeros_like(own)
    busy = np.zeros(ctx.fleet.size)
    for m, plan in enumerate(ctx.current_plans):
        if m != ctx.job and plan:
            busy[list(plan)] = 1.0
    spread = np.sqrt(max(own.var(), 1.0))
    return np.column_stack(
        [
            np.log(costs.device_times / reference),
            shift / reference,
            (1.0 / rate) / reference,
            (own - own.mean()) / spread,
            (others - others.mean()) / np.sqrt(max(others.var(), 1.0)),
            ctx.free.astype(np.float64),
            busy,
        ]
    ).astype(np.float32)


class PolicyNetwork(nn.Module):
    """LSTM over the devices followed by a linear layer: one logit per device."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.hidden = hidden
        self.lstm = nn.LSTM(FEATURES, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(features.unsqueeze(0))
        return self.head(out).squeeze(0).squeeze(-1)


@dataclass(frozen=True)
class _Decision:
    """What ``plan`` drew, kept so ``observe`` can credit the right choices."""

    features: NDArray[np.float32]
    free: NDArray[np.bool_]
    order: tuple[int, ...]


class RLDSScheduler:
    """Algorithms 2-3: an LSTM policy trained with REINFORCE on -TotalCost."""

    name = "rlds"

    def __init__(
        self,
        seed: Seed = 0,
        *,
        hidden: int = 32,
        lr: float = 0.01,
        epsilon: float = 0.1,
        gamma: float = 0.1,
        pretrain_rounds: int = 40,
        pretrain_plans: int = 8,
        policy_path: Path | None = None,
    ) -> None:
        if not 0 <= epsilon <= 1 or not 0 < gamma <= 1 or pretrain_plans < 2:
            raise ValueError("rlds: epsilon in [0, 1], gamma in (0, 1], pretrain_plans >= 2 (N > 1)")
        self.rng = as_generator(seed)
        torch_seed = int(self.rng.integers(2**62))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(torch_seed)
            self.policy = PolicyNetwork(hidden)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=lr)
        self.epsilon = epsilon
        self.gamma = gamma
        self.pretrain_rounds = pretrain_rounds
        self.pretrain_plans = pretrain_plans
        self.baseline: float | None = None
        self.pretrained = False
        self._decisions: dict[int, _Decision] = {}
        if policy_path is not None:
            self.load(policy_path)

    # -- Algorithm 3: plan with the latest policy, learn from the executed round --

    def plan(self, ctx: PlanContext) -> Decision:
        with single_threaded():
            return Decision(self._plan(ctx))

    def _plan(self, ctx: PlanContext) -> tuple[int, ...]:
        if not self.pretrained:
            self.pretrain(ctx)
        features = device_features(ctx)
        with torch.no_grad():
            logits = self.policy(torch.from_numpy(features)).numpy().astype(np.float64)
        order = self._draw(logits, ctx.free, ctx.size)
        self._decisions = {ctx.round: _Decision(features, ctx.free.copy(), order)}
        return as_plan(order)

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        """Formula 14 with N = 1 on the executed plan, reward -TotalCost as observed."""
        with single_threaded():
            self._observe(ctx, outcome)

    def _observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        decision = self._decisions.pop(outcome.round, None)
        if decision is None or set(decision.order) != set(outcome.plan):
            # Another scheduler's plan (inside Meta-Greedy): credit it in the
            # order this policy would most likely have drawn it.
            features = device_features(ctx)
            with torch.no_grad():
                logits = self.policy(torch.from_numpy(features)).numpy()
            plan = np.asarray(outcome.plan)
            decision = _Decision(features, ctx.free.copy(), tuple(plan[np.argsort(-logits[plan])]))
        costs = cost_model(ctx)
        observed_time = outcome.round_time / costs.reference_time
        reward = -costs.marginal(np.asarray(outcome.plan), time=observed_time)
        self._update(decision.features, decision.free, [decision.order], np.atleast_1d(reward))

    # -- Algorithm 2: pre-training on the cost model --

    def pretrain(self, ctx: PlanContext, rounds: int | None = None) -> list[float]:
        """Pre-train on a simulated run of ``ctx``'s job; returns each round's mean plan cost.

        Each round draws N plans from the policy, rewards them with -TotalCost,
        updates the policy and the baseline, then plays the best plan: its
        devices' frequencies grow (Formula 6) and a fresh random set of devices
        is occupied by the other jobs, as many as in ``ctx``.
        """
        with single_threaded():
            history = self._pretrain(ctx, self.pretrain_rounds if rounds is None else rounds)
        self.pretrained = True
        return history

    def _pretrain(self, ctx: PlanContext, rounds: int) -> list[float]:
        frequencies = ctx.frequencies.copy()
        busy = ctx.fleet.size - int(ctx.free.sum())
        history = []
        for r in range(rounds):
            free = np.ones(ctx.fleet.size, dtype=bool)
            free[self.rng.choice(ctx.fleet.size, size=busy, replace=False)] = False
            sim = PlanContext(
                job=ctx.job, round=ctx.round + r, fleet=ctx.fleet, jobs=ctx.jobs, free=free,
                frequencies=frequencies, current_plans=(None,) * len(ctx.jobs), size=ctx.size,
                weights=ctx.weights,
            )
            features = device_features(sim)
            with torch.no_grad():
                logits = self.policy(torch.from_numpy(features)).numpy().astype(np.float64)
            orders = [self._draw(logits, free, ctx.size) for _ in range(self.pretrain_plans)]
            costs = cost_model(sim).marginal(np.asarray(orders))
            self._update(features, free, orders, -costs)
            history.append(float(costs.mean()))
            best = orders[int(np.argmin(costs))]
            frequencies = frequencies.copy()
            frequencies[ctx.job, list(best)] += 1
        return history

    # -- the policy converter and Formula 14 --

    def _draw(self, logits: NDArray[np.float64], free: NDArray[np.bool_], size: int) -> tuple[int, ...]:
        """Epsilon-greedy draw of ``size`` free devices without replacement, in pick order."""
        remaining = free.copy()
        order = []
        weights = np.exp(logits - logits[free].max())
        for _ in range(size):
            candidates = np.flatnonzero(remaining)
            if self.rng.random() < self.epsilon:
                pick = int(self.rng.choice(candidates))
            else:
                w = weights[candidates]
                pick = int(self.rng.choice(candidates, p=w / w.sum()))
            order.append(pick)
            remaining[pick] = False
        return tuple(order)

    def log_probability(self, features: NDArray[np.float32], free: NDArray[np.bool_], orders: list[tuple[int, ...]]) -> torch.Tensor:
        """log P(plan) under the epsilon-mixture policy for each drawn order (Formula 14's sum)."""
        logits = self.policy(torch.from_numpy(features))
        orders_t = torch.as_tensor(np.asarray(orders), dtype=torch.long)  # (N, n)
        N, n = orders_t.shape
        K = logits.shape[0]
        # picked[i, j, k]: order i took device k before its pick j.
        position = torch.full((N, K), n, dtype=torch.long)
        position.scatter_(1, orders_t, torch.arange(n).expand(N, n))
        picked = position.unsqueeze(1) < torch.arange(n).view(1, n, 1)
        remaining = torch.from_numpy(free).unsqueeze(0).unsqueeze(0) & ~picked
        masked = logits.masked_fill(~remaining, float("-inf"))
        log_soft = masked.log_softmax(dim=-1).gather(2, orders_t.unsqueeze(-1)).squeeze(-1)
        uniform = -torch.log(remaining.sum(dim=-1).to(logits.dtype))
        mix = torch.logaddexp(
            log_soft + float(np.log1p(-self.epsilon)) if self.epsilon < 1 else torch.full_like(log_soft, float("-inf")),
            uniform + float(np.log(self.epsilon)) if self.epsilon > 0 else torch.full_like(uniform, float("-inf")),
        )
        return mix.sum(dim=1)

    def _update(self, features: NDArray[np.float32], free: NDArray[np.bool_], orders: list[tuple[int, ...]], rewards: NDArray[np.float64]) -> None:
        """Formula 14: theta += eta/N sum_n grad log P(V_n) (R_n - b), then Algorithm 2 line 7."""
        if self.baseline is None:
            self.baseline = float(rewards.mean())
        advantage = torch.as_tensor(rewards - self.baseline, dtype=torch.float32)
        loss = -(self.log_probability(features, free, orders) * advantage).mean()
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.baseline = (1 - self.gamma) * self.baseline + self.gamma * float(rewards.mean())

    # -- saving and loading the policy --

    def save(self, path: Path) -> None:
        """Write the policy, its optimiser and baseline to ``path``."""
        torch.save(self.state_dict(), path)

    def load(self, path: Path) -> None:
        """Load a policy saved by ``save``; it counts as pre-trained."""
        self.load_state_dict(torch.load(path, weights_only=False))

    def state_dict(self) -> dict[str, object]:
        return {
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "baseline": self.baseline,
            "hidden": self.policy.hidden,
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        if state.get("hidden") != self.policy.hidden:
            raise ValueError(f"saved policy has hidden size {state.get('hidden')}, not {self.policy.hidden}")
        self.policy.load_state_dict(state["policy"])  # type: ignore[arg-type]
        self.optimizer.load_state_dict(state["optimizer"])  # type: ignore[arg-type]
        self.baseline = state["baseline"]  # type: ignore[assignment]
        self.pretrained = True

