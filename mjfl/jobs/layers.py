"""The export form's operators: PyTorch's layers re-expressed for the ExecuTorch runtime.

`mjfl.jobs.convert` turns each layer of a traced model into these
functions; they compute the same values and gradients with the same
parameters, but only from operators that the ExecuTorch 1.5.1 runtime
differentiates correctly and fast. Why (all measured on executorch 1.5.1,
see docs/models.md):

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

So every tensor keeps the batch *innermost*: feature maps are (C, H, W, N)
and matrices (F, N). Then

- a convolution is one `mm` of the weight (O, C*kh*kw) with an im2col
  matrix (C*kh*kw, OH*OW*N) built from slices that copy whole contiguous
  runs of OW*N values, and its output is again (O, OH, OW, N); a depthwise
  one is kh*kw per-channel multiply-adds of shifted maps;
- max pooling is a tournament of optimized elementwise operators (2x2/2 by
  splitting contiguous halves), average pooling a sum of shifted maps;
- flattening a map for the classifier is a free reshape to (C*H*W, N) in
  PyTorch's (C, H, W) feature order, and the fully connected layers
  compute W @ X on (F, N) matrices;
- ReLU-like activations and max are "value times a detached mask", so their
  backward passes are a single optimized `mul`;
- batch norm and layer norm are plain arithmetic over each channel's row or
  each sample's column;
- dropout multiplies by a mask made from a noise *input* of the program
  (one per dropout site), because the runtime's own dropout draws from an
  unseeded generator and a seed must give the same training everywhere;
- padding concatenates constant maps.

The graph passes in `mjfl.jobs.passes` then turn the transposes that
autograd emits for `mm` into `linear` calls (which transpose inside BLAS)
or move them onto the small operand. The only layout changes are the input
image (N, C, H, W) -> (C, H, W, N) and the logits (K, N) -> (N, K).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "avg_pool_maps",
    "batch_norm_rows",
    "conv2d_maps",
    "dropout_keep",
    "layer_norm_cols",
    "max_pool_maps",
    "relu_masked",
]


def dropout_keep(noise: Tensor, p: float) -> Tensor:
    """Inverted dropout's multiplier from U[0, 1) noise: 1/(1-p) where noise > p, else 0.

    Spelled with optimized elementwise operators (a compare and a bool->float
    copy are portable kernels, 16 ns an element); the eager form uses it too.
    """
    return torch.sign(torch.relu(noise - p)) * (1.0 / (1.0 - p))


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


def pad_map(x: Tensor, top: int, bottom: int, left: int, right: int, value: float = 0.0) -> Tensor:
    """Constant padding of a (C, H, W, N) map by concatenating constant maps.

    `F.pad` (constant_pad_nd) fails at run time when its input needs a
    gradient; `cat` differentiates into cheap contiguous slices. Equal sides
    share one constant tensor: the program fills it once.
    """
    c, h, w, n = x.shape
    if left or right:
        lside = x.new_full((c, h, left, n), value) if left else None
        rside = lside if right == left else x.new_full((c, h, right, n), value) if right else None
        x = torch.cat([t for t in (lside, x, rside) if t is not None], dim=2)
    if top or bottom:
        wp = w + left + right
        tside = x.new_full((c, top, wp, n), value) if top else None
        bside = tside if bottom == top else x.new_full((c, bottom, wp, n), value) if bottom else None
        x = torch.cat([t for t in (tside, x, bside) if t is not None], dim=1)
    return x


def _taps(
    x: Tensor, k: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int]
) -> tuple[list[list[Tensor]], int, int]:
    """The kh x kw shifted, strided views of a padded (C, H, W, N) map, and (OH, OW)."""
    _, h, w, _ = x.shape
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
    if x.dim() == 4:  # a map as it is: a reshape would be one more copy each way in the program
        return batch_norm_maps(x, bn, inv_batch)
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
