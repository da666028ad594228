"""Protocol v1: codec round trips, session state machines, bad input, fuzzing."""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from repository import DOCS

from mjfl.device import protocol as p
from mjfl.device.protocol import (
    Bye,
    Cancel,
    Closed,
    CoordinatorSession,
    DeviceSession,
    Error,
    Heartbeat,
    HeartbeatAck,
    Hello,
    ModelSpec,
    Program,
    Provision,
    Result,
    SessionClosed,
    Settings,
    Shard,
    Task,
    TensorPack,
    Timing,
    Welcome,
    decode,
    decode_bytes,
    decode_text,
    encode,
)
from mjfl.device.protocol.credentials import hello_proof
from mjfl.errors import EncodeError, ProtocolError
from mjfl.jobs.base import LocalTraining

PROTOCOL_MD = DOCS / "protocol.md"
SHA_A, SHA_B = "a" * 64, "b" * 64
MODEL = ModelSpec("cnn", (1, 4, 4), 3)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- helpers ------------------------------------------------------------------


def frame(
    header: dict[str, Any],
    payload: bytes = b"",
    *,
    magic: bytes = b"MJFL",
    version: int = 1,
    flags: int = 0,
    payload_offset: int | None = None,
    payload_len: int | None = None,
) -> bytes:
    """A binary message built from the spec alone (not with the codec)."""
    text = json.dumps(header).encode()
    natural = -(-(24 + len(text)) // 64) * 64
    offset = natural if payload_offset is None else payload_offset
    length = len(payload) if payload_len is None else payload_len
    fixed = struct.pack("<4sHHIIQ", magic, version, flags, len(text), offset, length)
    return fixed + text + bytes(max(0, natural - 24 - len(text))) + payload


def split(message: bytes) -> tuple[dict[str, Any], bytes]:
    """The JSON header and the payload of a binary message."""
    _, _, _, header_len, offset, _ = struct.unpack_from("<4sHHIIQ", message)
    return json.loads(message[24 : 24 + header_len]), message[offset:]


def pump(
    src: p.CoordinatorSession | p.DeviceSession, dst: p.CoordinatorSession | p.DeviceSession
) -> None:
    for data in src.data_to_send():
        dst.receive(data)


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "conv.weight": rng.standard_normal((4, 1, 3, 3)).astype(np.float32),
        "conv.bias": rng.standard_normal(4).astype(np.float32),
        "fc.weight": rng.standard_normal((3, 16)).astype(np.float32),
        "bn.num_batches_tracked": np.array(7, dtype=np.int64),
    }


def artifacts(seed: int = 0) -> tuple[Program, Shard]:
    rng = np.random.default_rng(seed)
    program = Program(bytes(rng.integers(0, 256, 300, dtype=np.uint8)))
    shard = Shard(rng.random((5, 1, 4, 4), dtype=np.float32), rng.integers(0, 3, 5))
    return program, shard


def open_pair(
    coordinator: dict[str, Any] | None = None,
    device: dict[str, Any] | None = None,
    cached: tuple[str, ...] = (),
) -> tuple[CoordinatorSession, DeviceSession]:
    c = CoordinatorSession("coord-1", **(coordinator or {}))
    d = DeviceSession(**(device or {}))
    d.send_hello("dev-1", runtime="torch", cached=cached)
    pump(d, c)
    c.send_welcome()
    pump(c, d)
    c.events_received(), d.events_received()
    return c, d


def with_task(**coordinator: Any) -> tuple[CoordinatorSession, DeviceSession, Task]:
    """An open pair with job "j" provisioned and task "t1" at the device."""
    c, d = open_pair(coordinator)
    c.send_provision("j", MODEL, *artifacts())
    c.send_task(
        task_id="t1", job_id="j", round=3, weights=weights(), training=LocalTraining(epochs=1, batch_size=2, lr=0.1)
    )
    pump(c, d)
    events = d.events_received()
    assert isinstance(events[-1], Task)
    return c, d, events[-1]


def result_bytes(task: Task, **overrides: Any) -> bytes:
    fields: dict[str, Any] = {
        "task_id": task.task_id,
        "job_id": task.job_id,
        "round": task.round,
        "weights": {k: np.array(v) for k, v in task.weights.items()},
        "samples": 5,
        "mean_loss": 0.5,
        "timing": Timing(0.01, 1.0, None),
    }
    fields.update(overrides)
    data = encode(Result(**fields))
    assert isinstance(data, bytes)
    return data


def assert_failed(
    session: CoordinatorSession | DeviceSession, code: str, reason_part: str = ""
) -> None:
    """The session failed with ``code``, told the peer with a bye and emitted Closed."""
    assert session.closed
    assert session.failure is not None and session.failure.code == code, session.failure
    assert reason_part in session.failure.reason
    out = session.data_to_send()
    bye = decode_text(out[-1])
    assert bye == Bye(code, session.failure.reason)
    assert session.events_received()[-1] == Closed(code, session.failure.reason, by_peer=False)
    ws_code, ws_reason = session.websocket_close()
    assert ws_code in (1002, 1009, 1011) and len(ws_reason.encode()) <= 123
    # Unrelated entry points stay quiet after a failure.
    session.receive_text('{"type": "bye", "code": "normal", "reason": ""}')
    assert session.events_received() == [] and session.data_to_send() == []
    assert not session.heartbeat_due(1e9) and not session.is_expired(1e9)
    with pytest.raises(SessionClosed):
        session.send_bye()


def arrays_equal(a: Any, b: Any) -> bool:
    return list(a) == list(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
        for k in a
    )


