"""RLDS's policy network: a bidirectional LSTM over the devices, its backward pass, and its inputs.

The policy (Algorithm 2's "policy network") reads the fleet device by device
and a linear layer turns each pair of hidden states into a logit, so a
device's score can depend on the devices around it (the "device sharing
relationship among jobs"). Besides the LSTM and its head, a linear skip path
from the features to the logit learns the plain preferences quickly (its own
learning rate: ``training.Learner``).

Everything is numpy: the forward pass and backpropagation through time. The
network computes in float32, as it did under PyTorch. It is small and
sequential (one step per device), so a deep-learning framework buys nothing
here and would only contend with the trainers for cores.

Device features (per device, for the job being planned): expected round time
(per learning weight, ``CostModel.learning_device_times``, so a device that
reports it does not learn looks as slow as the cost model charges it),
shift and fluctuation over the reference time (Formula 4), the 90% quantile of
the round time, the job's scheduling frequency relative to the mean (Formula
5's deviation), the other jobs' frequencies, whether the device is free,
whether another job holds it, and its price in the return's fairness term
this round (``device_features``: the deviation weighed by beta*H, so that one
policy serves every H from the whole budget down to 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from mjfl.schedulers import round_time
from mjfl.schedulers.base import PlanContext
from mjfl.schedulers.cost import cost_model

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
class Forward:
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
        # checkpointed (``persistence``).
        self.features = features
        self.dtype = np.dtype(dtype)
        self._shapes = shapes = _shapes(H, features)
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

    def forward(self, features: Array) -> tuple[Vector, Forward]:
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
        return logits, Forward(rows, weights, acts, cell_tanh)

    def backward(self, cache: Forward, dlogits: Vector) -> Array:
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


def _shapes(hidden: int, features: int) -> dict[str, tuple[int, ...]]:
    """Each parameter's shape, under PyTorch's names, in the order of ``PolicyNetwork.parameters``."""
    H = hidden
    shapes: dict[str, tuple[int, ...]] = {}
    for suffix in ("", "_reverse"):
        shapes[f"lstm.weight_ih_l0{suffix}"] = (4 * H, features)
        shapes[f"lstm.weight_hh_l0{suffix}"] = (4 * H, H)
        shapes[f"lstm.bias_ih_l0{suffix}"] = (4 * H,)
        shapes[f"lstm.bias_hh_l0{suffix}"] = (4 * H,)
    shapes["head.weight"] = (1, 2 * H)
    shapes["head.bias"] = (1,)
    shapes["skip.weight"] = (1, features)
    return shapes


def parameter_count(hidden: int, features: int = FEATURES) -> int:
    """The size of ``PolicyNetwork(hidden, features=features).parameters``."""
    return sum(math.prod(s) for s in _shapes(hidden, features).values())
