"""A device's end of its session (mjfl/device/protocol/device.py): what it refuses from the
coordinator, each with its code, and its own send methods' checks."""

from __future__ import annotations

import numpy as np
import pytest
from wire_protocol import (
    HELLO,
    MODEL,
    SHA_A,
    SHA_B,
    artifacts,
    assert_failed,
    frame,
    open_pair,
    split,
    with_task,
)

from mjfl.device import protocol as p
from mjfl.errors import EncodeError


def test_device_refuses_a_welcome_for_a_version_it_did_not_offer() -> None:
    d = p.DeviceSession()
    d.send_hello("d")
    d.data_to_send()
    d.receive_text(p.encode(p.Welcome(5, "c", p.Settings(None, None, None, None))))
    assert_failed(d, "unsupported_version")


# -- bad input: every one fails the session with its code ---------------------------------


def test_device_refuses_a_task_for_a_job_never_provisioned() -> None:
    _, d = open_pair()
    d.receive_bytes(p.encode(p.Task("t", "ghost", 0, {}, 1, 1, 0.1, 0, 0, None, SHA_A, SHA_B)))
    assert_failed(d, "unknown_job", "ghost")


def test_device_refuses_a_provision_that_omits_an_artifact_it_lacks() -> None:
    program, shard = artifacts()
    _, d = open_pair(cached=(program.sha256,))
    d.receive_bytes(p.encode(p.Provision("j", MODEL, program.sha256, shard.sha256, None, None)))
    assert_failed(d, "missing_artifact", "shard")


def test_device_refuses_a_task_naming_artifacts_never_provisioned() -> None:
    _, d, task = with_task()
    other = p.Task("t2", "j", 0, {}, 1, 1, 0.1, 0, 0, None, SHA_A, task.shard_sha256)
    d.receive_bytes(p.encode(other))
    assert_failed(d, "missing_artifact")


def test_device_refuses_corrupt_artifacts() -> None:
    program, shard = artifacts()
    data = p.encode(p.Provision("j", MODEL, program.sha256, shard.sha256, program, shard))
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


@pytest.mark.parametrize(
    ("state", "message", "reason"),
    [
        (p.State.START, p.encode(p.Heartbeat(1, 0.0)), "before the device's hello"),
        (p.State.HELLO, p.encode(p.Cancel("t", "")), "expected welcome"),
        (p.State.OPEN, HELLO, "hello"),  # a device-only message from the coordinator
    ],
    ids=["before-hello", "before-welcome", "open"],
)
def test_device_refuses_what_its_state_does_not_allow(state: p.State, message: str, reason: str) -> None:
    """What a device may receive in each state (docs/protocol.md 7.1)."""
    if state is p.State.OPEN:
        _, d = open_pair()
    else:
        d = p.DeviceSession()
        if state is p.State.HELLO:
            d.send_hello("d")
    d.receive_text(message)
    assert_failed(d, "unexpected_message", reason)


# -- sending: local misuse is the caller's error, not the peer's -----------------------


def test_send_methods_check_state_and_arguments() -> None:
    c, d, task = with_task()
    trained = {k: np.array(v) for k, v in task.weights.items()}
    with pytest.raises(ValueError, match="not pending"):
        d.send_result("t404", weights=trained, samples=1, mean_loss=0.0, timing=p.Timing(0, 0, None))
    with pytest.raises(EncodeError, match="missing"):
        d.send_result("t1", weights={}, samples=1, mean_loss=0.0, timing=p.Timing(0, 0, None))
    trained["conv.bias"][0] = np.inf
    with pytest.raises(EncodeError, match="send_error"):
        d.send_result("t1", weights=trained, samples=1, mean_loss=0.0, timing=p.Timing(0, 0, None))
    assert c.failure is None and d.failure is None and d.pending_tasks == {"t1"}
    d.send_bye()
    with pytest.raises(p.SessionClosed):
        d.send_heartbeat(0.0)
