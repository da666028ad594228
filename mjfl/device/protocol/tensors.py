"""Named tensors laid out in one aligned buffer: the tensor section of a binary message.

A tensor table lists ``(name, dtype, shape, offset, nbytes)`` for each tensor; the
payload holds the raw little-endian, C-order bytes. The layout is canonical so a
reader can check it exactly (docs/protocol.md, "Tensor section"): tensors follow
in table order, the first at offset 0, each later one at the first multiple of
:data:`ALIGN` after the end of the one before; gaps are zero bytes and the payload
ends where the last tensor ends.

Encoding copies each tensor once, straight into the outgoing message; decoding
copies nothing: the arrays are read-only ``numpy.frombuffer`` views of the
received message.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np
import numpy.typing as npt

from mjfl.errors import EncodeError, ProtocolError

ALIGN = 64
"""Every tensor starts at a multiple of this many bytes from the payload start."""

DTYPES: Mapping[str, np.dtype[Any]] = {
    "float16": np.dtype("<f2"),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
    "int8": np.dtype("i1"),
    "uint8": np.dtype("u1"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
}
"""Wire dtype names and their numpy equivalents, all little-endian."""

_NAME_OF = {(dt.kind, dt.itemsize): name for name, dt in DTYPES.items()}

MAX_NAME_CHARS = 1024
MAX_NDIM = 32

# A bytes-like object the decoder accepts: bytes, bytearray or memoryview.
Buffer = bytes | bytearray | memoryview


def align(n: int) -> int:
    """The first multiple of ALIGN at or after ``n``."""
    return -(-n // ALIGN) * ALIGN


def dtype_name(dtype: npt.DTypeLike) -> str:
    """The wire name of a numpy dtype, whatever its byte order; EncodeError if unsupported."""
    dt = np.dtype(dtype)
    name = _NAME_OF.get((dt.kind, dt.itemsize))
    if name is None:
        raise EncodeError(
            f"dtype {dt} is not supported on the wire (supported: {', '.join(DTYPES)})"
        )
    return name


@dataclass(frozen=True)
class TensorInfo:
    """One row of a tensor table; ``offset`` counts from the payload start."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "offset": self.offset,
            "nbytes": self.nbytes,
        }


Signature = tuple[tuple[str, str, tuple[int, ...]], ...]
"""Names, dtypes and shapes of a tensor mapping, in order."""


class TensorPack(Mapping[str, np.ndarray]):
    """An ordered, read-only mapping of name -> array over one contiguous payload.

    Build one with :meth:`from_arrays` to encode the same tensors for many
    devices: the payload is laid out once and every message reuses it (a
    coordinator broadcasting a global model packs it once per round). Decoded
    messages hand out packs whose arrays are views of the received bytes.
    """

    __slots__ = ("_finite", "_index", "payload", "table")

    def __init__(self, table: tuple[TensorInfo, ...], payload: Buffer) -> None:
        # Trusted: callers pass a table checked by read_table or built by layout.
        self.table = table
        self.payload = payload
        self._index = {info.name: info for info in table}
        self._finite: bool | None = None

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, npt.ArrayLike]) -> TensorPack:
        """Pack ``arrays`` (in their iteration order) into one payload; one copy each."""
        if isinstance(arrays, TensorPack):
            return arrays
        table, parts = layout(arrays)
        return cls(table, b"".join(parts))

    def __getitem__(self, name: str) -> np.ndarray:
        info = self._index[name]
        dt = DTYPES[info.dtype]
        count = info.nbytes // dt.itemsize
        flat = np.frombuffer(self.payload, dtype=dt, count=count, offset=info.offset)
        return flat.reshape(info.shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._index)

    def __len__(self) -> int:
        return len(self.table)

    def __repr__(self) -> str:
        return f"TensorPack({len(self)} tensors, {self.nbytes} bytes)"

    @property
    def nbytes(self) -> int:
        """Length of the payload in bytes, padding included."""
        return memoryview(self.payload).nbytes

    @property
    def signature(self) -> Signature:
        return tuple((info.name, info.dtype, info.shape) for info in self.table)

    def all_finite(self) -> bool:
        """True when no floating-point tensor holds a NaN or an infinity (memoized)."""
        if self._finite is None:
            self._finite = all(
                bool(np.isfinite(self[info.name]).all())
                for info in self.table
                if info.dtype.startswith("float")
            )
        return self._finite


def signature(arrays: Mapping[str, npt.ArrayLike]) -> Signature:
    """The (name, dtype, shape) list of a mapping, as it would travel."""
    if isinstance(arrays, TensorPack):
        return arrays.signature
    out = []
    for name, value in arrays.items():
        a = np.asarray(value)
        out.append((name, dtype_name(a.dtype), tuple(int(d) for d in a.shape)))
    return tuple(out)


def as_arrays(arrays: Mapping[str, npt.ArrayLike]) -> Mapping[str, np.ndarray]:
    """The tensors as numpy arrays, without copying (a TensorPack is kept as is)."""
    if isinstance(arrays, TensorPack):
        return arrays
    return {name: np.asarray(value) for name, value in arrays.items()}


def all_finite(arrays: Mapping[str, np.ndarray]) -> bool:
    """True when no floating-point tensor holds a NaN or an infinity."""
    if isinstance(arrays, TensorPack):
        return arrays.all_finite()
    return all(a.dtype.kind != "f" or bool(np.isfinite(a).all()) for a in arrays.values())


