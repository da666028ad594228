"""One derivation of every stream from a seed (mjfl/seeds.py): reproducible, and no two (seed, purpose, index) meet."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjfl import seeds
from mjfl.seeds import INTEGER_SEEDS, Purpose

SEEDS = st.integers(0, 2**40)
JOBS = st.integers(0, 63)


@settings(max_examples=200, deadline=None)
@given(pairs=st.lists(st.tuples(SEEDS, JOBS), min_size=2, max_size=200, unique=True))
def test_the_initial_weights_of_different_jobs_never_coincide_across_seeds(pairs):
    # The run's rule (coordinator/run/preparation.py): job m's initial model under integer(seed, INITIAL_WEIGHTS, m).
    drawn = [seeds.integer(seed, Purpose.INITIAL_WEIGHTS, job) for seed, job in pairs]
    assert len(set(drawn)) == len(drawn)
    assert all(0 <= s < INTEGER_SEEDS for s in drawn)


@settings(max_examples=100, deadline=None)
@given(seed=SEEDS, job=JOBS)
def test_job_m_at_seed_s_is_no_longer_job_m_plus_1_at_seed_s_minus_1(seed, job):
    # ``seed + m`` gave the two the same initial weights.
    assert seeds.integer(seed + 1, Purpose.INITIAL_WEIGHTS, job) != seeds.integer(seed, Purpose.INITIAL_WEIGHTS, job + 1)


def test_two_jobs_initial_models_differ_where_seed_plus_m_made_them_equal():
    from mjfl.jobs.base import ModelSpec
    from mjfl.jobs.models import initial_weights

    spec = ModelSpec("lenet5", (1, 12, 12), 10)
    a = initial_weights(spec, seeds.integer(4, Purpose.INITIAL_WEIGHTS, 1))
    b = initial_weights(spec, seeds.integer(3, Purpose.INITIAL_WEIGHTS, 2))
    again = initial_weights(spec, seeds.integer(4, Purpose.INITIAL_WEIGHTS, 1))
    assert all(np.array_equal(a[k], again[k]) for k in a)
    assert not any(np.array_equal(a[k], b[k]) for k in a if k.endswith(".weight"))


@settings(max_examples=100, deadline=None)
@given(seed=SEEDS, index=st.lists(st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=6)), max_size=3))
def test_a_stream_is_a_function_of_seed_purpose_and_index_alone(seed, index):
    first = seeds.stream(seed, Purpose.TASK, *index).integers(2**62, size=4)
    assert np.array_equal(first, seeds.stream(seed, Purpose.TASK, *index).integers(2**62, size=4))
    assert seeds.integer(seed, Purpose.TASK, *index) == seeds.integer(seed, Purpose.TASK, *index)


@settings(max_examples=200, deadline=None)
@given(
    a=st.lists(st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=5)), max_size=4),
    b=st.lists(st.one_of(st.integers(-(2**70), 2**70), st.text(max_size=5)), max_size=4),
)
def test_different_indices_give_different_seeds(a, b):
    # By value and type: "7" is not 7, ("ab",) is not ("a", "b"), 2**32 is not (0, 1).
    key_a = [(type(x), x) for x in a]
    key_b = [(type(x), x) for x in b]
    if key_a != key_b:
        assert seeds.integer(0, Purpose.TASK, *a) != seeds.integer(0, Purpose.TASK, *b)


@pytest.mark.parametrize(
    ("a", "b"),
    [(("ab",), ("a", "b")), (("a",), ("a\0",)), ((7,), ("7",)), ((2**32,), (0, 1)), ((-1,), (1,)), ((), (0,))],
)
def test_encodings_that_once_could_meet_do_not(a, b):
    assert seeds.integer(5, Purpose.TASK, *a) != seeds.integer(5, Purpose.TASK, *b)


def test_every_purpose_has_a_number_of_its_own_and_gives_its_own_stream():
    numbers = [int(p) for p in Purpose]
    assert len(set(numbers)) == len(numbers)
    drawn = {seeds.integer(0, p, 0) for p in Purpose}
    assert len(drawn) == len(Purpose)


def test_an_index_is_an_integer_or_a_text():
    with pytest.raises(TypeError):
        seeds.integer(0, Purpose.TASK, 1.5)  # type: ignore[arg-type]
