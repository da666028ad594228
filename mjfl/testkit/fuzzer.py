"""A seeded mutation fuzzer of protocol v1: the decoder and both sessions (docs/faults.md).

Seeds are valid messages of every type as the codec writes them (the same
messages as tests/golden/protocol), split parts included. Each input is one
seed mutated one to four times, by bytes (flip, set, insert, delete,
truncate, repeat a range, splice with another seed) or by structure (a JSON
field replaced by any JSON value, removed or written twice, in a text message
or a binary message's header, the binary frame rebuilt around it). Each input
is then

1. decoded: it must decode or raise ``ProtocolError`` with a code of
   protocol.md section 8, nothing else;
2. received by a session in each state that can receive it (coordinator
   fresh and open with a task pending; device open with a job provisioned):
   ``receive`` must not raise, and the session must be open or closed with
   a documented code whose WebSocket close code is section 8's.

Anything else is ``unhandled``: the figure that must stay 0. Pure and
deterministic: the same seed gives the same inputs and the same figures.
"""

from __future__ import annotations

import copy
import functools
import json
import struct
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mjfl.device.protocol.codec import (
    FIXED_HEADER,
    decode_bytes,
    decode_text,
    encode,
    split_message,
)
from mjfl.device.protocol.coordinator import CoordinatorSession
from mjfl.device.protocol.device import DeviceSession
from mjfl.device.protocol.messages import (
    Bye,
    Cancel,
    Error,
    Heartbeat,
    HeartbeatAck,
    Hello,
    ModelSpec,
    Program,
    Provision,
    Result,
    Settings,
    Shard,
    Task,
    TaskId,
    Timing,
    Welcome,
)
from mjfl.device.protocol.session import WEBSOCKET_CLOSE_CODES, State
from mjfl.device.protocol.tensors import align
from mjfl.errors import ProtocolError
from mjfl.ids import DeviceId, JobId
from mjfl.jobs.base import LocalTraining

DOCUMENTED_CODES = frozenset({
    "normal", "going_away", "unauthorized", "message_too_big", "heartbeat_timeout", "internal_error",
    "unsupported_version", "bad_message", "unknown_type", "unexpected_message", "bad_frame",
    "bad_tensor_table", "bad_weights", "unknown_task", "unknown_job", "missing_artifact", "bad_artifact",
    "too_many_connections",
})
"""The bye codes of protocol.md section 8."""

_INTERESTING = (0, 1, 0x7F, 0x80, 0xFF, ord("{"), ord('"'), ord("\\"), ord("0"))
_JSON_VALUES: tuple[Any, ...] = (
    None, True, False, 0, -1, 1, 2**63, -(2**63) - 1, 1e308, -0.0, 0.5, "", "x" * 300, "\ud800", "t1", "j",
    [], [1], [[]], {}, {"a": 1}, "float32", [2**31], [-1], "a" * 64,
)


@dataclass
class Figures:
    """What a fuzzing run found."""

    inputs: int = 0
    decoded: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    session_closed: Counter[str] = field(default_factory=Counter)
    session_open: int = 0
    unhandled: int = 0
    examples: list[dict[str, str]] = field(default_factory=list)  # the first few unhandled inputs

    def as_dict(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "unhandled": self.unhandled,
            "decoded": self.decoded,
            "rejected": dict(sorted(self.rejected.items())),
            "session_closed": dict(sorted(self.session_closed.items())),
            "session_still_open": self.session_open,
            "unhandled_examples": self.examples,
        }


@functools.cache
def seeds() -> tuple[str | bytes, ...]:
    """Valid messages of every type (and the parts of a split result), as the codec writes them."""
    rng = np.random.default_rng(0)
    weights = {"conv.weight": rng.standard_normal((2, 1, 3, 3), dtype=np.float32), "fc.bias": np.zeros(2, np.float32),
               "steps": np.array([3], np.int64)}
    program = Program(b"\x00program bytes" * 8)
    shard = Shard(rng.random((4, 1, 4, 4), dtype=np.float32), np.array([0, 1, 2, 1], np.int64))
    model = ModelSpec("lenet5", (1, 4, 4), 3, (16,))
    messages: list[Any] = [
        Hello(DeviceId("pixel7-01"), "s3cret", "executorch", (1,), {"model": "Pixel 7", "cores": 8}, ("a" * 64,), 2**28),
        Welcome(1, "coord-1", Settings(10.0, 60.0, 2**28, 2**16)),
        Cancel(TaskId("t1"), "deadline passed"),
        Heartbeat(42, 1712.5),
        HeartbeatAck(42, 1712.5),
        Error("task_failed", "out of memory", TaskId("t1")),
        Bye("bad_weights", "weights hold NaN"),
        Provision(JobId("j"), model, program.sha256, shard.sha256, program, shard),
        Provision(JobId("j"), model, program.sha256, shard.sha256, None, None),
        Task(TaskId("t1"), JobId("j"), 3, weights, 1, 2, 0.1, 0.9, 0.0, 120.0, program.sha256, shard.sha256),
        Result(TaskId("t1"), JobId("j"), 3, weights, 4, 0.69, Timing(0.01, 4.25, None)),
    ]
    out: list[str | bytes] = [encode(m) for m in messages]
    big = {"w": rng.standard_normal(20_000, dtype=np.float32)}
    out += split_message(bytes(encode(Result(TaskId("t2"), JobId("j"), 3, big, 4, 0.5, Timing(0, 0, None)))), 2**16 + 64)
    return tuple(out)


