"""The coordinator's end of a session (mjfl/device/protocol/coordinator.py): version
negotiation, artifacts sent once per device, and every result checked against its task; each bad
input fails the session with its code."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from wire_protocol import (
    HELLO,
    MODEL,
    arrays_equal,
    artifacts,
    assert_failed,
    big_weights,
    frame,
    open_pair,
    pump,
    result_bytes,
    split,
    with_task,
)

from mjfl.device import protocol as p
from mjfl.errors import EncodeError
from mjfl.jobs.base import LocalTraining


def test_reconnecting_device_with_cached_artifacts_gets_none_resent() -> None:
    program, shard = artifacts()
    c, d = open_pair(cached=(program.sha256, shard.sha256))
    assert c.device_has(program.sha256) and c.device_has(shard.sha256)
    c.send_provision("j", MODEL, program, shard)
    pump(c, d)
    [provision] = d.events_received()
    assert (
        isinstance(provision, p.Provision) and provision.program is None and provision.shard is None
    )
    assert d.failure is None


# -- version negotiation ------------------------------------------------------------


def test_version_negotiation_picks_the_highest_common_version() -> None:
    c = p.CoordinatorSession("c")
    c.receive_text(HELLO.replace('"versions": [1]', '"versions": [7, 1, 3]'))
    assert isinstance(c.events_received()[0], p.Hello) and c.version == 1
    c.send_welcome()
    welcome = p.decode_text(c.data_to_send()[0])
    assert isinstance(welcome, p.Welcome) and welcome.version == 1


def test_no_common_version_closes_with_unsupported_version() -> None:
    c = p.CoordinatorSession("c")
    c.receive_text(HELLO.replace('"versions": [1]', '"versions": [2, 9]'))
    assert_failed(c, "unsupported_version", "[2, 9]")


# -- bad input: every one fails the session with its code ---------------------------------


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
    c = p.CoordinatorSession("c")
    c.receive(message)
    assert_failed(c, code, reason)


def test_device_messages_before_the_welcome_are_refused() -> None:
    c = p.CoordinatorSession("c")
    c.receive_text(HELLO)
    c.receive_text('{"type": "heartbeat", "seq": 1, "sent_at": 0}')
    assert_failed(c, "unexpected_message", "before the welcome")


def test_a_second_hello_is_refused() -> None:
    c, _ = open_pair()
    c.receive_text(HELLO)
    assert_failed(c, "unexpected_message", "hello")


def test_coordinator_only_messages_from_a_device_are_refused() -> None:
    c, _, task = with_task()
    c.receive_bytes(p.encode(task))
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


def test_a_split_result_longer_than_any_pending_task_asks_for_is_refused_on_its_first_part() -> None:
    # The per-device bound: a device cannot make the coordinator hold more than it asked for.
    parts = p.split_message(p.encode(p.Result("t1", "j", 3, big_weights(), 1, 0.1, p.Timing(0, 0, 0))), 100_000)
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
    [result] = [e for e in c.events_received() if isinstance(e, p.Result)]
    assert arrays_equal(result.weights, big_weights()) and c.failure is None


def test_error_for_an_unknown_task() -> None:
    c, _ = open_pair()
    c.receive_text(p.encode(p.Error("task_failed", "", "t7")))
    assert_failed(c, "unknown_task", "t7")


# -- sending: local misuse is the caller's error, not the peer's -----------------------


def test_send_methods_check_state_and_arguments() -> None:
    c = p.CoordinatorSession("c")
    with pytest.raises(RuntimeError):
        c.send_welcome()  # no hello yet
    c, _, _ = with_task()
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
        c.send_provision("k", p.ModelSpec("m", (2,), 3), *artifacts())
    assert c.failure is None and c.pending_tasks == {"t1"}
