"""Local training of one FL round: the `Trainer` protocol and its two runtimes.

A trainer takes the global weights (the eager model's `state_dict()` as
float32 numpy arrays), runs mini-batch SGD over a seeded shuffle of the
device's shard for a few epochs, and returns the new weights in the same
form. That dict is exactly what travels between coordinator and devices.

- `ExecuTorchTrainer` runs the exported training program (`mjfl.jobs.export`)
  in ExecuTorch's runtime, the same .pte a phone runs.
- `TorchTrainer` runs the eager model with `torch.optim.SGD` (CUDA when
  available): the fallback, and the reference the runtime is tested against.

Both draw the same batches and the same dropout masks for the same seed,
from the task generator (`mjfl.jobs.randomness`, docs/models.md): masks come
from U[0, 1) noise fed to the program as inputs. So from the same weights they
agree step by step, a seed gives the same training in either runtime run
after run, and a phone given the task's seed draws the same numbers.

`evaluate` is the coordinator's test-set evaluation (eager, eval mode).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mjfl.errors import ProgramError
from mjfl.jobs.base import LocalTraining, ModelSpec, Trainer, TrainResult, Weights
from mjfl.jobs.export import PARAM_PREFIX, validate_program
from mjfl.jobs.models import batch_norm_pixels, build_model, load_weights, state_to_numpy
from mjfl.jobs.randomness import TaskRandom

__all__ = [
    "ExecuTorchTrainer",
    "TorchTrainer",
    "TrainResult",
    "Trainer",
    "batches",
    "evaluate",
    "make_trainer",
]


def batches(n: int, *, epochs: int, batch_size: int, seed: int) -> list[np.ndarray]:
    """Index arrays of every mini-batch of a call, epoch after epoch.

    Epoch e is the task generator's permutation e of the shard
    (`TaskRandom.permutation`), cut into batches of `batch_size`; the last
    batch of an epoch is short when `batch_size` does not divide `n`.
    """
    if n <= 0:
        raise ValueError("cannot train on an empty shard")
    if epochs < 1 or batch_size < 1:
        raise ValueError(f"epochs and batch_size must be >= 1, got {epochs}, {batch_size}")
    rng = TaskRandom(seed)
    out: list[np.ndarray] = []
    for epoch in range(epochs):
        perm = rng.permutation(epoch, n)
        out += [perm[i : i + batch_size] for i in range(0, n, batch_size)]
    return out


def draw_noise(rng: TaskRandom, n: int, features: tuple[int, ...]) -> np.ndarray:
    """U[0, 1) float32 noise for one dropout site of an n-sample batch.

    Drawn in the program's layout, (*features, n) with the batch last; the
    eager trainer views it batch-first, so both runtimes use the same numbers.
    """
    return rng.noise((*features, n))


def _check_data(spec: ModelSpec, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from mjfl.errors import DataError

    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.ascontiguousarray(y, dtype=np.int64)
    if x.ndim != 4 or tuple(x.shape[1:]) != spec.input_shape:
        raise DataError(f"inputs of shape {x.shape} do not fit {spec.name} on {spec.input_shape}")
    if y.shape != (x.shape[0],):
        raise DataError(f"labels of shape {y.shape} do not match {x.shape[0]} inputs")
    if y.size and (y.min() < 0 or y.max() >= spec.num_classes):
        raise DataError(f"labels must be in [0, {spec.num_classes}), got [{y.min()}, {y.max()}]")
    return x, y


def _check_weights(reference: Mapping[str, tuple[int, ...]], weights: Weights) -> None:
    """ProgramError unless `weights` has exactly the reference keys and shapes."""
    missing = [k for k in reference if k not in weights]
    extra = [k for k in weights if k not in reference]
    if missing or extra:
        raise ProgramError(
            f"weights do not match the model: missing {missing[:3]}, unexpected {extra[:3]}"
        )
    for k, ref in reference.items():
        shape = tuple(np.shape(weights[k]))
        if shape != ref:
            raise ProgramError(f"weight {k!r} has shape {shape}, the model expects {ref}")


class ExecuTorchTrainer:
    """Runs a training program in ExecuTorch's runtime (what a phone runs).

    Built once per (device, job) from the program bytes and the model spec.
    It needs no model code, as a phone needs none: the parameters' names and
    shapes and the dropout sites come from the program, the batch norm
    layers from the task's weights (their buffers, in state-dict order) and
    `batch_norm_pixels` (the provision's; computed from the model when not
    given, for a spec whose model this process can build). The runtime owns
    the parameters: the global weights are written into its parameter
    tensors in place (they alias the runtime's memory), its own SGD
    optimizer (created once per `train` call, so momentum lives for the
    round's steps) updates them, and batch norm running averages are kept
    on the host from the program's batch-statistics outputs.
    """

    BN_MOMENTUM = 0.1  # the only one the conversion accepts (mjfl.jobs.convert)

    def __init__(
        self, program: bytes, spec: Any, *, sha256: str | None = None, batch_norm_pixels: Sequence[int] | None = None,
        etdump: bool = False,
    ) -> None:
        """``etdump``: the runtime times each operator it runs (``write_etdump``; `mjfl bench trainers --operators`)."""
        import torch

        validate_program(program, sha256=sha256)
        # The runtime reads from this buffer for as long as the module
        # lives; a temporary here segfaults later.
        self._program = bytes(program)
        self.spec = spec
        if batch_norm_pixels is None:
            batch_norm_pixels = list(_pixels_of(spec))
        self._pixels = [int(p) for p in batch_norm_pixels]
        try:
            from executorch.extension.pybindings.portable_lib import (
                _load_for_executorch_from_buffer,
            )

            self._module = _load_for_executorch_from_buffer(self._program, enable_etdump=etdump)
            meta = self._module.method_meta("forward")
            x_meta = meta.input_tensor_meta(0)
            self.max_batch = int(x_meta.sizes()[0])
            program_shape = tuple(int(d) for d in x_meta.sizes()[1:])
            noise_shapes = [
                tuple(int(d) for d in meta.input_tensor_meta(i).sizes()[:-1])
                for i in range(2, meta.num_inputs())
            ]
            grad_start = int(self._module.run_method("__et_training_gradients_index_forward", ())[0])
            param_start = int(self._module.run_method("__et_training_parameters_index_forward", ())[0])
            fqns = list(self._module.run_method("__et_training_fqn_forward", ()))
        except ProgramError:
            raise
        except Exception as exc:  # noqa: BLE001 - the runtime reports load errors as RuntimeError
            raise ProgramError(f"cannot load the training program: {exc}") from None
        if program_shape != tuple(spec.input_shape):
            raise ProgramError(
                f"program takes inputs {program_shape}, the spec says {tuple(spec.input_shape)}"
            )
        self._param_keys = [f.removeprefix(PARAM_PREFIX) for f in fqns]
        if param_start - grad_start != len(self._param_keys):
            raise ProgramError(f"program has {param_start - grad_start} gradients for {len(fqns)} parameters")
        if grad_start != 2 + 2 * len(self._pixels):
            raise ProgramError(
                f"program reports statistics of {(grad_start - 2) // 2} batch norm layer(s), "
                f"batch_norm_pixels lists {len(self._pixels)}"
            )
        self._noise_shapes = noise_shapes
        self._fqns = fqns
        self._grad_start = grad_start
        self._param_start = param_start
        # One dry step (no optimizer) hands out the runtime's parameter tensors.
        c, h, w = program_shape
        n = min(2, self.max_batch)
        noise = [torch.zeros(*shape, n) for shape in self._noise_shapes]
        outs = self._run(torch.zeros(n, c, h, w), torch.zeros(n, dtype=torch.long), noise)
        self._params: dict[str, torch.Tensor] = dict(zip(self._param_keys, outs[param_start:]))
        self._param_shapes = {k: tuple(t.shape) for k, t in self._params.items()}
        if not getattr(spec, "custom", True):
            self._check_zoo_model(spec)

    def _check_zoo_model(self, spec: Any) -> None:
        """A zoo spec's program is that model's: its parameters and dropout sites (a custom model is never
        built here, where its code may not run; its weights are checked against the program at each task)."""
        from mjfl.jobs.models import build_model, dropout_shapes

        model = build_model(spec)
        want = {k: tuple(p.shape) for k, p in model.named_parameters()}
        if want != self._param_shapes:
            raise ProgramError(f"program parameters {_sizes(self._param_shapes)} do not match model {spec.name}'s {_sizes(want)}")
        sites = [tuple(s) for s in dropout_shapes(model, spec.input_shape)]
        if sites != [tuple(s) for s in self._noise_shapes]:
            raise ProgramError(
                f"program takes {len(self._noise_shapes)} dropout noise input(s) {self._noise_shapes}, model "
                f"{spec.name} with dropout {spec.dropout} has {len(sites)} {sites}"
            )

    def _layout(self, weights: Weights) -> tuple[list[str], list[str]]:
        """The task's state keys (its order) and its batch norm layers, checked against the program."""
        keys = list(weights)
        missing = [k for k in self._param_keys if k not in weights]
        if missing:
            raise ProgramError(f"weights do not match the program: missing {missing[:3]}")
        for k, ref in self._param_shapes.items():
            shape = tuple(np.shape(weights[k]))
            if shape != ref:
                raise ProgramError(f"weight {k!r} has shape {shape}, the program expects {ref}")
        layers = [k[: -len("running_mean")].removesuffix(".") for k in keys if k.endswith("running_mean")]
        if len(layers) != len(self._pixels):
            raise ProgramError(
                f"weights hold {len(layers)} batch norm layer(s), the program {len(self._pixels)}"
            )
        known = set(self._param_keys)
        buffers = {f"{p}.{b}" if p else b for p in layers for b in ("running_mean", "running_var", "num_batches_tracked")}
        extra = [k for k in keys if k not in known and k not in buffers]
        if extra:
            raise ProgramError(f"weights do not match the program: unexpected {extra[:3]}")
        return keys, layers

    def write_etdump(self, path: Path) -> None:
        """The operators' timings of every step so far (an ETDump file, read by ``executorch.devtools.Inspector``)."""
        self._module.write_etdump_result_to_file(str(path))

    def _run(self, x: Any, y: Any, noise: Sequence[Any]) -> list[Any]:
        try:
            return list(self._module.run_method("forward", (x, y, *noise), clone_outputs=False))
        except Exception as exc:  # noqa: BLE001 - re-raised as one ProgramError
            raise ProgramError(f"the training program failed to run: {exc}") from None

    def train(
        self, weights: Weights, x: np.ndarray, y: np.ndarray, training: LocalTraining, *, seed: int = 0
    ) -> TrainResult:
        import torch
        from executorch.extension.training import get_sgd_optimizer

        t0 = time.perf_counter()
        state_keys, bn_layers = self._layout(weights)
        x, y = _check_data(self.spec, x, y)
        if training.batch_size > self.max_batch:
            raise ProgramError(
                f"batch_size {training.batch_size} exceeds the program's max batch {self.max_batch}"
            )
        plan = batches(len(x), epochs=training.epochs, batch_size=training.batch_size, seed=seed)
        with torch.no_grad():
            for k, t in self._params.items():
                t.copy_(torch.from_numpy(np.asarray(weights[k], dtype=np.float32)))
        buffers = {
            k: np.array(weights[k], dtype=np.float32, copy=True)
            for k in state_keys
            if k not in self._params
        }
        named = {f: self._params[k] for f, k in zip(self._fqns, self._param_keys)}
        optimizer = get_sgd_optimizer(named, training.lr, training.momentum, 0.0, training.weight_decay, False)
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)
        noise_rng = TaskRandom(seed)
        t1 = time.perf_counter()

        step_times = []
        loss_sum = 0.0
        for idx in plan:
            s = time.perf_counter()
            ti = torch.from_numpy(idx)
            noise = [torch.from_numpy(draw_noise(noise_rng, len(idx), f)) for f in self._noise_shapes]
            outs = self._run(xt.index_select(0, ti), yt.index_select(0, ti), noise)
            loss_sum += float(outs[0]) * len(idx)
            optimizer.step(dict(zip(self._fqns, outs[self._grad_start : self._param_start])))
            for i, (name, pixels) in enumerate(zip(bn_layers, self._pixels)):
                self._update_running(
                    buffers, name, self.BN_MOMENTUM, len(idx) * pixels, outs[2 + 2 * i], outs[3 + 2 * i]
                )
            step_times.append(time.perf_counter() - s)
        t2 = time.perf_counter()

        out: dict[str, np.ndarray] = {}
        for k in state_keys:
            if k in self._params:
                out[k] = self._params[k].detach().numpy().copy()
            else:
                out[k] = buffers[k]
        t3 = time.perf_counter()
        return TrainResult(
            weights=out,
            samples=len(x),
            epochs=training.epochs,
            steps=len(plan),
            mean_loss=loss_sum / (len(x) * training.epochs),
            compute_s=t3 - t0,
            setup_s=t1 - t0,
            step_s=t2 - t1,
            readback_s=t3 - t2,
            step_times_s=tuple(step_times),
        )

    @staticmethod
    def _update_running(
        buffers: dict[str, np.ndarray],
        name: str,
        momentum: float | None,
        count: int,
        mean: Any,
        var: Any,
    ) -> None:
        """nn.BatchNorm2d's running-average update, on the host.

        The program reports the biased batch variance; the running variance
        uses the unbiased one, count / (count - 1) times larger.
        """
        prefix = f"{name}." if name else ""
        tracked = buffers.get(prefix + "num_batches_tracked")
        if tracked is not None:
            tracked += 1
        if momentum is None:  # cumulative moving average, as PyTorch does
            assert tracked is not None
            f = np.float32(1.0 / float(tracked))
        else:
            f = np.float32(momentum)
        unbiased = var.numpy() * np.float32(count / max(count - 1, 1))
        for key, batch in ((prefix + "running_mean", mean.numpy()), (prefix + "running_var", unbiased)):
            if key in buffers:
                run = buffers[key]
                run *= np.float32(1.0) - f
                run += f * batch


class TorchTrainer:
    """Eager PyTorch training: the fallback runtime and the reference.

    Uses CUDA when available (or the `device` given). Dropout masks come
    from the same seeded noise as the ExecuTorch trainer's; torch's global
    RNG is not touched.
    """

    def __init__(self, spec: ModelSpec, *, device: str | None = None) -> None:
        import torch

        self.spec = spec
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        from mjfl.jobs.convert import EagerForm

        self.model = build_model(spec).to(self.device)
        self._form = EagerForm(self.model)
        self._shapes = {k: tuple(v.shape) for k, v in self.model.state_dict().items()}

    def train(
        self, weights: Weights, x: np.ndarray, y: np.ndarray, training: LocalTraining, *, seed: int = 0
    ) -> TrainResult:
        import torch
        import torch.nn.functional as F

        t0 = time.perf_counter()
        _check_weights(self._shapes, weights)
        x, y = _check_data(self.spec, x, y)
        plan = batches(len(x), epochs=training.epochs, batch_size=training.batch_size, seed=seed)
        model = self.model
        load_weights(model, weights)
        model.train()
        optimizer = torch.optim.SGD(
            model.parameters(), lr=training.lr, momentum=training.momentum, weight_decay=training.weight_decay
        )
        xt = torch.from_numpy(x).to(self.device)
        yt = torch.from_numpy(y).to(self.device)
        t1 = time.perf_counter()
        step_times = []
        losses = []
        noise_rng = TaskRandom(seed)

        def noise(shape: tuple[int, ...]) -> torch.Tensor:
            # The program's (*features, N) numbers, viewed batch-first.
            u = draw_noise(noise_rng, shape[0], shape[1:])
            return torch.from_numpy(u).movedim(-1, 0).to(self.device)

        for idx in plan:
            s = time.perf_counter()
            ti = torch.from_numpy(idx).to(self.device)
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(self._form(xt.index_select(0, ti), noise), yt.index_select(0, ti))
            loss.backward()
            optimizer.step()
            losses.append(loss.detach() * len(idx))
            step_times.append(time.perf_counter() - s)
        mean_loss = float(torch.stack(losses).sum()) / (len(x) * training.epochs)
        t2 = time.perf_counter()
        out = state_to_numpy(model)
        t3 = time.perf_counter()
        return TrainResult(
            weights=out,
            samples=len(x),
            epochs=training.epochs,
            steps=len(plan),
            mean_loss=mean_loss,
            compute_s=t3 - t0,
            setup_s=t1 - t0,
            step_s=t2 - t1,
            readback_s=t3 - t2,
            step_times_s=tuple(step_times),
        )


def evaluate(
    model: str | ModelSpec,
    input_shape: tuple[int, int, int] | None,
    num_classes: int | None,
    weights: Weights,
    x: np.ndarray,
    y: np.ndarray,
    *,
    batch_size: int = 512,
    device: str | None = None,
) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of `weights` on (x, y), eager, eval mode.

    Pass a `ModelSpec` as `model` (with `input_shape`/`num_classes` None) or
    the spec's fields. Batch norm uses its running averages, dropout is off.
    """
    import torch
    import torch.nn.functional as F

    if isinstance(model, ModelSpec):
        spec = model
    else:
        if input_shape is None or num_classes is None:
            raise TypeError("evaluate needs a ModelSpec or (name, input_shape, num_classes)")
        spec = ModelSpec(model, tuple(input_shape), num_classes)  # type: ignore[arg-type]
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    net = build_model(spec)
    load_weights(net, weights)
    net.to(dev).eval()
    x, y = _check_data(spec, x, y)
    if len(x) == 0:
        raise ValueError("cannot evaluate on an empty set")
    correct = 0
    loss_sum = 0.0
    with torch.no_grad():
        for i in range(0, len(x), batch_size):
            # Copies: test sets may be read-only arrays, which torch warns about.
            xb = torch.tensor(x[i : i + batch_size], device=dev)
            yb = torch.tensor(y[i : i + batch_size], device=dev)
            logits = net(xb)
            loss_sum += float(F.cross_entropy(logits, yb, reduction="sum"))
            correct += int((logits.argmax(dim=1) == yb).sum())
    return correct / len(x), loss_sum / len(x)


def _pixels_of(spec: Any) -> list[int]:
    """batch_norm_pixels of a spec whose model this process can build."""
    if not isinstance(spec, ModelSpec):
        raise ProgramError("the trainer needs batch_norm_pixels for a model it cannot build")
    return list(batch_norm_pixels(build_model(spec), spec.input_shape).values())


def make_trainer(
    runtime: str, spec: Any, program: bytes | None = None, *, batch_norm_pixels: Sequence[int] | None = None
) -> Trainer:
    """The trainer a device uses for ``runtime``: "executorch" runs ``program``, "torch" trains eagerly.

    ``spec`` is a `ModelSpec`, or for "executorch" anything with ``name``,
    ``input_shape`` and ``num_classes`` (a provision's model) given with
    ``batch_norm_pixels``: the runtime trains a program without its model's code.
    """
    if runtime == "executorch":
        if program is None:
            raise ValueError("the executorch runtime needs the job's training program")
        return ExecuTorchTrainer(program, spec, batch_norm_pixels=batch_norm_pixels)
    if runtime == "torch":
        return TorchTrainer(spec)
    raise ValueError(f"unknown runtime {runtime!r}; choose executorch or torch")


def _sizes(shapes: Mapping[str, tuple[int, ...]]) -> str:
    return f"({len(shapes)} tensors, {sum(math.prod(s) for s in shapes.values()):,} values)"
