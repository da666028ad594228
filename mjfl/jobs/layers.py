"""Export-form layers: the zoo's layers re-expressed for the ExecuTorch runtime.

A zoo model is written once against the small `Ops` vocabulary below and
runs two ways:

- `EagerOps` is plain PyTorch (`F.conv2d`, `F.max_pool2d`, batch norm in
  train mode, ...) on NCHW tensors. It is the reference, the GPU/CPU fallback
  trainer and the coordinator's evaluator.
- `ExportOps` computes the same function with the same parameters, but only
  from operators that the ExecuTorch 1.5.1 runtime differentiates correctly
  and fast. It is what `mjfl.jobs.export` traces.

Why a second spelling is needed (all measured on executorch 1.5.1, see
docs/models.md):

- `max_pool2d_with_indices_backward` returns wrong gradients (upstream issue
  21686); `avg_pool2d` has no backward kernel; train-mode batch norm does not
  export; `F.pad` fails at run time when its input needs a gradient.
- The runtime registers one kernel per operator. `mm`, `linear`, `bmm`,
  `sum.dim_IntList` and same-shape or 2-D-broadcast `add`/`sub`/`mul` use the
  optimized, BLAS-backed kernels (about 0.6 ns an element); `convolution`
  and `convolution_backward` are naive portable loops (a LeNet-5 step took
  75 ms), `permute_copy` costs 7-10 ns an element, `where` 12 ns, a
  bool->float copy 16 ns, `amax`/`argmax` 40-60 ns an output, and a strided
  slice along the innermost dimension 6 ns.

So the export form keeps every tensor with the batch *innermost*: feature
maps are (C, H, W, N) and matrices (F, N). Then

- a convolution is one `mm` of the weight (O, C*kh*kw) with an im2col
  matrix (C*kh*kw, OH*OW*N) built from slices that copy whole contiguous
  runs of OW*N values, and its output is again (O, OH, OW, N);
- 2x2 max pooling pairs neighbours by splitting contiguous halves, then
  runs a two-stage tournament of optimized elementwise operators;
- flattening a map for the classifier is a free reshape to (C*H*W, N) in
  PyTorch's (C, H, W) feature order, and the fully connected layers
  compute W @ X on (F, N) matrices;
- ReLU and max are "value times a detached 0/1 mask", so their backward
  passes are a single optimized `mul`;
- batch norm is plain arithmetic over each channel's row;
- dropout multiplies by a mask made from a noise *input* of the program
  (one per dropout site), because the runtime's own dropout draws from an
  unseeded generator and a seed must give the same training everywhere.

The graph passes in `mjfl.jobs.passes` then turn the transposes that
autograd emits for `mm` into `linear` calls (which transpose inside BLAS)
or move them onto the small operand. The only layout changes are the input
image (N, C, H, W) -> (C, H, W, N) and the logits (K, N) -> (N, K).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "BatchStats",
    "EagerOps",
    "ExportOps",
    "Ops",
    "dropout_keep",
]


class Ops(Protocol):
    """The layer vocabulary every zoo model is written in.

    Activations are opaque to the model: `image` turns the NCHW input into
    the implementation's layout for feature maps, `flatten` turns a feature
    map into the implementation's matrix layout (feature order is PyTorch's
    `flatten(1)` order, (C, H, W)), and `logits` turns the model's last
    matrix into the batch-major (N, K) scores the loss takes.
    """

    def image(self, x: Tensor) -> Tensor:
        """Take an (N, C, H, W) batch into this implementation's map layout."""
        ...

    def conv(
        self,
        x: Tensor,
        conv: nn.Conv2d,
        *,
        bn: nn.BatchNorm2d | None = None,
        relu: bool = False,
        pool: bool = False,
    ) -> Tensor:
        """`conv`, then optionally batch norm (train mode), ReLU, 2x2 max pooling."""
        ...

    def max_pool(self, x: Tensor) -> Tensor:
        """2x2, stride-2 max pooling with floor semantics (odd edges dropped)."""
        ...

    def relu(self, x: Tensor) -> Tensor:
        """ReLU of a map or matrix."""
        ...

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        """Elementwise sum of two maps (residual connections)."""
        ...

    def global_avg_pool(self, x: Tensor) -> Tensor:
        """Mean over the pixels of a map, as a matrix of C features."""
        ...

    def flatten(self, x: Tensor) -> Tensor:
        """A map as a matrix of C*H*W features in PyTorch's flatten order."""
        ...

    def linear(self, x: Tensor, fc: nn.Linear, *, relu: bool = False) -> Tensor:
        """`fc` on a matrix of features, optionally followed by ReLU."""
        ...

    def logits(self, x: Tensor) -> Tensor:
        """The model's output matrix as (N, K) scores."""
        ...

    def dropout(self, x: Tensor, p: float) -> Tensor:
        """Training-mode inverted dropout with probability `p` (identity for p == 0).

        Where the implementation is given uniform noise (see `dropout_keep`),
        an activation is kept where its noise is > p, so a seed that draws
        the noise fixes the masks in every runtime.
        """
        ...


