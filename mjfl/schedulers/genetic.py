"""Genetic scheduling (Barika et al. 2019) and simulated annealing (the paper's SA baseline).

Both search plans of exactly ``size`` free devices and score each *whole* plan
with TotalCost (Formula 8): expected round time of the plan (its slowest
device) plus data fairness, never a per-device proxy.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from mjfl.schedulers.base import Decision, PlanContext, RoundOutcome, as_plan
from mjfl.schedulers.baselines import Draws, Seed, as_generator
from mjfl.schedulers.cost import MIN_SHARE, cost_model

IntArray = NDArray[np.intp]


def top_members(keys: NDArray[np.float64], size: int) -> IntArray:
    """Per row, the positions of the ``size`` largest keys: a plan over the free set."""
    return np.argpartition(-keys, size - 1, axis=1)[:, :size]


def random_plans(rng: np.random.Generator, count: int, free: int, size: int) -> IntArray:
    """``count`` uniform plans of ``size`` positions out of ``free``."""
    return top_members(rng.random((count, free)), size)


def device_scores(
    ctx: PlanContext, times: NDArray[np.float64], fairness_weight: float, learning: NDArray[np.float64] | None = None
) -> NDArray[np.float64]:
    """A per-device price of each free device (lower is better), on one scale for any fleet.

    The device's expected round time and how often it already trained the
    job, each standardised over the free devices, weighed by alpha and
    ``fairness_weight``. A plan's cost is not a sum over its devices (the
    round waits for the slowest), so this only steers where plans are drawn;
    whole plans are still scored by the cost model. ``learning``: the
    devices' learning weights (``CostModel.learning_weights``); a device that
    does not learn is priced up by ``alpha * gamma * -log(max(w, MIN_SHARE))``,
    the log of the time factor the cost model charges it, so that its
    stretched time does not flatten the spread of the others'.
    """
    free = ctx.free_indices
    t = times[free]
    freq = ctx.frequencies[ctx.job][free].astype(np.float64)
    scores = ctx.weights.alpha * (t - t.mean()) / (t.std() + 1e-12) + fairness_weight * (freq - freq.mean()) / (
        freq.std() + 1.0
    )
    if learning is not None:
        scores = scores - ctx.weights.alpha * ctx.weights.utility * np.log(np.maximum(learning[free], MIN_SHARE))
    return scores


def biased_plans(rng: np.random.Generator, scores: NDArray[np.float64], count: int, size: int) -> IntArray:
    """``count`` feasible plans (positions in the free set), from uniform to strongly biased to low scores.

    Plan i takes the ``size`` largest of ``g - bias_i * score`` with Gumbel
    noise g: a Plackett-Luce sample whose bias ranges from none (an eighth of
    the plans) to strong (20 standard deviations per unit of score).
    """
    gumbel = -np.log(-np.log(rng.random((count, scores.size))))
    bias = np.geomspace(0.05, 20.0, count)
    bias[: max(1, count // 8)] = 0.0
    return top_members(gumbel - bias[:, None] * scores, size)


class GeneticScheduler(Draws):
    """A genetic algorithm over feasible plans (Barika et al. 2019).

    A population of plans over the free devices evolves for ``generations``
    generations: tournament selection, a crossover that keeps the genes both
    parents share and fills the rest from either parent, mutation that swaps a
    gene for another free device, and elitism. Fitness is TotalCost of the
    whole plan; the whole generation is scored in one batch.

    Where the search starts and moves decides whether it scales: among a
    thousand devices a uniform plan is so slow that crossing it with the
    fastest plan never beats the fastest plan. So the first generation is
    drawn from uniform to strongly biased toward cheap devices
    (``biased_plans``: fast and rarely scheduled), plus the fastest plan, and
    a mutation draws its new device with the same bias.
    """

    name = "genetic"

    def __init__(
        self,
        seed: Seed = 0,
        *,
        population: int = 24,
        generations: int = 20,
        mutation: float = 0.1,
        elite: int = 2,
    ) -> None:
        if population < 4 or generations < 1 or not 0 <= mutation <= 1 or not 0 < elite < population:
            raise ValueError("genetic: population >= 4, generations >= 1, mutation in [0, 1], 0 < elite < population")
        self.rng = as_generator(seed)
        self.population = population
        self.generations = generations
        self.mutation = mutation
        self.elite = elite

    def plan(self, ctx: PlanContext) -> Decision:
        rng, free, size = self.rng, ctx.free_indices, ctx.size
        if size == free.size:
            return Decision(as_plan(free))
        costs = cost_model(ctx)
        P, F = self.population, free.size
        scores = device_scores(ctx, costs.device_times, ctx.weights.beta, costs.learning_weights)
        members = biased_plans(rng, scores, P, size)
        members[0] = np.argsort(costs.learning_device_times[free], kind="stable")[:size]
        fitness = costs.total(free[members])
        # A mutation's new device: cheap ones more often (weights of mean 1).
        appeal = np.exp(-np.clip(scores, -3.0, 3.0))
        appeal /= appeal.mean()
        rows = np.arange(P)[:, None]
        for _ in range(self.generations):
            # Tournament selection of two parents per child.
            duel = rng.integers(P, size=(2, P, 2))
            winner = np.where(fitness[duel[..., 0]] <= fitness[duel[..., 1]], duel[..., 0], duel[..., 1])
            mask = np.zeros((2, P, F), dtype=bool)
            mask[0, rows, members[winner[0]]] = True
            mask[1, rows, members[winner[1]]] = True
            # Shared genes first, then genes of either parent, then (by mutation) anything.
            keys = 2.0 * (mask[0] & mask[1]) + (mask[0] ^ mask[1]) + rng.random((P, F))
            mutate = rng.random((P, F)) < self.mutation * size / F * appeal
            keys += 3.0 * mutate
            children = top_members(keys, size)
            child_fitness = costs.total(free[children])
            # Elitism: the best of the old generation survive unchanged.
            best_old = np.argsort(fitness, kind="stable")[: self.elite]
            worst_new = np.argsort(child_fitness, kind="stable")[::-1][: self.elite]
            children[worst_new] = members[best_old]
            child_fitness[worst_new] = fitness[best_old]
            members, fitness = children, child_fitness
        return Decision(as_plan(free[members[int(np.argmin(fitness))]]))

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        pass


class AnnealingScheduler(Draws):
    """Simulated annealing over plans (van Laarhoven & Aarts 1987), the paper's SA baseline.

    ``chains`` independent chains run in lock step (one batched cost evaluation a
    step). A move swaps one member for a free non-member; a worse plan is
    accepted with probability exp(-delta / T), T cooling geometrically from
    ``t_start`` times the initial cost spread to ``t_end`` times it.
    """

    name = "sa"

    def __init__(
        self,
        seed: Seed = 0,
        *,
        chains: int = 8,
        steps: int = 150,
        t_start: float = 0.5,
        t_end: float = 0.005,
    ) -> None:
        if chains < 1 or steps < 1 or not 0 < t_end <= t_start:
            raise ValueError("sa: chains >= 1, steps >= 1, 0 < t_end <= t_start")
        self.rng = as_generator(seed)
        self.chains = chains
        self.steps = steps
        self.t_start = t_start
        self.t_end = t_end

    def plan(self, ctx: PlanContext) -> Decision:
        rng, free, size = self.rng, ctx.free_indices, ctx.size
        if size == free.size:
            return Decision(as_plan(free))
        costs = cost_model(ctx)
        C, F = self.chains, free.size
        members = random_plans(rng, C, F, size)
        inside = np.zeros((C, F), dtype=bool)
        inside[np.arange(C)[:, None], members] = True
        cost = costs.total(free[members])
        best, best_cost = members.copy(), cost.copy()
        spread = max(float(np.ptp(cost)), 1e-3 * float(np.abs(cost).mean()), 1e-12)
        temperatures = spread * np.geomspace(self.t_start, self.t_end, self.steps)
        chain = np.arange(C)
        for temperature in temperatures:
            slot = rng.integers(size, size=C)
            # A random non-member: the largest random key among the positions outside.
            outside = np.where(inside, -1.0, rng.random((C, F))).argmax(axis=1)
            proposal = members.copy()
            proposal[chain, slot] = outside
            new_cost = costs.total(free[proposal])
            accept = rng.random(C) < np.exp(-np.maximum(new_cost - cost, 0.0) / temperature)
            inside[chain[accept], members[chain[accept], slot[accept]]] = False
            inside[chain[accept], outside[accept]] = True
            members[accept], cost[accept] = proposal[accept], new_cost[accept]
            improved = cost < best_cost
            best[improved], best_cost[improved] = members[improved], cost[improved]
        return Decision(as_plan(free[best[int(np.argmin(best_cost))]]))

    def observe(self, ctx: PlanContext, outcome: RoundOutcome) -> None:
        pass
