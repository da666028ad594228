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
- ReLU, max pooling, residual sums, global average pooling and dropout act
  per channel or element and need nothing more (flattening keeps each
  device's C*H*W block in PyTorch's (C, H, W) order); batch norm is per channel too, over the K*C
  channels with the K devices' stacked running averages;
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

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mjfl.jobs.base import LocalTraining, ModelSpec, TrainResult, Weights
from mjfl.jobs.layers import EagerOps
from mjfl.jobs.models import build_model
from mjfl.jobs.randomness import TaskRandom
from mjfl.jobs.trainers import _check_data, _check_weights, batches, draw_noise

__all__ = ["BatchedOps", "BatchedTask", "BatchedTrainer"]

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


class BatchedOps(EagerOps):
    """The `Ops` vocabulary (`mjfl.jobs.layers`) over K devices at once (see the module docstring).

    ``tensors`` holds every state entry of the model stacked over the
    devices, (K, *shape), by its `state_dict` key; ``names`` gives each
    module's key prefix. ``noise(n, features)`` returns the dropout noise
    of a site, (K, n, *features): each device's as its own trainer draws it
    for an n-sample batch of ``features``. Maps are (N, K*C, H, W), matrices
    (K, N, F) from `flatten` on; only the layers with weights, flattening,
    global pooling, the logits and dropout's noise differ from `EagerOps`: the rest (ReLU,
    pooling, sums) act per channel or per element, whichever device it
    belongs to.
    """

    def __init__(
        self, devices: int, names: Mapping[int, str], tensors: Mapping[str, Tensor],
        noise: Callable[[int, tuple[int, ...]], Tensor],
    ) -> None:
        super().__init__(training=True, noise=self._noise)
        self.k = devices
        self.names = names
        self.tensors = tensors
        self._device_noise = noise

    def _noise(self, shape: tuple[int, ...]) -> Tensor:
        """`EagerOps.dropout`'s noise for an activation of ``shape``, in this layout."""
        if len(shape) == 3:  # a device-major matrix
            return self._device_noise(shape[1], shape[2:])
        n, channels, *rest = shape  # a map: each device's channels one block
        return self._device_noise(n, (channels // self.k, *rest)).transpose(0, 1).reshape(shape)

    def _get(self, module: nn.Module, what: str) -> Tensor | None:
        return self.tensors.get(f"{self.names[id(module)]}.{what}")

    def conv(
        self, x: Tensor, conv: nn.Conv2d, *, bn: nn.BatchNorm2d | None = None, relu: bool = False, pool: bool = False
    ) -> Tensor:
        weight = self._get(conv, "weight")
        assert weight is not None
        bias = self._get(conv, "bias")
        if conv.in_channels // conv.groups <= CHANNELS_LAST_MAX:
            x = x.contiguous(memory_format=torch.channels_last)
        else:
            x = x.contiguous()
        x = F.conv2d(
            x, weight.reshape(-1, *weight.shape[2:]), None if bias is None else bias.reshape(-1),
            stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=self.k * conv.groups,
        )
        if bn is not None:
            x = self._batch_norm(x, bn)
        if relu:
            x = F.relu(x)
        if pool:
            x = F.max_pool2d(x, 2)
        return x

    def _batch_norm(self, x: Tensor, bn: nn.BatchNorm2d) -> Tensor:
        """Train-mode batch norm of every device's channels, with its running averages, as `nn.BatchNorm2d` does."""
        tracked = self._get(bn, "num_batches_tracked")
        factor = bn.momentum
        if tracked is not None:
            tracked.add_(1)
            if factor is None:  # a cumulative average
                factor = 1.0 / float(tracked[0])
        mean, var = self._get(bn, "running_mean"), self._get(bn, "running_var")
        weight, bias = self._get(bn, "weight"), self._get(bn, "bias")
        return F.batch_norm(
            x, None if mean is None else mean.view(-1), None if var is None else var.view(-1),
            None if weight is None else weight.reshape(-1), None if bias is None else bias.reshape(-1),
            training=True, momentum=0.0 if factor is None else factor, eps=bn.eps,
        )

    def flatten(self, x: Tensor) -> Tensor:
        return self._device_major(x)

    def global_avg_pool(self, x: Tensor) -> Tensor:
        return self._device_major(x.mean(dim=(2, 3)))

    def _device_major(self, x: Tensor) -> Tensor:
        """A map or (N, K*F) matrix as the (K, N, F) matrix of each device's features in PyTorch's order."""
        return x.reshape(x.shape[0], self.k, -1).transpose(0, 1).contiguous()

    def linear(self, x: Tensor, fc: nn.Linear, *, relu: bool = False) -> Tensor:
        weight = self._get(fc, "weight")
        assert weight is not None
        bias = self._get(fc, "bias")
        y = _batched_linear(x, weight, bias)
        return F.relu(y) if relu else y

    def logits(self, x: Tensor) -> Tensor:
        return x  # (K, N, classes)


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
        self._names = {id(m): name for name, m in self.model.named_modules()}

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

        ops = BatchedOps(k, self._names, tensors, noise)
        rows = torch.arange(k, device=dev)[:, None]
        loss_sums = torch.zeros(k, dtype=torch.float64, device=dev)
        c, h, w = self.spec.input_shape
        t1 = time.perf_counter()
        for step in range(len(plans[0])):
            index = torch.from_numpy(np.stack([plan[step] for plan in plans])).to(dev)  # (K, b)
            b = index.shape[1]
            xb = xs[rows, index].transpose(0, 1).reshape(b, k * c, h, w)
            yb = ys[rows, index]  # (K, b)
            logits = self.model.run(ops, xb)  # (K, b, classes)
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
