"""The RLDS scheduler (Algorithm 3): plan with the latest policy, learn from the executed round.

Pre-trained on its first call (Algorithm 2, ``training.pretrain``). Online
(on-policy): every plan call draws ``plans_per_round`` plans, updates the
policy on their returns under the cost model and proposes the best of them,
or the policy's most likely plan (its top logits) where its return is lower;
when the round's outcome comes back, the policy learns from its own plan
again, with the observed round time if that plan ran (inside Meta-Greedy
another member's plan may have run instead: crediting that plan would be
off-policy, so it is never used).

The return's H: ``horizon="auto"`` (the default) sums over the rounds the
job's objective still charges, as Meta-Greedy's return does
(``cost.return_horizon``): the rest of its budget for a job without a
target, 1 for a job with one; a number fixes H (10 was the old default).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mjfl.schedulers.base import Decision, PlanContext, RoundOutcome, as_plan
from mjfl.schedulers.baselines import Seed, as_generator
from mjfl.schedulers.cost import Horizon, check_horizon, cost_model, return_horizon
from mjfl.schedulers.rlds import persistence
from mjfl.schedulers.rlds.converter import most_likely
from mjfl.schedulers.rlds.policy import FEATURES, PolicyNetwork
from mjfl.schedulers.rlds.training import Learner, Sample, pretrain


class RLDSScheduler:
    """Algorithms 2-3: an LSTM policy trained with REINFORCE on -TotalCost.

    ``learner`` holds what it learned (``training.Learner``); ``state`` and
    ``load_state`` keep it, and the generator, in ``persistence``'s format.
    """

    name = "rlds"

    def __init__(
        self,
        seed: Seed = 0,
        *,
        hidden: int = 32,
        lr: float = 0.01,
        epsilon: float = 0.3,
        epsilon_end: float | None = None,
        epsilon_decay: float = 0.97,
        gamma: float = 0.1,
        horizon: Horizon = "auto",
        skip_lr: float = 0.1,
        pretrain_rounds: int = 100,
        pretrain_plans: int = 32,
        plans_per_round: int = 16,
    ) -> None:
        epsilon_end = min(epsilon, 0.05) if epsilon_end is None else epsilon_end
        if not 0 <= epsilon_end <= epsilon <= 1 or not 0 < epsilon_decay <= 1:
            raise ValueError("rlds: 0 <= epsilon_end <= epsilon <= 1 and epsilon_decay in (0, 1]")
        if not 0 < gamma <= 1 or pretrain_plans < 2:
            raise ValueError("rlds: gamma in (0, 1], pretrain_plans >= 2 (N > 1)")
        check_horizon(horizon, "rlds")
        self.rng = as_generator(seed)
        self.learner = Learner(
            PolicyNetwork(hidden, self.rng), lr=lr, skip_lr=skip_lr, gamma=gamma,
            epsilon=epsilon, epsilon_end=epsilon_end, epsilon_decay=epsilon_decay,
        )
        self.horizon = horizon
        self.plans_per_round = plans_per_round
        self.pretrain_rounds = pretrain_rounds
        self.pretrain_plans = pretrain_plans

    def horizon_for(self, ctx: PlanContext) -> float:
        """H of the return this round: the rounds the job still charges (``"auto"``), or the fixed number."""
        return return_horizon(ctx, self.horizon)

    def plan(self, ctx: PlanContext) -> Decision:
        learner = self.learner
        if not learner.pretrained:
            self.pretrain(ctx)
        horizon = self.horizon_for(ctx)
        features = learner.features(ctx, horizon)
        drawn = learner.draws(ctx, features, horizon, self.plans_per_round, self.rng)
        order = drawn.orders[0]
        if drawn.costs is not None:
            order = drawn.orders[int(np.argmin(drawn.costs))]
            # An older policy (fewer features: persistence) goes on as it went, without its mode.
            if learner.policy.features == FEATURES:
                mode = most_likely(drawn.logits, ctx.free, ctx.size)
                if cost_model(ctx).marginal(np.asarray([mode]), horizon=horizon)[0] < drawn.costs.min():
                    order = mode
        learner.drawn = {ctx.round: Sample(features, ctx.free.copy(), order, drawn.epsilon)}
        return Decision(as_plan(order))

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        """Formula 14 with N = 1 on this policy's own plan of the round (on-policy).

        The plan that ran is rewarded with its observed round time. When
        another scheduler's plan ran instead (inside Meta-Greedy), crediting
        that plan would be off-policy: its probability under this policy
        says nothing of how it was chosen. The policy then learns from its
        own plan of the round, on the cost model, as in pre-training.
        """
        sample = self.learner.drawn.pop(outcome.round, None)
        if sample is None:
            return  # a round this policy did not plan
        costs = cost_model(ctx)
        ran = set(sample.order) == set(outcome.plan)
        observed_time = outcome.round_time / costs.reference_time if ran else None
        reward = -costs.marginal(np.asarray(sample.order), time=observed_time, horizon=self.horizon_for(ctx))
        self.learner.update(sample.features, sample.free, [sample.order], np.atleast_1d(reward), sample.epsilon)

    def pretrain(self, ctx: PlanContext, rounds: int | None = None) -> list[float]:
        """Algorithm 2 on a simulated run of ``ctx``'s job (``training.pretrain``); each round's mean plan cost."""
        rounds = self.pretrain_rounds if rounds is None else rounds
        return pretrain(self.learner, ctx, rounds, self.pretrain_plans, self.horizon_for(ctx), self.rng)

    # -- checkpoints (Resumable) --

    def state(self) -> dict[str, Any]:
        """What it learned and drew so far, in ``persistence``'s format."""
        return persistence.state(self.learner, self.rng)

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state``, of any format ``persistence`` reads; ValueError where it does not fit."""
        persistence.restore(self.learner, self.rng, state)
