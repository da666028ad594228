import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mjfl.coordinator.engine.fedavg import check_update, fedavg


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 6), st.lists(st.integers(1, 500), min_size=1, max_size=8), st.integers(0, 2**16))
def test_fedavg_equals_numpy_weighted_mean(size, counts, seed):
    rng = np.random.default_rng(seed)
    updates = [({"w": rng.normal(size=(size, 3)).astype(np.float32), "b": rng.normal(size=size).astype(np.float32)}, n) for n in counts]
    out = fedavg(updates)
    for name in ("w", "b"):
        stacked = np.stack([u[name] for u, _ in updates]).astype(np.float64)
        expected = np.average(stacked, axis=0, weights=np.asarray(counts, float))
        assert out[name].dtype == np.float32
        np.testing.assert_allclose(out[name], expected, rtol=1e-6, atol=1e-6)
    assert list(out) == ["w", "b"]


def test_fedavg_rejects_empty_and_bad_counts():
    with pytest.raises(ValueError):
        fedavg([])
    with pytest.raises(ValueError):
        fedavg([({"w": np.zeros(2, np.float32)}, 0)])


def test_check_update_names_the_problem():
    ref = {"w": np.zeros((2, 2), np.float32), "b": np.zeros(2, np.float32)}
    assert check_update(ref, {"w": np.ones((2, 2), np.float32), "b": np.ones(2, np.float32)}) is None
    assert "names" in check_update(ref, {"w": ref["w"]})
    assert "shape" in check_update(ref, {"w": np.zeros((3, 2), np.float32), "b": ref["b"]})
    assert "dtype" in check_update(ref, {"w": np.zeros((2, 2)), "b": ref["b"]})
    assert "non-finite" in check_update(ref, {"w": np.full((2, 2), np.nan, np.float32), "b": ref["b"]})