def mismatch(got: Signature, expected: Signature) -> str | None:
    """How two tensor signatures differ, or None when they are the same."""
    if got == expected:
        return None
    got_names, expected_names = [g[0] for g in got], [e[0] for e in expected]
    if got_names != expected_names:
        missing = [n for n in expected_names if n not in got_names]
        extra = [n for n in got_names if n not in expected_names]
        if missing or extra:
            return f"missing {_show(missing)}, unexpected {_show(extra)}"
        return "the tensors come in a different order"
    for (name, dtype, shape), (_, want_dtype, want_shape) in zip(got, expected):
        if (dtype, shape) != (want_dtype, want_shape):
            return (
                f"{_show(name)} is {dtype} {list(shape)}, expected {want_dtype} {list(want_shape)}"
            )
    raise AssertionError("signatures differ but no difference found")


def payload_bytes(expected: Signature) -> int:
    """The canonical payload length of tensors with these names, dtypes and shapes (protocol.md 3)."""
    end = 0
    for _name, dtype, shape in expected:
        end = align(end) + math.prod(shape) * DTYPES[dtype].itemsize
    return end


def layout(arrays: Mapping[str, npt.ArrayLike]) -> tuple[tuple[TensorInfo, ...], list[Buffer]]:
    """The canonical table for ``arrays`` and the byte pieces that make the payload.

    Joining the pieces gives the payload; nothing is copied until then, so a
    caller joins them together with a message header in a single copy.
    EncodeError names the first tensor that cannot travel.
    """
    table: list[TensorInfo] = []
    parts: list[Buffer] = []
    cursor = 0
    for name, value in arrays.items():
        if not _valid_name(name):
            raise EncodeError(
                f"tensor name {name!r} must be a UTF-8 string of 1 to {MAX_NAME_CHARS} chars"
            )
        a = np.asarray(value)
        wire = dtype_name(a.dtype)
        if a.ndim > MAX_NDIM:
            raise EncodeError(f"tensor {name!r} has {a.ndim} dimensions, at most {MAX_NDIM} travel")
        # np.require keeps 0-d arrays 0-d (ascontiguousarray would make them 1-d)
        # and copies only when the byte order or memory layout is wrong.
        a = np.require(a, dtype=DTYPES[wire], requirements="C")
        offset = align(cursor)
        if offset > cursor:
            parts.append(bytes(offset - cursor))
        parts.append(a.reshape(-1).view(np.uint8).data)
        table.append(TensorInfo(name, wire, tuple(int(d) for d in a.shape), offset, a.nbytes))
        cursor = offset + a.nbytes
    return tuple(table), parts


def read_table(entries: Any, payload_len: int) -> tuple[TensorInfo, ...]:
    """Check a decoded JSON tensor table against a payload of ``payload_len`` bytes.

    Raises ProtocolError(code="bad_tensor_table") unless the table describes
    exactly the canonical layout of a payload of that length.
    """
    if not isinstance(entries, list):
        raise _bad("'tensors' must be a list")
    table: list[TensorInfo] = []
    seen: set[str] = set()
    cursor = 0
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise _bad(f"tensor #{i} must be an object")
        name = entry.get("name")
        if not _valid_name(name):
            raise _bad(f"tensor #{i}: 'name' must be a UTF-8 string of 1 to {MAX_NAME_CHARS} chars")
        if name in seen:
            raise _bad(f"tensor name {_show(name)} appears twice")
        seen.add(name)
        dtype = entry.get("dtype")
        if not isinstance(dtype, str) or dtype not in DTYPES:
            raise _bad(f"tensor {_show(name)}: unsupported dtype {_show(dtype)}")
        shape = entry.get("shape")
        if (
            not isinstance(shape, list)
            or len(shape) > MAX_NDIM
            or not all(type(d) is int and d >= 0 for d in shape)
        ):
            raise _bad(
                f"tensor {_show(name)}: 'shape' must be a list of at most {MAX_NDIM} ints >= 0"
            )
        offset, nbytes = entry.get("offset"), entry.get("nbytes")
        if type(offset) is not int or type(nbytes) is not int:
            raise _bad(f"tensor {_show(name)}: 'offset' and 'nbytes' must be ints")
        expected_nbytes = math.prod(shape) * DTYPES[dtype].itemsize
        if nbytes != expected_nbytes:
            raise _bad(
                f"tensor {_show(name)}: nbytes {nbytes} != {expected_nbytes} for {dtype} {shape}"
            )
        if offset != align(cursor):
            raise _bad(f"tensor {_show(name)}: offset {offset}, expected {align(cursor)}")
        cursor = offset + nbytes
        if cursor > payload_len:
            raise _bad(
                f"tensor {_show(name)} ends at byte {cursor} of a {payload_len}-byte payload"
            )
        table.append(TensorInfo(name, dtype, tuple(shape), offset, nbytes))
    if cursor != payload_len:
        raise _bad(f"the tensors end at byte {cursor} but the payload has {payload_len}")
    return tuple(table)


def _valid_name(name: object) -> TypeGuard[str]:
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_CHARS:
        return False
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, which no other language could hold
        return False
    return True


def _bad(reason: str) -> ProtocolError:
    return ProtocolError(reason, code="bad_tensor_table")


def _show(value: object, limit: int = 60) -> str:
    """A short, safe rendering of a peer-supplied value for an error reason."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
