"""Protocol v1 codec: whole WebSocket messages <-> message dataclasses (docs/protocol.md).

Pure functions, no state, no I/O. A text message is one UTF-8 JSON object; a
binary message is a 24-byte fixed header, a JSON header and a tensor section:

    offset  size  field
    0       4     magic b"MJFL"
    4       2     u16 protocol version
    6       2     u16 flags: 0, or FLAG_MORE on the first part of a split message
    8       4     u32 header_len: bytes of JSON header
    12      4     u32 payload_offset = align64(24 + header_len)
    16      8     u64 payload_len; the message ends at payload_offset + payload_len
    24      ...   JSON header, then zero padding up to payload_offset
    ...           payload (see tensors.py)

All integers little-endian. A message too large for the sender's WebSocket
library (OkHttp queues at most 16 MiB) may travel split into parts
(split_message, Assembly). Decoding raises ProtocolError and nothing else,
whatever the input; encoding raises EncodeError for a message the other side
would refuse.
"""

from __future__ import annotations

import json
import math
import re
import struct
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt

from mjfl.device.protocol.messages import (
    RUNTIMES,
    Bye,
    Cancel,
    Error,
    Heartbeat,
    HeartbeatAck,
    Hello,
    Message,
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
from mjfl.device.protocol.tensors import (
    MAX_NDIM,
    Buffer,
    TensorInfo,
    TensorPack,
    _show,
    align,
    layout,
    read_table,
)
from mjfl.errors import EncodeError, ProtocolError
from mjfl.ids import DeviceId, JobId

PROTOCOL_VERSIONS: tuple[int, ...] = (1,)
"""Versions this implementation speaks, oldest first."""

MAGIC = b"MJFL"
FIXED_HEADER = struct.Struct("<4sHHIIQ")
FLAG_MORE = 0x0001
"""Fixed-header flag: the payload continues in continuation parts."""
PART_MAGIC = b"MJFC"
PART_HEADER = struct.Struct("<4sI")
"""A continuation part: magic b"MJFC", u32 part number (1, 2, ...), then payload bytes."""

DEFAULT_MAX_MESSAGE_BYTES = 256 * 2**20
DEFAULT_MAX_CONTROL_BYTES = 64 * 2**10
# The coordinator's heartbeat (docs/protocol.md, "Heartbeats"), announced to the device in its welcome,
# and how long a connection may take to say hello: the one home of these defaults, which the server, the
# sessions and the run configuration read.
DEFAULT_HEARTBEAT_INTERVAL_S = 5.0
DEFAULT_HEARTBEAT_TIMEOUT_S = 60.0
DEFAULT_HANDSHAKE_TIMEOUT_S = 10.0

MAX_ID_CHARS = 256
MAX_REASON_CHARS = 1024
MAX_TOKEN_CHARS = 4096
MAX_LIST = 4096
MAX_BATCH_NORM_LAYERS = 1024
MAX_DROPOUT_SITES = 1024
INT64_MAX = 2**63 - 1
_CODE = re.compile(r"[a-z][a-z0-9_]{0,63}")
_SHA256 = re.compile(r"[0-9a-f]{64}")


# -- decoding -----------------------------------------------------------------


def decode_text(text: str, *, max_size: int | None = DEFAULT_MAX_CONTROL_BYTES) -> Message:
    """Decode one text message; ProtocolError if it is not a valid v1 control message."""
    if max_size is not None and len(text) > max_size:
        raise _too_big("text message", len(text), max_size)
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise _bad("the text message is not valid UTF-8") from None
    if max_size is not None and size > max_size:
        raise _too_big("text message", size, max_size)
    obj = _load_json(text)
    kind = _type_of(obj)
    if kind in _BINARY_PARSERS:
        raise _bad(f"'{kind}' must travel as a binary message")
    parser = _TEXT_PARSERS.get(kind)
    if parser is None:
        raise ProtocolError(f"unknown message type {_show(kind)}", code="unknown_type")
    return parser(_Fields(obj, kind))


def decode_bytes(
    data: Buffer,
    *,
    version: int = PROTOCOL_VERSIONS[-1],
    max_size: int | None = DEFAULT_MAX_MESSAGE_BYTES,
    max_header_size: int | None = DEFAULT_MAX_CONTROL_BYTES,
) -> Message:
    """Decode one whole (unsplit) binary message of protocol ``version``.

    Tensors in the result are read-only views of ``data``: no copy is made, so
    ``data`` must not be modified while they are in use. Split messages need
    :func:`begin_binary`, which sessions use.
    """
    result = begin_binary(data, version=version, max_size=max_size, max_header_size=max_header_size)
    if isinstance(result, Assembly):
        raise _frame("the first part of a split message, whose other parts are not here")
    return result


def begin_binary(
    data: Buffer,
    *,
    version: int = PROTOCOL_VERSIONS[-1],
    max_size: int | None = DEFAULT_MAX_MESSAGE_BYTES,
    max_header_size: int | None = DEFAULT_MAX_CONTROL_BYTES,
) -> Message | Assembly:
    """Decode a whole binary message, or start an Assembly from the first part of a split one."""
    view = memoryview(data).cast("B")
    size = view.nbytes
    if bytes(view[:4]) == PART_MAGIC:
        raise _frame("a continuation part with no split message pending")
    if max_size is not None and size > max_size:
        raise _too_big("binary message", size, max_size)
    if size < FIXED_HEADER.size:
        raise _frame(f"a binary message needs {FIXED_HEADER.size} header bytes, got {size}")
    magic, got_version, flags, header_len, payload_offset, payload_len = FIXED_HEADER.unpack_from(
        view
    )
    if magic != MAGIC:
        raise _frame(f"bad magic {magic!r}, expected {MAGIC!r}")
    if got_version != version:
        raise _frame(f"binary message of version {got_version} in a version {version} session")
    if flags & ~FLAG_MORE:
        raise _frame(f"unknown flags {flags:#06x}")
    if max_header_size is not None and header_len > max_header_size:
        raise _too_big("JSON header", header_len, max_header_size)
    if payload_offset != align(FIXED_HEADER.size + header_len):
        raise _frame(
            f"payload offset {payload_offset}, expected {align(FIXED_HEADER.size + header_len)}"
        )
    total = payload_offset + payload_len
    if total > (sys.maxsize if max_size is None else max_size):
        raise _too_big("binary message", total, sys.maxsize if max_size is None else max_size)
    more = bool(flags & FLAG_MORE)
    if more and not payload_offset <= size < total:
        raise _frame(
            f"a first part must hold the {payload_offset}-byte header and less than {total} bytes"
        )
    if not more and total != size:
        raise _frame(f"header says {total} bytes, the message has {size}")
    try:
        header_text = str(view[FIXED_HEADER.size : FIXED_HEADER.size + header_len], "utf-8")
    except UnicodeDecodeError:
        raise _bad("the JSON header is not valid UTF-8") from None
    obj = _load_json(header_text)
    kind = _type_of(obj)
    if kind not in _BINARY_PARSERS:
        if kind in _TEXT_PARSERS:
            raise _bad(f"'{kind}' must travel as a text message")
        raise ProtocolError(f"unknown message type {_show(kind)}", code="unknown_type")
    head = _Head(kind, obj, read_table(obj.get("tensors"), payload_len))
    if more:
        return Assembly(head, payload_len, view[payload_offset:])
    return head.finish(view[payload_offset:])


@dataclass(frozen=True)
class _Head:
    """The checked JSON header of a binary message whose payload may still be arriving."""

    kind: str
    obj: dict[str, Any]
    table: tuple[TensorInfo, ...]

    def finish(self, payload: Buffer) -> Message:
        return _BINARY_PARSERS[self.kind](
            _Fields(self.obj, self.kind), TensorPack(self.table, payload), True
        )


class Assembly:
    """A split binary message being received part by part (docs/protocol.md, "Parts").

    The payload is copied once into a buffer of its announced length; the
    decoded tensors are views of that buffer.
    """

    def __init__(self, head: _Head, payload_len: int, first: memoryview) -> None:
        self._head = head
        self.payload_len = payload_len
        """The payload length the first part announced."""
        self._first: memoryview | None = first
        self._buffer = bytearray()  # allocated with the first continuation: a receiver checks payload_len first
        self._filled = first.nbytes
        self._next = 1

    def add(self, data: Buffer) -> Message | None:
        """Take the next continuation part; the message once it is complete, else None."""
        view = memoryview(data).cast("B")
        if view.nbytes < PART_HEADER.size or bytes(view[:4]) != PART_MAGIC:
            raise _frame(f"expected continuation part {self._next} of a split message")
        _, seq = PART_HEADER.unpack_from(view)
        if seq != self._next:
            raise _frame(f"continuation part {seq}, expected {self._next}")
        chunk = view[PART_HEADER.size :]
        if self._first is not None:
            self._buffer = bytearray(self.payload_len)
            self._buffer[: self._first.nbytes] = self._first
            self._first = None
        end = self._filled + chunk.nbytes
        if chunk.nbytes == 0 or end > len(self._buffer):
            raise _frame(f"continuation part {seq} is empty or runs past the payload's end")
        self._buffer[self._filled : end] = chunk
        self._filled = end
        self._next += 1
        if end < len(self._buffer):
            return None
        return self._head.finish(self._buffer)


def decode(
    data: str | Buffer,
    *,
    version: int = PROTOCOL_VERSIONS[-1],
    max_message_bytes: int | None = DEFAULT_MAX_MESSAGE_BYTES,
    max_control_bytes: int | None = DEFAULT_MAX_CONTROL_BYTES,
) -> Message:
    """Decode a text (str) or binary (bytes-like) message."""
    if isinstance(data, str):
        return decode_text(data, max_size=max_control_bytes)
    return decode_bytes(
        data, version=version, max_size=max_message_bytes, max_header_size=max_control_bytes
    )


class _Fields:
    """Typed access to a decoded JSON object; every failure is a ProtocolError."""

    def __init__(self, obj: dict[str, Any], where: str) -> None:
        self.obj = obj
        self.where = where

    def fail(self, key: str, problem: str) -> NoReturn:
        raise _bad(f"{self.where}: '{key}' {problem}")

    def get(self, key: str) -> Any:
        if key not in self.obj:
            self.fail(key, "is missing")
        return self.obj[key]

    def text(self, key: str, *, max_chars: int, min_chars: int = 0) -> str:
        value = self.get(key)
        if not isinstance(value, str) or not min_chars <= len(value) <= max_chars:
            self.fail(key, f"must be a string of {min_chars} to {max_chars} chars")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            self.fail(key, "is not valid UTF-8")
        return value

    def ident(self, key: str) -> str:
        return self.text(key, min_chars=1, max_chars=MAX_ID_CHARS)

    def opt_ident(self, key: str) -> str | None:
        return None if self.obj.get(key) is None else self.ident(key)

    def code(self, key: str) -> str:
        value = self.get(key)
        if not isinstance(value, str) or not _CODE.fullmatch(value):
            self.fail(key, "must match [a-z][a-z0-9_]{0,63}")
        return value

    def digest(self, key: str) -> str:
        value = self.get(key)
        if not isinstance(value, str) or not _SHA256.fullmatch(value):
            self.fail(key, "must be 64 lowercase hex digits (sha256)")
        return value

    def integer(self, key: str, *, low: int = 0, high: int = INT64_MAX) -> int:
        value = self.get(key)
        if type(value) is not int or not low <= value <= high:
            self.fail(key, f"must be an integer in [{low}, {high}]")
        return value

    def opt_integer(self, key: str, *, low: int = 0) -> int | None:
        return None if self.obj.get(key) is None else self.integer(key, low=low)

    def number(self, key: str, *, low: float | None = None, positive: bool = False) -> float:
        value = self.get(key)
        # Any finite double (section 2); an int beyond the double range is not one
        # (compared exactly: math.isfinite(10**400) would raise OverflowError).
        finite = (type(value) is int and abs(value) <= sys.float_info.max) or (
            type(value) is float and math.isfinite(value)
        )
        if not finite:
            self.fail(key, "must be a finite number")
        if low is not None and value < low:
            self.fail(key, f"must be >= {low}")
        if positive and value <= 0:
            self.fail(key, "must be > 0")
        return float(value)

    def opt_number(
        self, key: str, *, low: float | None = None, positive: bool = False
    ) -> float | None:
        if self.obj.get(key) is None:
            return None
        return self.number(key, low=low, positive=positive)

    def fields(self, key: str) -> _Fields:
        value = self.get(key)
        if not isinstance(value, dict):
            self.fail(key, "must be an object")
        return _Fields(value, f"{self.where}.{key}")

    def array(self, key: str, *, max_len: int = MAX_LIST) -> list[Any]:
        value = self.get(key)
        if not isinstance(value, list) or len(value) > max_len:
            self.fail(key, f"must be a list of at most {max_len} items")
        return value


def _hello(f: _Fields) -> Hello:
    versions = f.array("versions", max_len=64)
    if not versions or not all(type(v) is int and 1 <= v <= 0xFFFF for v in versions):
        f.fail("versions", "must be a non-empty list of ints in [1, 65535]")
    cached = f.array("cached")
    if not all(isinstance(c, str) and _SHA256.fullmatch(c) for c in cached):
        f.fail("cached", "must list sha256 digests (64 lowercase hex digits)")
    runtime = f.get("runtime")
    if runtime not in RUNTIMES:
        f.fail("runtime", f"must be one of {', '.join(RUNTIMES)}")
    return Hello(
        device_id=DeviceId(f.ident("device_id")),
        token=f.text("token", max_chars=MAX_TOKEN_CHARS),
        runtime=runtime,
        versions=tuple(versions),
        hardware=f.fields("hardware").obj,
        cached=tuple(cached),
        max_message_bytes=f.opt_integer("max_message_bytes", low=1),
        proof=_opt_proof(f),
    )


def _opt_proof(f: _Fields) -> str | None:
    """hello.proof (section 5.1.1): absent or null, else 64 lowercase hex digits."""
    value = f.obj.get("proof")
    if value is not None and not (isinstance(value, str) and _SHA256.fullmatch(value)):
        f.fail("proof", "must be 64 lowercase hex digits (HMAC-SHA256) or null")
    return value


def _welcome(f: _Fields) -> Welcome:
    s = f.fields("settings")
    return Welcome(
        version=f.integer("version", low=1, high=0xFFFF),
        coordinator_id=f.ident("coordinator_id"),
        settings=Settings(
            heartbeat_interval_s=s.opt_number("heartbeat_interval_s", positive=True),
            heartbeat_timeout_s=s.opt_number("heartbeat_timeout_s", positive=True),
            max_message_bytes=s.opt_integer("max_message_bytes", low=1),
            max_control_bytes=s.opt_integer("max_control_bytes", low=1),
        ),
    )


def _cancel(f: _Fields) -> Cancel:
    return Cancel(TaskId(f.ident("task_id")), f.text("reason", max_chars=MAX_REASON_CHARS))


def _heartbeat(f: _Fields) -> Heartbeat:
    return Heartbeat(f.integer("seq", low=1), f.number("sent_at"))


def _heartbeat_ack(f: _Fields) -> HeartbeatAck:
    return HeartbeatAck(f.integer("seq", low=1), f.number("echo"))


def _error(f: _Fields) -> Error:
    task_id = f.opt_ident("task_id")
    return Error(
        f.code("code"),
        f.text("reason", max_chars=MAX_REASON_CHARS),
        None if task_id is None else TaskId(task_id),
    )


def _bye(f: _Fields) -> Bye:
    return Bye(f.code("code"), f.text("reason", max_chars=MAX_REASON_CHARS))


def _model(f: _Fields) -> ModelSpec:
    shape = f.array("input_shape", max_len=8)
    if not shape or not all(type(d) is int and 1 <= d <= INT64_MAX for d in shape):
        f.fail("input_shape", "must be a list of 1 to 8 ints >= 1")
    pixels: list[Any] = []
    if f.obj.get("batch_norm_pixels") is not None:  # optional (a v1 minor addition)
        pixels = f.array("batch_norm_pixels", max_len=MAX_BATCH_NORM_LAYERS)
        if not all(type(p) is int and 1 <= p <= INT64_MAX for p in pixels):
            f.fail("batch_norm_pixels", f"must be a list of at most {MAX_BATCH_NORM_LAYERS} ints >= 1")
    noise: list[Any] = []
    if f.obj.get("dropout_shapes") is not None:  # optional (a v1 minor addition)
        noise = f.array("dropout_shapes", max_len=MAX_DROPOUT_SITES)
        if not all(
            isinstance(site, list) and 1 <= len(site) <= MAX_NDIM and all(type(d) is int and 1 <= d <= INT64_MAX for d in site)
            for site in noise
        ):
            f.fail("dropout_shapes", f"must be a list of at most {MAX_DROPOUT_SITES} shapes (1 to {MAX_NDIM} ints >= 1)")
    return ModelSpec(
        f.ident("name"), tuple(shape), f.integer("num_classes", low=1), tuple(pixels), tuple(tuple(s) for s in noise)
    )


def _provision(f: _Fields, pack: TensorPack, verify: bool) -> Provision:
    """A provision; with verify False (an outgoing message) only the metadata is checked."""
    model = _model(f.fields("model"))
    program_sha256, shard_sha256 = f.digest("program_sha256"), f.digest("shard_sha256")
    info = {t.name: t for t in pack.table}
    if not info.keys() <= {"program", "x", "y"}:
        raise _bad(f"provision: unexpected tensors {sorted(info.keys() - {'program', 'x', 'y'})}")
    program = shard = None
    if "program" in info:
        t = info["program"]
        if t.dtype != "uint8" or len(t.shape) != 1:
            raise _bad(f"provision: 'program' must be 1-d uint8, got {t.dtype} {list(t.shape)}")
        if verify:
            program = Program(pack.payload[t.offset : t.offset + t.nbytes])
            if program.sha256 != program_sha256:
                raise ProtocolError(
                    "provision: the program does not match program_sha256", code="bad_artifact"
                )
    if ("x" in info) != ("y" in info):
        raise _bad("provision: a shard needs both 'x' and 'y'")
    if "x" in info:
        x, y = info["x"], info["y"]
        if x.dtype != "float32" or len(x.shape) < 1 or x.shape[1:] != model.input_shape:
            raise _bad(
                f"provision: 'x' must be float32 (n, {', '.join(map(str, model.input_shape))})"
            )
        if y.dtype != "int64" or y.shape != x.shape[:1]:
            raise _bad(f"provision: 'y' must be int64 ({x.shape[0]},)")
        if verify:
            labels = pack["y"]
            if labels.size and (labels.min() < 0 or labels.max() >= model.num_classes):
                raise _bad(f"provision: labels must lie in [0, {model.num_classes})")
            shard = Shard(pack["x"], labels)
            if shard.sha256 != shard_sha256:
                raise ProtocolError(
                    "provision: the shard does not match shard_sha256", code="bad_artifact"
                )
    return Provision(JobId(f.ident("job_id")), model, program_sha256, shard_sha256, program, shard)


def _weights(pack: TensorPack, verify: bool, where: str) -> TensorPack:
    if verify and not pack.all_finite():
        raise ProtocolError(f"{where}: the weights hold NaN or infinite values", code="bad_weights")
    return pack


def _task(f: _Fields, pack: TensorPack, verify: bool) -> Task:
    return Task(
        task_id=TaskId(f.ident("task_id")),
        job_id=JobId(f.ident("job_id")),
        round=f.integer("round"),
        weights=_weights(pack, verify, Task.type),
        epochs=f.integer("epochs", low=1),
        batch_size=f.integer("batch_size", low=1),
        lr=f.number("lr", low=0.0),
        momentum=f.number("momentum", low=0.0),
        weight_decay=f.number("weight_decay", low=0.0),
        deadline_s=f.opt_number("deadline_s", positive=True),
        program_sha256=f.digest("program_sha256"),
        shard_sha256=f.digest("shard_sha256"),
        seed=f.opt_integer("seed"),
    )


def _result(f: _Fields, pack: TensorPack, verify: bool) -> Result:
    t = f.fields("timing")
    return Result(
        task_id=TaskId(f.ident("task_id")),
        job_id=JobId(f.ident("job_id")),
        round=f.integer("round"),
        weights=_weights(pack, verify, Result.type),
        samples=f.integer("samples"),
        mean_loss=f.number("mean_loss"),
        timing=Timing(
            download_s=t.number("download_s", low=0.0),
            compute_s=t.number("compute_s", low=0.0),
            upload_s=t.opt_number("upload_s", low=0.0),
        ),
        # Optional (a v1 minor addition): what the device knows of its state, free-form.
        device_state=None if f.obj.get("device_state") is None else f.fields("device_state").obj,
    )


# The parser of each message, under the wire name its class carries (messages.py).
_TEXT_PARSERS: dict[str, Callable[[_Fields], Message]] = {
    Hello.type: _hello,
    Welcome.type: _welcome,
    Cancel.type: _cancel,
    Heartbeat.type: _heartbeat,
    HeartbeatAck.type: _heartbeat_ack,
    Error.type: _error,
    Bye.type: _bye,
}
_BINARY_PARSERS: dict[str, Callable[[_Fields, TensorPack, bool], Message]] = {
    Provision.type: _provision,
    Task.type: _task,
    Result.type: _result,
}


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _unique_fields(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        twice = next(k for k, _ in pairs if k in seen or seen.add(k))  # type: ignore[func-returns-value]
        raise ValueError(f"field {twice[:40]!r} appears twice")  # section 2: no field twice
    return obj


def _load_json(text: str) -> dict[str, Any]:
    try:
        obj = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_fields)
    except (ValueError, RecursionError) as exc:
        # JSONDecodeError says where parsing stopped, never what the text held.
        raise _bad(f"malformed JSON: {str(exc)[:100]}") from None
    if not isinstance(obj, dict):
        raise _bad("a message must be a JSON object")
    return obj


def _type_of(obj: dict[str, Any]) -> str:
    kind = obj.get("type")
    if not isinstance(kind, str):
        raise _bad("a message needs a string field 'type'")
    return kind


def _bad(reason: str) -> ProtocolError:
    return ProtocolError(reason, code="bad_message")


def _frame(reason: str) -> ProtocolError:
    return ProtocolError(reason, code="bad_frame")


def _too_big(what: str, size: int, limit: int) -> ProtocolError:
    return ProtocolError(
        f"{what} of {size} bytes exceeds the limit of {limit}", code="message_too_big"
    )


# -- encoding -----------------------------------------------------------------


def encode(message: Message, *, version: int = PROTOCOL_VERSIONS[-1]) -> str | bytes:
    """Encode one message: a str for a text message, bytes for a binary one.

    Raises EncodeError when the message breaks a rule the receiver checks (the
    same rules as decoding, so whatever encodes also decodes). Tensors are
    copied once, into the returned bytes; a TensorPack's payload is reused as is.
    """
    if isinstance(message, (Provision, Task, Result)):
        return _encode_binary(message, version)
    text = _dumps({"type": message.type, **_text_fields(message)})
    try:
        _TEXT_PARSERS[message.type](_Fields(json.loads(text), message.type))
    except ProtocolError as exc:
        raise EncodeError(f"cannot encode {message.type}: {exc.reason}") from None
    return text


def _dumps(obj: dict[str, Any]) -> str:
    try:
        return json.dumps(obj, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise EncodeError(f"cannot encode {obj.get('type')}: {exc}") from None


def _text_fields(m: Message) -> dict[str, Any]:
    """A text message's JSON fields after ``type``, in the order they are written."""
    match m:
        case Hello():
            return {
                "device_id": m.device_id,
                "token": m.token,
                "runtime": m.runtime,
                "versions": list(m.versions),
                "hardware": dict(m.hardware),
                "cached": list(m.cached),
                "max_message_bytes": m.max_message_bytes,
                **({"proof": m.proof} if m.proof is not None else {}),
            }
        case Welcome():
            s = m.settings
            return {
                "version": m.version,
                "coordinator_id": m.coordinator_id,
                "settings": {
                    "heartbeat_interval_s": s.heartbeat_interval_s,
                    "heartbeat_timeout_s": s.heartbeat_timeout_s,
                    "max_message_bytes": s.max_message_bytes,
                    "max_control_bytes": s.max_control_bytes,
                },
            }
        case Cancel():
            return {"task_id": m.task_id, "reason": m.reason}
        case Heartbeat():
            return {"seq": m.seq, "sent_at": m.sent_at}
        case HeartbeatAck():
            return {"seq": m.seq, "echo": m.echo}
        case Error():
            return {"code": m.code, "reason": m.reason, "task_id": m.task_id}
        case Bye():
            return {"code": m.code, "reason": m.reason}
    raise TypeError(f"not a protocol message: {m!r}")


def _binary_fields(
    m: Provision | Task | Result,
) -> tuple[dict[str, Any], Mapping[str, npt.ArrayLike]]:
    """A binary message's JSON header fields after ``type`` (the table comes last) and its tensors."""
    match m:
        case Provision():
            return _provision_fields(m), _provision_tensors(m)
        case Task():
            return _task_fields(m), m.weights
        case Result():
            return _result_fields(m), m.weights


def _provision_fields(m: Provision) -> dict[str, Any]:
    return {
        "job_id": m.job_id,
        "model": {
            "name": m.model.name,
            "input_shape": list(m.model.input_shape),
            "num_classes": m.model.num_classes,
            # Written only for models with batch norm: older readers never see it.
            **({"batch_norm_pixels": list(m.model.batch_norm_pixels)} if m.model.batch_norm_pixels else {}),
            **({"dropout_shapes": [list(s) for s in m.model.dropout_shapes]} if m.model.dropout_shapes else {}),
        },
        "program_sha256": m.program_sha256,
        "shard_sha256": m.shard_sha256,
    }


def _provision_tensors(m: Provision) -> dict[str, npt.ArrayLike]:
    tensors: dict[str, npt.ArrayLike] = {}
    if m.program is not None:
        if m.program.sha256 != m.program_sha256:
            raise EncodeError("cannot encode provision: program_sha256 is not the program's")
        tensors["program"] = np.frombuffer(m.program.data, dtype=np.uint8)
    if m.shard is not None:
        if m.shard.sha256 != m.shard_sha256:
            raise EncodeError("cannot encode provision: shard_sha256 is not the shard's")
        tensors["x"], tensors["y"] = m.shard.x, m.shard.y
    return tensors


def _task_fields(m: Task) -> dict[str, Any]:
    return {
        "task_id": m.task_id,
        "job_id": m.job_id,
        "round": m.round,
        "epochs": m.epochs,
        "batch_size": m.batch_size,
        "lr": m.lr,
        "momentum": m.momentum,
        "weight_decay": m.weight_decay,
        "deadline_s": m.deadline_s,
        "program_sha256": m.program_sha256,
        "shard_sha256": m.shard_sha256,
        **({} if m.seed is None else {"seed": m.seed}),
    }


def _result_fields(m: Result) -> dict[str, Any]:
    t = m.timing
    return {
        "task_id": m.task_id,
        "job_id": m.job_id,
        "round": m.round,
        "samples": m.samples,
        "mean_loss": m.mean_loss,
        "timing": {
            "download_s": t.download_s,
            "compute_s": t.compute_s,
            "upload_s": t.upload_s,
        },
        **({"device_state": dict(m.device_state)} if m.device_state is not None else {}),
    }


def _encode_binary(m: Provision | Task | Result, version: int) -> bytes:
    fields, tensors = _binary_fields(m)
    header = {"type": m.type, **fields}
    if isinstance(tensors, TensorPack):
        table, parts = tensors.table, [tensors.payload]
    else:
        table, parts = layout(tensors)
    header["tensors"] = [info.to_json() for info in table]
    header_bytes = _dumps(header).encode("ascii")
    payload_len = table[-1].offset + table[-1].nbytes if table else 0
    try:
        # The JSON rules, checked on the header as the peer will read it; the
        # tensor values are ours and are not re-read (verify=False).
        _BINARY_PARSERS[m.type](
            _Fields(json.loads(header_bytes), m.type), TensorPack(table, b""), False
        )
    except ProtocolError as exc:
        raise EncodeError(f"cannot encode {m.type}: {exc.reason}") from None
    payload_offset = align(FIXED_HEADER.size + len(header_bytes))
    fixed = FIXED_HEADER.pack(MAGIC, version, 0, len(header_bytes), payload_offset, payload_len)
    padding = bytes(payload_offset - FIXED_HEADER.size - len(header_bytes))
    return b"".join([fixed, header_bytes, padding, *parts])


def split_message(data: bytes, max_part_bytes: int) -> list[bytes]:
    """Split an encoded binary message into WebSocket messages of at most ``max_part_bytes``.

    The first part is the message itself, cut short, with FLAG_MORE set; each
    continuation part is PART_HEADER followed by the next payload bytes. A
    message that fits is returned whole.
    """
    if len(data) <= max_part_bytes:
        return [data]
    _, _, flags, _, payload_offset, _ = FIXED_HEADER.unpack_from(data)
    if max_part_bytes <= max(payload_offset, PART_HEADER.size):
        raise EncodeError(
            f"parts of {max_part_bytes} bytes cannot hold a {payload_offset}-byte header"
        )
    view = memoryview(data)
    first = bytearray(view[:max_part_bytes])
    struct.pack_into("<H", first, 6, flags | FLAG_MORE)
    parts = [bytes(first)]
    step = max_part_bytes - PART_HEADER.size
    for seq, start in enumerate(range(max_part_bytes, len(data), step), start=1):
        parts.append(b"".join([PART_HEADER.pack(PART_MAGIC, seq), view[start : start + step]]))
    return parts
