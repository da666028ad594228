"""Any PyTorch module, converted to the export form the runtime trains correctly.

A model is traced once with `torch.fx` (`trace`); the graph is then run two
ways over the module's own parameters:

- `EagerForm` runs the graph as PyTorch does (it *is* the module's forward),
  except that each dropout site takes its mask from U[0, 1) noise, so the
  eager reference and the program draw the same masks from one seed.
- `ExportForm` runs the graph through the rules below, which spell every
  operator with what ExecuTorch 1.5.1 differentiates correctly and fast
  (`mjfl.jobs.layers`, docs/models.md): every activation is kept with the
  batch *innermost*, a logical (N, d1, ..., dk) tensor stored as
  (d1, ..., dk, N); a convolution is one `mm` (or `bmm` over groups) of an
  im2col matrix; pooling is a tournament of optimized elementwise
  operators; batch norm is plain arithmetic returning its batch statistics;
  ReLU-like activations multiply by a detached mask; dropout multiplies by
  a mask made from a noise input; padding is concatenation. It is what
  `mjfl.jobs.export` traces.

The rules are a module-level substitution on the traced graph: a leaf module
(`nn.Conv2d`, `nn.BatchNorm2d`, ...) or a function (`F.relu`, `torch.cat`,
`x.view`, `+`) is looked up in `RULES` by what it is, never by name. Anything
else stops the conversion with one `ModelError` naming the operator, the
module's qualified name (`features.3.conv`) and what to use instead, before a
device is contacted: a program that would train wrongly is never written.

One rewrite changes the order of operators: a ReLU whose only use is a max
pooling runs after it (max and ReLU commute, values and gradients alike), so
the mask is made for a quarter of the values.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, fx, nn

from mjfl.errors import ModelError
from mjfl.jobs import layers

__all__ = [
    "RULES",
    "Conversion",
    "EagerForm",
    "ExportForm",
    "Site",
    "batch_norm_layers",
    "supported_table",
    "trace",
]

# The running-average update a device applies (docs/models.md, "Batch-norm statistics").
BN_MOMENTUM = 0.1


# -- tracing --------------------------------------------------------------------


class _Tracer(fx.Tracer):
    """`torch.fx`'s tracer, stamping each node with the module whose forward made it."""

    def __init__(self) -> None:
        super().__init__()
        self._path = [""]

    def call_module(self, m: nn.Module, forward: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        self._path.append(self.path_of_module(m))
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self._path.pop()

    def create_node(self, *args: Any, **kwargs: Any) -> fx.Node:
        node = super().create_node(*args, **kwargs)
        node.meta["mjfl_module"] = self._path[-1]
        return node


def trace(model: nn.Module) -> fx.GraphModule:
    """The model's forward as an fx graph over its own submodules (train mode).

    Raises `ModelError` when the forward cannot be traced (control flow on
    tensor values, a forward taking more than the input).
    """
    was = model.training
    model.train()
    try:
        graph = _Tracer().trace(model)
    except Exception as exc:  # noqa: BLE001 - fx raises many kinds; one clear error
        raise ModelError(
            "forward", type(model).__name__, f"torch.fx cannot trace it ({type(exc).__name__}: {exc})",
            "write forward without control flow that depends on tensor values",
        ) from None
    finally:
        model.train(was)
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        raise ModelError(
            "forward", type(model).__name__, f"forward takes {len(inputs)} inputs",
            "take one batch x of shape (N, C, H, W) and return the logits",
        )
    return fx.GraphModule(model, graph)


def where(node: fx.Node) -> str:
    """The qualified name of the module a node belongs to (its own for a module call)."""
    if node.op == "call_module":
        return str(node.target)
    return str(node.meta.get("mjfl_module") or "") or "(the model's forward)"


def operator_name(node: fx.Node, gm: fx.GraphModule | None = None) -> str:
    """How a user would name a node's operator: `nn.Conv2d`, `F.relu`, `torch.cat`, `x.view`, `+`."""
    if node.op == "call_module" and gm is not None:
        m = gm.get_submodule(str(node.target))
        return f"nn.{type(m).__name__}" if type(m).__module__.startswith("torch.nn") else type(m).__qualname__
    if node.op == "call_method":
        return f"x.{node.target}"
    if node.op == "call_function":
        target = node.target
        if target in _SYMBOLS:
            return _SYMBOLS[target]  # type: ignore[index]
        mod = getattr(target, "__module__", "") or ""
        name = getattr(target, "__name__", str(target))
        if mod.startswith(("torch.nn.functional", "torch._C._nn")):
            return f"F.{name}"
        if mod.startswith("torch"):
            return f"torch.{name}"
        return name
    return node.op


_SYMBOLS: dict[Any, str] = {
    operator.add: "+", operator.iadd: "+=", operator.sub: "-", operator.mul: "*",
    operator.truediv: "/", operator.getitem: "[...]", getattr: "getattr", operator.matmul: "@",
}


# -- the values the export form computes with ----------------------------------


@dataclass
class Act:
    """An activation in the export layout: logical (N, *features) stored as (*features, N)."""

    t: Tensor

    @property
    def features(self) -> tuple[int, ...]:
        return tuple(self.t.shape[:-1])

    @property
    def rank(self) -> int:
        """The logical rank (with the batch)."""
        return self.t.dim()


@dataclass(frozen=True)
class Site:
    """One operator of a model and what the conversion made of it (`mjfl models check`)."""

    module: str
    operator: str
    became: str


@dataclass
class Conversion:
    """What `ExportForm` found in a model: each operator and what it became, in forward order."""

    sites: list[Site] = field(default_factory=list)

    def counts(self) -> list[tuple[str, str, int]]:
        """(operator, became, how many) in order of first appearance."""
        seen: dict[tuple[str, str], int] = {}
        for s in self.sites:
            seen[(s.operator, s.became)] = seen.get((s.operator, s.became), 0) + 1
        return [(op, became, n) for (op, became), n in seen.items()]


def _fail(node: fx.Node, gm: fx.GraphModule, problem: str, instead: str) -> ModelError:
    return ModelError(operator_name(node, gm), where(node), problem, instead)


# -- the rules ------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """How one kind of operator becomes the export form.

    `apply(ctx, node, module, args, kwargs)` returns the node's value;
    `operators` names what the user writes, `becomes` what the program runs
    (the supported-set table of docs/models.md is made from these).
    """

    operators: tuple[str, ...]
    becomes: str
    apply: Callable[..., Any]


class _Ctx:
    """One forward of the export form: the batch size, statistics, noise, and the report."""

    def __init__(self, gm: fx.GraphModule, noise: Sequence[Tensor], report: Conversion | None) -> None:
        self.gm = gm
        self.noise = noise
        self.next_noise = 0
        self.n: Any = 1
        self.inv_batch = torch.ones(())
        self.stats: dict[int, tuple[Tensor, Tensor]] = {}
        self.report = report
        self.relu_after: set[fx.Node] = set()  # pools that apply a ReLU moved past them

    def said(self, node: fx.Node, became: str) -> None:
        if self.report is not None:
            self.report.sites.append(Site(where(node), operator_name(node, self.gm), became))


def _act(ctx: _Ctx, node: fx.Node, value: Any, what: str = "input") -> Act:
    if not isinstance(value, Act):
        raise _fail(node, ctx.gm, f"its {what} is not an activation of the batch ({type(value).__name__})",
                    "apply layers to the input batch and what follows from it")
    return value


def _map(ctx: _Ctx, node: fx.Node, value: Any) -> Act:
    a = _act(ctx, node, value)
    if a.rank != 4:
        raise _fail(node, ctx.gm, f"it needs a (N, C, H, W) map, got rank {a.rank}", "apply it to image-like maps")
    return a


def _pair(v: Any) -> tuple[int, int]:
    if isinstance(v, (tuple, list)):
        return int(v[0]), int(v[-1])
    return int(v), int(v)


def _conv(ctx: _Ctx, node: fx.Node, m: nn.Conv2d, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _map(ctx, node, args[0])
    if m.padding_mode != "zeros":
        raise _fail(node, ctx.gm, f"padding_mode={m.padding_mode!r}", "use padding_mode='zeros'")
    kh, kw = m.kernel_size
    dh, dw = m.dilation
    if isinstance(m.padding, str):
        if m.padding == "valid":
            pads = (0, 0, 0, 0)
        else:  # "same" (stride 1): PyTorch puts the odd extra on the bottom/right
            th, tw = dh * (kh - 1), dw * (kw - 1)
            pads = (th // 2, th - th // 2, tw // 2, tw - tw // 2)
    else:
        ph, pw = m.padding
        pads = (ph, ph, pw, pw)
    y = layers.conv2d_maps(x.t, m.weight, m.bias, stride=m.stride, pads=pads, dilation=m.dilation, groups=m.groups)
    c = x.t.shape[0]
    kind = "mm of an im2col matrix" if m.groups == 1 else (
        "per-channel multiply-adds of shifted maps" if m.groups == c == m.out_channels else "bmm over groups of an im2col matrix")
    ctx.said(node, kind)
    return Act(y)


def _linear(ctx: _Ctx, node: fx.Node, m: nn.Linear, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _act(ctx, node, args[0])
    if x.features[-1] != m.in_features:
        raise _fail(node, ctx.gm, f"its input has {x.features} features, it takes {m.in_features}",
                    "flatten the map first (nn.Flatten or x.flatten(1))")
    if x.rank == 2:
        y = m.weight @ x.t  # W @ X on (F, N); the passes keep autograd's transposes out
    else:
        y = torch.matmul(m.weight, x.t)  # (..., F, N): W broadcast over the leading dims
    if m.bias is not None:
        y = y + m.bias.reshape(-1, 1)
    ctx.said(node, "W @ X on (features, N) matrices")
    return Act(y)


def _batch_norm(ctx: _Ctx, node: fx.Node, m: nn.modules.batchnorm._BatchNorm, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _act(ctx, node, args[0])
    want = 4 if isinstance(m, nn.BatchNorm2d) else (2, 3)
    if (x.rank != want) if isinstance(want, int) else (x.rank not in want):
        raise _fail(node, ctx.gm, f"rank {x.rank} input", "BatchNorm2d takes (N, C, H, W), BatchNorm1d (N, C) or (N, C, L)")
    if not m.track_running_stats:
        raise _fail(node, ctx.gm, "track_running_stats=False", "keep the default track_running_stats=True")
    if m.momentum != BN_MOMENTUM:
        raise _fail(node, ctx.gm, f"momentum={m.momentum}",
                    f"use the default momentum {BN_MOMENTUM}: devices fold batch statistics with it (docs/models.md)")
    if id(m) in ctx.stats:
        raise _fail(node, ctx.gm, "the layer is called twice in one forward", "give each call its own batch norm layer")
    y, mean, var = layers.batch_norm_rows(x.t, m, ctx.inv_batch)
    ctx.stats[id(m)] = (mean, var)
    ctx.said(node, "arithmetic over each channel; batch mean and variance as outputs")
    return Act(y)


def _layer_norm(ctx: _Ctx, node: fx.Node, m: nn.LayerNorm, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _act(ctx, node, args[0])
    shape = tuple(m.normalized_shape)
    if x.features[len(x.features) - len(shape):] != shape:
        raise _fail(node, ctx.gm, f"normalized_shape {shape} is not the input's last dims {x.features}",
                    "normalise over the last dimensions of the sample")
    ctx.said(node, "arithmetic over each sample's features")
    return Act(layers.layer_norm_cols(x.t, len(shape), m.weight, m.bias, m.eps))


def _embedding(ctx: _Ctx, node: fx.Node, m: nn.Embedding, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _act(ctx, node, args[0])
    if x.t.dtype.is_floating_point:
        raise _fail(node, ctx.gm, "its input holds floats", "turn the input into indices first (x.long())")
    if m.max_norm is not None or m.padding_idx is not None or m.sparse or m.scale_grad_by_freq:
        raise _fail(node, ctx.gm, "max_norm, padding_idx, sparse or scale_grad_by_freq is set",
                    "use a plain nn.Embedding(num_embeddings, embedding_dim)")
    ctx.said(node, "one-hot matrix times the table (mm)")
    return Act(layers.embedding_cols(x.t, m.weight))


def _dropout_p(ctx: _Ctx, node: fx.Node, p: float, training: bool) -> float:
    if not 0 <= p < 1:
        raise _fail(node, ctx.gm, f"p={p}", "use 0 <= p < 1")
    return p if training else 0.0


def _dropout(ctx: _Ctx, node: fx.Node, x: Act, p: float) -> Act:
    if p == 0:
        ctx.said(node, "nothing (p = 0)")
        return x
    # The runtime's own dropout draws from an unseeded generator: the program
    # takes one noise input per site, shaped like the activation, batch last.
    noise = ctx.noise[ctx.next_noise]
    ctx.next_noise += 1
    ctx.said(node, "multiply by a mask made from a noise input")
    return Act(x.t * layers.dropout_keep(noise, p))


def _dropout_module(ctx: _Ctx, node: fx.Node, m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    if isinstance(m, (nn.Dropout2d, nn.Dropout1d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)):
        raise _fail(node, ctx.gm, "channel and alpha dropout have no rule", "use nn.Dropout")
    return _dropout(ctx, node, _act(ctx, node, args[0]), _dropout_p(ctx, node, float(m.p), True))


def _dropout_fn(ctx: _Ctx, node: fx.Node, m: None, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
    training = kwargs.get("training", args[2] if len(args) > 2 else True)
    return _dropout(ctx, node, _act(ctx, node, args[0]), _dropout_p(ctx, node, float(p), bool(training)))


def _elementwise(fn: Callable[[Tensor], Tensor], becomes: str) -> Callable[..., Act]:
    def apply(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
        ctx.said(node, becomes)
        return Act(fn(_act(ctx, node, args[0]).t))

    return apply


def _relu(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _act(ctx, node, args[0])
    if _moves_past_pool(node):
        ctx.said(node, "mask multiply, after the max pooling that follows")
        return x
    ctx.said(node, "multiply by a detached 0/1 mask")
    return Act(layers.relu_masked(x.t))


def _leaky(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    slope = m.negative_slope if m is not None else kwargs.get("negative_slope", args[1] if len(args) > 1 else 0.01)
    ctx.said(node, "multiply by a detached mask (1 or the slope)")
    return Act(layers.leaky_relu_masked(_act(ctx, node, args[0]).t, float(slope)))


def _hardtanh(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    if m is not None:
        lo, hi = float(m.min_val), float(m.max_val)
    elif node.target in (F.relu6,):
        lo, hi = 0.0, 6.0
    else:
        lo = float(kwargs.get("min_val", args[1] if len(args) > 1 else -1.0))
        hi = float(kwargs.get("max_val", args[2] if len(args) > 2 else 1.0))
    ctx.said(node, "detached masks: value inside, bounds outside")
    return Act(layers.clamp_masked(_act(ctx, node, args[0]).t, lo, hi))


def _gelu(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    approximate = m.approximate if m is not None else kwargs.get("approximate", "none")
    ctx.said(node, f"gelu (approximate={approximate!r})")
    return Act(F.gelu(_act(ctx, node, args[0]).t, approximate=approximate))


def _pool_args(m: Any, args: tuple[Any, ...], kwargs: dict[str, Any], names: Sequence[str], defaults: dict[str, Any]) -> dict[str, Any]:
    if m is not None:
        return {k: getattr(m, k) for k in names}
    out = dict(defaults)
    for k, v in zip(names, args[1:]):
        out[k] = v
    out.update({k: v for k, v in kwargs.items() if k in names})
    return out


_MAX_POOL = ("kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
_AVG_POOL = ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")


def _max_pool(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _map(ctx, node, args[0])
    a = _pool_args(m, args, kwargs, _MAX_POOL, {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False, "return_indices": False})
    if a["ceil_mode"] or a["return_indices"] or _pair(a["dilation"]) != (1, 1):
        raise _fail(node, ctx.gm, "ceil_mode, return_indices or dilation is set", "use floor mode, no indices, dilation 1")
    k = _pair(a["kernel_size"])
    s = _pair(a["stride"] if a["stride"] not in (None, ()) else a["kernel_size"])
    p = _pair(a["padding"])
    y = layers.max_pool_maps(x.t, k, s, p)
    relu = node in ctx.relu_after
    ctx.said(node, ("tournament of elementwise max" + (", then the ReLU's mask" if relu else "")))
    return Act(layers.relu_masked(y) if relu else y)


def _avg_pool(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _map(ctx, node, args[0])
    a = _pool_args(m, args, kwargs, _AVG_POOL, {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True, "divisor_override": None})
    p = _pair(a["padding"])
    if a["ceil_mode"] or a["divisor_override"] is not None or (p != (0, 0) and not a["count_include_pad"]):
        raise _fail(node, ctx.gm, "ceil_mode, divisor_override or count_include_pad=False with padding",
                    "use floor mode and the default divisor")
    k = _pair(a["kernel_size"])
    s = _pair(a["stride"] if a["stride"] not in (None, ()) else a["kernel_size"])
    ctx.said(node, "sum of shifted maps times 1/(kh*kw)")
    return Act(layers.avg_pool_maps(x.t, k, s, p))


def _adaptive_avg_pool(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _map(ctx, node, args[0])
    size = m.output_size if m is not None else kwargs.get("output_size", args[1] if len(args) > 1 else None)
    _, h, w, _ = x.t.shape
    oh, ow = _pair(size) if not isinstance(size, (tuple, list)) or None not in size else (
        h if size[0] is None else size[0], w if size[-1] is None else size[-1])
    if (oh, ow) == (1, 1):
        ctx.said(node, "mean over the pixels")
        return Act(layers.global_avg_pool_maps(x.t))
    if h % oh or w % ow:
        raise _fail(node, ctx.gm, f"output size {(oh, ow)} does not divide the {h}x{w} map",
                    "pool to 1x1, or to a size that divides the map")
    ctx.said(node, "sum of shifted maps times 1/(kh*kw)")
    return Act(layers.avg_pool_maps(x.t, (h // oh, w // ow), (h // oh, w // ow), (0, 0)))


def _logical_dim(ctx: _Ctx, node: fx.Node, x: Act, d: int) -> int:
    """A logical dimension of `x` as its stored one; the batch (0) has none."""
    d = d + x.rank if d < 0 else d
    if not 0 < d < x.rank:
        raise _fail(node, ctx.gm, f"dimension {d} is the batch or out of range",
                    "operate on the sample's dimensions (1 and up), never the batch")
    return d - 1


def _flatten(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _act(ctx, node, args[0])
    if m is not None:
        start, end = m.start_dim, m.end_dim
    else:
        start = kwargs.get("start_dim", args[1] if len(args) > 1 else 0)
        end = kwargs.get("end_dim", args[2] if len(args) > 2 else -1)
    s = _logical_dim(ctx, node, x, int(start))
    e = _logical_dim(ctx, node, x, int(end))
    f = x.features
    shape = (*f[:s], math.prod(f[s : e + 1]), *f[e + 1 :])
    ctx.said(node, "a free reshape (batch stays last)")
    return Act(x.t.reshape(*shape, x.t.shape[-1]))


def _reshape(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _act(ctx, node, args[0])
    dims = list(args[1:])
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = list(dims[0])
    if not dims:
        raise _fail(node, ctx.gm, "no shape given", "x.view(x.size(0), -1)")
    per_sample = math.prod(x.features)
    first, rest = dims[0], dims[1:]
    known = math.prod(int(d) for d in rest if not (isinstance(d, int) and d == -1))
    holes = sum(1 for d in rest if isinstance(d, int) and d == -1)
    if isinstance(first, int) and first == -1:
        if holes:
            raise _fail(node, ctx.gm, "two -1 dimensions", "give the batch as x.size(0)")
        if known != per_sample:
            raise _fail(node, ctx.gm, f"a shape of {known} features per sample from {per_sample}",
                        "keep the batch first: x.view(x.size(0), -1)")
    elif not _is_batch(ctx, first):
        raise _fail(node, ctx.gm, "the first dimension is not the batch",
                    "keep the batch first: x.view(x.size(0), -1) or x.flatten(1)")
    if holes > 1:
        raise _fail(node, ctx.gm, "two -1 dimensions", "give every dimension but one")
    features = [per_sample // known if isinstance(d, int) and d == -1 else int(d) for d in rest]
    if math.prod(features) != per_sample:
        raise _fail(node, ctx.gm, f"shape {features} does not hold {x.features}", "keep the sample's element count")
    ctx.said(node, "a free reshape (batch stays last)")
    return Act(x.t.reshape(*features, x.t.shape[-1]))


def _is_batch(ctx: _Ctx, d: Any) -> bool:
    """Whether a size is the batch's: the very value x.size(0) gave (symbolic in an export)."""
    return d is ctx.n or (isinstance(d, int) and isinstance(ctx.n, int) and d == ctx.n)


def _cat(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    parts = args[0] if args else kwargs["tensors"]
    dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
    acts = [_act(ctx, node, p) for p in parts]
    if len({a.rank for a in acts}) != 1:
        raise _fail(node, ctx.gm, "parts of different ranks", "concatenate activations of one shape")
    d = _logical_dim(ctx, node, acts[0], int(dim))
    ctx.said(node, "cat along the stored dimension")
    return Act(torch.cat([a.t for a in acts], dim=d))


def _mean(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _act(ctx, node, args[0])
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    keep = bool(kwargs.get("keepdim", args[2] if len(args) > 2 else False))
    if dim is None:
        raise _fail(node, ctx.gm, "a mean over every dimension mixes the batch", "give the dimensions: x.mean((2, 3))")
    dims = sorted({_logical_dim(ctx, node, x, int(d)) for d in (dim if isinstance(dim, (tuple, list)) else (dim,))})
    ctx.said(node, "mean over the stored dimensions")
    return Act(layers.mean_dims(x.t, dims, keep))


def _binary(op: Callable[[Any, Any], Any], symbol: str) -> Callable[..., Any]:
    def apply(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        a, b = args[0], args[1] if len(args) > 1 else kwargs.get("other")
        if "alpha" in kwargs:
            raise _fail(node, ctx.gm, "alpha is set", "scale the operand first")
        if not isinstance(a, Act) and not isinstance(b, Act):
            return op(a, b)  # sizes, constants: plain Python
        ta = a.t if isinstance(a, Act) else _operand(ctx, node, a, b)
        tb = b.t if isinstance(b, Act) else _operand(ctx, node, b, a)
        if isinstance(a, Act) and isinstance(b, Act) and a.t.shape != b.t.shape:
            raise _fail(node, ctx.gm, f"shapes {a.features} and {b.features} differ",
                        "combine activations of one shape (project the shortcut to match)")
        ctx.said(node, f"elementwise {symbol}")
        return Act(op(ta, tb))

    return apply


def _operand(ctx: _Ctx, node: fx.Node, c: Any, act: Act) -> Any:
    """A constant or parameter operand in the batch-last layout (broadcast over the batch)."""
    if not isinstance(c, Tensor) or c.dim() == 0:
        return c
    shape = tuple(c.shape)
    if len(shape) == act.rank:
        if shape[0] != 1:
            raise _fail(node, ctx.gm, f"an operand of shape {shape} spans the batch", "broadcast over the batch (leading dim 1)")
        shape = shape[1:]
    if len(shape) > act.rank - 1:
        raise _fail(node, ctx.gm, f"an operand of shape {tuple(c.shape)} for samples of {act.features}", "match the sample's shape")
    return c.reshape(*shape, 1)


def _size(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    x = _act(ctx, node, args[0])
    shape = (ctx.n, *x.features)
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    return shape if dim is None else shape[int(dim)]


def _getattr(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    obj, name = args[0], args[1]
    if isinstance(obj, Act):
        if name == "shape":
            return (ctx.n, *obj.features)
        raise _fail(node, ctx.gm, f"attribute {name!r} of an activation", "use x.shape or x.size()")
    return getattr(obj, name)


def _getitem(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    if isinstance(args[0], Act):
        raise _fail(node, ctx.gm, "indexing or slicing an activation", "use layers (pooling, flatten) instead of indexing")
    return args[0][args[1]]


def _identity(becomes: str) -> Callable[..., Any]:
    def apply(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        ctx.said(node, becomes)
        return args[0]

    return apply


def _cast(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    x = _act(ctx, node, args[0])
    if node.target == "long":
        dtype = torch.long
    elif node.target == "int":
        dtype = torch.int
    else:
        dtype = kwargs.get("dtype", args[1] if len(args) > 1 else None)
        if not isinstance(dtype, torch.dtype):
            raise _fail(node, ctx.gm, "x.to() without a dtype", "x.to(torch.long) or x.long()")
    ctx.said(node, f"a cast to {dtype} (no gradient)")
    return Act(x.t.detach().to(dtype))


def _round(ctx: _Ctx, node: fx.Node, m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Act:
    ctx.said(node, "round (no gradient)")
    return Act(torch.round(_act(ctx, node, args[0]).t.detach()))


RULES: dict[Any, Rule] = {}


def _add(targets: Sequence[Any], operators: tuple[str, ...], becomes: str, apply: Callable[..., Any]) -> None:
    rule = Rule(operators, becomes, apply)
    for t in targets:
        RULES[t] = rule


_add([nn.Conv2d], ("nn.Conv2d",), "one mm over an im2col matrix (groups: bmm; depthwise: per-channel multiply-adds)", _conv)
_add([nn.Linear], ("nn.Linear",), "W @ X on (features, N) matrices", _linear)
_add([nn.ReLU, F.relu, torch.relu, "relu"], ("nn.ReLU", "F.relu", "x.relu"), "multiply by a detached 0/1 mask", _relu)
_add([nn.ReLU6, nn.Hardtanh, F.relu6, F.hardtanh], ("nn.ReLU6", "nn.Hardtanh", "F.relu6"), "detached masks (value inside, bound outside)", _hardtanh)
_add([nn.LeakyReLU, F.leaky_relu], ("nn.LeakyReLU", "F.leaky_relu"), "multiply by a detached mask (1 or the slope)", _leaky)
_add([nn.GELU, F.gelu], ("nn.GELU", "F.gelu"), "gelu (the runtime's kernel and its backward)", _gelu)
_add([nn.SiLU, F.silu], ("nn.SiLU", "F.silu"), "x * sigmoid(x)", _elementwise(lambda t: t * torch.sigmoid(t), "x * sigmoid(x)"))
_add([nn.Hardswish, F.hardswish], ("nn.Hardswish", "F.hardswish"), "x * relu6(x + 3) / 6 from detached masks",
     _elementwise(layers.hardswish_masked, "x * relu6(x + 3) / 6 from detached masks"))
_add([nn.Sigmoid, torch.sigmoid, F.sigmoid, "sigmoid"], ("nn.Sigmoid", "torch.sigmoid"), "sigmoid", _elementwise(torch.sigmoid, "sigmoid"))
_add([nn.Tanh, torch.tanh, F.tanh, "tanh"], ("nn.Tanh", "torch.tanh"), "tanh", _elementwise(torch.tanh, "tanh"))
_add([nn.MaxPool2d, F.max_pool2d], ("nn.MaxPool2d", "F.max_pool2d"), "a tournament of elementwise max over shifted maps", _max_pool)
_add([nn.AvgPool2d, F.avg_pool2d], ("nn.AvgPool2d", "F.avg_pool2d"), "a sum of shifted maps times 1/(kh*kw)", _avg_pool)
_add([nn.AdaptiveAvgPool2d, F.adaptive_avg_pool2d], ("nn.AdaptiveAvgPool2d",), "mean over the pixels (to 1x1), or an average pooling that divides the map", _adaptive_avg_pool)
_add([nn.BatchNorm1d, nn.BatchNorm2d], ("nn.BatchNorm1d", "nn.BatchNorm2d"), "arithmetic over each channel; batch statistics as outputs", _batch_norm)
_add([nn.LayerNorm], ("nn.LayerNorm",), "arithmetic over each sample's features", _layer_norm)
_add([nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout], ("nn.Dropout",), "multiply by a mask made from a noise input", _dropout_module)
_add([F.dropout], ("F.dropout",), "multiply by a mask made from a noise input", _dropout_fn)
_add([nn.Flatten, torch.flatten, "flatten"], ("nn.Flatten", "torch.flatten", "x.flatten"), "a free reshape (the batch stays last)", _flatten)
_add(["view", "reshape", torch.reshape], ("x.view", "x.reshape"), "a free reshape (the batch stays last)", _reshape)
_add([operator.add, operator.iadd, torch.add, "add"], ("+", "torch.add"), "elementwise add", _binary(operator.add, "+"))
_add([operator.sub, torch.sub, "sub"], ("-",), "elementwise sub", _binary(operator.sub, "-"))
_add([operator.mul, torch.mul, "mul"], ("*",), "elementwise mul", _binary(operator.mul, "*"))
_add([operator.truediv, torch.div, "div"], ("/",), "elementwise div", _binary(operator.truediv, "/"))
_add([torch.cat, torch.concat], ("torch.cat",), "cat along the stored dimension (channels: the outermost)", _cat)
_add([nn.Embedding], ("nn.Embedding",), "a one-hot matrix times the table (mm)", _embedding)
_add([torch.mean, "mean"], ("x.mean", "torch.mean"), "mean over the stored dimensions", _mean)
_add(["size"], ("x.size",), "the logical sizes (batch first)", _size)
_add([getattr], ("x.shape",), "the logical sizes (batch first)", _getattr)
_add([operator.getitem], ("sizes[i]",), "Python indexing of sizes", _getitem)
_add([nn.Identity, "contiguous"], ("nn.Identity", "x.contiguous"), "nothing", _identity("nothing"))
_add(["long", "int", "to"], ("x.long", "x.to(dtype)"), "a cast (no gradient)", _cast)
_add([torch.round, "round"], ("torch.round",), "round (no gradient)", _round)

# What to use instead, for operators people reach for that have no rule.
ADVICE: dict[str, str] = {
    "nn.Softmax": "return the logits: the loss applies log-softmax itself",
    "nn.LogSoftmax": "return the logits: the loss applies log-softmax itself",
    "F.softmax": "return the logits: the loss applies log-softmax itself",
    "F.log_softmax": "return the logits: the loss applies log-softmax itself",
    "nn.Upsample": "no rule yet: use a strided convolution's inverse or drop the upsampling",
    "nn.LSTM": "recurrent layers have no rule: use convolutions or Linear layers over the sequence",
    "nn.GRU": "recurrent layers have no rule: use convolutions or Linear layers over the sequence",
    "nn.ConvTranspose2d": "no rule: use nn.Conv2d",
    "nn.GroupNorm": "use nn.BatchNorm2d, or nn.LayerNorm over the channels",
    "nn.InstanceNorm2d": "use nn.BatchNorm2d",
    "nn.PReLU": "use nn.LeakyReLU",
    "nn.ELU": "use nn.LeakyReLU or nn.SiLU",
    "F.pad": "use the layer's own padding (nn.Conv2d(padding=...))",
    "F.conv2d": "use an nn.Conv2d module",
    "F.linear": "use an nn.Linear module",
}


def _rule_for(node: fx.Node, gm: fx.GraphModule) -> tuple[Rule | None, Any]:
    if node.op == "call_module":
        m = gm.get_submodule(str(node.target))
        return RULES.get(type(m)), m
    return RULES.get(node.target), None


def _moves_past_pool(node: fx.Node) -> bool:
    """A ReLU whose only use is a max pooling (which then applies it)."""
    users = list(node.users)
    return len(users) == 1 and users[0].meta.get("mjfl_pool_after_relu") is node


def _mark_relu_pool(gm: fx.GraphModule) -> None:
    for node in gm.graph.nodes:
        rule, _ = _rule_for(node, gm)
        if rule is None or rule.apply is not _max_pool or not node.args:
            continue
        src = node.args[0]
        if isinstance(src, fx.Node) and len(src.users) == 1:
            src_rule, _ = _rule_for(src, gm)
            if src_rule is not None and src_rule.apply is _relu:
                node.meta["mjfl_pool_after_relu"] = src


def supported_table() -> list[tuple[str, str]]:
    """(what you write, what the program runs) for every rule, as docs/models.md lists them."""
    seen: dict[int, Rule] = {}
    for rule in RULES.values():
        seen.setdefault(id(rule), rule)
    return [(", ".join(f"`{o}`" for o in r.operators), r.becomes) for r in seen.values()]


# -- the two forms --------------------------------------------------------------


def batch_norm_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's batch norm layers in state-dict order: the program's statistics outputs."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


class ExportForm:
    """The export form of a traced model (see the module docstring).

    `run(x, noise)` is called inside the exported program's forward: it takes
    the (N, C, H, W) batch and one noise tensor per dropout site and returns
    the (N, K) logits and the batch statistics of each batch norm layer
    (`batch_norm_layers` order). `check(input_shape)` runs it once on a small
    batch, raising `ModelError` for an operator without a rule, and returns
    the conversion's report.
    """

    def __init__(self, model: nn.Module, gm: fx.GraphModule | None = None) -> None:
        self.model = model
        self.gm = gm if gm is not None else trace(model)
        _mark_relu_pool(self.gm)
        self.inv_batch: Tensor = torch.ones(())

    def run(self, x: Tensor, noise: Sequence[Tensor], report: Conversion | None = None) -> tuple[Tensor, list[Tensor]]:
        ctx = _Ctx(self.gm, noise, report)
        env: dict[fx.Node, Any] = {}
        out: Any = None
        for node in self.gm.graph.nodes:
            if node.meta.get("mjfl_pool_after_relu") is not None:
                ctx.relu_after.add(node)
            args = fx.node.map_arg(node.args, lambda n: env[n])
            kwargs = fx.node.map_arg(node.kwargs, lambda n: env[n])
            if node.op == "placeholder":
                n, c, h, w = x.shape
                ctx.n = n
                # 1/N once per program; layers multiply by it (no symbolic division per layer).
                ctx.inv_batch = torch.ones(()) / n
                env[node] = Act(x.reshape(n, c * h * w).t().reshape(c, h, w, n))
                continue
            if node.op == "get_attr":
                env[node] = _fetch(self.gm, str(node.target))
                continue
            if node.op == "output":
                out = args[0]
                break
            rule, m = _rule_for(node, self.gm)
            if rule is None:
                name = operator_name(node, self.gm)
                raise ModelError(name, where(node), "has no rule in the export form",
                                 ADVICE.get(name, "use the supported layers (docs/models.md, 'Your own model')"))
            env[node] = rule.apply(ctx, node, m, tuple(args), dict(kwargs))
        self.inv_batch = ctx.inv_batch
        logits = out
        if not isinstance(logits, Act) or logits.rank != 2:
            raise ModelError("forward", type(self.model).__name__, "does not return one (N, K) tensor of logits",
                             "return the logits of the classes (no softmax)")
        stats: list[Tensor] = []
        for name, bn in batch_norm_layers(self.model):
            if id(bn) not in ctx.stats:
                raise ModelError(f"nn.{type(bn).__name__}", name, "is never called in forward",
                                 "remove the unused batch norm layer (its statistics would not be trained)")
            stats += list(ctx.stats[id(bn)])
        if ctx.next_noise != len(noise):
            raise AssertionError(f"{len(noise)} noise inputs for {ctx.next_noise} dropout sites")
        return logits.t.t(), stats

    def check(self, input_shape: tuple[int, int, int], sites: Sequence[tuple[int, ...]]) -> Conversion:
        report = Conversion()
        n = 2
        noise = [torch.rand(*s, n) for s in sites]
        with torch.no_grad():
            self.run(torch.zeros(n, *input_shape), noise, report)
        return report


def _fetch(gm: fx.GraphModule, target: str) -> Any:
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


class EagerForm:
    """The traced model run by PyTorch itself, dropout masks from given noise.

    `noise(shape)` returns U[0, 1) noise of a batch-first (N, *features)
    shape for each dropout site in turn (see `mjfl.jobs.trainers`); without
    it, dropout draws from torch's generator as the module would.
    """

    def __init__(self, model: nn.Module, gm: fx.GraphModule | None = None) -> None:
        self.model = model
        self.gm = gm if gm is not None else trace(model)

    def __call__(self, x: Tensor, noise: Callable[[tuple[int, ...]], Tensor] | None = None) -> Tensor:
        return _EagerInterpreter(self.gm, noise).run(x)


class _EagerInterpreter(fx.Interpreter):
    def __init__(self, gm: fx.GraphModule, noise: Callable[[tuple[int, ...]], Tensor] | None, *, dropout: bool | None = None) -> None:
        super().__init__(gm)
        self.noise = noise
        self.dropout = dropout  # None: as each dropout module's mode says

    def _drop(self, x: Tensor, p: float) -> Tensor:
        if p == 0:
            return x
        if self.noise is None:
            return F.dropout(x, p, training=True)
        return x * layers.dropout_keep(self.noise(tuple(x.shape)), p)

    def call_module(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        m = self.fetch_attr(target)
        if type(m) is nn.Dropout:
            on = m.training if self.dropout is None else self.dropout
            return self._drop(args[0], float(m.p) if on else 0.0)
        return super().call_module(target, args, kwargs)

    def call_function(self, target: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if target is F.dropout:
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            return self._drop(args[0], float(p) if training else 0.0)
        return super().call_function(target, args, kwargs)


def dropout_sites(eager: EagerForm, input_shape: tuple[int, int, int]) -> list[tuple[int, ...]]:
    """Per-sample shape of the activation at each dropout site (p > 0), in forward order."""
    shapes: list[tuple[int, ...]] = []

    def record(shape: tuple[int, ...]) -> Tensor:
        shapes.append(shape[1:])
        return torch.ones(shape)

    model = eager.model
    was = model.training
    try:
        model.eval()  # batch norm on its running averages; dropout is the interpreter's business
        with torch.no_grad():
            _EagerInterpreter(eager.gm, record, dropout=True).run(torch.zeros(2, *input_shape))
    finally:
        model.train(was)
    return shapes
