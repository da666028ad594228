"""ExecuTorch's runtime for the JVM's test double of its Android training API.

The double (android/app/src/jvmTest/java/org/pytorch/executorch/**) starts
this script as a child process and forwards every call of
`org.pytorch.executorch.training.TrainingModule` and `SGD` here, one request
and one reply each; this side runs them in ExecuTorch's Python runtime: the
.pte through `executorch.extension.training.TrainingModule` (its
`forward_backward` is `run_method(..., clone_outputs=False)`, the outputs
aliasing the method's own tensors, as in C++) and the optimizer is
`get_sgd_optimizer`, the C++ `optimizer::SGD` that the Android JNI wraps too.
It is what mjfl's emulated devices run (`mjfl.jobs.trainers.ExecuTorchTrainer`).

Protocol, over the child's stdin (requests) and stdout (replies):

    frame   := u32 header_length (little-endian), header (UTF-8 JSON), payload
    header  := {"op": ..., op's arguments..., "tensors": {group: [spec, ...], ...}}
    spec    := {"name": str (optional), "dtype": ExecuTorch ScalarType code, "shape": [int, ...]}
    payload := each listed tensor's elements, in the order listed, C-order,
               little-endian, no padding (so its length follows from the specs)

A reply is a frame with `"ok": true` and the op's results, or `{"error":
message}` when the call failed (the double throws it as a RuntimeException).

    op                arguments                            reply
    load              path                                 module (an id)
    parameters        module, method; write                parameters (named, the method's order)
    forward_backward  module, method; write, inputs        outputs; gradients (named)
    sgd_create        module, names {key: parameter},      optimizer (an id)
                      lr, momentum, dampening,
                      weight_decay, nesterov
    sgd_step          optimizer; write, gradients (named)  parameters it updated (named)
    sgd_release       optimizer
    close             module
    live                                                   modules, optimizers (counts)

`write` carries the parameters that Java changed through a tensor's raw
buffer since the last call (the double's write-back of the runtime memory it
mirrors); they are copied into the runtime's parameters before the op runs.

Nothing but frames may reach stdout: the real one is kept for them and file
descriptor 1 points at stderr, where ExecuTorch's and Python's own output go.
"""

from __future__ import annotations

import json
import os
import struct
import sys
from typing import Any, BinaryIO

import numpy as np

# ExecuTorch's ScalarType codes (the Java DType's jniCode) and their numpy types.
DTYPES: dict[int, np.dtype[Any]] = {
    0: np.dtype("<u1"),
    1: np.dtype("<i1"),
    2: np.dtype("<i2"),
    3: np.dtype("<i4"),
    4: np.dtype("<i8"),
    6: np.dtype("<f4"),
    7: np.dtype("<f8"),
    11: np.dtype("?"),
}
CODES = {dtype: code for code, dtype in DTYPES.items()}

Groups = dict[str, list[tuple[str | None, np.ndarray]]]