class EagerOps:
    """Plain PyTorch on NCHW tensors: the reference semantics.

    `training` switches dropout (batch norm follows its module's own mode).
    `noise`, when given, returns U[0, 1) noise of a requested (N, ...) shape
    for each dropout site in turn; without it dropout draws from torch's RNG.
    """

    def __init__(self, training: bool = True, noise: Callable[[tuple[int, ...]], Tensor] | None = None) -> None:
        self.training = training
        self.noise = noise

    def image(self, x: Tensor) -> Tensor:
        return x

    def conv(
        self,
        x: Tensor,
        conv: nn.Conv2d,
        *,
        bn: nn.BatchNorm2d | None = None,
        relu: bool = False,
        pool: bool = False,
    ) -> Tensor:
        x = conv(x)
        if bn is not None:
            x = bn(x)
        if relu:
            x = F.relu(x)
        if pool:
            x = F.max_pool2d(x, 2)
        return x

    def max_pool(self, x: Tensor) -> Tensor:
        return F.max_pool2d(x, 2)

    def relu(self, x: Tensor) -> Tensor:
        return F.relu(x)

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        return a + b

    def global_avg_pool(self, x: Tensor) -> Tensor:
        return x.mean(dim=(2, 3))

    def flatten(self, x: Tensor) -> Tensor:
        return x.flatten(1)

    def linear(self, x: Tensor, fc: nn.Linear, *, relu: bool = False) -> Tensor:
        x = fc(x)
        return F.relu(x) if relu else x

    def logits(self, x: Tensor) -> Tensor:
        return x

    def dropout(self, x: Tensor, p: float) -> Tensor:
        if p == 0 or not self.training:
            return x
        if self.noise is None:
            return F.dropout(x, p, training=True)
        return x * dropout_keep(self.noise(tuple(x.shape)), p)


def dropout_keep(noise: Tensor, p: float) -> Tensor:
    """Inverted dropout's multiplier from U[0, 1) noise: 1/(1-p) where noise > p, else 0.

    Spelled with optimized elementwise operators (a compare and a bool->float
    copy are portable kernels, 16 ns an element); both forms use it.
    """
    return torch.sign(torch.relu(noise - p)) * (1.0 / (1.0 - p))


class BatchStats:
    """Per-step batch statistics of the batch norm layers, in module order.

    The export form normalises with the batch statistics (train mode) but
    cannot update the running averages inside the program, so it returns
    each layer's batch mean and biased variance as extra outputs and the
    trainer folds them into `running_mean`/`running_var` exactly as
    `nn.BatchNorm2d` does (with the unbiased variance).
    """

    def __init__(self) -> None:
        self.by_module: dict[int, tuple[Tensor, Tensor]] = {}

    def record(self, bn: nn.BatchNorm2d, mean: Tensor, var: Tensor) -> None:
        assert id(bn) not in self.by_module, "a batch norm layer may be used once per forward"
        self.by_module[id(bn)] = (mean, var)

    def ordered(self, model: nn.Module) -> list[Tensor]:
        """Flat [mean0, var0, mean1, var1, ...] in `model.modules()` order."""
        out: list[Tensor] = []
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                mean, var = self.by_module[id(m)]
                out += [mean, var]
        return out


