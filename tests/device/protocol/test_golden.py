"""The golden frames: one set of protocol v1 messages that every implementation must agree on.

`tests/golden/protocol/` holds whole WebSocket messages (`.txt` for text, `.bin`
for binary) and `manifest.json`, which says what each one decodes to, or which
bye code refuses it. The Python codec is checked against them here; the Java
client's codec against the very same files (android/client-core, `GoldenTest`).

The files are written by `PYTHONPATH=tests python tests/device/protocol/test_golden.py`;
this test fails when the codec and the files disagree, so neither side drifts alone.
"""

from __future__ import annotations

import json
import struct
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from repository import GOLDEN
from wire_protocol import frame

from mjfl.device.protocol import (
    Assembly,
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
    Timing,
    Welcome,
    begin_binary,
    decode_bytes,
    decode_text,
    encode,
    split_message,
)
from mjfl.errors import ProtocolError

PART_BYTES = 400  # small enough to split the result example in two parts
_binary = partial(frame, compact=True)  # compact JSON, as the codec writes it


def _messages() -> dict[str, Any]:
    """The valid messages, by file stem."""
    program = Program(b"MJFL golden program: not a real .pte")
    shard = Shard(np.arange(8, dtype=np.float32).reshape(2, 1, 2, 2) / 8, np.array([0, 1]))
    model = ModelSpec("cnn", (1, 2, 2), 2)
    weights = {
        "fc.weight": np.array([[0.25, -0.5, 1.0], [2.0, 0.0, -1.5]], np.float32),
        "fc.bias": np.array([0.5, -1.0], np.float32),
    }
    return {
        "hello": Hello(
            "pixel7-01", "s3cret", "executorch", (1,), {"model": "Pixel 7", "cores": 8, "ram_mb": 8192, "os": "Android 14"},
            ("a" * 64,), 268435456,
        ),
        "welcome": Welcome(1, "coord-1", Settings(10.0, 60.0, 268435456, 65536)),
        "provision": Provision("cnn", model, program.sha256, shard.sha256, program, shard),
        "provision-cached": Provision("cnn", model, program.sha256, shard.sha256, None, None),
        # A model with batch norm and dropout says what the device needs to train it (docs/models.md).
        "provision-layers": Provision(
            "cnn", ModelSpec("cnn", (1, 2, 2), 2, batch_norm_pixels=(4, 1), dropout_shapes=((3, 1, 1), (5,))),
            program.sha256, shard.sha256, None, None,
        ),
        "task": Task("t-0007", "cnn", 3, weights, 5, 32, 0.01, 0.9, 0.0, 120.0, program.sha256, shard.sha256, 20261127),
        # An older coordinator sends no seed: the device draws its own (docs/models.md, "The task generator").
        "task-unseeded": Task("t-0008", "cnn", 3, weights, 5, 32, 0.01, 0.9, 0.0, 120.0, program.sha256, shard.sha256),
        "result": Result(
            "t-0007", "cnn", 3, {"fc.bias": np.array([0.5, -1.0], np.float32), "steps": np.array([3], np.int64)},
            20, 0.6931, Timing(0.012, 4.25, 0.31),
        ),
        "cancel": Cancel("t-0007", "deadline passed"),
        "heartbeat": Heartbeat(42, 1712.5),
        "heartbeat_ack": HeartbeatAck(42, 1712.5),
        "error": Error("task_failed", "out of memory", "t-0007"),
        "bye": Bye("bad_weights", "result weights hold NaN or infinite values"),
    }


def _invalid() -> dict[str, tuple[str | bytes, str]]:
    """Messages a receiver must refuse, with the bye code it must refuse them with."""
    bias = {"name": "fc.bias", "dtype": "float32", "shape": [2], "offset": 0, "nbytes": 8}
    result = {"type": "result", "task_id": "t-0007", "job_id": "cnn", "round": 3, "samples": 20,
              "mean_loss": 0.5, "timing": {"download_s": 0.0, "compute_s": 1.0, "upload_s": None}}
    task = {"type": "task", "task_id": "t-0007", "job_id": "cnn", "round": 3, "epochs": 1, "batch_size": 2, "lr": 0.1,
            "momentum": 0.0, "weight_decay": 0.0, "deadline_s": None, "program_sha256": "a" * 64, "shard_sha256": "b" * 64}
    payload = np.array([0.5, -1.0], np.float32).tobytes()
    return {
        "bad-magic.bin": (_binary({**result, "tensors": [bias]}, payload, magic=b"MJFX"), "bad_frame"),
        "bad-version.bin": (_binary({**result, "tensors": [bias]}, payload, version=2), "bad_frame"),
        "bad-payload-offset.bin": (_binary({**result, "tensors": [bias]}, payload, payload_offset=24), "bad_frame"),
        "bad-tensor-offset.bin": (_binary({**result, "tensors": [{**bias, "offset": 8}]}, bytes(16)), "bad_tensor_table"),
        "bad-tensor-nbytes.bin": (_binary({**result, "tensors": [{**bias, "nbytes": 4}]}, payload[:4]), "bad_tensor_table"),
        "payload-too-long.bin": (_binary({**result, "tensors": [bias]}, payload + bytes(64)), "bad_tensor_table"),
        "negative-samples.bin": (_binary({**result, "samples": -1, "tensors": [bias]}, payload), "bad_message"),
        "negative-seed.bin": (_binary({**task, "seed": -1, "tensors": [bias]}, payload), "bad_message"),
        "seed-beyond-int64.bin": (_binary({**task, "seed": 2**63, "tensors": [bias]}, payload), "bad_message"),
        "text-type-as-binary.bin": (_binary({"type": "heartbeat", "seq": 1, "sent_at": 0.0, "tensors": []}), "bad_message"),
        "unknown-type.txt": ('{"type":"gossip"}', "unknown_type"),
        "malformed.txt": ('{"type":"heartbeat","seq":1,', "bad_message"),
        "nan-literal.txt": ('{"type":"heartbeat","seq":1,"sent_at":NaN}', "bad_message"),
        "missing-field.txt": ('{"type":"heartbeat","sent_at":1.0}', "bad_message"),
        "bad-code.txt": ('{"type":"error","code":"Bad Code","reason":"","task_id":null}', "bad_message"),
        "binary-type-as-text.txt": ('{"type":"result","task_id":"t"}', "bad_message"),
        "field-twice.txt": ('{"type":"heartbeat","seq":1,"seq":2,"sent_at":0.0}', "bad_message"),
        "no-tensor-table.bin": (_binary(result), "bad_tensor_table"),
        "label-out-of-range.bin": (_binary(
            {"type": "provision", "job_id": "cnn", "model": {"name": "cnn", "input_shape": [1], "num_classes": 2},
             "program_sha256": "a" * 64, "shard_sha256": "b" * 64,
             "tensors": [{"name": "x", "dtype": "float32", "shape": [1, 1], "offset": 0, "nbytes": 4},
                         {"name": "y", "dtype": "int64", "shape": [1], "offset": 64, "nbytes": 8}]},
            bytes(4) + bytes(60) + (2).to_bytes(8, "little")), "bad_message"),
    }


