"""Graph passes on the edge-dialect training program.

Autograd differentiates `mm(A, B)` into `mm(g, B^T)` and `mm(A^T, g)` and
emits every transpose as a `permute_copy`, which the runtime runs as a
naive portable loop at 7-10 ns an element; for the weight gradient of a
convolution that is a transpose of the whole im2col matrix. `mm`, and
`linear` (which computes `A @ B^T` with the transpose folded into BLAS),
run on the optimized kernels. The passes rewrite, exactly:

1. `mm(A, B)`            -> `mm(B^T, A^T)^T`                when that copies fewer
   elements (transposes of large weights move onto the batch-sized operand,
   transposes that meet transposes cancel);
2. `permute(permute(X))` -> `X`                            when the two are inverse;
3. `mm(A, permute(B))`   -> `linear(A, B)`                 for 2-D transposes;
4. `linear(A, B)`        -> `linear(B, A)^T`               when B is taller (faster BLAS path);
5. `op(expand(c), X)`    -> `op(c, X)`                     for per-channel broadcasts.

Each pass is a pure function of the graph (no I/O); they only reorder exact
matrix algebra, so the program's results are unchanged up to BLAS rounding.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassResult

__all__ = ["TRAINING_PASSES", "cancel_inverse_permutes", "mm_to_linear", "transpose_of_mm"]


def _ops() -> Any:
    from executorch.exir.dialects._ops import ops as exir_ops

    return exir_ops.edge.aten


def _numel(node: Any) -> int:
    """Element count of a node's value, with symbolic sizes at their hint."""
    val = node.meta.get("val") if isinstance(node, Node) else None
    if val is None or not hasattr(val, "shape"):
        return 0
    n = 1
    for d in val.shape:
        if isinstance(d, torch.SymInt):
            d = d.node.hint if d.node.hint is not None else 32
        n *= int(d)
    return n


def _is_transpose(node: Any) -> bool:
    a = _ops()
    return (
        isinstance(node, Node)
        and node.op == "call_function"
        and node.target == a.permute_copy.default
        and list(node.args[1]) in ([1, 0], [-1, -2], [1, -2], [-1, 0])
    )


def _transpose_cost(node: Node) -> int:
    """Elements copied by transposing `node` (0 if it already is a transpose)."""
    return 0 if _is_transpose(node) else _numel(node)


def _make_transpose(graph: Any, before: Node, x: Node) -> Node:
    a = _ops()
    if _is_transpose(x):
        return x.args[0]  # type: ignore[return-value]
    with graph.inserting_before(before):
        t = graph.call_function(a.permute_copy.default, (x, [1, 0]))
    val = x.meta.get("val")
    if val is not None:
        t.meta["val"] = val.t()
    return t


def _sole_transpose_user(node: Node) -> Node | None:
    users = list(node.users)
    return users[0] if len(users) == 1 and _is_transpose(users[0]) else None


def _private_transpose_cost(node: Any) -> int:
    """Elements `node`'s own transpose copies (0 unless it is a transpose used once)."""
    if _is_transpose(node) and len(node.users) == 1:
        return _numel(node)
    return 0


def transpose_of_mm(gm: GraphModule) -> PassResult:
    """Rewrite `mm(A, B)` as `mm(B^T, A)^T` when that copies fewer elements.

    Autograd writes the gradients of `Y = W @ X` as `mm(W^T, dY)` and
    `mm(dY, X^T)`; a transpose of a large weight (a classifier's) costs a
    full portable copy every step. `(B^T A^T)^T` moves the transposes onto
    the other operand and the result, and transposes that meet transposes
    (`permute(permute(X))`, `permute(mm(...))`) cancel. Decided per `mm` by
    counting the elements each arrangement copies.
    """
    a = _ops()
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != a.mm.default:
            continue
        lhs, rhs = node.args
        out_t = _sole_transpose_user(node)
        keep = _private_transpose_cost(lhs) + _private_transpose_cost(rhs)
        keep += _numel(node) if out_t is not None else 0
        swap = (0 if _is_transpose(rhs) else _numel(rhs)) + (0 if _is_transpose(lhs) else _numel(lhs))
        swap += 0 if out_t is not None else _numel(node)
        if swap >= keep:
            continue
        rt = _make_transpose(graph, node, rhs)
        lt = _make_transpose(graph, node, lhs)
        with graph.inserting_before(node):
            new = graph.call_function(a.mm.default, (rt, lt))
        val = node.meta.get("val")
        if val is not None:
            new.meta["val"] = val.t()
        if out_t is not None:
            out_t.replace_all_uses_with(new)
        else:
            with graph.inserting_before(node):
                back = graph.call_function(a.permute_copy.default, (new, [1, 0]))
            back.meta = dict(node.meta)
            node.replace_all_uses_with(back)
        changed = True
    if changed:
        graph.eliminate_dead_code()
        gm.recompile()
    return PassResult(gm, changed)


def cancel_inverse_permutes(gm: GraphModule) -> PassResult:
    """`permute(permute(X, p), q)` -> `X` when q undoes p."""
    a = _ops()
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != a.permute_copy.default:
            continue
        inner = node.args[0]
        if not (isinstance(inner, Node) and inner.target == a.permute_copy.default):
            continue
        rank = len(node.args[1])
        p = [d % rank for d in inner.args[1]]
        q = [d % rank for d in node.args[1]]
        if [p[i] for i in q] == list(range(rank)):
            node.replace_all_uses_with(inner.args[0])
            changed = True
    if changed:
        graph.eliminate_dead_code()
        gm.recompile()
    return PassResult(gm, changed)


