"""Scheduler state from a scheduler object pickled by mjfl's checkpoints of format 0.

Checkpoints once pickled the scheduler object itself (``storage/checkpoints.py``
reads them). There each mjfl object stands in as a placeholder that keeps its
class's name (``kind``) and its attributes; ``state_of`` turns one into the
plain state today's scheduler of that kind takes (``Resumable.load_state``);
RLDS's reader is its persistence module's (``rlds.persistence.from_pickled``),
beside the formats it writes.
The class and attribute names below are those of format 0, frozen: they need
not follow today's code, which is the point.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mjfl.schedulers.bods import FEATURES, fitted_kernel
from mjfl.schedulers.rlds.persistence import from_pickled as rlds_state

Reader = Callable[[dict[str, Any]], dict[str, Any]]


def state_of(obj: Any) -> dict[str, Any]:
    """The plain state of a pickled scheduler (a placeholder of format 0); ValueError for one that cannot resume."""
    kind = getattr(obj, "kind", type(obj).__name__)
    reader = _READERS.get(kind)
    if reader is None:
        raise ValueError(f"a checkpoint of a {kind} cannot resume in this mjfl")
    return reader(vars(obj))


def _draws(a: dict[str, Any]) -> dict[str, Any]:
    return {"rng": a["rng"].bit_generator.state}


def _oort(a: dict[str, Any]) -> dict[str, Any]:
    return {
        **_draws(a),
        "preferred_quantile": a["preferred_quantile"],
        "utility": dict(a["_utility"]),
        "last_round": dict(a["_last_round"]),
        "duration": dict(a["_duration"]),
        "collected": list(a["_collected"]),
    }


def _bods(a: dict[str, Any]) -> dict[str, Any]:
    history = vars(a["history"])
    return {
        **_draws(a),
        "X": np.array(list(a["X"]), dtype=np.float64).reshape(len(a["X"]), FEATURES),
        "y": list(a["y"]),
        "kernel": fitted_kernel(a["gp"]),
        "since_refit": a["_since_refit"],
        "incumbent": a["_incumbent"],
        # Devices took columns in the order they were first seen.
        "history": {"devices": list(history["_row"]), "counts": history["_counts"]},
    }


# Members' names were class attributes, which a pickle does not keep.
_NAMES = {
    "RandomScheduler": "random", "FedCSScheduler": "fedcs", "GreedyScheduler": "greedy",
    "GeneticScheduler": "genetic", "AnnealingScheduler": "sa", "BODSScheduler": "bods",
    "RLDSScheduler": "rlds", "OortScheduler": "oort",
}


def _meta_greedy(a: dict[str, Any]) -> dict[str, Any]:
    members = {vars(m).get("name", _NAMES.get(getattr(m, "kind", ""))): state_of(m) for m in a["members"]}
    bandit = a.get("bandit")
    if bandit is None:  # the return or ReCost: nothing learned
        selector: dict[str, Any] = {}
    elif getattr(bandit, "kind", "") == "PlateauSwitch":  # the learned selector
        b = vars(bandit)
        selector = {"best": b["best"], "since_best": b["since_best"], "bests": list(b["bests"])}
    else:
        raise ValueError(f"Meta-Greedy's {a.get('selector')!r} selector is no longer part of mjfl")
    return {"members": members, "selector": selector}


_READERS: dict[str, Reader] = {
    "RandomScheduler": _draws,
    "FedCSScheduler": _draws,
    "GreedyScheduler": lambda a: {},
    "GeneticScheduler": _draws,
    "AnnealingScheduler": _draws,
    "OortScheduler": _oort,
    "BODSScheduler": _bods,
    "RLDSScheduler": rlds_state,
    "MetaGreedyScheduler": _meta_greedy,
}
