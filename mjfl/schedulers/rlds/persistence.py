"""RLDS's state as plain data, in one versioned format: what a checkpoint keeps of it.

``state`` writes format 2 (``FORMAT``); ``RLDSScheduler.state`` and
``load_state`` (``Resumable``) are its only callers, and a checkpoint
(``storage/checkpoints.py``) stores it as JSON and numpy arrays::

    {"format": 2,
     "rng":        the generator's bit_generator.state (a dict),
     "policy":     {"hidden": H, "features": F,
                    "parameters": float32 array, PolicyNetwork.parameters' layout},
     "optimizer":  {"step": Adam's step count, "exp_avg": array, "exp_avg_sq": array},
     "baseline":   b_m (Algorithm 2 line 7), or None before the first update,
     "pretrained": whether Algorithm 2 has run,
     "drawn":      [{"round": r, "features": (K, F) float32, "free": (K,) bool,
                     "order": [device, ...] in pick order, "epsilon": float}, ...]}

"drawn" holds the plans drawn and not yet observed. Nothing the
configuration gives is kept (learning rates, epsilon's schedule, H): the
state goes into a scheduler built with the run's own configuration, and one
of another hidden size is refused (ValueError naming it).

Read as well, and turned into format 2 (``current``): format 1, the state
checkpoints held before it was numbered (no "format" key; the parameter
vector under "parameters", Adam's "lr" beside its moments), and format 0,
the attributes of an RLDSScheduler that checkpoints once pickled
(``from_pickled``, called by ``mjfl.schedulers.pickled``). Neither says the
policy's shape, which its parameter count gives. A policy of FEATURES - 1
features (mjfl before the fairness price) resumes as it went on: that
policy, without the price and without proposing its most likely plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from mjfl.schedulers.rlds.policy import FEATURES, PolicyNetwork, parameter_count
from mjfl.schedulers.rlds.training import Learner, Sample

FORMAT = 2


def state(learner: Learner, rng: np.random.Generator) -> dict[str, Any]:
    """The learner's state and the generator's, in format 2."""
    policy, optimizer = learner.policy, learner.optimizer
    drawn = [
        {"round": r, "features": s.features, "free": s.free, "order": list(s.order), "epsilon": s.epsilon}
        for r, s in learner.drawn.items()
    ]
    return {
        "format": FORMAT,
        "rng": rng.bit_generator.state,
        "policy": {"hidden": policy.hidden, "features": policy.features, "parameters": policy.parameters.copy()},
        "optimizer": {
            "step": optimizer.step_count, "exp_avg": optimizer.exp_avg.copy(), "exp_avg_sq": optimizer.exp_avg_sq.copy(),
        },
        "baseline": learner.baseline,
        "pretrained": learner.pretrained,
        "drawn": drawn,
    }


def restore(learner: Learner, rng: np.random.Generator, saved: Mapping[str, Any]) -> None:
    """Put ``saved`` (any format ``current`` reads) into ``learner`` and ``rng``; ValueError where it does not fit."""
    saved = current(saved)
    policy = saved["policy"]
    hidden, features = int(policy["hidden"]), int(policy["features"])
    parameters = np.asarray(policy["parameters"])
    if hidden != learner.policy.hidden:
        raise ValueError(f"rlds: the saved policy has hidden size {hidden}, not the configured {learner.policy.hidden}")
    if features not in (FEATURES, FEATURES - 1) or parameters.size != parameter_count(hidden, features):
        raise ValueError(f"rlds: the saved policy's {parameters.size} parameters are no policy of {features} features")
    rng.bit_generator.state = saved["rng"]
    if features != learner.policy.features:
        learner.use(PolicyNetwork(hidden, np.random.default_rng(0), features=features))
    learner.policy.parameters[...] = parameters  # in place: the named parameters are views of it
    optimizer = saved["optimizer"]
    learner.optimizer.step_count = int(optimizer["step"])
    learner.optimizer.exp_avg[...] = optimizer["exp_avg"]
    learner.optimizer.exp_avg_sq[...] = optimizer["exp_avg_sq"]
    learner.baseline = None if saved["baseline"] is None else float(saved["baseline"])
    learner.pretrained = bool(saved["pretrained"])
    learner.drawn = {
        int(d["round"]): Sample(
            np.asarray(d["features"], dtype=np.float32), np.asarray(d["free"], dtype=np.bool_),
            tuple(int(k) for k in d["order"]), float(d["epsilon"]),
        )
        for d in saved["drawn"]
    }


def current(saved: Mapping[str, Any]) -> Mapping[str, Any]:
    """``saved`` in format 2, from format 2 or 1; ValueError for a format this mjfl does not read."""
    version = saved.get("format", 1)
    if version == FORMAT:
        return saved
    if version == 1:
        return _from_format_1(saved)
    raise ValueError(f"rlds: a state of format {version!r}, which this mjfl does not read (formats 0 to {FORMAT})")


def from_pickled(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Format 2 from the attributes of a pickled RLDSScheduler (format 0; their names are frozen there)."""
    a = attributes
    optimizer = vars(a["optimizer"])
    drawn = [
        {"round": r, "features": d["features"], "free": d["free"], "order": list(d["order"]), "epsilon": d["epsilon"]}
        for r, d in ((r, vars(d)) for r, d in a["_decisions"].items())
    ]
    return _from_format_1({
        "rng": a["rng"].bit_generator.state,
        # The whole vector: in a pickle the named parameters are copies, no longer views of it.
        "parameters": vars(a["policy"])["parameters"],
        "optimizer": {"step": optimizer["step_count"], "exp_avg": optimizer["exp_avg"], "exp_avg_sq": optimizer["exp_avg_sq"]},
        "baseline": a["baseline"],
        "pretrained": a["pretrained"],
        "drawn": drawn,
    })


def _from_format_1(saved: Mapping[str, Any]) -> dict[str, Any]:
    parameters = np.asarray(saved["parameters"])
    hidden, features = _policy_shape(parameters.size)
    optimizer = saved["optimizer"]
    return {
        "format": FORMAT,
        "rng": saved["rng"],
        "policy": {"hidden": hidden, "features": features, "parameters": parameters},
        "optimizer": {"step": optimizer["step"], "exp_avg": optimizer["exp_avg"], "exp_avg_sq": optimizer["exp_avg_sq"]},
        "baseline": saved["baseline"],
        "pretrained": saved["pretrained"],
        "drawn": saved["drawn"],
    }


def _policy_shape(size: int) -> tuple[int, int]:
    """(hidden, features) of the policy of ``size`` parameters, of FEATURES or FEATURES - 1 features.

    The two never share a size: ``parameter_count`` is 8H^2 + (8F + 18)H + F + 1,
    even for F = 9 and odd for F = 8.
    """
    for features in (FEATURES, FEATURES - 1):
        hidden = 1
        while parameter_count(hidden, features) < size:
            hidden += 1
        if parameter_count(hidden, features) == size:
            return hidden, features
    raise ValueError(f"rlds: a saved policy of {size} parameters fits no policy of {FEATURES} or {FEATURES - 1} features")
