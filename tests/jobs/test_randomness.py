"""The task generator (mjfl/jobs/randomness.py) against the written algorithm and its test vectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjfl.jobs.randomness import MAX_SEED, TaskRandom, draw
from tests.repository import ROOT

_M = 2**64 - 1


def _draw(key: int, i: int) -> int:
    """docs/models.md, "The task generator", in plain Python integers: the spec, not the vectorised code."""
    z = (key + (i + 1) * 0x9E3779B97F4A7C15) & _M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M
    return z ^ (z >> 31)


def _permutation(seed: int, epoch: int, n: int) -> list[int]:
    e = _draw(_draw(seed, 0), epoch)
    return sorted(range(n), key=lambda j: (_draw(e, j), j))


def _noise(seed: int, start: int, count: int) -> list[float]:
    key = _draw(seed, 1)
    return [(_draw(key, c) >> 40) * 2.0**-24 for c in range(start, start + count)]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, MAX_SEED), epoch=st.integers(0, 50), n=st.integers(1, 300))
def test_permutation_follows_the_written_algorithm(seed: int, epoch: int, n: int) -> None:
    assert TaskRandom(seed).permutation(epoch, n).tolist() == _permutation(seed, epoch, n)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, MAX_SEED),
    shapes=st.lists(st.lists(st.integers(1, 5), min_size=1, max_size=3), min_size=1, max_size=4),
)
def test_noise_is_one_running_counter_in_c_order(seed: int, shapes: list[list[int]]) -> None:
    rng = TaskRandom(seed)
    drawn = [rng.noise(tuple(s)) for s in shapes]
    flat = np.concatenate([d.ravel() for d in drawn])
    assert all(d.dtype == np.float32 and d.shape == tuple(s) for d, s in zip(drawn, shapes))
    assert flat.tolist() == _noise(seed, 0, len(flat))
    assert ((flat >= 0) & (flat < 1)).all()


def test_keys_wrap_around_at_the_top_of_the_seed_range() -> None:
    assert int(draw(MAX_SEED, 2**20)[0]) == _draw(MAX_SEED, 2**20)
    assert int(draw(2**64 - 1, 0)[0]) == _draw(2**64 - 1, 0)


def test_seeds_outside_the_range_are_refused() -> None:
    for bad in (-1, MAX_SEED + 1):
        with pytest.raises(ValueError, match="seed"):
            TaskRandom(bad)


def test_the_test_vectors_still_hold() -> None:
    """tests/golden/randomness.json is what the app's Java generator is tested against too."""
    doc = json.loads((ROOT / "tests" / "golden" / "randomness.json").read_text())
    assert len(doc["cases"]) >= 3
    for case in doc["cases"]:
        rng = TaskRandom(case["seed"])
        assert int(draw(case["seed"], 0)[0]) == int(case["order_key"])
        assert int(draw(case["seed"], 1)[0]) == int(case["noise_key"])
        for p in case["permutations"]:
            assert rng.permutation(p["epoch"], p["n"]).tolist() == p["order"]
        for noise in case["noise"]:
            assert rng.noise(tuple(noise["shape"])).ravel().tolist() == noise["values"]