# -- codec round trips ----------------------------------------------------------

TEXT_MESSAGES = [
    Hello(
        "dev-1",
        "tok",
        "executorch",
        (1, 2),
        {"model": "Pixel 7", "cores": 8, "ram_mb": 8192},
        (SHA_A,),
        1000,
    ),
    Hello("dev-é", "", "torch", (1,), {}, (), None),
    Welcome(1, "coord-1", Settings(10.0, 60.0, 2**28, 2**16)),
    Welcome(1, "coord-1", Settings(None, None, None, None)),
    Cancel("t1", "straggler"),
    Heartbeat(1, 123.456),
    HeartbeatAck(9, -0.5),
    Error("task_failed", "out of memory", "t1"),
    Error("busy", "", None),
    Bye("normal", "done"),
]


@pytest.mark.parametrize("message", TEXT_MESSAGES, ids=lambda m: type(m).__name__)
def test_text_messages_round_trip(message: p.Message) -> None:
    text = encode(message)
    assert isinstance(text, str)
    assert decode_text(text) == message
    assert decode(text) == message


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
    task = Task("t1", "j", 4, w, 2, 32, 0.05, 0.9, 1e-4, 30.0, SHA_A, SHA_B)
    data = encode(task)
    assert isinstance(data, bytes)
    got = decode_bytes(data)
    assert isinstance(got, Task)
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

    result = Result("t1", "j", 4, got.weights, 10, 0.25, Timing(0.5, 3.0, 0.1))
    back = decode_bytes(encode(result))
    assert isinstance(back, Result)
    assert (back.samples, back.mean_loss, back.timing) == (10, 0.25, Timing(0.5, 3.0, 0.1))
    assert arrays_equal(back.weights, got.weights)


def test_provision_round_trip_with_and_without_artifacts() -> None:
    program, shard = artifacts()
    full = decode_bytes(encode(Provision("j", MODEL, program.sha256, shard.sha256, program, shard)))
    assert isinstance(full, Provision) and full.model == MODEL
    assert full.program is not None and bytes(full.program.data) == bytes(program.data)
    assert full.shard is not None and full.shard.sha256 == shard.sha256
    np.testing.assert_array_equal(full.shard.x, shard.x)
    np.testing.assert_array_equal(full.shard.y, shard.y)
    bare = decode_bytes(encode(Provision("j", MODEL, program.sha256, shard.sha256, None, None)))
    assert isinstance(bare, Provision) and bare.program is None and bare.shard is None


def test_a_provision_tells_the_batch_norm_pixels_and_older_headers_still_decode() -> None:
    program, shard = artifacts()
    with_bn = ModelSpec("cnn", (1, 4, 4), 3, batch_norm_pixels=(16, 4))
    data = encode(Provision("j", with_bn, program.sha256, shard.sha256, program, shard))
    assert split(data)[0]["model"]["batch_norm_pixels"] == [16, 4]
    assert decode_bytes(data).model == with_bn
    # Without batch norm the field is not written, and a header without it decodes to ().
    header, _ = split(encode(Provision("j", MODEL, program.sha256, shard.sha256, None, None)))
    assert "batch_norm_pixels" not in header["model"]
    for bad in ([0], [1.5], "16", [16] * 1025):
        with pytest.raises(ProtocolError, match="batch_norm_pixels") as refused:
            decode_bytes(frame({**header, "model": {**header["model"], "batch_norm_pixels": bad}}))
        assert refused.value.code == "bad_message"


def test_a_result_may_say_the_device_state() -> None:
    weights = {"b": np.zeros(2, np.float32)}
    state = {"battery_pct": 64, "charging": True, "thermal_status": 2}
    data = encode(Result("t", "j", 1, weights, 3, 0.5, Timing(0.0, 1.0, None), state))
    assert split(data)[0]["device_state"] == state
    assert decode_bytes(data).device_state == state
    plain = encode(Result("t", "j", 1, weights, 3, 0.5, Timing(0.0, 1.0, None)))
    assert "device_state" not in split(plain)[0] and decode_bytes(plain).device_state is None
    header, payload = split(plain)
    with pytest.raises(ProtocolError, match="device_state"):
        decode_bytes(frame({**header, "device_state": [64]}, payload))


def test_a_provision_tells_the_dropout_noise_shapes() -> None:
    program, shard = artifacts()
    with_dropout = ModelSpec("cnn", (1, 4, 4), 3, dropout_shapes=((8, 2, 2), (16,)))
    data = encode(Provision("j", with_dropout, program.sha256, shard.sha256, None, None))
    header = split(data)[0]
    assert header["model"]["dropout_shapes"] == [[8, 2, 2], [16]]
    assert decode_bytes(data).model == with_dropout
    for bad in ([[0]], [[]], [8], [[1.5]], [[1] * 33]):
        with pytest.raises(ProtocolError, match="dropout_shapes") as refused:
            decode_bytes(frame({**header, "model": {**header["model"], "dropout_shapes": bad}}))
        assert refused.value.code == "bad_message"


