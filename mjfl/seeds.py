"""Every random stream derived from a seed, in one way: (seed, purpose, index...) -> a stream.

A run draws its fleet, its slow tail, each job's data split, shards, initial
model and scheduler, each task's seed and each device's round times from its
one ``seed``. Each comes from here: ``stream(seed, purpose, *index)`` is a
numpy Generator, ``integer(seed, purpose, *index)`` a seed in [0, 2**63) for
what takes an integer (torch's initial weights, the task generator, a
scheduler). ``purpose`` says what the numbers are for (``Purpose``); the
index says whose they are: a job's position, a device's id, a round.

Both are numpy's SeedSequence over an encoding of (seed, purpose, *index)
that no other tuple shares: each part is a tag, a length and its 32-bit
words (an integer, negative ones too, or a text's UTF-8 bytes). So two
derivations meet only if seed, purpose and every index are equal: job m at
seed s and job m + 1 at seed s - 1 get different initial weights, which
``seed + m`` once gave them alike; adding a purpose or an index never moves
another's numbers. For one (seed, purpose, index) take either the stream or
the integer, not both (they start from the same words).

A purpose's number is part of every stream of that purpose: changing it, or
the encoding, changes every run's draws (docs/config.md, ``seed``).
"""

from __future__ import annotations

import operator
from enum import IntEnum

import numpy as np

__all__ = ["INTEGER_SEEDS", "Purpose", "integer", "sequence", "stream"]

INTEGER_SEEDS = 2**63
"""``integer`` gives seeds in [0, 2**63): a signed 64-bit integer everywhere (the protocol's task seed, torch's)."""

Index = int | str


class Purpose(IntEnum):
    """What a stream is for, and the index that says whose it is. The numbers are fixed."""

    FLEET = 1  # the fleet's devices, drawn from the profiles or synthetic (index: fleet.salt)
    SLOW_TAIL = 2  # which devices of the fleet are slowed, and by how much (index: fleet.salt)
    DATA_SPLIT = 3  # a data set's train/test split
    PARTITION = 4  # job m's shards of its training data (index: m)
    INITIAL_WEIGHTS = 5  # job m's initial global model (index: m)
    SCHEDULER = 6  # job m's scheduler (index: m)
    TASK = 7  # the task generator's seed of a task (index: job name, round, device id)
    ROUND_TIMES = 8  # a simulated device's round times and drop-outs (index: device id); an emulated device's (its seed)
    DEVICE = 9  # an emulated device's own seed (index: its position in the emulated fleet)
    OWN_TASKS = 10  # an emulated device's task seeds where the coordinator sends none (its seed)
    BACKOFF = 11  # an emulated device's reconnect jitter (its seed)
    NETWORK_FAULTS = 12  # what a fault proxy does to the bytes it carries
    KILLS = 13  # what a benchmark kills (devices, the coordinator), and when


_INTEGER, _NEGATIVE, _TEXT = 0, 1, 2
_WORD = 32
_MASK = (1 << _WORD) - 1


def sequence(seed: int, purpose: Purpose, *index: Index) -> np.random.SeedSequence:
    """The SeedSequence of (seed, purpose, *index): what ``stream`` and ``integer`` draw from."""
    words = [w for part in (seed, int(purpose), *index) for w in _words(part)]
    return np.random.SeedSequence(np.asarray(words, dtype=np.uint32))


def stream(seed: int, purpose: Purpose, *index: Index) -> np.random.Generator:
    """The Generator of (seed, purpose, *index)."""
    return np.random.default_rng(sequence(seed, purpose, *index))


def integer(seed: int, purpose: Purpose, *index: Index) -> int:
    """The integer seed of (seed, purpose, *index), in [0, ``INTEGER_SEEDS``)."""
    return int(sequence(seed, purpose, *index).generate_state(1, np.uint64)[0] >> np.uint64(1))


def _words(part: Index) -> list[int]:
    """``part`` as 32-bit words no other part's start with: a tag, the length, the words (little-endian)."""
    if isinstance(part, str):
        data = part.encode("utf-8")
        tag, length, number = _TEXT, len(data), int.from_bytes(data, "little")
        count = -(-length // 4)
    else:
        value = operator.index(part)  # TypeError for anything but an integer or a text: our bug
        tag, number = (_INTEGER, value) if value >= 0 else (_NEGATIVE, -value)
        count = length = max(1, -(-number.bit_length() // _WORD))
    return [tag, length, *((number >> (_WORD * k)) & _MASK for k in range(count))]
