"""Batched local training: the rounds of K devices of one job in one computation.

The per-device trainers (`mjfl.jobs.trainers`) train one device's model at a
time, and a small model's kernels are far too small to keep a GPU (or even a
CPU's vector units) busy. `BatchedTrainer` trains K devices' models together:
every tensor carries the K devices side by side, each device's channels (or
features) one contiguous block, so that

- a map is (N, K*C, H, W) and a convolution is one grouped convolution
  (groups = K) of the K devices' stacked kernels;
- a convolution whose kernels read few channels (at most
  `CHANNELS_LAST_MAX` per group) reads its map channels-last, where the
  grouped kernels of such layers are two to three times faster;
- a matrix is device-major, (K, N, F), and a fully connected layer one
  batched matrix product of the K devices' stacked weights, whose gradients
  come out in the weights' own layout (`_batched_linear`);
- ReLU-like activations, pooling, residual sums, global average pooling and
  dropout act per channel or element and need nothing more (flattening keeps
  each device's C*H*W block in PyTorch's (C, H, W) order); batch norm is per
  channel too, over the K*C channels with the K devices' stacked running
  averages; a concatenation along channels interleaves each device's parts;
- the model is the graph `mjfl.jobs.convert.trace` takes from its module,
  run by `BatchedForm` with the layers above rewritten for the layout: any
  PyTorch module made of them trains batched, and anything else is refused
  with the operator and module named;
- the loss is the sum of the K devices' mean cross-entropies: the devices'
  parameters are disjoint, so each device's gradient is its own loss's,
  and SGD with momentum and weight decay, elementwise, updates each device
  as its own optimizer would.

Each device keeps its own task: its shard, the task generator's batch order
and dropout noise for its seed (`mjfl.jobs.randomness`, docs/models.md), its
batch-norm statistics and its sample count. Devices train together only when
their tasks have the same plan shape: the same number of samples and the same
local training (epochs, batch size, learning rate, momentum, weight decay),
so every step has the same batch size in every device; `train_many` groups
the tasks it is given so and trains group after group, at most `max_devices`
at once (by default 32 on the CPU, 128 on CUDA). The result of every device
equals the per-device trainer's for the same task and seed up to
floating-point summation order (tested for every zoo model in
`tests/jobs/test_batched.py`).
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, fx, nn

from mjfl.errors import ModelError
from mjfl.jobs import convert
from mjfl.jobs.base import LocalTraining, ModelSpec, TrainResult, Weights
from mjfl.jobs.layers import dropout_keep
from mjfl.jobs.models import build_model
from mjfl.jobs.randomness import TaskRandom
from mjfl.jobs.trainers import _check_data, _check_weights, batches, draw_noise

__all__ = ["BatchedForm", "BatchedTask", "BatchedTrainer"]

# Devices a step trains at most by default, on the CPU and on CUDA: on a CPU core 128 devices' maps
# outgrow the caches, and CNN-A and VGG-6 train slower than at 32 (`mjfl bench trainers`, docs/scale.md).
MAX_DEVICES = {False: 32, True: 128}
CHANNELS_LAST_MAX = 8  # a convolution reading at most this many channels per group reads channels-last


@dataclass(frozen=True)
class BatchedTask:
    """One device's task: the global weights, its shard, the local training and the task's seed."""

    weights: Weights
    x: np.ndarray
    y: np.ndarray
    training: LocalTraining
    seed: int = 0


# Functions and parameterless modules that act per channel or per element, in whichever device's block:
# in this layout they are called as they are.
_AS_THEY_ARE_MODULES: tuple[type[nn.Module], ...] = (
    nn.ReLU, nn.ReLU6, nn.Hardtanh, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Hardswish, nn.Sigmoid, nn.Tanh,
    nn.MaxPool2d, nn.AvgPool2d, nn.Identity,
)
_AS_THEY_ARE_FUNCTIONS: frozenset[Any] = frozenset({
    F.relu, torch.relu, F.relu6, F.hardtanh, F.leaky_relu, F.gelu, F.silu, F.hardswish, torch.sigmoid, F.sigmoid,
    torch.tanh, F.tanh, F.max_pool2d, F.avg_pool2d, operator.add, operator.iadd, operator.sub, operator.mul,
    operator.truediv, torch.add, torch.mul,
})
_AS_THEY_ARE_METHODS = frozenset({"relu", "sigmoid", "tanh", "contiguous", "float", "add", "mul"})


class BatchedForm(fx.Interpreter):
    """A model's traced graph (`mjfl.jobs.convert.trace`) run over K devices at once (the module docstring).

    ``tensors`` holds every state entry of the model stacked over the
    devices, (K, *shape), by its `state_dict` key. ``noise(n, features)``
    returns the dropout noise of a site, (K, n, *features): each device's as
    its own trainer draws it for an n-sample batch of ``features``. Maps are
    (N, K*C, H, W) and matrices device-major (K, N, F): a 4-d value is a
    map, a 3-d one a matrix. The layers with weights, flattening, global
    pooling, concatenation, means and dropout's noise are rewritten for the
    layout; the rest act per channel or element and run as they are. Any
    other operator raises `ModelError` (train such a model with the
    ``torch`` or ``executorch`` runtime).
    """

    def __init__(
        self, gm: fx.GraphModule, devices: int, tensors: Mapping[str, Tensor],
        noise: Callable[[int, tuple[int, ...]], Tensor],
    ) -> None:
        super().__init__(gm)
        self.k = devices
        self.tensors = tensors
        self._device_noise = noise
        self._node: fx.Node | None = None

    def run_node(self, n: fx.Node) -> Any:
        self._node = n  # for `_refuse` to name
        return super().run_node(n)

    def _refuse(self, problem: str) -> ModelError:
        node = self._node
        assert node is not None
        return ModelError(
            convert.operator_name(node, self.module), convert.where(node), f"{problem} in the batched runtime",
            "train this model with runtime = 'torch' or 'executorch'",
        )

    def _get(self, target: str, what: str) -> Tensor | None:
        return self.tensors.get(f"{target}.{what}")

    def _logical_shape(self, x: Tensor) -> torch.Size:
        if x.dim() == 4:
            n, kc, h, w = x.shape
            return torch.Size((n, kc // self.k, h, w))
        if x.dim() == 3:
            return torch.Size(x.shape[1:])
        raise self._refuse(f"a {x.dim()}-d activation")

    def _noise(self, shape: tuple[int, ...]) -> Tensor:
        """The noise of a dropout site for an activation of ``shape``, in this layout."""
        if len(shape) == 3:  # a device-major matrix
            return self._device_noise(shape[1], shape[2:])
        n, channels, *rest = shape  # a map: each device's channels one block
        return self._device_noise(n, (channels // self.k, *rest)).transpose(0, 1).reshape(shape)

    def _dropout(self, x: Tensor, p: float) -> Tensor:
        return x if p == 0 else x * dropout_keep(self._noise(tuple(x.shape)), p)

    def _device_major(self, x: Tensor) -> Tensor:
        """A map or (N, K*F) matrix as the (K, N, F) matrix of each device's features in PyTorch's order."""
        if x.dim() == 3:
            return x
        return x.reshape(x.shape[0], self.k, -1).transpose(0, 1).contiguous()

    # -- modules ----------------------------------------------------------------

    def call_module(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        m = self.fetch_attr(target)
        x = args[0]
        if isinstance(m, nn.Conv2d):
            return self._conv(str(target), m, x)
        if isinstance(m, nn.Linear):
            return self._linear(str(target), x)
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            return self._batch_norm(str(target), m, x)
        if isinstance(m, nn.LayerNorm):
            return self._layer_norm(str(target), m, x)
        if isinstance(m, nn.Dropout):
            return self._dropout(x, float(m.p) if m.training else 0.0)
        if isinstance(m, nn.Flatten):
            if m.start_dim != 1 or m.end_dim != -1:
                raise self._refuse("flattening other than from the channels on")
            return self._device_major(x)
        if isinstance(m, nn.AdaptiveAvgPool2d):
            return self._global_pool(x, m.output_size)
        if isinstance(m, _AS_THEY_ARE_MODULES):
            return m(*args, **kwargs)
        raise self._refuse("this module")

    def _conv(self, target: str, conv: nn.Conv2d, x: Tensor) -> Tensor:
        if x.dim() != 4:
            raise self._refuse("a convolution of a matrix")
        weight = self._get(target, "weight")
        assert weight is not None
        bias = self._get(target, "bias")
        if conv.in_channels // conv.groups <= CHANNELS_LAST_MAX:
            x = x.contiguous(memory_format=torch.channels_last)
        else:
            x = x.contiguous()
        if conv.padding_mode != "zeros":
            raise self._refuse(f"padding_mode {conv.padding_mode!r}")
        return F.conv2d(
            x, weight.reshape(-1, *weight.shape[2:]), None if bias is None else bias.reshape(-1),
            stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=self.k * conv.groups,
        )

    def _linear(self, target: str, x: Tensor) -> Tensor:
        if x.dim() != 3:
            raise self._refuse("a fully connected layer over a map")
        weight = self._get(target, "weight")
        assert weight is not None
        return _batched_linear(x, weight, self._get(target, "bias"))

    def _batch_norm(self, target: str, bn: nn.modules.batchnorm._BatchNorm, x: Tensor) -> Tensor:
        """Train-mode batch norm of every device's channels, with its running averages, as PyTorch's does."""
        tracked = self._get(target, "num_batches_tracked")
        factor = bn.momentum
        if tracked is not None:
            tracked.add_(1)
            if factor is None:  # a cumulative average
                factor = 1.0 / float(tracked[0])
        matrix = x.dim() == 3
        if matrix:  # (K, N, F) as (N, K*F): each device's features one block of channels
            k, n, f = x.shape
            x = x.transpose(0, 1).reshape(n, k * f)
        mean, var = self._get(target, "running_mean"), self._get(target, "running_var")
        weight, bias = self._get(target, "weight"), self._get(target, "bias")
        y = F.batch_norm(
            x, None if mean is None else mean.view(-1), None if var is None else var.view(-1),
            None if weight is None else weight.reshape(-1), None if bias is None else bias.reshape(-1),
            training=True, momentum=0.0 if factor is None else factor, eps=bn.eps,
        )
        return y.reshape(n, k, f).transpose(0, 1) if matrix else y

    def _layer_norm(self, target: str, ln: nn.LayerNorm, x: Tensor) -> Tensor:
        if x.dim() != 3 or len(ln.normalized_shape) != 1:
            raise self._refuse("layer norm other than over a matrix's features")
        y = F.layer_norm(x, ln.normalized_shape, None, None, ln.eps)
        weight, bias = self._get(target, "weight"), self._get(target, "bias")
        if weight is not None:
            y = y * weight.unsqueeze(1)
        if bias is not None:
            y = y + bias.unsqueeze(1)
        return y

    # -- functions and methods -----------------------------------------------------

    def call_function(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if target is getattr and args[1] == "shape":
            return self._logical_shape(args[0])
        if target is operator.getitem and isinstance(args[0], torch.Size):
            return args[0][args[1]]
        if target is F.dropout:
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            return self._dropout(args[0], float(p) if training else 0.0)
        if target is torch.flatten:
            if (args[1:] or (kwargs.get("start_dim", 0),))[0] != 1:
                raise self._refuse("flattening other than from the channels on")
            return self._device_major(args[0])
        if target is torch.cat:
            return self._cat(*args, **kwargs)
        if target is F.adaptive_avg_pool2d:
            return self._global_pool(args[0], kwargs.get("output_size", args[1:2] and args[1]))
        if target in _AS_THEY_ARE_FUNCTIONS:
            return target(*args, **kwargs)
        raise self._refuse("this function")

    def _global_pool(self, x: Tensor, output_size: Any) -> Tensor:
        if output_size not in (1, (1, 1)) or x.dim() != 4:
            raise self._refuse("adaptive pooling to other than 1x1")
        return x.mean(dim=(2, 3), keepdim=True)

    def _cat(self, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
        if dim != 1:
            raise self._refuse("concatenation other than along channels or features")
        if all(t.dim() == 3 for t in tensors):
            return torch.cat(tensors, dim=2)
        if not all(t.dim() == 4 for t in tensors):
            raise self._refuse("concatenation of a map and a matrix")
        n, _, h, w = tensors[0].shape  # each device's channels of every part, side by side
        return torch.cat([t.reshape(n, self.k, -1, h, w) for t in tensors], dim=2).reshape(n, -1, h, w)

    def call_method(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        x = args[0]
        if target == "size":
            shape = self._logical_shape(x)
            return shape if len(args) == 1 and "dim" not in kwargs else shape[(args[1:] or (kwargs["dim"],))[0]]
        if target in ("view", "reshape"):
            shape = args[1] if len(args) == 2 and isinstance(args[1], (tuple, list, torch.Size)) else args[1:]
            logical = self._logical_shape(x)
            if len(shape) == 2 and shape[0] == logical[0] and shape[1] in (-1, logical[1:].numel()):
                return self._device_major(x)
            raise self._refuse("a reshape other than flattening each sample")
        if target == "flatten":
            if (args[1:] or (kwargs.get("start_dim", 0),))[0] != 1:
                raise self._refuse("flattening other than from the channels on")
            return self._device_major(x)
        if target == "mean":
            return self._mean(x, *args[1:], **kwargs)
        if target in _AS_THEY_ARE_METHODS:
            return getattr(x, target)(*args[1:], **kwargs)
        raise self._refuse("this method")

    def _mean(self, x: Tensor, dim: Any = None, keepdim: bool = False) -> Tensor:
        dims = tuple(sorted(d % 4 for d in (dim if isinstance(dim, (tuple, list)) else (dim,)))) if dim is not None else ()
        if x.dim() != 4 or dims != (2, 3):
            raise self._refuse("a mean other than over a map's height and width")
        y = x.mean(dim=(2, 3), keepdim=keepdim)
        return y if keepdim else self._device_major(y)


class _BatchedLinear(torch.autograd.Function):
    """y[k] = x[k] @ w[k].T (+ b[k]) for every device k, with each gradient computed in its input's layout.

    Autograd's own `bmm(x, w.transpose(1, 2))` computes the weights' gradient
    transposed and then copies it into place, the largest cost of a small
    model's step; here every product writes its result where it belongs.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        if bias is None:
            return torch.bmm(x, weight.transpose(1, 2))
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:  # type: ignore[override]
        x, weight = ctx.saved_tensors
        grad_x = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
        grad_w = torch.bmm(grad.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        grad_b = grad.sum(1) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b


def _batched_linear(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """K devices' fully connected layers on a device-major matrix (K, N, F): (K, N, O)."""
    return _BatchedLinear.apply(x, weight, bias)  # type: ignore[no-any-return]


class BatchedTrainer:
    """Trains many devices' tasks of one model, K at a time (see the module docstring); CUDA when available."""

    def __init__(self, spec: ModelSpec, *, device: str | None = None, max_devices: int | None = None) -> None:
        if max_devices is not None and max_devices < 1:
            raise ValueError(f"max_devices must be >= 1, got {max_devices}")
        self.spec = spec
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.max_devices = max_devices or MAX_DEVICES[self.device.type == "cuda"]
        self.model = build_model(spec).train()
        state = self.model.state_dict()
        self._shapes = {k: tuple(v.shape) for k, v in state.items()}
        self._dtypes = {k: v.dtype for k, v in state.items()}
        self._params = [k for k, _ in self.model.named_parameters()]
        self._graph = convert.trace(self.model)

    def train(
        self, weights: Weights, x: np.ndarray, y: np.ndarray, training: LocalTraining, *, seed: int = 0
    ) -> TrainResult:
        """One device's task (the `Trainer` protocol): a batch of one."""
        (result,) = self.train_many([BatchedTask(weights, x, y, training, seed)])
        return result

    def train_many(self, tasks: Sequence[BatchedTask]) -> list[TrainResult]:
        """Every task's result, in the order given; tasks with the same plan shape train together."""
        groups: dict[tuple[int, LocalTraining], list[int]] = {}
        for i, task in enumerate(tasks):
            groups.setdefault((len(task.y), task.training), []).append(i)
        results: list[TrainResult | None] = [None] * len(tasks)
        for members in groups.values():
            for start in range(0, len(members), self.max_devices):
                chunk = members[start : start + self.max_devices]
                for i, result in zip(chunk, self._train_group([tasks[i] for i in chunk])):
                    results[i] = result
        assert all(r is not None for r in results)  # every task is in one group
        return results  # type: ignore[return-value]

    def _train_group(self, tasks: Sequence[BatchedTask]) -> list[TrainResult]:
        t0 = time.perf_counter()
        k, dev = len(tasks), self.device
        training = tasks[0].training
        data = []
        for task in tasks:
            _check_weights(self._shapes, task.weights)
            data.append(_check_data(self.spec, task.x, task.y))
        n = len(data[0][1])
        # As `load_weights` reads them: float32 on the wire, integer buffers rounded back.
        tensors = {
            key: torch.stack([_tensor(t.weights[key], dtype) for t in tasks]).to(dev) for key, dtype in self._dtypes.items()
        }
        params = [tensors[key].requires_grad_() for key in self._params]
        step_sgd = _sgd(params, training)
        xs = torch.from_numpy(np.stack([x for x, _ in data])).to(dev)  # (K, n, C, H, W)
        ys = torch.from_numpy(np.stack([y for _, y in data])).to(dev)  # (K, n)
        plans = [batches(n, epochs=training.epochs, batch_size=training.batch_size, seed=t.seed) for t in tasks]
        generators = [TaskRandom(t.seed) for t in tasks]

        def noise(count: int, features: tuple[int, ...]) -> Tensor:
            # Each device's (*features, N) numbers, as its own trainer draws them, laid out (K, N, *features).
            drawn = np.stack([draw_noise(g, count, features) for g in generators])
            return torch.from_numpy(drawn).movedim(-1, 1).to(dev)

        form = BatchedForm(self._graph, k, tensors, noise)
        rows = torch.arange(k, device=dev)[:, None]
        loss_sums = torch.zeros(k, dtype=torch.float64, device=dev)
        c, h, w = self.spec.input_shape
        t1 = time.perf_counter()
        for step in range(len(plans[0])):
            index = torch.from_numpy(np.stack([plan[step] for plan in plans])).to(dev)  # (K, b)
            b = index.shape[1]
            xb = xs[rows, index].transpose(0, 1).reshape(b, k * c, h, w)
            yb = ys[rows, index]  # (K, b)
            logits = form.run(xb)  # (K, b, classes)
            losses = F.cross_entropy(logits.flatten(0, 1), yb.flatten(), reduction="none").view(k, b).mean(1)
            losses.sum().backward()
            step_sgd()
            loss_sums += losses.detach().double() * b
        t2 = time.perf_counter()
        # As `state_to_numpy` writes them: float32, integer buffers included.
        stacked = {key: t.detach().to("cpu", torch.float32).numpy() for key, t in tensors.items()}
        means = (loss_sums / (n * training.epochs)).cpu().numpy()
        t3 = time.perf_counter()
        # The group's time, shared: a device's part of the computation they did together.
        return [
            TrainResult(
                weights={key: np.array(stacked[key][i]) for key in stacked},
                samples=n, epochs=training.epochs, steps=len(plans[i]), mean_loss=float(means[i]),
                compute_s=(t3 - t0) / k, setup_s=(t1 - t0) / k, step_s=(t2 - t1) / k, readback_s=(t3 - t2) / k,
                step_times_s=(),
            )
            for i in range(k)
        ]


def _sgd(params: Sequence[Tensor], training: LocalTraining) -> Callable[[], None]:
    """One step of ``torch.optim.SGD(params, lr, momentum, weight_decay)`` per call, op for op as its
    single-tensor path computes it, the gradients then cleared; without the optimizer's per-step bookkeeping
    (hooks, profiler ranges, dispatch), measured at about a twentieth of a study's simulated run.
    """
    lr, momentum, decay = training.lr, training.momentum, training.weight_decay
    buffers: list[Tensor | None] = [None] * len(params)

    @torch.no_grad()
    def step() -> None:
        for i, param in enumerate(params):
            grad = param.grad
            if grad is None:  # not in the loss: SGD leaves it, and its momentum, as they are
                continue
            if decay != 0:
                grad = grad.add(param, alpha=decay)
            if momentum != 0:
                buffer = buffers[i]
                if buffer is None:
                    buffers[i] = buffer = grad.detach().clone()
                else:
                    buffer.mul_(momentum).add_(grad, alpha=1)
                grad = buffer
            param.add_(grad, alpha=-lr)
            param.grad = None

    return step


def _tensor(value: np.ndarray, dtype: torch.dtype) -> Tensor:
    # np.asarray keeps a scalar buffer 0-d (np.ascontiguousarray would make it (1,)); stacking copies it anyway.
    t = torch.as_tensor(np.asarray(value, dtype=np.float32))
    return t if dtype == torch.float32 else t.round().to(dtype)