def test_any_finite_double_is_a_number_and_nothing_beyond() -> None:
    assert decode_text('{"type":"heartbeat","seq":1,"sent_at":1.5e308}') == Heartbeat(1, 1.5e308)
    assert decode_text('{"type":"heartbeat","seq":1,"sent_at":-1e305}') == Heartbeat(1, -1e305)
    for text in ('{"type":"heartbeat","seq":1,"sent_at":1e309}', '{"type":"heartbeat","seq":1,"sent_at":' + "9" * 400 + "}"):
        with pytest.raises(ProtocolError, match="sent_at"):
            decode_text(text)


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
    data = encode(Result("t", "j", 0, w, 1, 0.0, Timing(0.0, 0.0, None)))
    got = decode_bytes(data)
    assert isinstance(got, Result)
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
    pack = TensorPack.from_arrays(w)
    assert pack.nbytes >= 20_000_000
    data = encode(Task("t", "j", 0, pack, 1, 1, 0.1, 0.0, 0.0, None, SHA_A, SHA_B))
    assert isinstance(data, bytes)
    got = decode_bytes(data)
    assert isinstance(got, Task)
    assert arrays_equal(got.weights, w)
    # Decoding hands out views of the received message, not copies.
    assert np.shares_memory(got.weights["layer7.weight"], np.frombuffer(data, np.uint8))


def test_the_wire_layout_is_the_documented_one() -> None:
    w = {"a": np.array([1.0, 2.0], np.float32), "b": np.array([3], np.int64)}
    data = encode(Result("t1", "j", 0, w, 2, 0.5, Timing(0.0, 1.0, None)))
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
    assert arrays_equal(decode_bytes(frame(header, payload)).weights, w)


def test_encode_refuses_what_the_peer_would_refuse() -> None:
    with pytest.raises(EncodeError, match="epochs"):
        encode(Task("t", "j", 0, {}, 0, 1, 0.1, 0.0, 0.0, None, SHA_A, SHA_B))
    with pytest.raises(EncodeError, match="code"):
        encode(Error("Bad Code", "", None))
    with pytest.raises(EncodeError):
        encode(Heartbeat(1, math.nan))
    with pytest.raises(EncodeError, match="dtype"):
        encode(Result("t", "j", 0, {"c": np.zeros(2, np.complex64)}, 1, 0.0, Timing(0, 0, None)))


# -- sessions: the whole conversation ---------------------------------------------


def test_full_conversation_in_memory() -> None:
    c = CoordinatorSession("coord-1", heartbeat_interval=5.0, heartbeat_timeout=20.0)
    d = DeviceSession()
    d.send_hello(
        "dev-1", runtime="executorch", token="secret", hardware={"model": "Pixel 7", "cores": 8}
    )
    pump(d, c)
    [hello] = c.events_received()
    assert isinstance(hello, Hello) and hello.token == "secret" and c.version == 1
    c.send_welcome()
    pump(c, d)
    [welcome] = d.events_received()
    assert isinstance(welcome, Welcome) and welcome.settings.heartbeat_interval_s == 5.0
    assert d.heartbeat_interval == 5.0 and d.heartbeat_timeout == 20.0

    program, shard = artifacts()
    c.send_provision("cnn", MODEL, program, shard)
    [provision_msg] = c.data_to_send()
    d.receive(provision_msg)
    [provision] = d.events_received()
    assert isinstance(provision, Provision)
    assert provision.program is not None and provision.program.sha256 == program.sha256
    assert provision.shard is not None and provision.shard.sha256 == shard.sha256

    # A second job with the same program and shard: nothing is resent.
    c.send_provision("cnn-b", MODEL, program, shard)
    [second] = c.data_to_send()
    assert len(second) < 1024 < len(provision_msg)
    d.receive(second)
    [bare] = d.events_received()
    assert isinstance(bare, Provision) and bare.program is None and bare.shard is None

    global_weights = TensorPack.from_arrays(weights())
    for rnd in range(2):
        c.send_task(
            task_id=f"t{rnd}",
            job_id="cnn",
            round=rnd,
            weights=global_weights,
            training=LocalTraining(epochs=1, batch_size=2, lr=0.1, momentum=0.9),
            deadline_s=60.0,
        )
        pump(c, d)
        [task] = d.events_received()
        assert isinstance(task, Task) and task.round == rnd and task.deadline_s == 60.0
        assert task.program_sha256 == program.sha256  # rounds reference, never resend
        trained = {k: np.array(v) for k, v in task.weights.items()}
        trained["fc.weight"] += 1.0
        d.send_result(
            task.task_id,
            weights=trained,
            samples=5,
            mean_loss=0.7,
            timing=Timing(0.01, 2.5, 0.2 if rnd else None),
        )
        pump(d, c)
        [result] = c.events_received()
        assert isinstance(result, Result) and result.task_id == f"t{rnd}" and result.round == rnd
        assert arrays_equal(result.weights, trained)
        assert c.pending_tasks == frozenset()

    # Heartbeats both ways, acked automatically; the echo measures a round trip.
    assert c.heartbeat_due(100.0)
    c.send_heartbeat(100.0)
    assert not c.heartbeat_due(101.0)
    pump(c, d)
    assert d.events_received() == [Heartbeat(1, 100.0)]
    pump(d, c)
    assert c.events_received() == [HeartbeatAck(1, 100.0)]
    d.send_heartbeat(7.0)
    pump(d, c)
    pump(c, d)
    assert d.events_received() == [HeartbeatAck(1, 7.0)]
    assert c.events_received() == [Heartbeat(1, 7.0)]

    # A cancelled task is still answered, here with an error.
    c.send_task(
        task_id="t9",
        job_id="cnn-b",
        round=2,
        weights=global_weights,
        training=LocalTraining(epochs=1, batch_size=2, lr=0.1),
    )
    c.send_cancel("t9", "deadline")
    pump(c, d)
    assert [type(e) for e in d.events_received()] == [Task, Cancel]
    d.send_error("cancelled", "stopped", task_id="t9")
    pump(d, c)
    assert c.events_received() == [Error("cancelled", "stopped", "t9")]
    assert c.pending_tasks == frozenset()

    d.send_bye("going_away", "battery low")
    pump(d, c)
    assert c.events_received() == [Closed("going_away", "battery low", by_peer=True)]
    assert c.closed and d.closed and c.failure is None
    assert c.websocket_close() == (1001, "battery low")