class Fuzzer:
    """Mutates seeds with ``rng`` and checks the decoder and the sessions on each input."""

    def __init__(self, rng: np.random.Generator, *, examples: int = 5) -> None:
        self.rng = rng
        self.seeds = seeds()
        self.figures = Figures()
        self._examples = examples
        self._task_weights = {"conv.weight": np.zeros((2, 1, 3, 3), np.float32), "fc.bias": np.zeros(2, np.float32),
                              "steps": np.zeros(1, np.int64)}
        # Each input meets sessions in these states, copied from templates (setting one up costs more).
        self._templates = (CoordinatorSession("coord-1"), self._open_coordinator(), self._open_device())

    # -- inputs --------------------------------------------------------------

    def input(self) -> str | bytes:
        """One mutated seed."""
        rng = self.rng
        data: str | bytes = self.seeds[int(rng.integers(len(self.seeds)))]
        for _ in range(int(rng.integers(1, 5))):
            if rng.random() < 0.4:
                data = self._structural(data)
            else:
                raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
                mutated = self._bytes(raw)
                if isinstance(data, str):
                    data = mutated.decode("utf-8", "surrogateescape")
                else:
                    data = mutated
        return data

    def _bytes(self, data: bytes) -> bytes:
        rng, buf = self.rng, bytearray(data)
        n = len(buf)
        kind = int(rng.integers(8))
        if kind == 0 and n:
            i = int(rng.integers(n))
            buf[i] ^= 1 << int(rng.integers(8))
        elif kind == 1 and n:
            buf[int(rng.integers(n))] = _INTERESTING[int(rng.integers(len(_INTERESTING)))]
        elif kind == 2:
            i = int(rng.integers(n + 1))
            buf[i:i] = rng.bytes(int(rng.integers(1, 9)))
        elif kind == 3 and n:
            i = int(rng.integers(n))
            del buf[i : i + int(rng.integers(1, 65))]
        elif kind == 4 and n:
            del buf[int(rng.integers(n)) :]
        elif kind == 5 and n:
            i = int(rng.integers(n))
            buf[i:i] = buf[i : i + int(rng.integers(1, 65))]
        elif kind == 6:
            other = self.seeds[int(rng.integers(len(self.seeds)))]
            other_b = other.encode() if isinstance(other, str) else other
            cut, cut_other = int(rng.integers(n + 1)), int(rng.integers(len(other_b) + 1))
            buf = buf[:cut] + bytearray(other_b[cut_other:])
        elif kind == 7 and n >= FIXED_HEADER.size:
            # A fixed-header field (magic, version, flags, lengths) set to an edge value.
            offset, fmt = [(4, "<H"), (6, "<H"), (8, "<I"), (12, "<I"), (16, "<Q")][int(rng.integers(5))]
            edge = [0, 1, 2**16 - 1, 2**31, 2**32 - 1, n, n + 64][int(rng.integers(7))]
            struct.pack_into(fmt, buf, offset, edge % (1 << (8 * struct.calcsize(fmt))))
        return bytes(buf)

    def _structural(self, data: str | bytes) -> str | bytes:
        """A JSON field replaced, removed or repeated; a binary frame rebuilt around its new header."""
        try:
            if isinstance(data, str):
                return self._mutate_json(data)
            if len(data) < FIXED_HEADER.size or data[:4] != b"MJFL":
                return data
            magic, version, flags, header_len, payload_offset, _ = FIXED_HEADER.unpack_from(data)
            header = bytes(data[FIXED_HEADER.size : FIXED_HEADER.size + header_len]).decode("utf-8")
            payload = data[payload_offset:]
        except (UnicodeDecodeError, ValueError, struct.error):
            return data
        new = self._mutate_json(header).encode("utf-8", "surrogatepass")
        offset = align(FIXED_HEADER.size + len(new))
        fixed = FIXED_HEADER.pack(magic, version, flags, len(new), offset, len(payload))
        return fixed + new + bytes(offset - FIXED_HEADER.size - len(new)) + payload

    def _mutate_json(self, text: str) -> str:
        rng = self.rng
        try:
            obj = json.loads(text)
        except ValueError:
            return text
        if not isinstance(obj, dict) or not obj:
            return text
        target: Any = obj
        # Walk down a few levels into nested objects and lists.
        for _ in range(int(rng.integers(0, 3))):
            children = [v for v in (target.values() if isinstance(target, dict) else target) if isinstance(v, (dict, list)) and v]
            if not children:
                break
            target = children[int(rng.integers(len(children)))]
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        if not keys:
            return text
        key = keys[int(rng.integers(len(keys)))]
        action = int(rng.integers(4))
        if action == 0:
            del target[key]
        elif action == 3 and isinstance(target, dict) and target is obj:
            # A field written twice: the JSON library would keep one silently.
            value = json.dumps(_JSON_VALUES[int(rng.integers(len(_JSON_VALUES)))])
            return text[:-1] + f',"{key}":{value}}}' if text.endswith("}") else text
        else:
            target[key] = _JSON_VALUES[int(rng.integers(len(_JSON_VALUES)))]
        return json.dumps(obj, ensure_ascii=bool(rng.integers(2)), allow_nan=bool(rng.integers(2)))

    # -- checks --------------------------------------------------------------

    def run(self, n: int, progress: Callable[[int], None] | None = None) -> Figures:
        """Fuzz ``n`` inputs; ``progress(done)`` every 1,000."""
        for i in range(n):
            self.check(self.input())
            if progress is not None and (i + 1) % 1000 == 0:
                progress(i + 1)
        return self.figures

    def check(self, data: str | bytes) -> None:
        """Decode ``data`` and feed it to the sessions, counting what happens."""
        f = self.figures
        f.inputs += 1
        try:
            decode_text(data) if isinstance(data, str) else decode_bytes(data)
            f.decoded += 1
        except ProtocolError as exc:
            if exc.code in DOCUMENTED_CODES:
                f.rejected[exc.code] += 1
            else:
                self._unhandled(data, f"decoder: undocumented code {exc.code!r}")
        except Exception as exc:  # noqa: BLE001 - the figure this fuzzer exists to find
            self._unhandled(data, f"decoder: {type(exc).__name__}: {exc}")
        for template in self._templates:
            session = copy.deepcopy(template)
            try:
                session.receive(data)
                session.events_received()
                session.data_to_send()
            except Exception as exc:  # noqa: BLE001 - as above: counted, never hidden
                self._unhandled(data, f"{type(session).__name__}: {type(exc).__name__}: {exc}")
                continue
            if session.state is State.CLOSED:
                code = session.close_code or ""
                close, _ = session.websocket_close()
                documented = WEBSOCKET_CLOSE_CODES.get(code, 1002) == close and (
                    code in DOCUMENTED_CODES or session.failure is None  # a peer's bye may carry any code
                )
                if documented:
                    # A peer's bye ends a session with whatever well-formed code it carries.
                    f.session_closed[code if session.failure is not None else "peer_bye"] += 1
                else:
                    self._unhandled(data, f"{type(session).__name__}: closed with {code!r} -> {close}")
            elif session.state in (State.START, State.HELLO, State.OPEN):
                f.session_open += 1
            else:
                self._unhandled(data, f"{type(session).__name__}: state {session.state}")

    def _unhandled(self, data: str | bytes, what: str) -> None:
        self.figures.unhandled += 1
        if len(self.figures.examples) < self._examples:
            shown = data[:200].hex() if isinstance(data, bytes) else repr(data[:200])
            self.figures.examples.append({"what": what, "input": shown})

    def _open_coordinator(self) -> CoordinatorSession:
        c, d = CoordinatorSession("coord-1"), DeviceSession()
        d.send_hello("dev-1", runtime="torch")
        for m in d.data_to_send():
            c.receive(m)
        c.send_welcome()
        program, shard = Program(b"p"), Shard(np.zeros((1, 1, 4, 4), np.float32), np.zeros(1, np.int64))
        c.send_provision("j", ModelSpec("lenet5", (1, 4, 4), 3), program, shard)
        training = LocalTraining(epochs=1, batch_size=1, lr=0.1)
        c.send_task(task_id="t1", job_id="j", round=3, weights=self._task_weights, training=training)
        c.send_task(task_id="t2", job_id="j", round=3, weights={"w": np.zeros(20_000, np.float32)}, training=training)
        c.events_received(), c.data_to_send()
        return c

    def _open_device(self) -> DeviceSession:
        c, d = CoordinatorSession("coord-1"), DeviceSession()
        d.send_hello("dev-1", runtime="torch")
        for m in d.data_to_send():
            c.receive(m)
        c.send_welcome()
        for m in c.data_to_send():
            d.receive(m)
        d.events_received(), d.data_to_send()
        return d
