"""RLDS: reinforcement-learning-based device scheduling (Algorithms 2-3, Formula 14).

A bidirectional LSTM reads the fleet device by device and gives each device a
logit; an epsilon-greedy converter turns the logits into a plan; REINFORCE
on the plan's return (-TotalCost, Formula 8) trains it, first on the cost
model (Algorithm 2), then online (Algorithm 3). All of it is numpy.

- ``policy``: the policy network, its backward pass, its inputs (``device_features``);
- ``converter``: logits to a plan (``draw``, ``most_likely``) and a plan's exact log-probability;
- ``training``: Formula 14's update with Adam (``Learner``), pre-training (``pretrain``);
- ``scheduler``: ``RLDSScheduler``, Algorithm 3;
- ``persistence``: its state as plain data, in one versioned format (checkpoints keep it).
"""

from mjfl.schedulers.rlds.converter import draw, most_likely, order_log_probability
from mjfl.schedulers.rlds.policy import (
    FEATURES,
    GATES,
    TORCH_GATES,
    Array,
    PolicyNetwork,
    Vector,
    device_features,
)
from mjfl.schedulers.rlds.scheduler import RLDSScheduler
from mjfl.schedulers.rlds.training import Adam, Learner

__all__ = [
    "FEATURES",
    "GATES",
    "TORCH_GATES",
    "Adam",
    "Array",
    "Learner",
    "PolicyNetwork",
    "RLDSScheduler",
    "Vector",
    "device_features",
    "draw",
    "most_likely",
    "order_log_probability",
]
