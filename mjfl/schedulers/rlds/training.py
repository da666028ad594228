"""How RLDS learns: Formula 14's REINFORCE update with Adam, pre-training on the cost model (Algorithm 2).

Reward: -TotalCost (Formula 8) as a return: only TotalCost's plan-dependent
part counts (``CostModel.marginal``; the rest is the same for every plan of a
round but drifts from round to round), with the plan's fairness increment
charged for H rounds, because the variance a plan adds stays in every later
round's TotalCost while its round time is paid once (docs/cost-model.md, "A
plan's return"). Baseline: with N > 1 plans the batch's mean reward; with
N = 1 the moving baseline b_m (Algorithm 2 line 7), which starts from the
first batch's mean rather than 0. Exploration: epsilon decays per update from
``epsilon`` to ``epsilon_end``.

Pre-training (Algorithm 2) runs on the cost model with N > 1 plans a round
over a simulated run of the job; online learning (Algorithm 3) is the
scheduler's (``scheduler.RLDSScheduler``), through the same ``Learner``.
Adam, like the network, is plain numpy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from mjfl.schedulers.base import PlanContext
from mjfl.schedulers.cost import cost_model
from mjfl.schedulers.rlds.converter import Order, draw, order_log_probability
from mjfl.schedulers.rlds.policy import Array, Forward, PolicyNetwork, Vector, device_features


class Adam:
    """Adam (Kingma & Ba 2015) with bias correction, as ``torch.optim.Adam`` computes it."""

    def __init__(
        self,
        parameters: Array,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ) -> None:
        self.parameters = parameters
        self.lr, self.betas, self.eps = lr, betas, eps
        self.scale = np.ones_like(parameters)  # per-parameter multiples of lr
        self.step_count = 0
        self.exp_avg = np.zeros_like(parameters)
        self.exp_avg_sq = np.zeros_like(parameters)

    def step(self, grad: Array) -> None:
        """One descent step on ``parameters`` (in place) along ``grad``."""
        beta1, beta2 = self.betas
        self.step_count += 1
        self.exp_avg *= beta1
        self.exp_avg += (1 - beta1) * grad
        self.exp_avg_sq *= beta2
        self.exp_avg_sq += (1 - beta2) * grad * grad
        correction1 = 1 - beta1**self.step_count
        correction2 = 1 - beta2**self.step_count
        denominator = np.sqrt(self.exp_avg_sq) / math.sqrt(correction2) + self.eps
        self.parameters -= (self.lr / correction1) * self.exp_avg / denominator * self.scale


@dataclass(frozen=True)
class Sample:
    """A plan the policy drew, with what its log-probability needs: kept until its round's outcome comes back."""

    features: NDArray[np.float32]
    free: NDArray[np.bool_]
    order: Order
    epsilon: float


@dataclass(frozen=True)
class Draws:
    """One round's plans drawn from the policy: their orders, their costs (None: not priced), the logits."""

    orders: list[Order]
    costs: Vector | None
    logits: Vector
    epsilon: float


