"""Named tensors on the wire (mjfl/device/protocol/tensors.py): any tensors round trip byte for
byte into aligned views, a pack is laid out once and decoded without a copy, and the helpers the
sessions check results with agree with the layout."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from wire_protocol import FUZZ, SHA_A, SHA_B, arrays_equal, weights

from mjfl.device import protocol as p
from mjfl.device.protocol.tensors import mismatch, payload_bytes, signature


def finite_arrays(dtype: str) -> st.SearchStrategy[np.ndarray]:
    dt = np.dtype(dtype)
    elements = (
        st.floats(width=8 * dt.itemsize, allow_nan=False, allow_infinity=False)
        if dt.kind == "f"
        else None
    )
    shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5)
    return hnp.arrays(dt, shapes, elements=elements)


tensor_dicts = st.dictionaries(
    st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=20),
    st.sampled_from(["<f4", "<f8", "<f2", "<i8", "<i4", "u1", "i1", ">f4", ">i8"]).flatmap(
        finite_arrays
    ),
    max_size=6,
)


@FUZZ
@given(tensor_dicts)
def test_any_tensor_dict_round_trips_byte_exact(w: dict[str, np.ndarray]) -> None:
    data = p.encode(p.Result("t", "j", 0, w, 1, 0.0, p.Timing(0.0, 0.0, None)))
    got = p.decode_bytes(data)
    assert isinstance(got, p.Result)
    assert list(got.weights) == list(w)
    for name, value in w.items():
        v = got.weights[name]
        assert v.shape == value.shape and v.dtype == value.dtype.newbyteorder("<")
        assert v.tobytes() == value.astype(value.dtype.newbyteorder("<")).tobytes()
        assert v.ctypes.data % 16 == 0 or v.size == 0  # aligned views


def test_twenty_megabyte_weights_round_trip_byte_exact_and_zero_copy() -> None:
    rng = np.random.default_rng(1)
    w = {f"layer{i}.weight": rng.standard_normal((500, 500), dtype=np.float32) for i in range(20)}
    w["head.bias"] = rng.standard_normal(10, dtype=np.float32)
    pack = p.TensorPack.from_arrays(w)
    assert pack.nbytes >= 20_000_000
    data = p.encode(p.Task("t", "j", 0, pack, 1, 1, 0.1, 0.0, 0.0, None, SHA_A, SHA_B))
    assert isinstance(data, bytes)
    got = p.decode_bytes(data)
    assert isinstance(got, p.Task)
    assert arrays_equal(got.weights, w)
    # Decoding hands out views of the received message, not copies.
    assert np.shares_memory(got.weights["layer7.weight"], np.frombuffer(data, np.uint8))


@FUZZ
@given(tensor_dicts)
def test_the_payload_length_of_a_signature_is_what_packing_its_tensors_takes(
    w: dict[str, np.ndarray],
) -> None:
    # The coordinator bounds a split result by this length before its parts arrive.
    assert payload_bytes(signature(w)) == p.TensorPack.from_arrays(w).nbytes


def test_a_mismatch_names_how_two_signatures_differ() -> None:
    expected = signature(weights())
    assert mismatch(expected, expected) is None
    renamed = {("fc.w" if k == "fc.weight" else k): v for k, v in weights().items()}
    assert mismatch(signature(renamed), expected) == "missing ['fc.weight'], unexpected ['fc.w']"
    reordered = dict(reversed(list(weights().items())))
    assert mismatch(signature(reordered), expected) == "the tensors come in a different order"
    wider = {**weights(), "conv.bias": np.zeros(5, np.float32)}
    assert mismatch(signature(wider), expected) == "'conv.bias' is float32 [5], expected float32 [4]"