def _describe(message: Any, encoded: str | bytes) -> dict[str, Any]:
    """What a decoder must find in ``encoded``: its JSON fields, and its tensors' values."""
    if isinstance(encoded, str):
        return {"kind": "text", "fields": json.loads(encoded)}
    header_len = struct.unpack_from("<I", encoded, 8)[0]
    fields = json.loads(encoded[24 : 24 + header_len])
    table = fields.pop("tensors")
    tensors = [{**entry, "values": _values(message, entry["name"])} for entry in table]
    return {"kind": "binary", "fields": fields, "tensors": tensors}


def _values(message: Any, name: str) -> list[Any]:
    if isinstance(message, Provision):
        arrays = {"program": np.frombuffer(bytes(message.program.data), np.uint8)} if message.program else {}
        if message.shard is not None:
            arrays |= {"x": message.shard.x, "y": message.shard.y}
    else:
        arrays = dict(message.weights)
    return np.asarray(arrays[name]).reshape(-1).tolist()


def build() -> dict[str, Any]:
    """The files' contents and the manifest, from the codec."""
    files: dict[str, str | bytes] = {}
    valid = []
    for stem, message in _messages().items():
        encoded = encode(message)
        name = f"{stem}.{'txt' if isinstance(encoded, str) else 'bin'}"
        files[name] = encoded
        description = _describe(message, encoded)
        valid.append({"file": name, "type": description["fields"]["type"], **description})
    parts = split_message(files["result.bin"], PART_BYTES)  # type: ignore[arg-type]
    part_names = [f"result-part-{i}.bin" for i in range(len(parts))]
    files.update(zip(part_names, parts))
    invalid = []
    for name, (data, code) in _invalid().items():
        files[name] = data
        invalid.append({"file": name, "kind": "text" if name.endswith(".txt") else "binary", "code": code})
    manifest = {
        "about": "protocol v1 golden frames (docs/protocol.md); written by tests/device/test_golden.py",
        "valid": valid,
        "parts": {"of": "result.bin", "max_part_bytes": PART_BYTES, "files": part_names},
        "invalid": invalid,
    }
    return {"files": files, "manifest": manifest}


def _read(name: str) -> str | bytes:
    path = GOLDEN / name
    return path.read_text(encoding="utf-8") if name.endswith(".txt") else path.read_bytes()


def write() -> None:
    built = build()
    GOLDEN.mkdir(parents=True, exist_ok=True)
    for name, data in built["files"].items():
        if isinstance(data, str):
            (GOLDEN / name).write_text(data, encoding="utf-8")
        else:
            (GOLDEN / name).write_bytes(data)
    (GOLDEN / "manifest.json").write_text(json.dumps(built["manifest"], indent=2) + "\n", encoding="utf-8")


def test_the_golden_files_are_what_the_codec_writes():
    built = build()
    assert json.loads((GOLDEN / "manifest.json").read_text()) == built["manifest"]
    for name, data in built["files"].items():
        assert _read(name) == data, f"{name} differs: rewrite with python {Path(__file__).name}"


@pytest.mark.parametrize("entry", build()["manifest"]["valid"], ids=lambda e: e["file"])
def test_each_valid_frame_decodes_to_what_the_manifest_says(entry):
    data = _read(entry["file"])
    message = decode_text(data) if isinstance(data, str) else decode_bytes(data)
    assert encode(message) == data  # and back, byte for byte
    if entry["kind"] == "binary":
        for tensor in entry["tensors"]:
            assert _values(message, tensor["name"]) == tensor["values"]


def test_the_parts_reassemble_to_the_whole_message():
    manifest = build()["manifest"]["parts"]
    first, *rest = (_read(name) for name in manifest["files"])
    assembly = begin_binary(first)
    assert isinstance(assembly, Assembly)
    message = None
    for part in rest:
        message = assembly.add(part)
    assert message is not None and encode(message) == _read(manifest["of"])


@pytest.mark.parametrize("entry", build()["manifest"]["invalid"], ids=lambda e: e["file"])
def test_each_invalid_frame_is_refused_with_its_code(entry):
    data = _read(entry["file"])
    with pytest.raises(ProtocolError) as refused:
        decode_text(data) if isinstance(data, str) else decode_bytes(data)
    assert refused.value.code == entry["code"]


if __name__ == "__main__":
    write()
    print(f"wrote {GOLDEN}", file=sys.stderr)
