"""Schedulers by name, as the config file and the command line spell them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from mjfl.errors import ConfigError
from mjfl.schedulers.base import Scheduler
from mjfl.schedulers.baselines import (
    FedCSScheduler,
    GreedyScheduler,
    RandomScheduler,
    Seed,
    as_generator,
)
from mjfl.schedulers.bods import BODSScheduler
from mjfl.schedulers.genetic import AnnealingScheduler, GeneticScheduler
from mjfl.schedulers.meta_greedy import MetaGreedyScheduler
from mjfl.schedulers.oort import OortScheduler
from mjfl.schedulers.rlds import RLDSScheduler

SINGLE: dict[str, Callable[..., Scheduler]] = {
    "random": RandomScheduler,
    "fedcs": FedCSScheduler,
    "greedy": GreedyScheduler,
    "genetic": GeneticScheduler,
    "bods": BODSScheduler,
    "rlds": RLDSScheduler,
    "sa": AnnealingScheduler,
    "oort": OortScheduler,  # beyond the paper: Lai et al. 2021, a member only when listed
}
# Algorithm 4's six members, in the paper's order.
META_MEMBERS = ("bods", "rlds", "random", "fedcs", "genetic", "greedy")
# Meta-Greedy by name: mjfl's (the least TotalCost: the return with H = 1, the fastest to
# target measured, docs/cost-model.md) and the paper's Algorithm 4 as written (ReCost).
META = {"meta-greedy": {"selector": "return", "horizon": 1.0}, "meta-greedy-paper": {"selector": "recost"}}
METHODS = (*SINGLE, *META)


def make_scheduler(
    method: str,
    seed: Seed = 0,
    *,
    options: dict[str, dict[str, Any]] | None = None,
    members: Sequence[str] = META_MEMBERS,
) -> Scheduler:
    """A scheduler by name; ``options[name]`` holds keyword arguments for that method.

    Meta-Greedy's members each get their own generator spawned from ``seed``,
    so adding a member does not change the others' draws. ``options[method]``
    of a Meta-Greedy method overrides its defaults (``selector``, ``horizon``,
    ``shared_objective``).
    """
    options = options or {}
    if method in META:
        unknown = [m for m in members if m not in SINGLE]
        if unknown:
            raise ConfigError("scheduler.members", f"unknown method(s) {unknown}; choose from {list(SINGLE)}")
        rngs = as_generator(seed).spawn(len(members))
        return MetaGreedyScheduler(
            [SINGLE[m](rng, **options.get(m, {})) for m, rng in zip(members, rngs)],
            name=method,
            **{**META[method], **options.get(method, {})},
        )
    if method not in SINGLE:
        raise ConfigError("scheduler.method", f"unknown method {method!r}; choose from {list(METHODS)}")
    return SINGLE[method](seed, **options.get(method, {}))

