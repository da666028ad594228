"""RLDS's policy converter: from the policy's logits to a plan, and the plan's exact log-probability.

A plan is drawn device by device without replacement; each pick follows the
policy's softmax over the remaining free devices with probability
1 - epsilon, and is uniform with probability epsilon (epsilon-greedy). The
log-probability of a plan under this mixture is exact and differentiable
(``order_log_probability``, in float64), which is what Formula 14's REINFORCE
update needs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

from mjfl.schedulers.rlds.policy import Vector

Order = tuple[int, ...]


def draw(
    logits: Vector, free: NDArray[np.bool_], size: int, epsilon: float, rng: np.random.Generator
) -> Order:
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
    ``order_log_probability`` computes.
    """
    candidates = np.flatnonzero(free)
    keys = logits[candidates] + rng.gumbel(size=candidates.size)
    by_policy = candidates[np.argsort(-keys)].tolist()
    by_chance = rng.permutation(candidates).tolist()
    chance = (rng.random(size) < epsilon).tolist()
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


def most_likely(logits: Vector, free: NDArray[np.bool_], size: int) -> Order:
    """The policy's most likely plan: the free devices of the ``size`` largest logits, in that order.

    Proposed instead of the best draw when its return is lower: with 100
    devices a plan out of 900 free, 16 draws spread over many devices the
    policy ranks low, and the best of them can be much worse than the
    ranking they come from.
    """
    candidates = np.flatnonzero(free)
    return tuple(int(k) for k in candidates[np.argsort(-logits[candidates], kind="stable")[:size]])


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
