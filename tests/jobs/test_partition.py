import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjfl.errors import ConfigError, UserError
from mjfl.jobs.partition import partition


def balanced_labels(num_classes: int, per_class: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(num_classes), per_class))


def assert_valid(parts: list[np.ndarray], num_samples: int, num_devices: int) -> None:
    assert len(parts) == num_devices
    assert all(p.dtype == np.int64 and p.ndim == 1 for p in parts)
    assert min(p.size for p in parts) >= 1, "a device got no data"
    everything = np.concatenate(parts)
    # disjoint and complete: every index exactly once
    assert np.array_equal(np.sort(everything), np.arange(num_samples))


@st.composite
def labelled_fleets(draw: st.DrawFn) -> tuple[np.ndarray, int, int]:
    num_classes = draw(st.integers(1, 12))
    counts = draw(st.lists(st.integers(1, 40), min_size=num_classes, max_size=num_classes))
    ids = draw(st.permutations(range(100)))[:num_classes]  # arbitrary, non-contiguous ids
    labels = np.repeat(np.asarray(ids, dtype=np.int64), counts)
    labels = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(labels)
    # small fleets half the time, so the non-IID scheme is often feasible
    num_devices = draw(st.integers(1, min(labels.size, 25)) | st.integers(1, labels.size))
    seed = draw(st.integers(0, 2**32 - 1))
    return labels, num_devices, seed


@settings(max_examples=150, deadline=None)
@given(labelled_fleets())
def test_iid_is_a_near_equal_split(fleet: tuple[np.ndarray, int, int]) -> None:
    labels, k, seed = fleet
    parts = partition(labels, k, "iid", np.random.default_rng(seed))
    assert_valid(parts, labels.size, k)
    sizes = [p.size for p in parts]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=300, deadline=None)
