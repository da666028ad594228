"""The codec (mjfl/device/protocol/codec.py): round trips, the documented layout, what encoding
refuses, split messages, decoders fuzzed, and the spec's examples as the codec writes them."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from repository import DOCS
from wire_protocol import (
    FUZZ,
    MODEL,
    SHA_A,
    SHA_B,
    TEXT_MESSAGES,
    arrays_equal,
    artifacts,
    frame,
    json_messages,
    json_values,
    split,
    valid_binaries,
)

from mjfl.device import protocol as p
from mjfl.device.protocol.credentials import hello_proof
from mjfl.errors import EncodeError, ProtocolError

PROTOCOL_MD = DOCS / "protocol.md"
VALID_BINARIES = valid_binaries()


# -- round trips ----------------------------------------------------------------------


@pytest.mark.parametrize("message", TEXT_MESSAGES, ids=lambda m: type(m).__name__)
def test_text_messages_round_trip(message: p.Message) -> None:
    text = p.encode(message)
    assert isinstance(text, str)
    assert p.decode_text(text) == message
    assert p.decode(text) == message


def test_task_and_result_round_trip_with_several_dtypes_and_empty_tensors() -> None:
    w = {
        "f32": np.arange(12, dtype=np.float32).reshape(3, 4),
        "f64": np.array([1.5, -2.5]),
        "f16": np.ones((2, 2), np.float16),
        "i64": np.array(7, dtype=np.int64),  # 0-d
        "i32": np.array([1, 2, 3], np.int32),
        "u8": np.arange(5, dtype=np.uint8),
        "i8": np.array([-1], np.int8),
        "empty": np.zeros((0, 3), np.float32),
        "big_endian": np.array([1.0, 2.0], dtype=">f4"),
        "strided": np.arange(20, dtype=np.float32)[::2],
    }
    task = p.Task("t1", "j", 4, w, 2, 32, 0.05, 0.9, 1e-4, 30.0, SHA_A, SHA_B)
    data = p.encode(task)
    assert isinstance(data, bytes)
    got = p.decode_bytes(data)
    assert isinstance(got, p.Task)
    for field in (
        "task_id",
        "job_id",
        "round",
        "epochs",
        "batch_size",
        "lr",
        "momentum",
        "weight_decay",
        "deadline_s",
        "program_sha256",
        "shard_sha256",
    ):
        assert getattr(got, field) == getattr(task, field)
    assert list(got.weights) == list(w)
    for name, value in w.items():
        assert got.weights[name].shape == value.shape
        np.testing.assert_array_equal(got.weights[name], value)
    assert got.weights["big_endian"].dtype == np.dtype("<f4")

    result = p.Result("t1", "j", 4, got.weights, 10, 0.25, p.Timing(0.5, 3.0, 0.1))
    back = p.decode_bytes(p.encode(result))
    assert isinstance(back, p.Result)
    assert (back.samples, back.mean_loss, back.timing) == (10, 0.25, p.Timing(0.5, 3.0, 0.1))
    assert arrays_equal(back.weights, got.weights)


def test_provision_round_trip_with_and_without_artifacts() -> None:
    program, shard = artifacts()
    full = p.decode_bytes(p.encode(p.Provision("j", MODEL, program.sha256, shard.sha256, program, shard)))
    assert isinstance(full, p.Provision) and full.model == MODEL
    assert full.program is not None and bytes(full.program.data) == bytes(program.data)
    assert full.shard is not None and full.shard.sha256 == shard.sha256
    np.testing.assert_array_equal(full.shard.x, shard.x)
    np.testing.assert_array_equal(full.shard.y, shard.y)
    bare = p.decode_bytes(p.encode(p.Provision("j", MODEL, program.sha256, shard.sha256, None, None)))
    assert isinstance(bare, p.Provision) and bare.program is None and bare.shard is None


def test_a_provision_tells_the_batch_norm_pixels_and_older_headers_still_decode() -> None:
    program, shard = artifacts()
    with_bn = p.ModelSpec("cnn", (1, 4, 4), 3, batch_norm_pixels=(16, 4))
    data = p.encode(p.Provision("j", with_bn, program.sha256, shard.sha256, program, shard))
    assert split(data)[0]["model"]["batch_norm_pixels"] == [16, 4]
    assert p.decode_bytes(data).model == with_bn
    # Without batch norm the field is not written, and a header without it decodes to ().
    header, _ = split(p.encode(p.Provision("j", MODEL, program.sha256, shard.sha256, None, None)))
    assert "batch_norm_pixels" not in header["model"]
    for bad in ([0], [1.5], "16", [16] * 1025):
        with pytest.raises(ProtocolError, match="batch_norm_pixels") as refused:
            p.decode_bytes(frame({**header, "model": {**header["model"], "batch_norm_pixels": bad}}))
        assert refused.value.code == "bad_message"


def test_a_result_may_say_the_device_state() -> None:
    weights = {"b": np.zeros(2, np.float32)}
    state = {"battery_pct": 64, "charging": True, "thermal_status": 2}
    data = p.encode(p.Result("t", "j", 1, weights, 3, 0.5, p.Timing(0.0, 1.0, None), state))
    assert split(data)[0]["device_state"] == state
    assert p.decode_bytes(data).device_state == state
    plain = p.encode(p.Result("t", "j", 1, weights, 3, 0.5, p.Timing(0.0, 1.0, None)))
    assert "device_state" not in split(plain)[0] and p.decode_bytes(plain).device_state is None
    header, payload = split(plain)
    with pytest.raises(ProtocolError, match="device_state"):
        p.decode_bytes(frame({**header, "device_state": [64]}, payload))


def test_a_provision_tells_the_dropout_noise_shapes() -> None:
    program, shard = artifacts()
    with_dropout = p.ModelSpec("cnn", (1, 4, 4), 3, dropout_shapes=((8, 2, 2), (16,)))
    data = p.encode(p.Provision("j", with_dropout, program.sha256, shard.sha256, None, None))
    header = split(data)[0]
    assert header["model"]["dropout_shapes"] == [[8, 2, 2], [16]]
    assert p.decode_bytes(data).model == with_dropout
    for bad in ([[0]], [[]], [8], [[1.5]], [[1] * 33]):
        with pytest.raises(ProtocolError, match="dropout_shapes") as refused:
            p.decode_bytes(frame({**header, "model": {**header["model"], "dropout_shapes": bad}}))
        assert refused.value.code == "bad_message"


def test_any_finite_double_is_a_number_and_nothing_beyond() -> None:
    assert p.decode_text('{"type":"heartbeat","seq":1,"sent_at":1.5e308}') == p.Heartbeat(1, 1.5e308)
    assert p.decode_text('{"type":"heartbeat","seq":1,"sent_at":-1e305}') == p.Heartbeat(1, -1e305)
    for text in ('{"type":"heartbeat","seq":1,"sent_at":1e309}', '{"type":"heartbeat","seq":1,"sent_at":' + "9" * 400 + "}"):
        with pytest.raises(ProtocolError, match="sent_at"):
            p.decode_text(text)


def test_the_wire_layout_is_the_documented_one() -> None:
    w = {"a": np.array([1.0, 2.0], np.float32), "b": np.array([3], np.int64)}
    data = p.encode(p.Result("t1", "j", 0, w, 2, 0.5, p.Timing(0.0, 1.0, None)))
    assert isinstance(data, bytes)
    magic, version, flags, header_len, offset, payload_len = struct.unpack_from("<4sHHIIQ", data)
    assert (magic, version, flags) == (b"MJFL", 1, 0)
    assert offset % 64 == 0 and offset == -(-(24 + header_len) // 64) * 64
    header, payload = split(data)
    assert header["tensors"] == [
        {"name": "a", "dtype": "float32", "shape": [2], "offset": 0, "nbytes": 8},
        {"name": "b", "dtype": "int64", "shape": [1], "offset": 64, "nbytes": 8},
    ]
    assert payload_len == len(payload) == 72
    assert payload[:8] == struct.pack("<2f", 1.0, 2.0) and payload[64:] == struct.pack("<q", 3)
    assert payload[8:64] == bytes(56)
    # A message built from the spec alone decodes the same.
    assert arrays_equal(p.decode_bytes(frame(header, payload)).weights, w)


def test_encode_refuses_what_the_peer_would_refuse() -> None:
    with pytest.raises(EncodeError, match="epochs"):
        p.encode(p.Task("t", "j", 0, {}, 0, 1, 0.1, 0.0, 0.0, None, SHA_A, SHA_B))
    with pytest.raises(EncodeError, match="code"):
        p.encode(p.Error("Bad Code", "", None))
    with pytest.raises(EncodeError):
        p.encode(p.Heartbeat(1, math.nan))
    with pytest.raises(EncodeError, match="dtype"):
        p.encode(p.Result("t", "j", 0, {"c": np.zeros(2, np.complex64)}, 1, 0.0, p.Timing(0, 0, None)))


# -- split messages ---------------------------------------------------------------------


def test_twenty_megabytes_in_okhttp_sized_parts_round_trip_byte_exact() -> None:
    rng = np.random.default_rng(3)
    w = {f"layer{i}": rng.standard_normal((1000, 500), dtype=np.float32) for i in range(10)}
    data = p.encode(p.Result("t", "j", 0, w, 1, 0.0, p.Timing(0, 0, None)))
    assert isinstance(data, bytes) and len(data) > 20_000_000
    parts = p.split_message(data, 8 * 2**20)
    assert len(parts) == 3 and max(len(x) for x in parts) <= 8 * 2**20
    assembly = p.begin_binary(parts[0])
    assert isinstance(assembly, p.Assembly)
    assert assembly.add(parts[1]) is None
    message = assembly.add(parts[2])
    assert isinstance(message, p.Result) and arrays_equal(message.weights, w)


# -- fuzzing: arbitrary input raises ProtocolError and nothing else -----------------------


def _only_protocol_errors(decoder: Any, data: Any) -> None:
    try:
        decoder(data)
    except ProtocolError:
        pass


@FUZZ
@given(st.text())
def test_fuzz_text_decoder(text: str) -> None:
    _only_protocol_errors(p.decode_text, text)


@FUZZ
@given(json_messages)
def test_fuzz_text_decoder_with_plausible_messages(obj: dict[str, Any]) -> None:
    _only_protocol_errors(p.decode_text, json.dumps(obj))


@FUZZ
@given(st.binary())
def test_fuzz_binary_decoder(data: bytes) -> None:
    _only_protocol_errors(p.decode_bytes, data)
    _only_protocol_errors(p.decode_bytes, b"MJFL\x01\x00\x00\x00" + data)


@FUZZ
@given(json_messages, st.binary(max_size=200))
def test_fuzz_binary_decoder_with_plausible_headers(obj: dict[str, Any], payload: bytes) -> None:
    _only_protocol_errors(p.decode_bytes, frame(obj, payload))


def _mutate(value: Any, data: st.DataObject) -> Any:
    """``value`` with one field, at any depth, replaced by any JSON value or removed."""
    if isinstance(value, (dict, list)) and value and data.draw(st.booleans()):
        keys = list(value) if isinstance(value, dict) else list(range(len(value)))
        key = data.draw(st.sampled_from(keys))
        copy = dict(value) if isinstance(value, dict) else list(value)
        if data.draw(st.integers(0, 3)) == 0:
            del copy[key]
        else:
            copy[key] = _mutate(copy[key], data)
        return copy
    return data.draw(json_values)


@FUZZ
@given(st.sampled_from([p.encode(m) for m in TEXT_MESSAGES] + VALID_BINARIES), st.data())
def test_fuzz_decoders_with_one_field_mutated(message: str | bytes, data: st.DataObject) -> None:
    if isinstance(message, str):
        _only_protocol_errors(p.decode_text, json.dumps(_mutate(json.loads(message), data)))
    else:
        header, payload = split(message)
        _only_protocol_errors(p.decode_bytes, frame(_mutate(header, data), payload))


@FUZZ
@given(st.sampled_from(VALID_BINARIES), st.data())
def test_fuzz_binary_decoder_with_mutated_messages(message: bytes, data: st.DataObject) -> None:
    buf = bytearray(message)
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    _only_protocol_errors(p.decode_bytes, bytes(buf))
    _only_protocol_errors(p.decode_bytes, bytes(buf[:cut]))


# -- the spec's examples are what the code writes ------------------------------------------


def hexdump(data: bytes) -> str:
    lines = []
    for i in range(0, len(data), 16):
        chunk = data[i : i + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{i:08x}  {hexes:<47}  |{text}|")
    return "\n".join(lines)


def doc_examples() -> dict[str, str]:
    """The example messages of docs/protocol.md, as this codec writes them."""
    examples = {
        "hello": p.Hello(
            "pixel7-01",
            "s3cret",
            "executorch",
            (1,),
            {"model": "Pixel 7", "cores": 8, "ram_mb": 8192, "os": "Android 14"},
            (SHA_A,),
            268435456,
        ),
        # 5.1.1's known answer: the proof of secret "s3cret-s3cret-s3cret" over nonce 00..01.
        "hello_with_proof": p.Hello(
            "pixel7-01", "", "executorch", (1,), {"model": "Pixel 7"}, (), None,
            hello_proof("s3cret-s3cret-s3cret", "00" * 31 + "01", "pixel7-01"),
        ),
        "welcome": p.Welcome(1, "coord-1", p.Settings(10.0, 60.0, 268435456, 65536)),
        "heartbeat": p.Heartbeat(42, 1712.5),
        "heartbeat_ack": p.HeartbeatAck(42, 1712.5),
        "cancel": p.Cancel("t-0007", "deadline passed"),
        "error": p.Error("task_failed", "out of memory", "t-0007"),
        "bye": p.Bye("bad_weights", "result weights hold NaN or infinite values"),
    }
    out = {name: str(p.encode(m)) for name, m in examples.items()}
    result = p.encode(
        p.Result(
            "t-0007",
            "cnn",
            3,
            {"fc.bias": np.array([0.5, -1.0], np.float32), "steps": np.array([3], np.int64)},
            20,
            0.6931,
            p.Timing(0.012, 4.25, 0.31),
        )
    )
    assert isinstance(result, bytes)
    out["result_header"] = json.dumps(split(result)[0], separators=(",", ":"))
    out["result_hexdump"] = hexdump(result)
    return out


@pytest.mark.parametrize("name", list(doc_examples()))
def test_docs_show_what_the_codec_writes(name: str) -> None:
    assert doc_examples()[name] in PROTOCOL_MD.read_text(), f"docs/protocol.md is out of date for {name}"
