"""The model zoo: the paper's networks, sized from the input shape, and custom models.

Every zoo model is an ordinary `nn.Module` made of `nn.Conv2d`,
`nn.BatchNorm2d`, `nn.Linear`, `F.relu`, `F.max_pool2d` and `nn.Dropout`, so
its `state_dict()` is what coordinator and devices exchange and its `forward`
is the eager reference. The ExecuTorch export converts it like any module of
the user's own (`mjfl.jobs.convert`); nothing is spelled twice.

Models (paper section "Experiments" and the appendix "Experimentation with
Real Mobile Devices"):

    lenet5        LeNet-5 (ReLU, max pooling), conv 6@5x5 pad 2, 16@5x5, FC 120-84
    cnn-a-iid     CNN-A-IID: conv 32, 64 @3x3, each + batch norm + 2x2 max pool, FC 1568-784
    cnn-a-noniid  CNN-A-non-IID: conv 32, 64, 64 @3x3 ReLU, pool after the first two, FC 64
    cnn-b         CNN-B: conv 64, 32 @2x2 ReLU, each + dropout 0.05, one FC
    vgg6          VGG of 6 conv layers: 32,32,M,64,64,M,128,128,M then FC 256 (dropout 0.5)
    resnet13      ResNet of 13 conv layers: stem + 3 stages x 2 basic blocks (16/32/64)
    alexnet       small AlexNet: conv 32,64,96,64,64 @3x3 (pool after 1, 2, 5), FC 256-128

Pooling is always 2x2/2 max pooling (AlexNet's overlapping 3x3/2 pooling is
replaced; see docs/models.md). All 3x3 convolutions use padding 1.

A job may name a model of its own instead: a factory (`mjfl.jobs.custom`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mjfl.errors import ConfigError
from mjfl.jobs.base import MODEL_NAMES, ModelSpec

__all__ = [
    "MODELS",
    "ModelSpec",
    "batch_norm_pixels",
    "build_model",
    "dropout_shapes",
    "initial_weights",
    "load_weights",
    "parameter_count",
    "state_to_numpy",
]


def _block(x: Tensor, conv: nn.Conv2d, bn: nn.BatchNorm2d | None = None, *, relu: bool = True, pool: bool = False) -> Tensor:
    """conv, then optionally batch norm, ReLU and 2x2 max pooling: the zoo's repeated unit."""
    x = conv(x)
    if bn is not None:
        x = bn(x)
    if relu:
        x = F.relu(x)
    if pool:
        x = F.max_pool2d(x, 2)
    return x


def _pooled(size: int, n: int = 1) -> int:
    for _ in range(n):
        size //= 2
    return size


def _require(name: str, input_shape: tuple[int, int, int], ok: bool, need: str) -> None:
    if not ok:
        raise ConfigError("input_shape", f"model {name!r} needs {need}; got {input_shape}")