@given(labelled_fleets(), st.integers(1, 4))
def test_noniid_invariants_or_a_config_error(fleet: tuple[np.ndarray, int, int], c: int) -> None:
    labels, k, seed = fleet
    classes, counts = np.unique(labels, return_counts=True)
    n = classes.size
    if c > n:
        with pytest.raises(ConfigError, match="classes_per_device"):
            partition(labels, k, "noniid", np.random.default_rng(seed), classes_per_device=c)
        return
    shards = math.ceil(k * c / n)
    if counts.min() < shards:
        with pytest.raises(ConfigError, match="fewer than"):
            partition(labels, k, "noniid", np.random.default_rng(seed), classes_per_device=c)
        return
    parts = partition(labels, k, "noniid", np.random.default_rng(seed), classes_per_device=c)
    assert_valid(parts, labels.size, k)
    held = [np.unique(labels[p]) for p in parts]
    takers = {int(j): sum(int(j) in h for h in held) for j in classes}
    if k * c >= n:
        assert all(h.size == c for h in held), "every device holds exactly c distinct classes"
        # the takers of each class are as balanced as possible
        assert set(takers.values()) <= {k * c // n, shards}
    else:
        # fewer slots than classes: whole classes, each to one device
        assert set(takers.values()) == {1}
        assert {h.size for h in held} <= {n // k, math.ceil(n / k)}


@pytest.mark.parametrize("k", [10, 20, 30, 100])
def test_noniid_gives_exactly_two_classes_for_paper_like_fleets(k: int) -> None:
    labels = balanced_labels(10, 120)
    for seed in range(25):
        parts = partition(labels, k, "noniid", np.random.default_rng(seed))
        assert_valid(parts, labels.size, k)
        assert all(np.unique(labels[p]).size == 2 for p in parts)
        # K*2 is a multiple of 10 here: each class gets K*2/10 equal shards
        assert {p.size for p in parts} == {2 * 1200 // (2 * k)}


def test_noniid_matches_the_paper_for_100_devices() -> None:
    # Paper: 10 classes x 20 shards = 200 shards, two classes a device, all used.
    labels = balanced_labels(10, 600)
    default = partition(labels, 100, "noniid", np.random.default_rng(7))
    explicit = partition(labels, 100, "noniid", np.random.default_rng(7), shards_per_class=20)
    assert all(np.array_equal(a, b) for a, b in zip(default, explicit, strict=True))
    for p in default:
        _, counts = np.unique(labels[p], return_counts=True)
        assert counts.tolist() == [30, 30]  # 600/20 of each of two classes
    takers = np.bincount(np.concatenate([np.unique(labels[p]) for p in default]))
    assert np.all(takers == 20)
    # class pairs are random, not a fixed pattern
    assert len({tuple(np.unique(labels[p])) for p in default}) >= 20


def test_noniid_spare_shards_stay_within_the_class() -> None:
    # K=13: 26 slots over 10 classes -> 3 shards a class, 4 classes have one spare.
    labels = balanced_labels(10, 60)
    parts = partition(labels, 13, "noniid", np.random.default_rng(3))
    assert_valid(parts, labels.size, 13)
    assert all(np.unique(labels[p]).size == 2 for p in parts)
    per_class = [np.bincount(labels[p], minlength=10) for p in parts]
    # every part of a class is a whole number of 20-sample shards
    assert all(set(np.unique(c)) <= {0, 20, 40} for c in per_class)
    assert sorted(p.size for p in parts).count(60) == 4  # four devices got a spare shard


def test_noniid_with_more_shards_than_needed() -> None:
    labels = balanced_labels(10, 100)
    parts = partition(labels, 10, "noniid", np.random.default_rng(0), shards_per_class=5)
    assert_valid(parts, labels.size, 10)
    assert all(np.unique(labels[p]).size == 2 for p in parts)
    for p in parts:  # 2 takers share 5 shards of 20: parts of 40 and 60
        assert set(np.unique(np.bincount(labels[p]))) <= {0, 40, 60}


def test_noniid_rejects_too_few_shards() -> None:
    with pytest.raises(ConfigError, match="shards_per_class"):
        partition(
            balanced_labels(10, 100), 100, "noniid", np.random.default_rng(0), shards_per_class=19
        )


@pytest.mark.parametrize("scheme", ["iid", "noniid", "dirichlet"])
def test_same_seed_same_partition_other_seed_differs(scheme: str) -> None:
    labels = balanced_labels(10, 50)
    a = partition(labels, 20, scheme, np.random.default_rng(42))
    b = partition(labels, 20, scheme, np.random.default_rng(42))
    c = partition(labels, 20, scheme, np.random.default_rng(43))
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


@settings(max_examples=150, deadline=None)
@given(labelled_fleets(), st.floats(1e-3, 100.0))
def test_dirichlet_invariants(fleet: tuple[np.ndarray, int, int], alpha: float) -> None:
    labels, k, seed = fleet
    parts = partition(labels, k, "dirichlet", np.random.default_rng(seed), alpha=alpha)
    assert_valid(parts, labels.size, k)


def label_entropy(labels: np.ndarray, parts: list[np.ndarray]) -> float:
    """Mean over devices of the entropy (nats) of the device's label distribution."""
    total = 0.0
    for p in parts:
        q = np.bincount(labels[p]) / p.size
        q = q[q > 0]
        total += float(-(q * np.log(q)).sum())
    return total / len(parts)


def test_dirichlet_skew_grows_as_alpha_shrinks() -> None:
    labels = balanced_labels(10, 200)
    alphas = [100.0, 1.0, 0.1, 0.01]
    entropy = [
        np.mean(
            [
                label_entropy(
                    labels, partition(labels, 20, "dirichlet", np.random.default_rng(s), alpha=a)
                )
                for s in range(5)
            ]
        )
        for a in alphas
    ]
    assert all(x > y for x, y in itertools.pairwise(entropy)), entropy
    assert entropy[0] > 0.95 * np.log(10)  # near-IID
    assert entropy[-1] < 0.3  # near one class a device


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"num_devices": 0, "scheme": "iid"}, "num_devices"),
        ({"num_devices": 101, "scheme": "iid"}, "num_devices"),
        ({"num_devices": 10, "scheme": "shards"}, "scheme"),
        ({"num_devices": 10, "scheme": "noniid", "classes_per_device": 11}, "classes_per_device"),
        ({"num_devices": 10, "scheme": "noniid", "classes_per_device": 0}, "classes_per_device"),
        ({"num_devices": 10, "scheme": "noniid", "shards_per_class": 0}, "shards_per_class"),
        ({"num_devices": 10, "scheme": "dirichlet", "alpha": 0.0}, "alpha"),
        ({"num_devices": 10, "scheme": "dirichlet", "alpha": float("nan")}, "alpha"),
    ],
)
def test_impossible_requests_raise_config_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        partition(balanced_labels(10, 10), rng=np.random.default_rng(0), **kwargs)


def test_bad_labels_raise_user_errors() -> None:
    with pytest.raises(UserError, match="1-D"):
        partition(np.zeros((4, 2), dtype=np.int64), 2, "iid", np.random.default_rng(0))
    with pytest.raises(UserError, match="integers"):
        partition(np.zeros(4), 2, "iid", np.random.default_rng(0))