def _masked(x: Tensor, mask: Tensor) -> Tensor:
    """`x * mask` with a 0/1 mask that carries no gradient.

    Autograd turns this into a single optimized `mul` for the backward pass,
    where `relu`/`where` would cost a comparison plus a 12 ns/element `where`.
    """
    return x * mask.detach()


def relu_masked(x: Tensor) -> Tensor:
    """ReLU whose backward is `grad * sign(relu(x))` (one optimized mul)."""
    return _masked(x, torch.sign(torch.relu(x)))


def max2(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise max with first-wins ties, from optimized elementwise ops.

    `t` is 1 where b > a strictly, else 0, so ties go to `a` as in PyTorch's
    max pooling scan; the value `a + t * (b - a)` equals max(a, b) up to one
    rounding. Gradients flow to the winner only.
    """
    d = b - a
    t = torch.sign(torch.relu(d)).detach()
    return a + t * d


def pool_maps(x: Tensor) -> Tensor:
    """2x2/2 max pooling of a (C, H, W, N) map, floor semantics.

    With the batch innermost, horizontal neighbours are the two contiguous
    halves of each (2, N) block and vertical ones the halves of each
    (2, W/2*N) block, so pairing them is a `split`, whose backward is a
    `cat`. (`max_pool2d` itself has a wrong backward in the runtime.)
    """
    c, h, w, n = x.shape
    h2, w2 = h // 2, w // 2
    if h != 2 * h2 or w != 2 * w2:
        x = x[:, : 2 * h2, : 2 * w2, :]
    # Explicit sizes: split(n) would make export divide by the symbolic N.
    left, right = x.reshape(c * 2 * h2 * w2, 2 * n).split([n, n], dim=1)
    m = max2(left, right)  # (C*2*H2*W2, N)
    top, bottom = m.reshape(c * h2, 2 * w2 * n).split([w2 * n, w2 * n], dim=1)
    return max2(top, bottom).reshape(c, h2, w2, n)


def pad_maps(x: Tensor, p: int) -> Tensor:
    """Zero padding of a (C, H, W, N) map by concatenating zeros.

    `F.pad` (constant_pad_nd) fails at run time when its input needs a
    gradient; `cat` differentiates into cheap contiguous slices.
    """
    if p == 0:
        return x
    c, h, w, n = x.shape
    side = x.new_zeros(c, h, p, n)
    x = torch.cat([side, x, side], dim=2)
    top = x.new_zeros(c, p, w + 2 * p, n)
    return torch.cat([top, x, top], dim=1)


def conv_maps(x: Tensor, weight: Tensor, bias: Tensor | None, stride: int, padding: int) -> Tensor:
    """Convolution of a (C, H, W, N) map as one `mm` with an im2col matrix.

    The im2col matrix has rows (c, i, j) in the order of `weight.reshape(O, -1)`
    and columns (y, x, n). It is built separably, kh row-slices then kw
    column-slices, so a k x k kernel costs 2k slice operators instead of k^2
    (export time grows with the operator count), and every slice copies
    contiguous runs of at least N values. The result is an (O, OH, OW, N)
    map. In the backward pass the weight gradient `dY @ P^T` becomes a
    `linear` after the export passes, so no large transpose is materialised.
    """
    o, c, kh, kw = weight.shape
    x = pad_maps(x, padding)
    _, h, w, n = x.shape
    oh = (h - kh) // stride + 1
    ow = (w - kw) // stride + 1
    span_h = stride * (oh - 1) + 1
    span_w = stride * (ow - 1) + 1
    if kh == 1 and kw == 1:
        p = x[:, :span_h:stride, :span_w:stride, :].reshape(c, -1)
    else:
        rows = [x[:, i : i + span_h : stride] for i in range(kh)]
        u = torch.stack(rows, dim=1)  # (C, kh, OH, W, N)
        cols = [u[:, :, :, j : j + span_w : stride] for j in range(kw)]
        p = torch.stack(cols, dim=2).reshape(c * kh * kw, -1)  # (C, kh, kw, OH, OW, N)
    y = weight.reshape(o, c * kh * kw) @ p
    if bias is not None:
        y = y + bias.reshape(o, 1)
    return y.reshape(o, oh, ow, n)


def _mean_per_channel(x: Tensor, inv_count: Tensor) -> Tensor:
    """(C, 1) mean of a (C, H, W, N) map: each pixel over the batch, then pixels.

    The runtime's sum accumulates sequentially in float32, so one pass over
    H*W*N values is ~5x less accurate than PyTorch's; near a ReLU kink that
    error flips masks after batch norm and the runtimes drift apart. Two
    short sums keep the error at PyTorch's level for the same cost.
    `inv_count` is a 0-d tensor 1/(N*H*W): multiplying by it keeps the
    symbolic batch size out of every layer (one division per program).
    """
    c, h, w, n = x.shape
    return x.reshape(c, h * w, n).sum(dim=2).sum(dim=1, keepdim=True) * inv_count


def batch_norm_maps(
    x: Tensor, bn: nn.BatchNorm2d, inv_batch: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Train-mode batch norm of a (C, H, W, N) map from plain arithmetic.

    `inv_batch` is the 0-d tensor 1/N. Returns the normalised map and the
    batch mean and *biased* variance (shape (C,)); the trainer applies the
    n/(n-1) correction that `nn.BatchNorm2d` uses for its running variance,
    which keeps symbolic batch-size arithmetic out of the graph.
    """
    c, h, w, n = x.shape
    inv_count = inv_batch * (1.0 / (h * w))
    x2 = x.reshape(c, -1)
    mean = _mean_per_channel(x, inv_count)
    xc = x2 - mean
    var = _mean_per_channel((xc * xc).reshape(c, h, w, n), inv_count)
    scale = torch.rsqrt(var + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight.reshape(c, 1)
    y = xc * scale
    if bn.bias is not None:
        y = y + bn.bias.reshape(c, 1)
    return y.reshape(c, h, w, n), mean.reshape(c), var.reshape(c)


class ExportOps:
    """The runtime-friendly spelling of `Ops` (see the module docstring).

    Maps are (C, H, W, N), matrices (F, N). One instance per traced forward:
    it collects the batch norm statistics that the exported program returns.
    """

    def __init__(self) -> None:
        self.stats = BatchStats()
        self.inv_batch = torch.ones(())
        self.noise: Sequence[Tensor] = ()
        self._next_noise = 0

    def start(self, noise: Sequence[Tensor]) -> None:
        """Reset for one traced forward that draws dropout masks from `noise`."""
        self.stats = BatchStats()
        self.noise = noise
        self._next_noise = 0

    def image(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        # 1/N once per program; layers multiply by it (see _mean_per_channel).
        self.inv_batch = torch.ones(()) / n
        # The one transpose of a map; the input needs no gradient.
        return x.reshape(n, c * h * w).t().reshape(c, h, w, n)

    def conv(
        self,
        x: Tensor,
        conv: nn.Conv2d,
        *,
        bn: nn.BatchNorm2d | None = None,
        relu: bool = False,
        pool: bool = False,
    ) -> Tensor:
        assert conv.groups == 1 and conv.dilation == (1, 1), "zoo convs are plain"
        assert conv.stride[0] == conv.stride[1] and conv.padding[0] == conv.padding[1]
        assert isinstance(conv.padding[0], int)
        y = conv_maps(x, conv.weight, conv.bias, conv.stride[0], conv.padding[0])
        if bn is not None:
            y, mean, var = batch_norm_maps(y, bn, self.inv_batch)
            self.stats.record(bn, mean, var)
        if pool:
            # max and ReLU commute, so pool first and apply ReLU to a
            # quarter of the data.
            y = pool_maps(y)
        if relu:
            y = relu_masked(y)
        return y

    def max_pool(self, x: Tensor) -> Tensor:
        return pool_maps(x)

    def relu(self, x: Tensor) -> Tensor:
        return relu_masked(x)

    def add(self, a: Tensor, b: Tensor) -> Tensor:
        return a + b

    def global_avg_pool(self, x: Tensor) -> Tensor:
        c, h, w, n = x.shape
        # A mean over the pixels (`avg_pool2d` has no backward kernel).
        return x.reshape(c, h * w, n).mean(dim=1)

    def flatten(self, x: Tensor) -> Tensor:
        c, h, w, n = x.shape
        return x.reshape(c * h * w, n)

    def linear(self, x: Tensor, fc: nn.Linear, *, relu: bool = False) -> Tensor:
        # W @ X on (F, N) matrices; the passes keep autograd's transposes
        # of W and X out of the runtime (they would be portable copies).
        y = fc.weight @ x
        if fc.bias is not None:
            y = y + fc.bias.reshape(-1, 1)
        return relu_masked(y) if relu else y

    def logits(self, x: Tensor) -> Tensor:
        return x.t()

    def dropout(self, x: Tensor, p: float) -> Tensor:
        # The runtime's dropout draws from an unseeded generator; the program
        # takes one noise input per site instead (shape (*features, N), like
        # the activation), which the trainer fills from its seed.
        if p == 0:
            return x
        noise = self.noise[self._next_noise]
        self._next_noise += 1
        return x * dropout_keep(noise, p)


# -- the primitives of the converted form (mjfl.jobs.convert) ------------------
#
# Every activation is stored with the batch innermost: a logical (N, *features)
# tensor as (*features, N); a map (N, C, H, W) as (C, H, W, N).


def pad_map(x: Tensor, top: int, bottom: int, left: int, right: int, value: float = 0.0) -> Tensor:
    """Constant padding of a (C, H, W, N) map by concatenation (see `pad_maps`)."""
    c, h, w, n = x.shape
    if left or right:
        parts = [x.new_full((c, h, left, n), value)] if left else []
        parts.append(x)
        if right:
            parts.append(x.new_full((c, h, right, n), value))
        x = torch.cat(parts, dim=2)
    if top or bottom:
        wp = w + left + right
        parts = [x.new_full((c, top, wp, n), value)] if top else []
        parts.append(x)
        if bottom:
            parts.append(x.new_full((c, bottom, wp, n), value))
        x = torch.cat(parts, dim=1)
    return x


def _taps(
    x: Tensor, k: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]
) -> tuple[list[list[Tensor]], int, int]:
    """The kh x kw shifted, strided views of a padded (C, H, W, N) map, and (OH, OW)."""
    c, h, w, n = x.shape
    (kh, kw), (sh, sw), (dh, dw) = k, stride, dilation
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (w - dw * (kw - 1) - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ValueError(f"a {kh}x{kw} window does not fit a {h}x{w} map")
    span_h, span_w = sh * (oh - 1) + 1, sw * (ow - 1) + 1
    rows = [x[:, i * dh : i * dh + span_h : sh] for i in range(kh)]
    return [[r[:, :, j * dw : j * dw + span_w : sw] for j in range(kw)] for r in rows], oh, ow


def conv2d_maps(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    *,
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
    dilation: tuple[int, int] = (1, 1),
    groups: int = 1,
) -> Tensor:
    """`nn.Conv2d` of a (C, H, W, N) map; `pads` is (top, bottom, left, right).

    - groups 1: one `mm` of the weight (O, C*kh*kw) with an im2col matrix
      (C*kh*kw, OH*OW*N), built separably from kh row-slices, then kw
      column-slices, each copying contiguous runs of at least N values;
    - depthwise (groups == C == O): kh*kw per-channel multiply-adds of the
      shifted maps, (C, 1) weights broadcast over (C, OH*OW*N) rows, all
      optimized elementwise kernels forward and backward;
    - other groups: one `bmm` over the groups of the im2col matrix.
    """
    o, cg, kh, kw = weight.shape
    x = pad_map(x, *pads)
    c, h, w, n = x.shape
    (sh, sw), (dh, dw) = stride, dilation
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (w - dw * (kw - 1) - 1) // sw + 1
    span_h, span_w = sh * (oh - 1) + 1, sw * (ow - 1) + 1
    if groups == c == o and cg == 1:
        taps, _, _ = _taps(x, (kh, kw), stride, dilation)
        wk = weight.reshape(c, kh * kw)
        y = None
        for t, tap in enumerate(v for row in taps for v in row):
            term = tap.reshape(c, -1) * wk[:, t : t + 1]
            y = term if y is None else y + term
        assert y is not None
    else:
        if kh == 1 and kw == 1:
            p = x[:, :span_h:sh, :span_w:sw, :].reshape(c, -1)
        else:
            rows = [x[:, i * dh : i * dh + span_h : sh] for i in range(kh)]
            u = torch.stack(rows, dim=1)  # (C, kh, OH, W, N)
            cols = [u[:, :, :, j * dw : j * dw + span_w : sw] for j in range(kw)]
            p = torch.stack(cols, dim=2).reshape(c * kh * kw, -1)  # (C, kh, kw, OH, OW, N)
        if groups == 1:
            y = weight.reshape(o, c * kh * kw) @ p
        else:
            g = groups
            y = torch.bmm(weight.reshape(g, o // g, cg * kh * kw), p.reshape(g, cg * kh * kw, -1)).reshape(o, -1)
    if bias is not None:
        y = y + bias.reshape(o, 1)
    return y.reshape(o, oh, ow, n)


def max_exact(a: Tensor, b: Tensor) -> Tensor:
    """Elementwise max, first-wins ties, exact even when one side is a huge sentinel.

    `a - t*a + t*b` with a detached 0/1 `t` returns a or b bit for bit (where
    `max2`'s `a + t*(b - a)` rounds once), at one more multiply.
    """
    t = torch.sign(torch.relu(b - a)).detach()
    return a - t * a + t * b


# Padding value of max pooling: far below any activation, finite so that 0 * it is 0.
_MAX_PAD = -3.0e38


def max_pool_maps(x: Tensor, k: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int]) -> Tensor:
    """`nn.MaxPool2d` (floor mode) of a (C, H, W, N) map.

    2x2/2 without padding is `pool_maps`'s split tournament; any other window
    folds its kh*kw shifted maps in row-major order (PyTorch's first-wins
    scan) with optimized elementwise operators.
    """
    if k == (2, 2) and stride == (2, 2) and padding == (0, 0):
        return pool_maps(x)
    ph, pw = padding
    if ph or pw:
        x = pad_map(x, ph, ph, pw, pw, _MAX_PAD)
    taps, _, _ = _taps(x, k, stride, (1, 1))
    flat = [v for row in taps for v in row]
    fold = max_exact if (ph or pw) else max2
    m = flat[0]
    for v in flat[1:]:
        m = fold(m, v)
    return m if len(flat) > 1 else m.clone()


def avg_pool_maps(x: Tensor, k: tuple[int, int], stride: tuple[int, int], padding: tuple[int, int]) -> Tensor:
    """`nn.AvgPool2d` (floor mode, zeros counted) of a (C, H, W, N) map: a sum of shifted maps."""
    ph, pw = padding
    if ph or pw:
        x = pad_map(x, ph, ph, pw, pw)
    taps, _, _ = _taps(x, k, stride, (1, 1))
    flat = [v for row in taps for v in row]
    s = flat[0]
    for v in flat[1:]:
        s = s + v
    return s * (1.0 / (k[0] * k[1]))


def global_avg_pool_maps(x: Tensor) -> Tensor:
    """Mean over the pixels of a (C, H, W, N) map, as a (C, 1, 1, N) map (`avg_pool2d` has no backward)."""
    c, h, w, n = x.shape
    return x.reshape(c, h * w, n).mean(dim=1).reshape(c, 1, 1, n)


def mean_dims(x: Tensor, dims: list[int], keepdim: bool) -> Tensor:
    """Mean over stored dimensions `dims` (sorted, never the batch's last one).

    Adjacent dimensions are merged first, so a map's mean over its pixels is
    one mean over a (C, H*W, N) view.
    """
    shape = list(x.shape)
    if dims == list(range(dims[0], dims[-1] + 1)):
        lead, span, tail = shape[: dims[0]], shape[dims[0] : dims[-1] + 1], shape[dims[-1] + 1 :]
        y = x.reshape(*lead, math.prod(span), *tail).mean(dim=len(lead))
        if keepdim:
            y = y.reshape(*lead, *([1] * len(span)), *tail)
        return y
    return x.mean(dim=dims, keepdim=keepdim)


def batch_norm_rows(x: Tensor, bn: nn.Module, inv_batch: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Train-mode batch norm of a (C, *rest, N) activation (BatchNorm1d or 2d).

    The statistics are over the batch and `rest` (the pixels, the length, or
    nothing); see `batch_norm_maps`, which this generalises.
    """
    c, n = x.shape[0], x.shape[-1]
    rest = math.prod(x.shape[1:-1])
    y, mean, var = batch_norm_maps(x.reshape(c, rest, 1, n), bn, inv_batch)
    return y.reshape(x.shape), mean, var


def layer_norm_cols(x: Tensor, k: int, weight: Tensor | None, bias: Tensor | None, eps: float) -> Tensor:
    """`nn.LayerNorm` over the last `k` sample dimensions of a (*lead, *norm, N) activation."""
    shape = x.shape
    n = shape[-1]
    lead = math.prod(shape[: len(shape) - 1 - k])
    d = math.prod(shape[len(shape) - 1 - k : -1])
    x3 = x.reshape(d, n) if lead == 1 else x.reshape(lead, d, n)
    axis = 0 if lead == 1 else 1
    inv = 1.0 / d
    mean = x3.sum(dim=axis, keepdim=True) * inv
    xc = x3 - mean
    var = (xc * xc).sum(dim=axis, keepdim=True) * inv
    y = xc * torch.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.reshape(d, 1)
    if bias is not None:
        y = y + bias.reshape(d, 1)
    return y.reshape(shape)


def embedding_cols(idx: Tensor, weight: Tensor) -> Tensor:
    """`nn.Embedding` of (*lead, N) indices as (*lead, D, N): the table times one-hot columns.

    The one-hot matrix (V, lead*N) is data (no gradient); the table's
    gradient is then one `mm`, where the runtime has no embedding backward.
    """
    v, d = weight.shape
    lead, n = tuple(idx.shape[:-1]), idx.shape[-1]
    flat = idx.reshape(-1)
    onehot = (torch.arange(v, dtype=idx.dtype).reshape(v, 1) == flat.reshape(1, -1)).to(weight.dtype).detach()
    y = weight.t() @ onehot  # (D, lead*N), columns (l, n)
    l = math.prod(lead)
    return y.reshape(d, l, n).permute(1, 0, 2).reshape(*lead, d, n)


def leaky_relu_masked(x: Tensor, slope: float) -> Tensor:
    """LeakyReLU as `x` times a detached mask of 1 (x > 0) or the slope."""
    pos = torch.sign(torch.relu(x))
    return _masked(x, pos * (1.0 - slope) + slope)


def clamp_masked(x: Tensor, lo: float, hi: float) -> Tensor:
    """Hardtanh/ReLU6: `x` inside (lo, hi), the bound outside, gradient 1 strictly inside.

    `below` is 1 where x < hi, `above` 1 where x > lo; both detached, so the
    backward is one multiply, as PyTorch's (zero at the bounds).
    """
    below = torch.sign(torch.relu(hi - x)).detach()
    above = torch.sign(torch.relu(x - lo)).detach()
    inside = below * above
    return x * inside + (1.0 - below) * hi + (1.0 - above) * lo


def hardswish_masked(x: Tensor) -> Tensor:
    """Hardswish, x * relu6(x + 3) / 6, its ReLU6 from detached masks."""
    return x * clamp_masked(x + 3.0, 0.0, 6.0) * (1.0 / 6.0)
