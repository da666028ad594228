"""What the protocol's tests share (tests/device/protocol): messages built from the spec alone,
session pairs talking in memory, sample weights and artifacts, and the fuzzers' JSON."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from mjfl.device import protocol as p
from mjfl.jobs.base import LocalTraining

SHA_A, SHA_B = "a" * 64, "b" * 64
MODEL = p.ModelSpec("cnn", (1, 4, 4), 3)
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
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
"""A device's valid hello, written out as the spec shows it."""
TEXT_MESSAGES = [
    p.Hello(
        "dev-1",
        "tok",
        "executorch",
        (1, 2),
        {"model": "Pixel 7", "cores": 8, "ram_mb": 8192},
        (SHA_A,),
        1000,
    ),
    p.Hello("dev-é", "", "torch", (1,), {}, (), None),
    p.Welcome(1, "coord-1", p.Settings(10.0, 60.0, 2**28, 2**16)),
    p.Welcome(1, "coord-1", p.Settings(None, None, None, None)),
    p.Cancel("t1", "straggler"),
    p.Heartbeat(1, 123.456),
    p.HeartbeatAck(9, -0.5),
    p.Error("task_failed", "out of memory", "t1"),
    p.Error("busy", "", None),
    p.Bye("normal", "done"),
]
"""Text messages of every kind, some with every optional field and some with none."""


# -- messages built from the spec alone (not with the codec) ------------------------------


def frame(
    header: dict[str, Any],
    payload: bytes = b"",
    *,
    magic: bytes = b"MJFL",
    version: int = 1,
    flags: int = 0,
    payload_offset: int | None = None,
    payload_len: int | None = None,
    compact: bool = False,
) -> bytes:
    """A binary message built from the spec alone (docs/protocol.md section 3); ``compact``
    writes the JSON header without spaces, as the codec does."""
    text = json.dumps(header, separators=(",", ":") if compact else None).encode()
    natural = -(-(24 + len(text)) // 64) * 64
    offset = natural if payload_offset is None else payload_offset
    length = len(payload) if payload_len is None else payload_len
    fixed = struct.pack("<4sHHIIQ", magic, version, flags, len(text), offset, length)
    return fixed + text + bytes(max(0, natural - 24 - len(text))) + payload


def split(message: bytes) -> tuple[dict[str, Any], bytes]:
    """The JSON header and the payload of a binary message."""
    _, _, _, header_len, offset, _ = struct.unpack_from("<4sHHIIQ", message)
    return json.loads(message[24 : 24 + header_len]), message[offset:]


# -- sample tensors and artifacts ---------------------------------------------------------


def weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "conv.weight": rng.standard_normal((4, 1, 3, 3)).astype(np.float32),
        "conv.bias": rng.standard_normal(4).astype(np.float32),
        "fc.weight": rng.standard_normal((3, 16)).astype(np.float32),
        "bn.num_batches_tracked": np.array(7, dtype=np.int64),
    }


def big_weights(n: int = 300_000) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(2)
    return {
        "w": rng.standard_normal(n, dtype=np.float32),
        "b": rng.standard_normal(7, dtype=np.float32),
    }


def artifacts(seed: int = 0) -> tuple[p.Program, p.Shard]:
    rng = np.random.default_rng(seed)
    program = p.Program(bytes(rng.integers(0, 256, 300, dtype=np.uint8)))
    shard = p.Shard(rng.random((5, 1, 4, 4), dtype=np.float32), rng.integers(0, 3, 5))
    return program, shard


def arrays_equal(a: Any, b: Any) -> bool:
    return list(a) == list(b) and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and a[k].tobytes() == b[k].tobytes()
        for k in a
    )


def valid_binaries() -> list[bytes]:
    """One valid provision, task and result, encoded."""
    program, shard = artifacts()
    out = [
        p.encode(p.Provision("j", MODEL, program.sha256, shard.sha256, program, shard)),
        p.encode(p.Task("t", "j", 0, weights(), 1, 1, 0.1, 0.0, 0.0, 5.0, SHA_A, SHA_B)),
        p.encode(p.Result("t", "j", 0, weights(), 1, 0.1, p.Timing(0, 0, 0))),
    ]
    return [o for o in out if isinstance(o, bytes)]


# -- sessions talking in memory -----------------------------------------------------------


def pump(src: p.Session, dst: p.Session) -> None:
    """Deliver what ``src`` has to send to ``dst``."""
    for data in src.data_to_send():
        dst.receive(data)


def open_pair(
    coordinator: dict[str, Any] | None = None,
    device: dict[str, Any] | None = None,
    cached: tuple[str, ...] = (),
) -> tuple[p.CoordinatorSession, p.DeviceSession]:
    """A coordinator and a device session past hello and welcome, their events drained."""
    c = p.CoordinatorSession("coord-1", **(coordinator or {}))
    d = p.DeviceSession(**(device or {}))
    d.send_hello("dev-1", runtime="torch", cached=cached)
    pump(d, c)
    c.send_welcome()
    pump(c, d)
    c.events_received(), d.events_received()
    return c, d


def with_task(**coordinator: Any) -> tuple[p.CoordinatorSession, p.DeviceSession, p.Task]:
    """An open pair with job "j" provisioned and task "t1" at the device."""
    c, d = open_pair(coordinator)
    c.send_provision("j", MODEL, *artifacts())
    c.send_task(
        task_id="t1", job_id="j", round=3, weights=weights(), training=LocalTraining(epochs=1, batch_size=2, lr=0.1)
    )
    pump(c, d)
    events = d.events_received()
    assert isinstance(events[-1], p.Task)
    return c, d, events[-1]


def result_bytes(task: p.Task, **overrides: Any) -> bytes:
    """An encoded result answering ``task``, with some fields overridden."""
    fields: dict[str, Any] = {
        "task_id": task.task_id,
        "job_id": task.job_id,
        "round": task.round,
        "weights": {k: np.array(v) for k, v in task.weights.items()},
        "samples": 5,
        "mean_loss": 0.5,
        "timing": p.Timing(0.01, 1.0, None),
    }
    fields.update(overrides)
    data = p.encode(p.Result(**fields))
    assert isinstance(data, bytes)
    return data


def assert_failed(session: p.Session, code: str, reason_part: str = "") -> None:
    """The session failed with ``code``, told the peer with a bye and emitted Closed."""
    assert session.closed
    assert session.failure is not None and session.failure.code == code, session.failure
    assert reason_part in session.failure.reason
    out = session.data_to_send()
    bye = p.decode_text(out[-1])
    assert bye == p.Bye(code, session.failure.reason)
    assert session.events_received()[-1] == p.Closed(code, session.failure.reason, by_peer=False)
    ws_code, ws_reason = session.websocket_close()
    assert ws_code in (1002, 1009, 1011) and len(ws_reason.encode()) <= 123
    # Unrelated entry points stay quiet after a failure.
    session.receive_text('{"type": "bye", "code": "normal", "reason": ""}')
    assert session.events_received() == [] and session.data_to_send() == []
    assert not session.heartbeat_due(1e9) and not session.is_expired(1e9)
    with pytest.raises(p.SessionClosed):
        session.send_bye()


# -- the fuzzers' JSON --------------------------------------------------------------------

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
"""JSON objects of any message type, with any of the spec's fields holding any JSON value."""