class LeNet5(nn.Module):
    """LeNet-5 with ReLU and max pooling (28x28 inputs give the classic 16x5x5)."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        oh, ow = (_pooled(h) - 4) // 2, (_pooled(w) - 4) // 2
        _require("lenet5", input_shape, oh >= 1 and ow >= 1, "H, W >= 12")
        self.conv1 = nn.Conv2d(c, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * oh * ow, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = _block(x, self.conv1, pool=True)
        x = _block(x, self.conv2, pool=True)
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class CnnAIid(nn.Module):
    """CNN-A-IID: two 3x3 convs (32, 64) each with batch norm and 2x2 max
    pooling, then FC layers of 1568 and 784 units and the classifier."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        oh, ow = _pooled(h, 2), _pooled(w, 2)
        _require("cnn-a-iid", input_shape, oh >= 1 and ow >= 1, "H, W >= 4")
        self.conv1 = nn.Conv2d(c, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * oh * ow, 1568)
        self.fc2 = nn.Linear(1568, 784)
        self.fc3 = nn.Linear(784, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = _block(x, self.conv1, self.bn1, pool=True)
        x = _block(x, self.conv2, self.bn2, pool=True)
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class CnnANonIid(nn.Module):
    """CNN-A-non-IID: 3x3 convs 32, 64, 64 with ReLU, 2x2 max pooling after
    the first two, then FC 64 and the classifier."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        oh, ow = _pooled(h, 2), _pooled(w, 2)
        _require("cnn-a-noniid", input_shape, oh >= 1 and ow >= 1, "H, W >= 4")
        self.conv1 = nn.Conv2d(c, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 64, 3, padding=1)
        self.fc1 = nn.Linear(64 * oh * ow, 64)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = _block(x, self.conv1, pool=True)
        x = _block(x, self.conv2, pool=True)
        x = _block(x, self.conv3)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


class CnnB(nn.Module):
    """CNN-B: 2x2 convs 64 and 32 with ReLU, each followed by dropout 0.05,
    then flatten and one FC layer (no pooling, no padding)."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, dropout: float) -> None:
        super().__init__()
        c, h, w = input_shape
        _require("cnn-b", input_shape, h >= 3 and w >= 3, "H, W >= 3")
        self.conv1 = nn.Conv2d(c, 64, 2)
        self.drop1 = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(64, 32, 2)
        self.drop2 = nn.Dropout(dropout)
        self.fc = nn.Linear(32 * (h - 2) * (w - 2), num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = self.drop1(_block(x, self.conv1))
        x = self.drop2(_block(x, self.conv2))
        return self.fc(x.flatten(1))


class Vgg6(nn.Module):
    """VGG of 6 conv layers (the appendix's phone experiment): 3x3 convs
    32,32,M,64,64,M,128,128,M with ReLU, then FC 256 + dropout and the classifier."""

    WIDTHS = ((32, 32), (64, 64), (128, 128))

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, dropout: float) -> None:
        super().__init__()
        c, h, w = input_shape
        oh, ow = _pooled(h, 3), _pooled(w, 3)
        _require("vgg6", input_shape, oh >= 1 and ow >= 1, "H, W >= 8")
        convs = []
        for a, b in self.WIDTHS:
            convs += [nn.Conv2d(c, a, 3, padding=1), nn.Conv2d(a, b, 3, padding=1)]
            c = b
        self.convs = nn.ModuleList(convs)
        self.fc1 = nn.Linear(c * oh * ow, 256)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(256, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        for k, conv in enumerate(self.convs):
            x = _block(x, conv, pool=k % 2 == 1)
        x = self.drop(F.relu(self.fc1(x.flatten(1))))
        return self.fc2(x)


class BasicBlock(nn.Module):
    """ResNet basic block: two 3x3 conv + batch norm, identity or 1x1 projection."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut: nn.Conv2d | None = None
        self.shortcut_bn: nn.BatchNorm2d | None = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
            self.shortcut_bn = nn.BatchNorm2d(cout)

    def forward(self, x: Tensor) -> Tensor:
        out = _block(x, self.conv1, self.bn1)
        out = _block(out, self.conv2, self.bn2, relu=False)
        if self.shortcut is not None:
            x = _block(x, self.shortcut, self.shortcut_bn, relu=False)
        return F.relu(out + x)


class ResNet13(nn.Module):
    """ResNet of 13 conv layers (appendix): a 3x3 stem and three stages of two
    basic blocks (16, 32, 64 channels; stride 2 entering stages 2 and 3), global
    average pooling and the classifier. The 1x1 projection shortcuts are not
    counted as layers, as in ResNet-18."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int) -> None:
        super().__init__()
        c, h, w = input_shape
        _require("resnet13", input_shape, h >= 4 and w >= 4, "H, W >= 4")
        self.stem = nn.Conv2d(c, 16, 3, padding=1, bias=False)
        self.stem_bn = nn.BatchNorm2d(16)
        blocks = []
        cin = 16
        for cout, stride in ((16, 1), (16, 1), (32, 2), (32, 1), (64, 2), (64, 1)):
            blocks.append(BasicBlock(cin, cout, stride))
            cin = cout
        self.blocks = nn.ModuleList(blocks)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = _block(x, self.stem, self.stem_bn)
        for block in self.blocks:
            x = block(x)
        return self.fc(x.mean(dim=(2, 3)))


class AlexNetSmall(nn.Module):
    """A small AlexNet for 28x28-class inputs: five 3x3 convs (32, 64, 96,
    64, 64) with ReLU, 2x2 max pooling after conv 1, 2 and 5, then dropout,
    FC 256, dropout, FC 128 and the classifier."""

    def __init__(self, input_shape: tuple[int, int, int], num_classes: int, dropout: float) -> None:
        super().__init__()
        c, h, w = input_shape
        oh, ow = _pooled(h, 3), _pooled(w, 3)
        _require("alexnet", input_shape, oh >= 1 and ow >= 1, "H, W >= 8")
        self.conv1 = nn.Conv2d(c, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.conv3 = nn.Conv2d(64, 96, 3, padding=1)
        self.conv4 = nn.Conv2d(96, 64, 3, padding=1)
        self.conv5 = nn.Conv2d(64, 64, 3, padding=1)
        self.drop1 = nn.Dropout(dropout)
        self.fc1 = nn.Linear(64 * oh * ow, 256)
        self.drop2 = nn.Dropout(dropout)
        self.fc2 = nn.Linear(256, 128)
        self.fc3 = nn.Linear(128, num_classes)

    def forward(self, x: Tensor) -> Tensor:
        x = _block(x, self.conv1, pool=True)
        x = _block(x, self.conv2, pool=True)
        x = _block(x, self.conv3)
        x = _block(x, self.conv4)
        x = _block(x, self.conv5, pool=True)
        x = self.drop1(x.flatten(1))
        x = self.drop2(F.relu(self.fc1(x)))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def _drop(spec_dropout: float | None, default: float) -> float:
    return default if spec_dropout is None else spec_dropout


# name -> builder(input_shape, num_classes, dropout override)
MODELS: dict[str, Callable[[tuple[int, int, int], int, float | None], nn.Module]] = {
    "lenet5": lambda s, k, p: LeNet5(s, k),
    "cnn-a-iid": lambda s, k, p: CnnAIid(s, k),
    "cnn-a-noniid": lambda s, k, p: CnnANonIid(s, k),
    "cnn-b": lambda s, k, p: CnnB(s, k, _drop(p, 0.05)),
    "vgg6": lambda s, k, p: Vgg6(s, k, _drop(p, 0.5)),
    "resnet13": lambda s, k, p: ResNet13(s, k),
    "alexnet": lambda s, k, p: AlexNetSmall(s, k, _drop(p, 0.5)),
}
assert tuple(MODELS) == MODEL_NAMES, "jobs/base.py names the zoo's models in this order"


def build_model(
    name: str | ModelSpec,
    input_shape: tuple[int, int, int] | None = None,
    num_classes: int | None = None,
    *,
    dropout: float | None = None,
) -> nn.Module:
    """A freshly initialised model (its own init under the global RNG): the zoo's, or a factory's.

    Accepts either a `ModelSpec` or its fields; raises `ConfigError` for an
    unknown name, an input too small for the architecture, or a factory
    that cannot be loaded or called (`mjfl.jobs.custom`).
    """
    if isinstance(name, ModelSpec):
        spec = name
    else:
        if input_shape is None or num_classes is None:
            raise TypeError("build_model(name, input_shape, num_classes) needs all three")
        spec = ModelSpec(name, tuple(input_shape), num_classes, dropout)  # type: ignore[arg-type]
    if spec.custom:
        from mjfl.jobs.custom import build_custom

        return build_custom(spec)  # type: ignore[no-any-return]
    return MODELS[spec.name](spec.input_shape, spec.num_classes, spec.dropout)


def state_to_numpy(model: nn.Module) -> dict[str, np.ndarray]:
    """The model's `state_dict()` as float32 numpy arrays, in state_dict order.

    Integer buffers (batch norm's `num_batches_tracked`) are carried as
    float32 too, so every exchanged tensor has one dtype.
    """
    return {
        k: v.detach().to("cpu", torch.float32).numpy().copy() for k, v in model.state_dict().items()
    }


def load_weights(model: nn.Module, weights: Mapping[str, np.ndarray]) -> None:
    """Copy `weights` into `model`; keys and shapes must match exactly.

    Raises `mjfl.errors.ProgramError` naming the first mismatch.
    """
    from mjfl.errors import ProgramError

    state = model.state_dict()
    missing = [k for k in state if k not in weights]
    extra = [k for k in weights if k not in state]
    if missing or extra:
        raise ProgramError(
            f"weights do not match the model: missing {missing[:3]}, unexpected {extra[:3]}"
        )
    new = {}
    for k, ref in state.items():
        arr = np.asarray(weights[k])
        if tuple(arr.shape) != tuple(ref.shape):
            raise ProgramError(
                f"weight {k!r} has shape {tuple(arr.shape)}, the model expects {tuple(ref.shape)}"
            )
        t = torch.from_numpy(np.ascontiguousarray(arr, dtype=np.float32))
        if ref.dtype != torch.float32:
            t = t.round().to(ref.dtype)
        new[k] = t
    model.load_state_dict(new)


def initial_weights(spec: ModelSpec, seed: int) -> dict[str, np.ndarray]:
    """The initial global model of a job: the model built under `seed`, He-initialised for the zoo.

    A custom model keeps the initialisation its factory gives it (drawn
    from torch's generator seeded with `seed`).

    Every zoo network is a ReLU network, for which He et al. (2015)'s
    normal init with fan-in scaling keeps activations from shrinking layer
    after layer; PyTorch's default (a uniform with a = sqrt(5)) left the
    6-conv VGG at chance accuracy for 15+ FedAvg rounds on digits, where He
    init learns from the first round. Biases start at zero; batch norm keeps
    its (1, 0) affine init. Deterministic for a given (spec, seed) and leaves
    the global RNG as it was.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = build_model(spec)
        for module in model.modules() if not spec.custom else ():
            if isinstance(module, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(module.weight, nonlinearity="relu")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
    return state_to_numpy(model)


def parameter_count(spec: ModelSpec) -> int:
    """Trainable parameters of the model built for `spec`."""
    return sum(p.numel() for p in build_model(spec).parameters())


def batch_norm_pixels(model: nn.Module, input_shape: tuple[int, int, int]) -> dict[str, int]:
    """Values per channel per sample that each batch norm layer of `model` normalises.

    H*W for `nn.BatchNorm2d`, L for a (N, C, L) `nn.BatchNorm1d`, 1 for
    (N, C). A layer averages over batch * that many values; the trainers need
    the count for the unbiased running variance. Keys in state-dict order.
    """
    pixels: dict[str, int] = {}
    hooks = []
    for name, m in model.named_modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):

            def hook(m: nn.Module, args: tuple[Tensor, ...], _out: Tensor, name: str = name) -> None:
                x = args[0]
                pixels[name] = int(x.numel() // (x.shape[0] * x.shape[1]))

            hooks.append(m.register_forward_hook(hook))
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(torch.zeros(1, *input_shape))
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    return {name: pixels[name] for name, m in model.named_modules() if name in pixels}


def dropout_shapes(model: nn.Module, input_shape: tuple[int, int, int]) -> list[tuple[int, ...]]:
    """Per-sample shape of the activation at each dropout site, in forward order.

    A training program takes one noise input per site (see
    `mjfl.jobs.convert`); sites with p == 0 are skipped, as the conversion
    skips them.
    """
    from mjfl.jobs.convert import EagerForm, dropout_sites

    return dropout_sites(EagerForm(model), input_shape)
