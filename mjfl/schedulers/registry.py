"""Schedulers by name, as the config file and the command line spell them."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from mjfl.errors import ConfigError
from mjfl.schedulers.base import META_MEMBERS, Scheduler
from mjfl.schedulers.baselines import (
    FedCSScheduler,
    GreedyScheduler,
    RandomScheduler,
    Seed,
    as_generator,
)
from mjfl.schedulers.bods import BODSScheduler
from mjfl.schedulers.genetic import AnnealingScheduler, GeneticScheduler
from mjfl.schedulers.meta_greedy import (
    LearnedSelector,
    MetaGreedyScheduler,
    ReCostSelector,
    ReturnSelector,
    Selector,
    TimeToTargetSelector,
)
from mjfl.schedulers.oort import OortScheduler
from mjfl.schedulers.rlds import RLDSScheduler
from mjfl.schedulers.sweep import SweepScheduler

SINGLE: dict[str, Callable[..., Scheduler]] = {
    "random": RandomScheduler,
    "fedcs": FedCSScheduler,
    "greedy": GreedyScheduler,
    "genetic": GeneticScheduler,
    "bods": BODSScheduler,
    "rlds": RLDSScheduler,
    "sa": AnnealingScheduler,
    "oort": OortScheduler,  # beyond the paper: Lai et al. 2021, a member only when listed
    "sweep": SweepScheduler,  # beyond the paper: the least-used of the fastest devices (sweep.py)
}
# Meta-Greedy's selectors, by the name its ``selector`` option gives (meta_greedy.py says why each).
SELECTORS: dict[str, Callable[..., Selector]] = {
    "recost": ReCostSelector,
    "return": ReturnSelector,
    "learned": LearnedSelector,
    "time-to-target": TimeToTargetSelector,
}
# Meta-Greedy by name, with its selector: mjfl's (fast plans while a job is on course for its
# target, the return over the rounds its objective still charges otherwise: chosen on the held-out
# set's pilot seeds, docs/results.md) and the paper's Algorithm 4 as written (ReCost, Formulas 12-13).
META = {"meta-greedy": "learned", "meta-greedy-paper": "recost"}
# Defaults of members inside one Meta-Greedy method (the config's options override them). Under
# ReCost, whose fairness weight grows with the round (Formula 13), RLDS's return over the rounds
# left weighs fairness most early and proposes plans the selector rejects; a fixed H = 10 proposes
# plans ReCost keeps (docs/cost-model.md).
# Inside mjfl's, Sweep plans a job with a target with its fastest cut, Greedy's plan (Greedy, listed
# first, wins the tie), so its least return changes only the plans of jobs without a target.
MEMBER_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "meta-greedy": {"sweep": {"targets": "fastest"}},
    "meta-greedy-paper": {"rlds": {"horizon": 10.0}},
}
# Each Meta-Greedy method's members unless ``scheduler.members`` lists others: the paper's six, and
# for mjfl's Sweep as well (beyond the paper; docs/cost-model.md, "Sweep").
MEMBERS: dict[str, tuple[str, ...]] = {"meta-greedy": (*META_MEMBERS, "sweep"), "meta-greedy-paper": META_MEMBERS}
METHODS = (*SINGLE, *META)

T = TypeVar("T")


def make_scheduler(
    method: str,
    seed: Seed = 0,
    *,
    options: dict[str, dict[str, Any]] | None = None,
    members: Sequence[str] | None = None,
) -> Scheduler:
    """A scheduler by name; ``options[name]`` holds keyword arguments for that method.

    Meta-Greedy's members are ``members``, or the method's own (``MEMBERS``);
    each gets its own generator spawned from ``seed``, so adding a member does
    not change the others' draws. ``options[method]``
    of a Meta-Greedy method names its ``selector`` (``SELECTORS``; ``META``
    gives the default) and that selector's options; ``options[member]``
    overrides the member's, and ``MEMBER_DEFAULTS`` those a Meta-Greedy
    method gives its members.
    """
    options = options or {}
    if method in META:
        members = MEMBERS[method] if members is None else members
        unknown = [m for m in members if m not in SINGLE]
        if unknown:
            raise ConfigError("scheduler.members", f"unknown method(s) {unknown}; choose from {list(SINGLE)}")
        rngs = as_generator(seed).spawn(len(members))
        defaults = MEMBER_DEFAULTS.get(method, {})
        member_options = {m: {**defaults.get(m, {}), **options.get(m, {})} for m in members}
        built = [_build(m, SINGLE[m], (rng,), member_options.get(m, {})) for m, rng in zip(members, rngs)]
        return MetaGreedyScheduler(built, _selector(method, options.get(method, {})), name=method)
    if method not in SINGLE:
        raise ConfigError("scheduler.method", f"unknown method {method!r}; choose from {list(METHODS)}")
    return _build(method, SINGLE[method], (seed,), options.get(method, {}))


def _selector(method: str, given: dict[str, Any]) -> Selector:
    """The selector ``[scheduler.options.<method>]`` names, with its options (``pace = 0``: off)."""
    given = dict(given)
    name = given.pop("selector", META[method])
    if name not in SELECTORS:
        raise ConfigError(f"scheduler.options.{method}", f"selector is one of {list(SELECTORS)}, not {name!r}")
    if "pace" in given and given["pace"] == 0:
        given["pace"] = None  # TOML cannot write None: 0 turns the pace rule off
    return _build(method, SELECTORS[name], (), given, also=("selector",))


def _build(method: str, factory: Callable[..., T], args: tuple[Any, ...], given: dict[str, Any], *, also: Sequence[str] = ()) -> T:
    """``factory(*args, **given)``; an unknown or bad option names the method's table."""
    parameters = list(inspect.signature(factory).parameters)[len(args):]
    known = [*also, *(n for n in parameters if n != "name")]
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise ConfigError(f"scheduler.options.{method}", f"unknown option(s) {unknown}; {method} takes {known}")
    try:
        return factory(*args, **given)
    except (TypeError, ValueError) as exc:
        if not given:
            raise
        raise ConfigError(f"scheduler.options.{method}", str(exc)) from None