def mm_to_linear(gm: GraphModule) -> PassResult:
    """`mm(A, permute(B, [1, 0]))` -> `linear(A, B)` (BLAS transposes in place)."""
    a = _ops()
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != a.mm.default:
            continue
        lhs, rhs = node.args
        if not _is_transpose(rhs):
            continue
        with graph.inserting_before(node):
            new = graph.call_function(a.linear.default, (lhs, rhs.args[0]))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        changed = True
    if changed:
        graph.eliminate_dead_code()
        gm.recompile()
    return PassResult(gm, changed)


def _dim(node: Any, axis: int) -> int:
    """Size of a 2-D node's `axis` (a symbolic batch counts as its hint), or -1."""
    val = node.meta.get("val") if isinstance(node, Node) else None
    if val is None or len(val.shape) != 2:
        return -1
    d = val.shape[axis]
    if isinstance(d, torch.SymInt):
        d = d.node.hint if d.node.hint is not None else 32
    return int(d)


# A transpose costs ~8 ns an element and a multiply-add ~0.1 ns, so swapping
# pays when the shared dimension is this long (the swap saves half or more).
_MIN_SWAP_DEPTH = 256


def order_linear_operands(gm: GraphModule) -> PassResult:
    """`linear(A, B)` -> `linear(B, A)^T` when B has more rows than A.

    The runtime's BLAS (Eigen) computes `A @ B^T` two to seven times faster
    with the taller operand first (measured: 4.6 vs 8.8 GMAC/s for a
    convolution's weight gradient, 64 x 8192 by 576 x 8192); transposing the
    result back costs M*N copies, worth it when the shared dimension is long.
    """
    a = _ops()
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target != a.linear.default or len(node.args) != 2:
            continue
        lhs, rhs = node.args
        m, n = _dim(lhs, 0), _dim(rhs, 0)
        if m < 0 or n < 0 or m >= n or _dim(lhs, 1) < _MIN_SWAP_DEPTH:
            continue
        with graph.inserting_before(node):
            swapped = graph.call_function(a.linear.default, (rhs, lhs))
            out = graph.call_function(a.permute_copy.default, (swapped, [1, 0]))
        val = node.meta.get("val")
        if val is not None:
            swapped.meta["val"] = val.t()
            out.meta["val"] = val
        node.replace_all_uses_with(out)
        changed = True
    if changed:
        graph.eliminate_dead_code()
        gm.recompile()
    return PassResult(gm, changed)


_SHAPE_ONLY = ("expand_copy", "unsqueeze_copy", "view_copy")
_BROADCASTING = ("add.Tensor", "sub.Tensor", "mul.Tensor", "div.Tensor")


def _op_name(node: Any) -> str:
    return str(getattr(node, "target", ""))


def _channel_source(node: Node) -> Node | None:
    """The (C, 1) tensor that `node` merely broadcasts along non-channel dims.

    Walks back through expand/unsqueeze/view copies that all keep dimension
    0 at C, as autograd emits for the backward of a per-channel sum. Each
    of them maps channel row c only to row c (expand grows size-1 dims, a
    row-major view that keeps the outermost dim regroups within rows), so
    node[c, ...] == source[c, 0]. None when `node` is not such a broadcast.
    """
    if not any(k in _op_name(node) for k in _SHAPE_ONLY):
        return None
    channels = node.meta["val"].shape[0]
    cur: Any = node
    saw_expand = False
    while isinstance(cur, Node) and any(k in _op_name(cur) for k in _SHAPE_ONLY):
        val = cur.meta.get("val")
        if val is None or len(val.shape) == 0 or val.shape[0] != channels:
            return None
        saw_expand = saw_expand or "expand_copy" in _op_name(cur)
        cur = cur.args[0]
    if not isinstance(cur, Node) or not saw_expand:
        return None
    val = cur.meta.get("val")
    if val is None or tuple(val.shape) != (channels, 1):
        return None
    return cur


def fold_channel_broadcasts(gm: GraphModule) -> PassResult:
    """`op(expand((C, 1) -> (C, L)), X)` -> `op((C, 1), X)` for add/sub/mul/div.

    The backward pass of a per-channel sum (batch norm statistics, biases)
    materialises its gradient with `expand_copy` (a full-size copy, plus the
    views around it); the optimized elementwise kernels broadcast a (C, 1)
    operand against a (C, L) one at full speed, so the copy is dropped.
    """
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if node.op != "call_function" or not any(k in _op_name(node) for k in _BROADCASTING):
            continue
        val = node.meta.get("val")
        if val is None or len(val.shape) != 2:
            continue
        args = list(node.args)
        for i, arg in enumerate(args[:2]):
            if not isinstance(arg, Node):
                continue
            other = args[1 - i]
            other_val = other.meta.get("val") if isinstance(other, Node) else None
            if other_val is None or tuple(other_val.shape) != tuple(val.shape):
                continue
            source = _channel_source(arg)
            if source is not None and source.meta["val"].shape[0] == val.shape[0]:
                args[i] = source
                changed = True
        node.args = tuple(args)
    if changed:
        graph.eliminate_dead_code()
        gm.recompile()
    return PassResult(gm, changed)


TRAINING_PASSES: list[Callable[[GraphModule], PassResult]] = [
    transpose_of_mm,
    cancel_inverse_permutes,
    mm_to_linear,
    order_linear_operands,
    cancel_inverse_permutes,
    fold_channel_broadcasts,
]
