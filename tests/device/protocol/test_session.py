"""What both roles of a session share (mjfl/device/protocol/session.py): a whole conversation
in memory, closing, heartbeats on the caller's clock, limits, split messages, and sessions that
never raise for anything a peer sends."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from wire_protocol import (
    FUZZ,
    MODEL,
    arrays_equal,
    artifacts,
    assert_failed,
    big_weights,
    json_messages,
    open_pair,
    pump,
    valid_binaries,
    weights,
    with_task,
)

from mjfl.device import protocol as p
from mjfl.errors import EncodeError, ProtocolError
from mjfl.jobs.base import LocalTraining

VALID_BINARIES = valid_binaries()


# -- the whole conversation ----------------------------------------------------------------


def test_full_conversation_in_memory() -> None:
    c, d = _handshake()
    program = _provision_twice(c, d)
    global_weights = p.TensorPack.from_arrays(weights())
    _two_rounds(c, d, global_weights, program)
    _heartbeats_both_ways(c, d)
    _a_cancelled_task_is_still_answered(c, d, global_weights)
    d.send_bye("going_away", "battery low")
    pump(d, c)
    assert c.events_received() == [p.Closed("going_away", "battery low", by_peer=True)]
    assert c.closed and d.closed and c.failure is None
    assert c.websocket_close() == (1001, "battery low")


def _handshake() -> tuple[p.CoordinatorSession, p.DeviceSession]:
    c = p.CoordinatorSession("coord-1", heartbeat_interval=5.0, heartbeat_timeout=20.0)
    d = p.DeviceSession()
    d.send_hello(
        "dev-1", runtime="executorch", token="secret", hardware={"model": "Pixel 7", "cores": 8}
    )
    pump(d, c)
    [hello] = c.events_received()
    assert isinstance(hello, p.Hello) and hello.token == "secret" and c.version == 1
    c.send_welcome()
    pump(c, d)
    [welcome] = d.events_received()
    assert isinstance(welcome, p.Welcome) and welcome.settings.heartbeat_interval_s == 5.0
    assert d.heartbeat_interval == 5.0 and d.heartbeat_timeout == 20.0
    return c, d


def _provision_twice(c: p.CoordinatorSession, d: p.DeviceSession) -> p.Program:
    """Jobs "cnn" and "cnn-b" provisioned with one program and shard, sent once."""
    program, shard = artifacts()
    c.send_provision("cnn", MODEL, program, shard)
    [provision_msg] = c.data_to_send()
    d.receive(provision_msg)
    [provision] = d.events_received()
    assert isinstance(provision, p.Provision)
    assert provision.program is not None and provision.program.sha256 == program.sha256
    assert provision.shard is not None and provision.shard.sha256 == shard.sha256

    # A second job with the same program and shard: nothing is resent.
    c.send_provision("cnn-b", MODEL, program, shard)
    [second] = c.data_to_send()
    assert len(second) < 1024 < len(provision_msg)
    d.receive(second)
    [bare] = d.events_received()
    assert isinstance(bare, p.Provision) and bare.program is None and bare.shard is None
    return program


def _two_rounds(
    c: p.CoordinatorSession, d: p.DeviceSession, global_weights: p.TensorPack, program: p.Program
) -> None:
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
        assert isinstance(task, p.Task) and task.round == rnd and task.deadline_s == 60.0
        assert task.program_sha256 == program.sha256  # rounds reference, never resend
        trained = {k: np.array(v) for k, v in task.weights.items()}
        trained["fc.weight"] += 1.0
        d.send_result(
            task.task_id,
            weights=trained,
            samples=5,
            mean_loss=0.7,
            timing=p.Timing(0.01, 2.5, 0.2 if rnd else None),
        )
        pump(d, c)
        [result] = c.events_received()
        assert isinstance(result, p.Result) and result.task_id == f"t{rnd}" and result.round == rnd
        assert arrays_equal(result.weights, trained)
        assert c.pending_tasks == frozenset()


def _heartbeats_both_ways(c: p.CoordinatorSession, d: p.DeviceSession) -> None:
    """Heartbeats both ways, acked automatically; the echo measures a round trip."""
    assert c.heartbeat_due(100.0)
    c.send_heartbeat(100.0)
    assert not c.heartbeat_due(101.0)
    pump(c, d)
    assert d.events_received() == [p.Heartbeat(1, 100.0)]
    pump(d, c)
    assert c.events_received() == [p.HeartbeatAck(1, 100.0)]
    d.send_heartbeat(7.0)
    pump(d, c)
    pump(c, d)
    assert d.events_received() == [p.HeartbeatAck(1, 7.0)]
    assert c.events_received() == [p.Heartbeat(1, 7.0)]


def _a_cancelled_task_is_still_answered(
    c: p.CoordinatorSession, d: p.DeviceSession, global_weights: p.TensorPack
) -> None:
    """A cancelled task is still answered, here with an error."""
    c.send_task(
        task_id="t9",
        job_id="cnn-b",
        round=2,
        weights=global_weights,
        training=LocalTraining(epochs=1, batch_size=2, lr=0.1),
    )
    c.send_cancel("t9", "deadline")
    pump(c, d)
    assert [type(e) for e in d.events_received()] == [p.Task, p.Cancel]
    d.send_error("cancelled", "stopped", task_id="t9")
    pump(d, c)
    assert c.events_received() == [p.Error("cancelled", "stopped", "t9")]
    assert c.pending_tasks == frozenset()


def test_sessions_reject_unknown_versions_at_construction() -> None:
    with pytest.raises(ValueError):
        p.CoordinatorSession("c", versions=(1, 2))


# -- closing --------------------------------------------------------------------------------


def test_internal_errors_close_without_details_and_surface_to_the_caller(monkeypatch: Any) -> None:
    c, _ = open_pair()

    def boom(message: Any) -> None:
        raise KeyError("secret internal detail")

    monkeypatch.setattr(c, "_dispatch", boom)
    with pytest.raises(KeyError):
        c.receive_text(p.encode(p.Heartbeat(1, 0.0)))
    [bye] = c.data_to_send()
    assert "secret" not in bye and p.decode_text(bye) == p.Bye("internal_error", "internal error")
    assert c.websocket_close() == (1011, "internal error")


def test_close_reason_fits_a_websocket_close_frame() -> None:
    c = p.CoordinatorSession("c")
    c.receive_text('{"type": "' + "é" * 300 + '"}')
    code, reason = c.websocket_close()
    assert code == 1002 and 0 < len(reason.encode()) <= 123


# -- limits ---------------------------------------------------------------------------------


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
    assert d.welcome is not None and d.welcome.settings == p.Settings(None, None, None, None)
    assert not c.heartbeat_due(1e9) and not d.heartbeat_due(1e9)
    c.receive_text(p.encode(p.Error("note", "x" * 1000, None)))
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
    assert [type(e) for e in c.events_received()] == [p.HeartbeatAck, p.HeartbeatAck]
    assert not c.is_expired(1e9)
    c.send_heartbeat(40.0)
    assert c.is_expired(70.0)
    c.receive_text(p.encode(p.Error("note", "", None)))
    assert not c.is_expired(70.0)  # any message proves the device alive


def test_heartbeat_ack_for_a_heartbeat_never_sent() -> None:
    c, _ = open_pair()
    c.receive_text(p.encode(p.HeartbeatAck(1, 0.0)))
    assert_failed(c, "bad_message", "heartbeat_ack")


def test_heartbeat_seq_must_increase() -> None:
    c, _ = open_pair()
    c.receive_text(p.encode(p.Heartbeat(2, 0.0)))
    c.receive_text(p.encode(p.Heartbeat(2, 0.0)))
    assert_failed(c, "bad_message", "heartbeat seq 2")


# -- split messages -------------------------------------------------------------------------


def test_split_messages_are_reassembled_with_text_between_parts() -> None:
    c, d = open_pair(device={"max_part_bytes": 100_000})
    c.send_provision("j", MODEL, *artifacts())
    c.send_task(
        task_id="t1", job_id="j", round=0, weights=big_weights(), training=LocalTraining(epochs=1, batch_size=1, lr=0.1)
    )
    pump(c, d)
    [_, task] = d.events_received()
    assert isinstance(task, p.Task)
    d.send_result(
        "t1", weights=dict(task.weights), samples=3, mean_loss=0.1, timing=p.Timing(0, 1, None)
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
    assert isinstance(ack, p.HeartbeatAck) and isinstance(result, p.Result)
    assert arrays_equal(result.weights, big_weights()) and c.failure is None


def test_bad_parts_fail_the_session() -> None:
    whole = p.encode(p.Result("t1", "j", 3, big_weights(), 1, 0.1, p.Timing(0, 0, 0)))
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
        p.decode_bytes(parts[0])


# -- fuzzing: sessions never raise for what a peer sends -------------------------------------


SPLIT_PARTS = p.split_message(
    p.encode(p.Result("t1", "j", 3, big_weights(20_000), 1, 0.1, p.Timing(0, 0, 0))),
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
    for session in (p.CoordinatorSession("c"), open_pair()[0], open_pair()[1], with_task()[1]):
        for message in messages:
            session.receive(message)
            session.events_received()
            session.data_to_send()
        assert session.failure is None or isinstance(session.failure, ProtocolError)