def _read_exactly(stream: BinaryIO, n: int) -> bytes | None:
    chunks = []
    while n:
        chunk = stream.read(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(stream: BinaryIO) -> tuple[dict[str, Any], Groups] | None:
    """The next frame: its header and its tensors by group; None at the end of the stream."""
    prefix = _read_exactly(stream, 4)
    if prefix is None:
        return None
    (length,) = struct.unpack("<I", prefix)
    raw = _read_exactly(stream, length)
    if raw is None:
        raise EOFError("the stream ended inside a frame header")
    header = json.loads(raw)
    groups: Groups = {}
    for group, specs in header.pop("tensors", {}).items():
        arrays = []
        for spec in specs:
            dtype = DTYPES[spec["dtype"]]
            shape = tuple(int(d) for d in spec["shape"])
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            data = _read_exactly(stream, nbytes) if nbytes else b""
            if data is None:
                raise EOFError("the stream ended inside a tensor")
            arrays.append((spec.get("name"), np.frombuffer(bytearray(data), dtype).reshape(shape)))
        groups[group] = arrays
    return header, groups


def write_frame(stream: BinaryIO, header: dict[str, Any], groups: Groups | None = None) -> None:
    specs: dict[str, list[dict[str, Any]]] = {}
    payload = []
    for group, arrays in (groups or {}).items():
        specs[group] = []
        for name, a in arrays:
            a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
            spec: dict[str, Any] = {"dtype": CODES[a.dtype], "shape": list(a.shape)}
            if name is not None:
                spec["name"] = name
            specs[group].append(spec)
            payload.append(a.tobytes())
    raw = json.dumps({**header, "tensors": specs}).encode()
    stream.write(struct.pack("<I", len(raw)))
    stream.write(raw)
    stream.writelines(payload)
    stream.flush()


def _numpy(t: Any) -> np.ndarray:
    return t.detach().contiguous().numpy()


class Program:
    """One loaded .pte: the Java TrainingModule's runtime side."""

    def __init__(self, path: str) -> None:
        from executorch.extension.training import _load_for_executorch_for_training

        self.training = _load_for_executorch_for_training(path)
        self.method: str | None = None
        self.params: dict[str, Any] = {}

    def bind(self, method: str) -> None:
        """The runtime's parameter tensors of `method`.

        C++ `TrainingModule::named_parameters` reads them from the loaded
        method; the Python bindings hand them out only as the outputs of a
        run, so one run on a zero batch of one sample (which changes nothing:
        no optimizer steps) takes its place.
        """
        if self.method is not None:
            if method != self.method:
                raise ValueError(f"this double runs one training method per module, {self.method!r}, not {method!r}")
            return
        import torch

        meta = self.training.model.method_meta(method)
        inputs = []
        for i in range(meta.num_inputs()):
            spec = meta.input_tensor_meta(i)
            sizes = list(spec.sizes())
            # x [N, ...] and y [N] have the batch first, the noise inputs (..., N) last.
            sizes[0 if i < 2 else -1] = 1
            inputs.append(torch.from_numpy(np.zeros(sizes, DTYPES[spec.dtype()])))
        self.training.forward_backward(method, inputs)
        self.params = self.training.named_parameters()
        self.method = method

    def write(self, arrays: list[tuple[str | None, np.ndarray]]) -> None:
        import torch

        with torch.no_grad():
            for name, a in arrays:
                target = self.params[name]
                if tuple(target.shape) != a.shape:
                    raise ValueError(f"parameter {name} is {tuple(target.shape)}, the write {a.shape}")
                target.copy_(torch.from_numpy(a))

    def parameters(self) -> list[tuple[str | None, np.ndarray]]:
        return [(name, _numpy(t)) for name, t in self.params.items()]

    def forward_backward(self, method: str, inputs: list[np.ndarray]) -> tuple[list[Any], list[Any]]:
        import torch

        outputs = self.training.forward_backward(method, [torch.from_numpy(a) for a in inputs])
        gradients = [(name, _numpy(g)) for name, g in self.training.named_gradients().items()]
        return [(None, _numpy(o)) for o in outputs], gradients


class Runtime:
    """The modules and optimizers that Java objects stand for, by id."""

    def __init__(self) -> None:
        self.programs: dict[int, Program] = {}
        self.optimizers: dict[int, tuple[int, Any, dict[str, str]]] = {}
        self.next_id = 1

    def _new_id(self) -> int:
        self.next_id += 1
        return self.next_id - 1

    def handle(self, header: dict[str, Any], groups: Groups) -> tuple[dict[str, Any], Groups]:
        op = header["op"]
        if op == "load":
            module = self._new_id()
            self.programs[module] = Program(header["path"])
            return {"module": module}, {}
        if op == "live":
            return {"modules": len(self.programs), "optimizers": len(self.optimizers)}, {}
        if op in ("sgd_step", "sgd_release"):
            module, optimizer, names = self.optimizers[header["optimizer"]]
        else:
            module = header["module"]
        program = self.programs[module]
        if "method" in header:
            program.bind(header["method"])
        # Java's writes into the memory it mirrors reach the runtime before the op runs.
        program.write(groups.get("write", []))
        if op == "parameters":
            return {}, {"parameters": program.parameters()}
        if op == "forward_backward":
            outputs, gradients = program.forward_backward(header["method"], [a for _, a in groups["inputs"]])
            return {}, {"outputs": outputs, "gradients": gradients}
        if op == "sgd_create":
            from executorch.extension.training import get_sgd_optimizer

            names = header["names"]
            named = {key: program.params[name] for key, name in names.items()}
            args = (header[k] for k in ("lr", "momentum", "dampening", "weight_decay", "nesterov"))
            ident = self._new_id()
            self.optimizers[ident] = (module, get_sgd_optimizer(named, *args), names)
            return {"optimizer": ident}, {}
        if op == "sgd_step":
            import torch

            optimizer.step({key: torch.from_numpy(a) for key, a in groups["gradients"]})
            updated = dict.fromkeys(names.values())
            return {}, {"parameters": [(name, _numpy(program.params[name])) for name in updated]}
        if op == "sgd_release":
            del self.optimizers[header["optimizer"]]
            return {}, {}
        if op == "close":
            del self.programs[module]
            return {}, {}
        raise ValueError(f"unknown op {op!r}")


def serve(requests: BinaryIO, replies: BinaryIO) -> None:
    runtime = Runtime()
    while (frame := read_frame(requests)) is not None:
        header, groups = frame
        try:
            reply, tensors = runtime.handle(header, groups)
        except Exception as exc:  # noqa: BLE001 - every failure is the Java call's exception
            write_frame(replies, {"error": f"{type(exc).__name__}: {exc}"})
            continue
        write_frame(replies, {"ok": True, **reply}, tensors)


def main() -> None:
    replies = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, replies)
    # The JVM waits for this exit; every reply is flushed, so skip the interpreter's (and
    # torch's) slow teardown.
    os._exit(0)


if __name__ == "__main__":
    main()
