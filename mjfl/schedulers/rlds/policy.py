"""RLDS: reinforcement-learning-based device scheduling (Algorithms 2-3, Formula 14).

Policy network: a bidirectional LSTM reads the fleet device by device
(features below) and a linear layer turns each pair of hidden states into a
logit, so a device's score can depend on the devices around it (the "device
sharing relationship among jobs"). Policy converter: a plan is drawn device by
device without replacement; each pick follows the policy's softmax over the
remaining free devices with probability 1 - epsilon, and is uniform with
probability epsilon (epsilon-greedy). The log-probability of a plan under this
mixture is exact and differentiable, which is what Formula 14's REINFORCE
update needs.

Everything is numpy: the LSTM's forward pass, its backward pass
(backpropagation through time), the gradient of the mixture's log-probability
with respect to the logits (exact, in float64), and Adam. The network computes
in float32, as it did under PyTorch. It is small and sequential (one step per
device), so a deep-learning framework buys nothing here and would only contend
with the trainers for cores.

Reward: -TotalCost (Formula 8) as a return: only TotalCost's plan-dependent
part counts (``CostModel.marginal``; the rest is the same for every plan of a
round but drifts from round to round), with the plan's fairness increment
charged for ``horizon`` rounds, because the variance a plan adds stays in
every later round's TotalCost while its round time is paid once
(docs/cost-model.md, "A plan's return"). ``horizon="auto"`` (the default)
sums over the rounds the job's objective still charges, as Meta-Greedy's
return does (``cost.return_horizon``): the rest of its budget for a job
without a target, 1 for a job with one; a number fixes H (10 was the old
default). Baseline: with N > 1 plans the
batch's mean reward; with N = 1 the moving baseline b_m (Algorithm 2 line 7),
which starts from the first batch's mean rather than 0.

Pre-training (Algorithm 2) runs on the cost model with N > 1 plans a round
over a simulated run of the job. Online (Algorithm 3, on-policy): every plan
call draws ``plans_per_round`` plans, updates the policy on their returns under
the cost model and proposes the best of them, or the policy's most likely plan
(its top logits) where its return is lower; when the round's outcome comes
back, the policy learns from its own plan again, with the observed round time
if that plan ran (inside Meta-Greedy another member's plan may have run
instead: crediting that plan would be off-policy, so it is never used).
Exploration: epsilon decays per update from ``epsilon`` to ``epsilon_end``.

Device features (per device, for the job being planned): expected round time
(per learning weight, ``CostModel.learning_device_times``, so a device that
reports it does not learn looks as slow as the cost model charges it),
shift and fluctuation over the reference time (Formula 4), the 90% quantile of
the round time, the job's scheduling frequency relative to the mean (Formula
5's deviation), the other jobs' frequencies, whether the device is free,
whether another job holds it, and its price in the return's fairness term
this round (``device_features``: the deviation weighed by beta*H, so that one
policy serves every H from the whole budget down to 1). Besides the LSTM and its head, a linear skip
path from the features to the logit (its own learning rate ``skip_lr``) learns
the plain preferences quickly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mjfl.schedulers import round_time
from mjfl.schedulers.base import Decision, PlanContext, RoundOutcome, as_plan
from mjfl.schedulers.baselines import Seed, as_generator
from mjfl.schedulers.cost import Horizon, check_horizon, cost_model, return_horizon

FEATURES = 9

Vector = NDArray[np.float64]
Array = NDArray[np.floating]


def device_features(ctx: PlanContext, horizon: float = 1.0) -> NDArray[np.float32]:
    """Per-device inputs of the policy network, shape (K, FEATURES), for a return over ``horizon`` rounds.

    The last is the device's price in the return's fairness term: a plan's
    increment ``beta*H*(F(V) - F(no plan))`` is a sum over its devices of
    ``beta*H*2(s_k - mean s) / (K p(1-p))``; times the plan size n = pK this
    is ``beta*H*2(s_k - mean s) / (1 - p)``, in the units of the cost. The
    frequency deviation alone cannot say how much fairness is worth this
    round: H runs from the whole budget down to 1, and a policy that sees
    only the deviation learns one compromise for every round (at 1,000
    devices, where 16 draws of 100 devices differ little, the best of them
    could not make up for it).
    """
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
    p = ctx.size / ctx.fleet.size
    price = ctx.weights.beta * horizon * 2.0 * (own - own.mean()) / max(1.0 - p, 1e-9)
    return np.column_stack(
        [
            np.log(costs.learning_device_times / reference),
            shift / reference,
            (1.0 / rate) / reference,
            np.log(round_time.quantile(0.9, shift, rate) / reference),
            (own - own.mean()) / spread,
            (others - others.mean()) / np.sqrt(max(others.var(), 1.0)),
            ctx.free.astype(np.float64),
            busy,
            price,
        ]
    ).astype(np.float32)


# Where each of PyTorch's gates (i, f, g, o) goes in a step's pre-activations:
# [o, i, f, g], so the three sigmoid gates come first and [i, f] lines up with
# [g, c] (see ``PolicyNetwork.forward``).
GATES = (3, 0, 1, 2)
TORCH_GATES = tuple(int(k) for k in np.argsort(GATES))


@dataclass(frozen=True)
class _Forward:
    """What the forward pass keeps for the backward pass (layout: see ``PolicyNetwork``)."""

    rows: Array  # (K + 1, width): a step's input row [h_fwd, h_rev, x fwd, x rev, 1, padding]
    weights: Array  # (width, 8H), unscaled
    activations: Array  # (K + 1, 10H): [tanh of the scaled pre-activations, c before the step]
    cell_tanh: Array  # (K, 2H): tanh(c) after each step


class PolicyNetwork:
    """A bidirectional LSTM over the devices followed by a linear layer: one logit per device.

    The parameters are PyTorch's ``nn.LSTM(FEATURES, hidden, bidirectional=True)``
    and ``nn.Linear(2 * hidden, 1)``, under PyTorch's names, shapes, gate order
    (i, f, g, o) and initialisation; they are views into one flat vector,
    ``parameters``, so that Adam updates them all at once.

    Both directions run in one loop: step s advances the forward direction at
    device s and the reverse direction at device K-1-s. A step's input row is
    [h_fwd, h_rev, x_s, x_(K-1-s), 1] and one product with a (width, 8H) matrix
    (recurrent weights block-diagonal, input weights, biases) gives all its
    pre-activations, gate by gate in the order ``GATES``, each gate [fwd, rev].
    A step costs a few numpy calls on a few hundred numbers, so their Python
    overhead, not arithmetic, bounds the speed: the loops below are written
    for the fewest calls. ``dtype`` float32 is what the scheduler uses (as
    PyTorch did); float64 serves gradient checks.
    """

    def __init__(
        self,
        hidden: int = 32,
        rng: np.random.Generator | None = None,
        dtype: type[np.floating] = np.float32,
        features: int = FEATURES,
    ) -> None:
        rng = rng if rng is not None else np.random.default_rng()
        self.hidden = H = hidden
        # The inputs per device: FEATURES, or fewer for a policy an older mjfl
        # checkpointed (``RLDSScheduler.load_state``).
        self.features = features
        self.dtype = np.dtype(dtype)
        shapes: dict[str, tuple[int, ...]] = {}
        for suffix in ("", "_reverse"):
            shapes[f"lstm.weight_ih_l0{suffix}"] = (4 * H, features)
            shapes[f"lstm.weight_hh_l0{suffix}"] = (4 * H, H)
            shapes[f"lstm.bias_ih_l0{suffix}"] = (4 * H,)
            shapes[f"lstm.bias_hh_l0{suffix}"] = (4 * H,)
        shapes["head.weight"] = (1, 2 * H)
        shapes["head.bias"] = (1,)
        shapes["skip.weight"] = (1, features)
        self._shapes = shapes
        self.parameters = np.empty(sum(math.prod(s) for s in shapes.values()), self.dtype)
        self.params = self.named(self.parameters)
        # PyTorch's defaults: U(-1/sqrt(H), 1/sqrt(H)) for every LSTM parameter,
        # U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for the head's weight and bias.
        for name, value in self.params.items():
            bound = 1 / math.sqrt(2 * H if name.startswith("head.") else H)
            value[...] = rng.uniform(-bound, bound, value.shape)
        # The skip path starts at zero: at first the policy is the LSTM's alone.
        self.params["skip.weight"][...] = 0.0
        # Row width of a step: state, both directions' inputs, the bias's 1,
        # padded to a multiple of 8 (aligned rows make the products faster).
        self._width = -(-(2 * H + 2 * features + 1) // 8) * 8
        # sigmoid(z) = (1 + tanh(z / 2)) / 2: halving the o, i, f pre-activations
        # up front leaves one tanh call for all four gates.
        scale = np.full((4, 2 * H), 0.5, self.dtype)
        scale[3] = 1.0
        self._scale = scale.reshape(8 * H)
        self._half = np.full(6 * H, 0.5, self.dtype)

    def named(self, vector: Array) -> dict[str, Array]:
        """Views of a vector laid out like ``parameters`` (a gradient, say), by parameter name."""
        views, start = {}, 0
        for name, shape in self._shapes.items():
            size = math.prod(shape)
            views[name] = vector[start : start + size].reshape(shape)
            start += size
        return views

    def _weights(self) -> Array:
        """The (width, 8H) matrix of a step: rows [h_fwd, h_rev, x fwd, x rev, 1, padding]."""
        p, H, F = self.params, self.hidden, self.features
        weights = np.zeros((self._width, 4, 2, H), self.dtype)
        for d, suffix in enumerate(("", "_reverse")):
            # h_fwd feeds only forward gates, h_rev only reverse ones.
            recurrent = p[f"lstm.weight_hh_l0{suffix}"].reshape(4, H, H)[list(GATES)]
            weights[d * H : (d + 1) * H, :, d] = recurrent.transpose(2, 0, 1)
            inputs = p[f"lstm.weight_ih_l0{suffix}"].reshape(4, H, F)[list(GATES)]
            weights[2 * H + d * F : 2 * H + (d + 1) * F, :, d] = inputs.transpose(2, 0, 1)
            bias = p[f"lstm.bias_ih_l0{suffix}"] + p[f"lstm.bias_hh_l0{suffix}"]
            weights[2 * H + 2 * F, :, d] = bias.reshape(4, H)[list(GATES)]
        return weights.reshape(self._width, 8 * H)

    def __call__(self, features: Array) -> Vector:
        """The logits, shape (K,)."""
        return self.forward(features)[0]

    def forward(self, features: Array) -> tuple[Vector, _Forward]:
        """The logits, shape (K,), and what ``backward`` needs."""
        H, F, K = self.hidden, self.features, features.shape[0]
        rows = np.zeros((K + 1, self._width), self.dtype)
        rows[:K, 2 * H : 2 * H + F] = features
        rows[:K, 2 * H + F : 2 * H + 2 * F] = features[::-1]
        rows[:K, 2 * H + 2 * F] = 1.0
        weights = self._weights()
        scaled = weights * self._scale
        # Row s: step s's activations [o, i, f, g], then c_(s-1), so that
        # [sigma(i), sigma(f)] * [g, c_(s-1)] is one product and c_s = the sum
        # of its halves, written straight into row s+1.
        acts = np.empty((K + 1, 10 * H), self.dtype)
        acts[0, 8 * H :] = 0.0  # c before the first step
        cell_tanh = np.empty((K, 2 * H), self.dtype)
        sig, half = np.empty(6 * H, self.dtype), self._half
        both = np.empty(4 * H, self.dtype)
        sig_o, sig_if, ig, fc = sig[: 2 * H], sig[2 * H :], both[: 2 * H], both[2 * H :]
        dot, tanh, multiply, add = np.dot, np.tanh, np.multiply, np.add
        steps = zip(
            rows[:K], acts[:K, : 8 * H], acts[:K, : 6 * H], acts[:K, 6 * H :],
            acts[1:, 8 * H :], cell_tanh, rows[1:, : 2 * H],
        )
        for row, a, a_oif, g_c, c, tc, h in steps:
            dot(row, scaled, a)
            tanh(a, a)
            multiply(a_oif, half, sig)
            add(sig, half, sig)
            multiply(sig_if, g_c, both)
            add(ig, fc, c)
            tanh(c, tc)
            multiply(sig_o, tc, h)
        w, b = self.params["head.weight"][0].astype(np.float64), float(self.params["head.bias"][0])
        hidden = rows[1:, : 2 * H]
        skip = features.astype(np.float64) @ self.params["skip.weight"][0].astype(np.float64)
        logits = hidden[:, :H] @ w[:H] + hidden[::-1, H:] @ w[H:] + b + skip
        return logits, _Forward(rows, weights, acts, cell_tanh)

    def backward(self, cache: _Forward, dlogits: Vector) -> Array:
        """Backpropagation through time: the gradient over ``parameters`` given d/d logits."""
        H, F, K = self.hidden, self.features, dlogits.shape[0]
        dlogits = dlogits.astype(self.dtype)
        w = self.params["head.weight"][0]
        grad = np.empty_like(self.parameters)
        named = self.named(grad)
        hidden = cache.rows[1:, : 2 * H]
        named["head.weight"][0, :H] = dlogits @ hidden[:, :H]
        named["head.weight"][0, H:] = dlogits @ hidden[::-1, H:]
        named["head.bias"][0] = dlogits.sum()
        named["skip.weight"][0] = dlogits @ cache.rows[:K, 2 * H : 2 * H + F]
        dh_out = np.empty((K, 2 * H), self.dtype)
        dh_out[:, :H] = np.outer(dlogits, w[:H])
        dh_out[:, H:] = np.outer(dlogits[::-1], w[H:])
        # Local derivatives of every step at once; only dh and dc are sequential.
        acts = cache.activations
        gates = acts[:K, : 8 * H].reshape(K, 4, 2 * H)
        sig = 0.5 * gates[:, :3] + 0.5
        o, i, f, g = sig[:, 0], sig[:, 1], sig[:, 2], gates[:, 3]
        c_prev, tc = acts[:K, 8 * H :], cache.cell_tanh
        f_next = np.vstack([f[1:], np.zeros((1, 2 * H), self.dtype)])
        through_h = o * (1 - tc * tc)  # dc += dh * through_h
        local = np.empty((K, 4, 2 * H), self.dtype)  # dz = [dh, dc, dc, dc] * local
        local[:, 0] = tc * o * (1 - o)
        local[:, 1] = g * i * (1 - i)
        local[:, 2] = c_prev * f * (1 - f)
        local[:, 3] = i * (1 - g * g)
        dz = np.zeros((K + 1, 8 * H), self.dtype)  # row K stays 0: nothing after the last step
        recurrent_t = np.ascontiguousarray(cache.weights[: 2 * H].T)
        dh, dch = np.empty(2 * H, self.dtype), np.empty(2 * H, self.dtype)
        dc = np.zeros(2 * H, self.dtype)
        dot, multiply, add = np.dot, np.multiply, np.add
        steps = zip(
            dz[K:0:-1], dh_out[::-1], f_next[::-1], through_h[::-1],
            dz[K - 1 :: -1, : 2 * H], local[::-1, 0],
            dz[:K, 2 * H :].reshape(K, 3, 2 * H)[::-1], local[::-1, 1:],
        )
        for dz_next, dh_s, f_s, th_s, dz_o, local_o, dz_ifg, local_ifg in steps:
            dot(dz_next, recurrent_t, dh)
            add(dh, dh_s, dh)
            multiply(dc, f_s, dc)
            add(dc, multiply(dh, th_s, dch), dc)
            multiply(dh, local_o, dz_o)
            multiply(dc, local_ifg, dz_ifg)
        # Every step's row times its pre-activation gradients: all LSTM weights at
        # once. einsum, not a BLAS product: OpenBLAS would run a product this size
        # on several threads, which then spin and, on a busy machine, fight the
        # trainers and this very loop for cores (measured: plan latency doubled).
        dweights = np.einsum("ki,kj->ij", cache.rows[:K], dz[:K]).reshape(self._width, 4, 2, H)
        dweights = dweights[:, list(TORCH_GATES)]
        for d, suffix in enumerate(("", "_reverse")):
            recurrent = dweights[d * H : (d + 1) * H, :, d].transpose(1, 2, 0)
            named[f"lstm.weight_hh_l0{suffix}"][...] = recurrent.reshape(4 * H, H)
            inputs = dweights[2 * H + d * F : 2 * H + (d + 1) * F, :, d].transpose(1, 2, 0)
            named[f"lstm.weight_ih_l0{suffix}"][...] = inputs.reshape(4 * H, F)
            named[f"lstm.bias_ih_l0{suffix}"][...] = dweights[2 * H + 2 * F, :, d].reshape(4 * H)
            named[f"lstm.bias_hh_l0{suffix}"][...] = named[f"lstm.bias_ih_l0{suffix}"]
        return grad

    def state_dict(self) -> dict[str, Array]:
        return {name: value.copy() for name, value in self.params.items()}

    def load_state_dict(self, state: dict[str, Array]) -> None:
        for name, value in self.params.items():
            value[...] = np.asarray(state[name]).reshape(value.shape)


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

    def state_dict(self) -> dict[str, object]:
        return {
            "step": self.step_count,
            "lr": self.lr,
            "exp_avg": self.exp_avg.copy(),
            "exp_avg_sq": self.exp_avg_sq.copy(),
        }

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.step_count = int(state["step"])  # type: ignore[call-overload]
        self.lr = float(state["lr"])  # type: ignore[arg-type]
        self.exp_avg[...] = state["exp_avg"]
        self.exp_avg_sq[...] = state["exp_avg_sq"]


def order_log_probability(
    logits: Vector, free: NDArray[np.bool_], orders: Sequence[Sequence[int]], epsilon: float
) -> tuple[Vector, Vector]:
    """log P of each drawn order under the epsilon mixture, shape (N,), and its gradient
    with respect to the logits, shape (N, K).

    Pick j of order n takes device d from the remaining free devices R (those
    not taken before) with probability p = (1 - eps) softmax_R(l)_d + eps / |R|.
    With w = (1 - eps) softmax_R(l)_d / p, the share of the pick owed to the
    policy, d log p / d l = w (e_d - softmax_R(l)), zero outside R. Everything is
    kept in logs, so no softmax over a set of tiny logits underflows.
    """
    order = np.asarray(orders, dtype=np.intp)
    N, n = order.shape
    K = logits.shape[0]
    rows = np.arange(N)[:, None]
    masked = np.where(free, logits - logits[free].max(), -np.inf)
    picked = masked[order]  # (N, n)
    # Softmax denominators over R at every pick: the free devices an order
    # never takes, plus its own picks from j on (log-sum-exp from the right).
    untaken = np.repeat(masked[None], N, axis=0)
    untaken[rows, order] = -np.inf
    top = untaken.max(axis=1, keepdims=True)
    top[~np.isfinite(top)] = 0.0  # an order that took every free device: log 0 below
    with np.errstate(divide="ignore"):
        log_untaken = top[:, 0] + np.log(np.exp(untaken - top).sum(axis=1))
    log_later = np.logaddexp.accumulate(picked[:, ::-1], axis=1)[:, ::-1]
    log_norm = np.logaddexp(log_later, log_untaken[:, None])
    log_soft = picked - log_norm
    log_uniform = -np.log(int(free.sum()) - np.arange(n))
    log_policy = math.log1p(-epsilon) if epsilon < 1 else -math.inf
    log_random = math.log(epsilon) if epsilon > 0 else -math.inf
    log_mix = np.logaddexp(log_policy + log_soft, log_random + log_uniform)
    log_share = log_policy + log_soft - log_mix  # log w
    # sum_j w_j softmax_Rj(l)_k runs over the picks j at which k was still
    # remaining: up to k's own pick, or all n picks if the order never took k.
    log_spread = np.logaddexp.accumulate(log_share - log_norm, axis=1)
    last = np.full((N, K), n - 1)
    last[rows, order] = np.arange(n)
    grad = -np.exp(masked[None] + np.take_along_axis(log_spread, last, axis=1))
    grad[rows, order] += np.exp(log_share)
    return log_mix.sum(axis=1), grad


@dataclass(frozen=True)
class _Drawn:
    """What ``plan`` drew, kept so ``observe`` can credit the right choices."""

    features: NDArray[np.float32]
    free: NDArray[np.bool_]
    order: tuple[int, ...]
    epsilon: float


class RLDSScheduler:
    """Algorithms 2-3: an LSTM policy trained with REINFORCE on -TotalCost."""

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
        policy_path: Path | None = None,
    ) -> None:
        epsilon_end = min(epsilon, 0.05) if epsilon_end is None else epsilon_end
        if not 0 <= epsilon_end <= epsilon <= 1 or not 0 < epsilon_decay <= 1:
            raise ValueError("rlds: 0 <= epsilon_end <= epsilon <= 1 and epsilon_decay in (0, 1]")
        if not 0 < gamma <= 1 or pretrain_plans < 2:
            raise ValueError("rlds: gamma in (0, 1], pretrain_plans >= 2 (N > 1)")
        check_horizon(horizon, "rlds")
        self.rng = as_generator(seed)
        self.lr, self.skip_lr = lr, skip_lr
        self._new_policy(PolicyNetwork(hidden, self.rng))
        self.epsilon_start, self.epsilon_end, self.epsilon_decay = epsilon, epsilon_end, epsilon_decay
        self.gamma = gamma
        self.horizon = horizon
        self.plans_per_round = plans_per_round
        self.pretrain_rounds = pretrain_rounds
        self.pretrain_plans = pretrain_plans
        self.baseline: float | None = None
        self.pretrained = False
        self._decisions: dict[int, _Drawn] = {}
        if policy_path is not None:
            self.load(policy_path)

    # -- Algorithm 3: plan with the latest policy, learn from the executed round --

    def horizon_for(self, ctx: PlanContext) -> float:
        """H of the return this round: the rounds the job still charges (``"auto"``), or the fixed number."""
        return return_horizon(ctx, self.horizon)

    @property
    def epsilon(self) -> float:
        """The exploration rate now: from ``epsilon`` down to ``epsilon_end``, decaying per update."""
        decayed = self.epsilon_decay ** self.optimizer.step_count
        return self.epsilon_end + (self.epsilon_start - self.epsilon_end) * decayed

    def plan(self, ctx: PlanContext) -> Decision:
        if not self.pretrained:
            self.pretrain(ctx)
        horizon = self.horizon_for(ctx)
        features = self._features(ctx, horizon)
        epsilon = self.epsilon
        logits, forward = self.policy.forward(features)
        orders = [self._draw(logits, ctx.free, ctx.size, epsilon) for _ in range(self.plans_per_round)]
        order = orders[0]
        if len(orders) > 1:
            costs = cost_model(ctx).marginal(np.asarray(orders), horizon=horizon)
            self._update(features, ctx.free, orders, -costs, epsilon, (logits, forward))
            order = orders[int(np.argmin(costs))]
            mode = self._mode(logits, ctx.free, ctx.size)
            if self.policy.features == FEATURES and cost_model(ctx).marginal(np.asarray([mode]), horizon=horizon)[0] < costs.min():
                order = mode
        self._decisions = {ctx.round: _Drawn(features, ctx.free.copy(), order, epsilon)}
        return Decision(as_plan(order))

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        """Formula 14 with N = 1 on this policy's own plan of the round (on-policy).

        The plan that ran is rewarded with its observed round time. When
        another scheduler's plan ran instead (inside Meta-Greedy), crediting
        that plan would be off-policy: its probability under this policy
        says nothing of how it was chosen. The policy then learns from its
        own plan of the round, on the cost model, as in pre-training.
        """
        decision = self._decisions.pop(outcome.round, None)
        if decision is None:
            return  # a round this policy did not plan
        costs = cost_model(ctx)
        plan = np.asarray(decision.order)
        ran = set(decision.order) == set(outcome.plan)
        observed_time = outcome.round_time / costs.reference_time if ran else None
        reward = -costs.marginal(plan, time=observed_time, horizon=self.horizon_for(ctx))
        self._update(decision.features, decision.free, [decision.order], np.atleast_1d(reward), decision.epsilon)

    # -- Algorithm 2: pre-training on the cost model --

    def pretrain(self, ctx: PlanContext, rounds: int | None = None) -> list[float]:
        """Pre-train on a simulated run of ``ctx``'s job; returns each round's mean plan cost.

        Each round draws N plans from the policy, rewards them with -TotalCost,
        updates the policy and the baseline, then plays the best plan: its
        devices' frequencies grow (Formula 6) and a fresh random set of devices
        is occupied by the other jobs, as many as in ``ctx``.
        """
        history = self._pretrain(ctx, self.pretrain_rounds if rounds is None else rounds)
        self.pretrained = True
        return history

    def _pretrain(self, ctx: PlanContext, rounds: int) -> list[float]:
        frequencies = ctx.frequencies.copy()
        busy = ctx.fleet.size - int(ctx.free.sum())
        horizon = self.horizon_for(ctx)  # the return the live round asks for, in every simulated round
        history = []
        for r in range(rounds):
            free = np.ones(ctx.fleet.size, dtype=bool)
            free[self.rng.choice(ctx.fleet.size, size=busy, replace=False)] = False
            sim = PlanContext(
                job=ctx.job, round=ctx.round + r, fleet=ctx.fleet, jobs=ctx.jobs, free=free,
                frequencies=frequencies, current_plans=(None,) * len(ctx.jobs), size=ctx.size,
                weights=ctx.weights, losses=ctx.losses,
            )
            features = self._features(sim, horizon)
            # One forward pass serves both the draws and the update.
            logits, forward = self.policy.forward(features)
            epsilon = self.epsilon
            orders = [self._draw(logits, free, ctx.size, epsilon) for _ in range(self.pretrain_plans)]
            costs = cost_model(sim).marginal(np.asarray(orders), horizon=horizon)
            self._update(features, free, orders, -costs, epsilon, (logits, forward))
            history.append(float(costs.mean()))
            best = orders[int(np.argmin(costs))]
            frequencies = frequencies.copy()
            frequencies[ctx.job, list(best)] += 1
        return history

    # -- the policy converter and Formula 14 --

    @staticmethod
    def _mode(logits: NDArray[np.float64], free: NDArray[np.bool_], size: int) -> tuple[int, ...]:
        """The policy's most likely plan: the free devices of the ``size`` largest logits, in that order.

        Proposed instead of the best draw when its return is lower: with 100
        devices a plan out of 900 free, 16 draws spread over many devices the
        policy ranks low, and the best of them can be much worse than the
        ranking they come from.
        """
        candidates = np.flatnonzero(free)
        return tuple(int(k) for k in candidates[np.argsort(-logits[candidates], kind="stable")[:size]])

    def _draw(
        self, logits: NDArray[np.float64], free: NDArray[np.bool_], size: int, epsilon: float
    ) -> tuple[int, ...]:
        """Epsilon-greedy draw of ``size`` free devices without replacement, in pick order.

        The same distribution as tossing each pick's epsilon coin and then
        drawing from the uniform or the softmax over the remaining devices, at
        a few Python operations a pick: all coins are tossed up front, a
        softmax pick takes the next untaken device of one Plackett-Luce order
        of the free devices (sorted logits + Gumbel noise), a uniform pick the
        next untaken device of one random permutation. Whatever the other queue
        took, the first untaken device of a Plackett-Luce order is a softmax
        draw over the untaken ones (Luce's choice axiom), and likewise for the
        permutation, so each pick has exactly the mixture's probability that
        ``log_probability`` computes.
        """
        candidates = np.flatnonzero(free)
        keys = logits[candidates] + self.rng.gumbel(size=candidates.size)
        by_policy = candidates[np.argsort(-keys)].tolist()
        by_chance = self.rng.permutation(candidates).tolist()
        chance = (self.rng.random(size) < epsilon).tolist()
        taken: set[int] = set()
        order = []
        p = q = 0  # the next device of each queue not yet looked at
        for uniform in chance:
            if uniform:
                while by_chance[q] in taken:
                    q += 1
                pick = by_chance[q]
            else:
                while by_policy[p] in taken:
                    p += 1
                pick = by_policy[p]
            taken.add(pick)
            order.append(pick)
        return tuple(order)

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
        forward: tuple[Vector, _Forward] | None = None,
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

    def _update(
        self,
        features: NDArray[np.float32],
        free: NDArray[np.bool_],
        orders: list[tuple[int, ...]],
        rewards: NDArray[np.float64],
        epsilon: float,
        forward: tuple[Vector, _Forward] | None = None,
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

    # -- checkpoints (Resumable) --

    def state(self) -> dict[str, Any]:
        """The policy, its optimiser, the baseline, the plans drawn and not yet observed, and the generator."""
        drawn = [
            {"round": r, "features": d.features, "free": d.free, "order": list(d.order), "epsilon": d.epsilon}
            for r, d in self._decisions.items()
        ]
        return {
            "rng": self.rng.bit_generator.state,
            "parameters": self.policy.parameters.copy(),
            "optimizer": self.optimizer.state_dict(),
            "baseline": self.baseline,
            "pretrained": self.pretrained,
            "drawn": drawn,
        }

    def load_state(self, state: Mapping[str, Any]) -> None:
        self._fit_policy(int(np.asarray(state["parameters"]).size))
        self.rng.bit_generator.state = state["rng"]
        self.policy.parameters[...] = state["parameters"]  # in place: the named parameters are views of it
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline = None if state["baseline"] is None else float(state["baseline"])
        self.pretrained = bool(state["pretrained"])
        self._decisions = {
            int(d["round"]): _Drawn(
                np.asarray(d["features"], dtype=np.float32), np.asarray(d["free"], dtype=np.bool_),
                tuple(int(k) for k in d["order"]), float(d["epsilon"]),
            )
            for d in state["drawn"]
        }

    def _new_policy(self, policy: PolicyNetwork) -> None:
        """Plan with ``policy``, a fresh Adam over its parameters (the skip path at its own rate)."""
        self.policy = policy
        self.optimizer = Adam(policy.parameters, lr=self.lr)
        self.optimizer.scale[-policy.features :] = self.skip_lr / self.lr

    def _features(self, ctx: PlanContext, horizon: float) -> NDArray[np.float32]:
        """The device features the policy takes: all of them, or an older policy's first ones."""
        return device_features(ctx, horizon)[:, : self.policy.features]

    def _fit_policy(self, size: int) -> None:
        """Before a checkpoint's parameters load: a policy of as many parameters.

        mjfl before the fairness price (the ninth feature) checkpointed policies
        of 8 features; such a run resumes as it went on: that policy, without
        the price and without proposing its most likely plan. Any other size
        does not fit, and loading says so.
        """
        if size == self.policy.parameters.size:
            return
        older = PolicyNetwork(self.policy.hidden, np.random.default_rng(0), features=FEATURES - 1)
        if size == older.parameters.size:
            self._new_policy(older)

    # -- saving and loading the policy --

    def save(self, path: Path) -> None:
        """Write the policy, its optimiser and baseline to ``path`` (numpy's .npz, no pickle)."""
        arrays = {f"policy/{name}": value for name, value in self.policy.state_dict().items()}
        for key, value in self.optimizer.state_dict().items():
            arrays[f"optimizer/{key}"] = np.asarray(value)
        arrays["hidden"] = np.asarray(self.policy.hidden)
        arrays["baseline"] = np.asarray(np.nan if self.baseline is None else self.baseline)
        # A file object, so numpy does not append ".npz" to the name.
        with open(path, "wb") as file:
            np.savez(file, **arrays)

    def load(self, path: Path) -> None:
        """Load a policy saved by ``save``; it counts as pre-trained."""
        with np.load(path, allow_pickle=False) as data:
            state: dict[str, object] = {"policy": {}, "optimizer": {}}
            for key in data.files:
                group, _, name = key.partition("/")
                if name:
                    state[group][name] = data[key]  # type: ignore[index]
            baseline = float(data["baseline"])
            state["baseline"] = None if math.isnan(baseline) else baseline
            state["hidden"] = int(data["hidden"])
        self.load_state_dict(state)

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
        self._fit_policy(sum(np.asarray(v).size for v in state["policy"].values()))  # type: ignore[attr-defined]
        self.policy.load_state_dict(state["policy"])  # type: ignore[arg-type]
        self.optimizer.load_state_dict(state["optimizer"])  # type: ignore[arg-type]
        self.baseline = state["baseline"]  # type: ignore[assignment]
        self.pretrained = True