class Learner:
    """What RLDS learns and how: the policy, its Adam, the baseline b_m, exploration's schedule.

    ``pretrained`` says whether Algorithm 2 has run; ``drawn`` holds the
    plans drawn and not yet observed, by round. ``mjfl.schedulers.rlds.persistence``
    keeps all of it as plain data.
    """

    def __init__(
        self, policy: PolicyNetwork, *, lr: float, skip_lr: float, gamma: float,
        epsilon: float, epsilon_end: float, epsilon_decay: float,
    ) -> None:
        self.lr, self.skip_lr, self.gamma = lr, skip_lr, gamma
        self.epsilon_start, self.epsilon_end, self.epsilon_decay = epsilon, epsilon_end, epsilon_decay
        self.baseline: float | None = None
        self.pretrained = False
        self.drawn: dict[int, Sample] = {}
        self.use(policy)

    def use(self, policy: PolicyNetwork) -> None:
        """Learn ``policy`` from now on, with a fresh Adam over its parameters (the skip path at its own rate)."""
        self.policy = policy
        self.optimizer = Adam(policy.parameters, lr=self.lr)
        self.optimizer.scale[-policy.features :] = self.skip_lr / self.lr

    @property
    def epsilon(self) -> float:
        """The exploration rate now: from ``epsilon`` down to ``epsilon_end``, decaying per update."""
        decayed = self.epsilon_decay ** self.optimizer.step_count
        return self.epsilon_end + (self.epsilon_start - self.epsilon_end) * decayed

    def features(self, ctx: PlanContext, horizon: float) -> NDArray[np.float32]:
        """The device features the policy takes: all of them, or an older policy's first ones."""
        return device_features(ctx, horizon)[:, : self.policy.features]

    def draws(
        self, ctx: PlanContext, features: NDArray[np.float32], horizon: float, count: int, rng: np.random.Generator,
    ) -> Draws:
        """``count`` plans drawn from the policy; with more than one, priced by the cost model and learned from.

        One forward pass serves both the draws and the update.
        """
        epsilon = self.epsilon
        logits, forward = self.policy.forward(features)
        orders = [draw(logits, ctx.free, ctx.size, epsilon, rng) for _ in range(count)]
        if count == 1:
            return Draws(orders, None, logits, epsilon)
        costs = cost_model(ctx).marginal(np.asarray(orders), horizon=horizon)
        self.update(features, ctx.free, orders, -costs, epsilon, (logits, forward))
        return Draws(orders, costs, logits, epsilon)

    def log_probability(
        self, features: Array, free: NDArray[np.bool_], orders: Sequence[Sequence[int]], epsilon: float | None = None
    ) -> Vector:
        """log P(plan) under the epsilon-mixture policy for each drawn order (Formula 14's sum)."""
        epsilon = self.epsilon if epsilon is None else epsilon
        return order_log_probability(self.policy(features), free, orders, epsilon)[0]

    def loss_and_gradient(
        self,
        features: Array,
        free: NDArray[np.bool_],
        orders: Sequence[Sequence[int]],
        advantage: Vector,
        forward: tuple[Vector, Forward] | None = None,
        epsilon: float | None = None,
    ) -> tuple[float, Array]:
        """Formula 14's loss -1/N sum_n log P(V_n) (R_n - b) and its gradient over
        ``policy.parameters`` (``policy.named`` names its parts).

        ``forward`` is the policy's forward pass on ``features``, when already
        done; ``epsilon`` the exploration rate the orders were drawn with (now's by default).
        """
        logits, cache = forward if forward is not None else self.policy.forward(features)
        epsilon = self.epsilon if epsilon is None else epsilon
        log_p, dlog_p = order_log_probability(logits, free, orders, epsilon)
        N = log_p.shape[0]
        loss = -float(log_p @ advantage) / N
        return loss, self.policy.backward(cache, -(advantage @ dlog_p) / N)

    def update(
        self,
        features: NDArray[np.float32],
        free: NDArray[np.bool_],
        orders: Sequence[Order],
        rewards: NDArray[np.float64],
        epsilon: float,
        forward: tuple[Vector, Forward] | None = None,
    ) -> None:
        """Formula 14: theta += eta/N sum_n grad log P(V_n) (R_n - b), then Algorithm 2 line 7."""
        if self.baseline is None:
            self.baseline = float(rewards.mean())
        if rewards.size > 1:
            advantage = rewards - rewards.mean()
        else:
            advantage = rewards - self.baseline
        _, grad = self.loss_and_gradient(features, free, orders, advantage, forward, epsilon)
        self.optimizer.step(grad)
        self.baseline = (1 - self.gamma) * self.baseline + self.gamma * float(rewards.mean())


def pretrain(
    learner: Learner, ctx: PlanContext, rounds: int, plans: int, horizon: float, rng: np.random.Generator,
) -> list[float]:
    """Algorithm 2 on a simulated run of ``ctx``'s job; each round's mean plan cost.

    Each round draws ``plans`` plans from the policy, rewards them with
    -TotalCost (the return over ``horizon`` rounds, the live round's, in
    every simulated round), updates the policy and the baseline, then plays
    the best plan: its devices' frequencies grow (Formula 6) and a fresh
    random set of devices is occupied by the other jobs, as many as in ``ctx``.
    """
    frequencies = ctx.frequencies.copy()
    busy = ctx.fleet.size - int(ctx.free.sum())
    history = []
    for r in range(rounds):
        free = np.ones(ctx.fleet.size, dtype=bool)
        free[rng.choice(ctx.fleet.size, size=busy, replace=False)] = False
        sim = PlanContext(
            job=ctx.job, round=ctx.round + r, fleet=ctx.fleet, jobs=ctx.jobs, free=free,
            frequencies=frequencies, current_plans=(None,) * len(ctx.jobs), size=ctx.size,
            weights=ctx.weights, losses=ctx.losses,
        )
        drawn = learner.draws(sim, learner.features(sim, horizon), horizon, plans, rng)
        assert drawn.costs is not None  # plans > 1: priced and learned from
        history.append(float(drawn.costs.mean()))
        best = drawn.orders[int(np.argmin(drawn.costs))]
        frequencies = frequencies.copy()
        frequencies[ctx.job, list(best)] += 1
    learner.pretrained = True
    return history