def test_reconnecting_device_with_cached_artifacts_gets_none_resent() -> None:
    program, shard = artifacts()
    c, d = open_pair(cached=(program.sha256, shard.sha256))
    assert c.device_has(program.sha256) and c.device_has(shard.sha256)
    c.send_provision("j", MODEL, program, shard)
    pump(c, d)
    [provision] = d.events_received()
    assert (
        isinstance(provision, Provision) and provision.program is None and provision.shard is None
    )
    assert d.failure is None


# -- version negotiation ------------------------------------------------------------


def test_version_negotiation_picks_the_highest_common_version() -> None:
    c = CoordinatorSession("c")
    c.receive_text(
        json.dumps(
            {
                "type": "hello",
                "device_id": "d",
                "token": "",
                "runtime": "torch",
                "versions": [7, 1, 3],
                "hardware": {},
                "cached": [],
            }
        )
    )
    assert isinstance(c.events_received()[0], Hello) and c.version == 1
    c.send_welcome()
    welcome = decode_text(c.data_to_send()[0])
    assert isinstance(welcome, Welcome) and welcome.version == 1


def test_no_common_version_closes_with_unsupported_version() -> None:
    c = CoordinatorSession("c")
    c.receive_text(
        json.dumps(
            {
                "type": "hello",
                "device_id": "d",
                "token": "",
                "runtime": "torch",
                "versions": [2, 9],
                "hardware": {},
                "cached": [],
            }
        )
    )
    assert_failed(c, "unsupported_version", "[2, 9]")


def test_device_refuses_a_welcome_for_a_version_it_did_not_offer() -> None:
    d = DeviceSession()
    d.send_hello("d")
    d.data_to_send()
    d.receive_text(encode(Welcome(5, "c", Settings(None, None, None, None))))
    assert_failed(d, "unsupported_version")


def test_sessions_reject_unknown_versions_at_construction() -> None:
    with pytest.raises(ValueError):
        CoordinatorSession("c", versions=(1, 2))


# -- bad input: every one fails the session with its code ---------------------------------

HELLO = json.dumps(
    {
        "type": "hello",
        "device_id": "d",
        "token": "",
        "runtime": "torch",
        "versions": [1],
        "hardware": {},
        "cached": [],
    }
)


@pytest.mark.parametrize(
    ("message", "code", "reason"),
    [
        ('{"type": "heartbeat", "seq": 1, "sent_at": 0}', "unexpected_message", "expected hello"),
        (b"MJFL", "unexpected_message", "binary message before"),
        ("{not json", "bad_message", "malformed JSON"),
        ("[1, 2]", "bad_message", "JSON object"),
        ('{"seq": 1}', "bad_message", "'type'"),
        ('{"type": "shout"}', "unknown_type", "shout"),
        ('{"type": "task"}', "bad_message", "binary"),
        (HELLO.replace('"token": ""', '"token": NaN'), "bad_message", "malformed JSON"),
        (HELLO.replace('"runtime": "torch"', '"runtime": "tf"'), "bad_message", "runtime"),
        (HELLO.replace('"device_id": "d"', '"device_id": ""'), "bad_message", "device_id"),
        (HELLO.replace('"versions": [1]', '"versions": [true]'), "bad_message", "versions"),
        (HELLO.replace('"cached": []', '"cached": ["abc"]'), "bad_message", "cached"),
        (HELLO.replace(', "hardware": {}', ""), "bad_message", "'hardware' is missing"),
        (
            '{"type": "heartbeat", "seq": 1, "sent_at": 1' + "0" * 400 + "}",
            "bad_message",
            "sent_at",
        ),
        ("[" * 100_000 + "]" * 100_000, "message_too_big", "exceeds"),
        ('{"type":' * 5000 + "1" + "}" * 5000, "bad_message", "malformed JSON"),
    ],
)
def test_bad_first_messages(message: str | bytes, code: str, reason: str) -> None:
    c = CoordinatorSession("c")
    c.receive(message)
    assert_failed(c, code, reason)


def test_device_messages_before_the_welcome_are_refused() -> None:
    c = CoordinatorSession("c")
    c.receive_text(HELLO)
    c.receive_text('{"type": "heartbeat", "seq": 1, "sent_at": 0}')
    assert_failed(c, "unexpected_message", "before the welcome")


def test_a_second_hello_is_refused() -> None:
    c, _ = open_pair()
    c.receive_text(HELLO)
    assert_failed(c, "unexpected_message", "hello")


def test_coordinator_only_messages_from_a_device_are_refused() -> None:
    c, _, task = with_task()
    c.receive_bytes(encode(task))
    assert_failed(c, "unexpected_message", "task")


def test_result_for_an_unknown_task() -> None:
    c, _, task = with_task()
    c.receive_bytes(result_bytes(task, task_id="t404"))
    assert_failed(c, "unknown_task", "t404")


def test_result_twice_for_the_same_task() -> None:
    c, _, task = with_task()
    c.receive_bytes(result_bytes(task))
    assert c.failure is None
    c.receive_bytes(result_bytes(task))
    assert_failed(c, "unknown_task")


