"""The messages (mjfl/device/protocol/messages.py): each class carries the wire name and kind the
spec gives it, and artifacts are addressed as the spec says."""

from __future__ import annotations

import hashlib
import json
import re
from typing import get_args

import numpy as np
import pytest
from repository import DOCS
from wire_protocol import MODEL, SHA_A, SHA_B, TEXT_MESSAGES, artifacts, split, weights

from mjfl.device import protocol as p

# "### 5.7 heartbeat and heartbeat_ack (both directions, text)"
_SECTION = re.compile(r"^### 5\.\d+ (?P<names>[a-z_ ]+) \([^,]+, (?P<kind>text|binary)\)$", re.MULTILINE)


def _documented_kinds() -> dict[str, str]:
    """Each message's wire name and kind (text or binary), from the headings of docs/protocol.md 5."""
    kinds = {}
    for heading in _SECTION.finditer((DOCS / "protocol.md").read_text()):
        for name in heading["names"].split(" and "):
            kinds[name] = heading["kind"]
    return kinds


def _one_of_each() -> list[p.Message]:
    program, shard = artifacts()
    return [
        *TEXT_MESSAGES,
        p.Provision("j", MODEL, program.sha256, shard.sha256, program, shard),
        p.Task("t", "j", 0, weights(), 1, 1, 0.1, 0.0, 0.0, 5.0, SHA_A, SHA_B),
        p.Result("t", "j", 0, weights(), 1, 0.1, p.Timing(0, 0, 0)),
    ]


def test_each_message_carries_the_wire_name_and_kind_the_spec_gives_it() -> None:
    messages = _one_of_each()
    assert {type(m) for m in messages} == set(get_args(p.Message))
    kinds = {}
    for message in messages:
        data = p.encode(message)
        fields = split(data)[0] if isinstance(data, bytes) else json.loads(data)
        assert fields["type"] == message.type  # the codec writes the class's name
        assert type(p.decode(data)) is type(message)  # and reads it back as that class
        kinds[message.type] = "binary" if isinstance(data, bytes) else "text"
    assert kinds == _documented_kinds()
    assert len(kinds) == len(get_args(p.Message))  # no two classes share a name


def test_a_shard_is_addressed_by_the_sha256_of_its_little_endian_bytes() -> None:
    x = np.arange(6, dtype=">f4").reshape(3, 2)  # big-endian in memory: the address is not
    y = np.array([2, 0, 1])
    shard = p.Shard(x, y)
    expected = hashlib.sha256(x.astype("<f4").tobytes() + y.astype("<i8").tobytes()).hexdigest()
    assert shard.sha256 == expected and shard.samples == 3
    with pytest.raises(ValueError, match="must have shapes"):
        p.Shard(x, y[:2])
