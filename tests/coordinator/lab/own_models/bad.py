"""Model factories that misbehave, as a researcher's file might: each must be refused within the lab's limits."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
from torch import nn


def sleeps(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    while True:  # never returns, and uses no CPU: only the wall-time limit ends it
        time.sleep(1)


def raises(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    raise ValueError("this factory has no layer for 8x8 inputs")


def allocates(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    blocks = []
    while True:  # 512 MiB at a time, without end (zeros: the address space grows faster than the memory used)
        blocks.append(np.zeros(1 << 26))


def spins(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    count = 0
    while True:  # CPU without end: only the CPU or the wall-time limit ends it
        count += 1


def crashes(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    os.kill(os.getpid(), signal.SIGSEGV)  # as a native extension's fault would
    raise AssertionError("unreachable")


def exits(input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    os._exit(3)


def not_a_module(input_shape: tuple[int, int, int], num_classes: int) -> object:
    return "a model"