def test_result_naming_another_round() -> None:
    c, _, task = with_task()
    c.receive_bytes(result_bytes(task, round=4))
    assert_failed(c, "bad_message", "round 4")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (
            lambda w: w.update({"fc.weight": np.zeros((3, 15), np.float32)}),
            "'fc.weight' is float32 [3, 15]",
        ),
        (lambda w: w.update({"fc.weight": np.zeros((3, 16), np.float64)}), "float64"),
        (lambda w: w.pop("conv.bias"), "missing ['conv.bias']"),
        (lambda w: w.update({"extra": np.zeros(1, np.float32)}), "unexpected ['extra']"),
        (lambda w: w.update({"conv.weight": w.pop("conv.weight")}), "different order"),
        (lambda w: w["conv.bias"].__setitem__(0, np.nan), "NaN"),
        (lambda w: w["fc.weight"].__setitem__((1, 1), -np.inf), "NaN or infinite"),
    ],
)
def test_results_with_bad_weights(change: Any, reason: str) -> None:
    c, _, task = with_task()
    w = {k: np.array(v) for k, v in task.weights.items()}
    change(w)
    c.receive_bytes(result_bytes(task, weights=w))
    assert_failed(c, "bad_weights", reason)


def test_result_frames_with_bad_framing_or_tables() -> None:
    def check(data: bytes, code: str, reason: str = "", **limits: Any) -> None:
        c, _, _ = with_task(**limits)
        c.receive_bytes(data)
        assert_failed(c, code, reason)

    _, _, task = with_task()
    good = result_bytes(task)
    header, payload = split(good)
    assert split(frame(header, payload))[1] == payload

    check(good[:20], "bad_frame", "24 header bytes")
    check(good[:-1], "bad_frame", "the message has")
    check(good + b"\0", "bad_frame", "the message has")
    check(b"XJFL" + good[4:], "bad_frame", "magic")
    check(frame(header, payload, version=2), "bad_frame", "version 2")
    check(frame(header, payload, flags=2), "bad_frame", "flags")
    check(
        frame(header, payload, payload_offset=128 if len(good) - len(payload) != 128 else 192),
        "bad_frame",
        "payload offset",
    )
    check(good, "message_too_big", "exceeds the limit of 100", max_message_bytes=100)
    check(good, "message_too_big", "JSON header", max_control_bytes=300)

    def table(mutate: Any) -> bytes:
        h = json.loads(json.dumps(header))
        mutate(h["tensors"])
        return frame(h, payload)

    check(table(lambda t: t[0].update(nbytes=t[0]["nbytes"] + 4)), "bad_tensor_table", "nbytes")
    check(table(lambda t: t[1].update(offset=t[1]["offset"] + 64)), "bad_tensor_table", "offset")
    check(table(lambda t: t[1].update(dtype="complex64")), "bad_tensor_table", "dtype")
    check(table(lambda t: t[0].update(shape=[-1])), "bad_tensor_table", "shape")
    check(table(lambda t: t[1].update(name=t[0]["name"])), "bad_tensor_table", "twice")
    check(table(lambda t: t.pop()), "bad_tensor_table", "payload has")
    check(
        frame({k: v for k, v in header.items() if k != "tensors"}, payload),
        "bad_tensor_table",
        "list",
    )
    check(frame(header, payload + bytes(64)), "bad_tensor_table", "payload has")
    check(frame({**header, "type": "heartbeat"}, payload), "bad_message", "text message")
    check(frame({**header, "type": "gossip"}, payload), "unknown_type", "gossip")
    check(frame({**header, "samples": -1}, payload), "bad_message", "samples")
    check(
        frame({**header, "timing": {"download_s": 0, "compute_s": "1"}}, payload),
        "bad_message",
        "compute_s",
    )
    bad_utf8 = bytearray(good)
    bad_utf8[24] = 0xFF
    check(bytes(bad_utf8), "bad_message", "UTF-8")


def big_weights(n: int = 300_000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {
        "w": rng.standard_normal(n, dtype=np.float32),
        "b": rng.standard_normal(7, dtype=np.float32),
    }


def test_split_messages_are_reassembled_with_text_between_parts() -> None:
    c, d = open_pair(device={"max_part_bytes": 100_000})
    c.send_provision("j", MODEL, *artifacts())
    c.send_task(
        task_id="t1", job_id="j", round=0, weights=big_weights(), training=LocalTraining(epochs=1, batch_size=1, lr=0.1)
    )
    pump(c, d)
    [_, task] = d.events_received()
    assert isinstance(task, Task)
    d.send_result(
        "t1", weights=dict(task.weights), samples=3, mean_loss=0.1, timing=Timing(0, 1, None)
    )
    parts = d.data_to_send()
    assert len(parts) == 13 and all(isinstance(x, bytes) and len(x) <= 100_000 for x in parts)
    assert struct.unpack_from("<H", parts[0], 6) == (p.FLAG_MORE,)
    assert all(x[:8] == struct.pack("<4sI", b"MJFC", i) for i, x in enumerate(parts[1:], 1))
    c.send_heartbeat(5.0)
    for i, part in enumerate(parts):
        c.receive(part)
        if i == 4:  # a text message between two parts is fine
            pump(c, d)
            pump(d, c)
    [ack, result] = c.events_received()
    assert isinstance(ack, HeartbeatAck) and isinstance(result, Result)
    assert arrays_equal(result.weights, big_weights()) and c.failure is None


def test_twenty_megabytes_in_okhttp_sized_parts_round_trip_byte_exact() -> None:
    rng = np.random.default_rng(3)
    w = {f"layer{i}": rng.standard_normal((1000, 500), dtype=np.float32) for i in range(10)}
    data = encode(Result("t", "j", 0, w, 1, 0.0, Timing(0, 0, None)))
    assert isinstance(data, bytes) and len(data) > 20_000_000
    parts = p.split_message(data, 8 * 2**20)
    assert len(parts) == 3 and max(len(x) for x in parts) <= 8 * 2**20
    assembly = p.begin_binary(parts[0])
    assert isinstance(assembly, p.Assembly)
    assert assembly.add(parts[1]) is None
    message = assembly.add(parts[2])
    assert isinstance(message, Result) and arrays_equal(message.weights, w)


def test_bad_parts_fail_the_session() -> None:
    whole = encode(Result("t1", "j", 3, big_weights(), 1, 0.1, Timing(0, 0, 0)))
    assert isinstance(whole, bytes)
    parts = p.split_message(whole, 100_000)
    assert len(parts) > 3

    def check(messages: list[bytes], reason: str) -> None:
        c, _ = open_pair()
        c.send_provision("j", MODEL, *artifacts())
        c.send_task(task_id="t1", job_id="j", round=3, weights=big_weights(), training=LocalTraining(epochs=1, batch_size=1, lr=0.1))
        for m in messages:
            c.receive_bytes(m)
        assert_failed(c, "bad_frame", reason)

    check([parts[1]], "no split message pending")
    check([parts[0], parts[2]], "part 2, expected 1")
    check([parts[0], parts[0]], "expected continuation part 1")
    check([parts[0], b"MJFC" + struct.pack("<I", 1)], "empty")
    check(
        [parts[0], parts[1], parts[2], b"MJFC" + struct.pack("<I", 3) + bytes(len(whole))],
        "past the payload",
    )
    complete_but_flagged = bytearray(whole)
    struct.pack_into("<H", complete_but_flagged, 6, p.FLAG_MORE)
    check([bytes(complete_but_flagged)], "less than")
    with pytest.raises(ProtocolError, match="first part"):
        decode_bytes(parts[0])


def test_a_split_result_longer_than_any_pending_task_asks_for_is_refused_on_its_first_part() -> None:
    # The per-device bound: a device cannot make the coordinator hold more than it asked for.
    parts = p.split_message(encode(Result("t1", "j", 3, big_weights(), 1, 0.1, Timing(0, 0, 0))), 100_000)
    c, _ = open_pair()
    c.receive_bytes(parts[0])  # no task pending: a device has nothing to send
    assert_failed(c, "message_too_big", "at most 0")
    c, _, _ = with_task()  # a task of weights(): far smaller than big_weights()
    c.receive_bytes(parts[0])
    assert_failed(c, "message_too_big", "1200028 payload bytes")
    c, _ = open_pair()
    c.send_provision("j", MODEL, *artifacts())
    c.send_task(task_id="t1", job_id="j", round=3, weights=big_weights(), training=LocalTraining(epochs=1, batch_size=1, lr=0.1))
    for part in parts:
        c.receive_bytes(part)
    [result] = [e for e in c.events_received() if isinstance(e, Result)]
    assert arrays_equal(result.weights, big_weights()) and c.failure is None


def test_heartbeat_ack_for_a_heartbeat_never_sent() -> None:
    c, _ = open_pair()
    c.receive_text(encode(HeartbeatAck(1, 0.0)))
    assert_failed(c, "bad_message", "heartbeat_ack")


def test_heartbeat_seq_must_increase() -> None:
    c, _ = open_pair()
    c.receive_text(encode(Heartbeat(2, 0.0)))
    c.receive_text(encode(Heartbeat(2, 0.0)))
    assert_failed(c, "bad_message", "heartbeat seq 2")


def test_error_for_an_unknown_task() -> None:
    c, _ = open_pair()
    c.receive_text(encode(Error("task_failed", "", "t7")))
    assert_failed(c, "unknown_task", "t7")


def test_device_refuses_a_task_for_a_job_never_provisioned() -> None:
    _, d = open_pair()
    d.receive_bytes(encode(Task("t", "ghost", 0, {}, 1, 1, 0.1, 0, 0, None, SHA_A, SHA_B)))
    assert_failed(d, "unknown_job", "ghost")


def test_device_refuses_a_provision_that_omits_an_artifact_it_lacks() -> None:
    program, shard = artifacts()
    _, d = open_pair(cached=(program.sha256,))
    d.receive_bytes(encode(Provision("j", MODEL, program.sha256, shard.sha256, None, None)))
    assert_failed(d, "missing_artifact", "shard")


def test_device_refuses_a_task_naming_artifacts_never_provisioned() -> None:
    _, d, task = with_task()
    other = Task("t2", "j", 0, {}, 1, 1, 0.1, 0, 0, None, SHA_A, task.shard_sha256)
    d.receive_bytes(encode(other))
    assert_failed(d, "missing_artifact")


def test_device_refuses_corrupt_artifacts() -> None:
    program, shard = artifacts()
    data = encode(Provision("j", MODEL, program.sha256, shard.sha256, program, shard))
    header, payload = split(data)
    corrupt = bytearray(payload)
    corrupt[0] ^= 1  # first program byte
    _, d = open_pair()
    d.receive_bytes(frame(header, bytes(corrupt)))
    assert_failed(d, "bad_artifact", "program")
    labels = {**header, "model": {**header["model"], "num_classes": 2}}
    _, d = open_pair()
    d.receive_bytes(frame(labels, payload))
    assert_failed(d, "bad_message", "labels")


def test_device_refuses_messages_before_its_hello_and_before_the_welcome() -> None:
    d = DeviceSession()
    d.receive_text(encode(Heartbeat(1, 0.0)))
    assert_failed(d, "unexpected_message", "before the device's hello")
    d = DeviceSession()
    d.send_hello("d")
    d.receive_text(encode(Cancel("t", "")))
    assert_failed(d, "unexpected_message", "expected welcome")


def test_device_refuses_device_only_messages_from_the_coordinator() -> None:
    _, d = open_pair()
    d.receive_text(HELLO)
    assert_failed(d, "unexpected_message", "hello")


def test_internal_errors_close_without_details_and_surface_to_the_caller(monkeypatch: Any) -> None:
    c, _ = open_pair()

    def boom(message: Any) -> None:
        raise KeyError("secret internal detail")

    monkeypatch.setattr(c, "_handle", boom)
    with pytest.raises(KeyError):
        c.receive_text(encode(Heartbeat(1, 0.0)))
    [bye] = c.data_to_send()
    assert "secret" not in bye and decode_text(bye) == Bye("internal_error", "internal error")
    assert c.websocket_close() == (1011, "internal error")


def test_close_reason_fits_a_websocket_close_frame() -> None:
    c = CoordinatorSession("c")
    c.receive_text('{"type": "' + "é" * 300 + '"}')
    code, reason = c.websocket_close()
    assert code == 1002 and 0 < len(reason.encode()) <= 123


# -- sending: local misuse is the caller's error, not the peer's -----------------------


def test_send_methods_check_state_and_arguments() -> None:
    c = CoordinatorSession("c")
    with pytest.raises(RuntimeError):
        c.send_welcome()  # no hello yet
    c, d, task = with_task()
    with pytest.raises(ValueError, match="not been provisioned"):
        c.send_task(
            task_id="t2", job_id="nope", round=0, weights={}, training=LocalTraining(epochs=1, batch_size=1, lr=0.1)
        )
    with pytest.raises(ValueError, match="already pending"):
        c.send_task(task_id="t1", job_id="j", round=0, weights={}, training=LocalTraining(epochs=1, batch_size=1, lr=0.1))
    with pytest.raises(EncodeError, match="NaN"):
        c.send_task(
            task_id="t2",
            job_id="j",
            round=0,
            weights={"w": np.array([np.nan])},
            training=LocalTraining(epochs=1, batch_size=1, lr=0.1),
        )
    with pytest.raises(EncodeError, match="input shape"):
        c.send_provision("k", ModelSpec("m", (2,), 3), *artifacts())
    trained = {k: np.array(v) for k, v in task.weights.items()}
    with pytest.raises(ValueError, match="not pending"):
        d.send_result("t404", weights=trained, samples=1, mean_loss=0.0, timing=Timing(0, 0, None))
    with pytest.raises(EncodeError, match="missing"):
        d.send_result("t1", weights={}, samples=1, mean_loss=0.0, timing=Timing(0, 0, None))
    trained["conv.bias"][0] = np.inf
    with pytest.raises(EncodeError, match="send_error"):
        d.send_result("t1", weights=trained, samples=1, mean_loss=0.0, timing=Timing(0, 0, None))
    assert c.failure is None and d.failure is None and d.pending_tasks == {"t1"}
    d.send_bye()
    with pytest.raises(SessionClosed):
        d.send_heartbeat(0.0)


def test_messages_larger_than_the_peer_accepts_are_not_sent() -> None:
    c, _ = open_pair(device={"max_message_bytes": 4096})
    c.send_provision("j", MODEL, *artifacts())
    with pytest.raises(EncodeError, match="peer's limit of 4096"):
        c.send_task(
            task_id="t",
            job_id="j",
            round=0,
            weights={"w": np.zeros(2000, np.float32)},
            training=LocalTraining(epochs=1, batch_size=1, lr=0.1),
        )
    assert c.pending_tasks == frozenset()


def test_limits_can_be_turned_off() -> None:
    c, d = open_pair(
        {
            "max_message_bytes": None,
            "max_control_bytes": None,
            "heartbeat_interval": None,
            "heartbeat_timeout": None,
        }
    )
    assert d.welcome is not None and d.welcome.settings == Settings(None, None, None, None)
    assert not c.heartbeat_due(1e9) and not d.heartbeat_due(1e9)
    c.receive_text(encode(Error("note", "x" * 1000, None)))
    assert c.failure is None


# -- heartbeats: time comes from the caller ------------------------------------------------


def test_heartbeat_schedule_and_expiry() -> None:
    c, d = open_pair({"heartbeat_interval": 10.0, "heartbeat_timeout": 30.0})
    assert c.heartbeat_due(0.0) and not c.is_expired(1e9)  # nothing unanswered yet
    c.send_heartbeat(0.0)
    assert not c.heartbeat_due(9.9) and c.heartbeat_due(10.0)
    c.send_heartbeat(10.0)
    assert not c.is_expired(29.9) and c.is_expired(30.0)  # counted from the oldest unanswered
    pump(c, d)
    pump(d, c)  # two acks
    assert [type(e) for e in c.events_received()] == [HeartbeatAck, HeartbeatAck]
    assert not c.is_expired(1e9)
    c.send_heartbeat(40.0)
    assert c.is_expired(70.0)
    c.receive_text(encode(Error("note", "", None)))
    assert not c.is_expired(70.0)  # any message proves the device alive


# -- fuzzing: arbitrary input raises ProtocolError and nothing else -----------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.just(-(10**400))
    | st.floats(allow_nan=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELDS = [
    "type",
    "device_id",
    "token",
    "runtime",
    "versions",
    "hardware",
    "cached",
    "version",
    "coordinator_id",
    "settings",
    "task_id",
    "job_id",
    "round",
    "seq",
    "sent_at",
    "echo",
    "code",
    "reason",
    "samples",
    "mean_loss",
    "timing",
    "tensors",
    "model",
]
TYPES = [
    "hello",
    "welcome",
    "provision",
    "task",
    "result",
    "cancel",
    "heartbeat",
    "heartbeat_ack",
    "error",
    "bye",
    "other",
]
json_messages = st.builds(
    lambda kind, fields: {**fields, "type": kind},
    st.sampled_from(TYPES),
    st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=10),
)


def _only_protocol_errors(decoder: Any, data: Any) -> None:
    try:
        decoder(data)
    except ProtocolError:
        pass


@FUZZ
@given(st.text())
def test_fuzz_text_decoder(text: str) -> None:
    _only_protocol_errors(decode_text, text)


@FUZZ
@given(json_messages)
def test_fuzz_text_decoder_with_plausible_messages(obj: dict[str, Any]) -> None:
    _only_protocol_errors(decode_text, json.dumps(obj))


@FUZZ
@given(st.binary())
def test_fuzz_binary_decoder(data: bytes) -> None:
    _only_protocol_errors(decode_bytes, data)
    _only_protocol_errors(decode_bytes, b"MJFL\x01\x00\x00\x00" + data)


@FUZZ
@given(json_messages, st.binary(max_size=200))
def test_fuzz_binary_decoder_with_plausible_headers(obj: dict[str, Any], payload: bytes) -> None:
    _only_protocol_errors(decode_bytes, frame(obj, payload))


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


def _valid_binaries() -> list[bytes]:
    program, shard = artifacts()
    out = [
        encode(Provision("j", MODEL, program.sha256, shard.sha256, program, shard)),
        encode(Task("t", "j", 0, weights(), 1, 1, 0.1, 0.0, 0.0, 5.0, SHA_A, SHA_B)),
        encode(Result("t", "j", 0, weights(), 1, 0.1, Timing(0, 0, 0))),
    ]
    return [o for o in out if isinstance(o, bytes)]


VALID_BINARIES = _valid_binaries()


@FUZZ
@given(st.sampled_from([encode(m) for m in TEXT_MESSAGES] + VALID_BINARIES), st.data())
def test_fuzz_decoders_with_one_field_mutated(message: str | bytes, data: st.DataObject) -> None:
    if isinstance(message, str):
        _only_protocol_errors(decode_text, json.dumps(_mutate(json.loads(message), data)))
    else:
        header, payload = split(message)
        _only_protocol_errors(decode_bytes, frame(_mutate(header, data), payload))


@FUZZ
@given(st.sampled_from(VALID_BINARIES), st.data())
def test_fuzz_binary_decoder_with_mutated_messages(message: bytes, data: st.DataObject) -> None:
    buf = bytearray(message)
    for _ in range(data.draw(st.integers(1, 8))):
        i = data.draw(st.integers(0, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(buf)))
    _only_protocol_errors(decode_bytes, bytes(buf))
    _only_protocol_errors(decode_bytes, bytes(buf[:cut]))


SPLIT_PARTS = p.split_message(
    encode(Result("t1", "j", 3, big_weights(20_000), 1, 0.1, Timing(0, 0, 0))),
    2**16 + 64,
)


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.text(max_size=50),
            st.binary(max_size=100),
            json_messages.map(json.dumps),
            st.sampled_from(VALID_BINARIES + SPLIT_PARTS),
        ),
        max_size=6,
    )
)
def test_fuzz_sessions_never_raise(messages: list[str | bytes]) -> None:
    for session in (CoordinatorSession("c"), open_pair()[0], open_pair()[1], with_task()[1]):
        for message in messages:
            session.receive(message)
            session.events_received()
            session.data_to_send()
        assert session.failure is None or isinstance(session.failure, ProtocolError)


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
        "hello": Hello(
            "pixel7-01",
            "s3cret",
            "executorch",
            (1,),
            {"model": "Pixel 7", "cores": 8, "ram_mb": 8192, "os": "Android 14"},
            (SHA_A,),
            268435456,
        ),
        # 5.1.1's known answer: the proof of secret "s3cret-s3cret-s3cret" over nonce 00..01.
        "hello_with_proof": Hello(
            "pixel7-01", "", "executorch", (1,), {"model": "Pixel 7"}, (), None,
            hello_proof("s3cret-s3cret-s3cret", "00" * 31 + "01", "pixel7-01"),
        ),
        "welcome": Welcome(1, "coord-1", Settings(10.0, 60.0, 268435456, 65536)),
        "heartbeat": Heartbeat(42, 1712.5),
        "heartbeat_ack": HeartbeatAck(42, 1712.5),
        "cancel": Cancel("t-0007", "deadline passed"),
        "error": Error("task_failed", "out of memory", "t-0007"),
        "bye": Bye("bad_weights", "result weights hold NaN or infinite values"),
    }
    out = {name: str(encode(m)) for name, m in examples.items()}
    result = encode(
        Result(
            "t-0007",
            "cnn",
            3,
            {"fc.bias": np.array([0.5, -1.0], np.float32), "steps": np.array([3], np.int64)},
            20,
            0.6931,
            Timing(0.012, 4.25, 0.31),
        )
    )
    assert isinstance(result, bytes)
    out["result_header"] = json.dumps(split(result)[0], separators=(",", ":"))
    out["result_hexdump"] = hexdump(result)
    return out


@pytest.mark.parametrize("name", list(doc_examples()))
def test_docs_show_what_the_codec_writes(name: str) -> None:
    assert doc_examples()[name] in PROTOCOL_MD.read_text(), f"docs/protocol.md is out of date for {name}"
