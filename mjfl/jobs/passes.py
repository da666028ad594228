"""Graph passes on the edge-dialect training program.

Autograd differentiates `mm(A, B)` into `mm(g, B^T)` and `mm(A^T, g)` and
emits every transpose as a `permute_copy`, which the runtime runs as a
naive portable loop at 7-10 ns an element; for the weight gradient of a
convolution that is a transpose of the whole im2col matrix. `mm`, and
`linear` (which computes `A @ B^T` with the transpose folded into BLAS),
run on the optimized kernels. The passes rewrite, exactly:

1. `permute(mm(A, B))`   -> `mm(permute(B), permute(A))`   when that moves the
   transpose onto smaller tensors (or onto transposes that then cancel);
2. `permute(permute(X))` -> `X`                            when the two are inverse;
3. `mm(A, permute(B))`   -> `linear(A, B)`                 for 2-D transposes.

Each pass is a pure function of the graph (no I/O); they only reorder exact
matrix algebra, so the program's results are unchanged up to BLAS rounding.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.fx import GraphModule, Node
from torch.fx.passes.infra.pass_base import PassResult

__all__ = ["TRAINING_PASSES", "transpose_of_mm", "cancel_inverse_permutes", "mm_to_linear"]


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


def transpose_of_mm(gm: GraphModule) -> PassResult:
    """`permute(mm(A, B))` -> `mm(B^T, A^T)` where that copies fewer elements."""
    a = _ops()
    graph = gm.graph
    changed = False
    for node in list(graph.nodes):
        if not _is_transpose(node):
            continue
        mm = node.args[0]
        if not (isinstance(mm, Node) and mm.target == a.mm.default and len(mm.users) == 1):
            continue
        lhs, rhs = mm.args
        if _transpose_cost(lhs) + _transpose_cost(rhs) >= _numel(mm):
            continue
        rt = _make_transpose(graph, node, rhs)
        lt = _make_transpose(graph, node, lhs)
        with graph.inserting_before(node):
            new = graph.call_function(a.mm.default, (rt, lt))
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
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


TRAINING_PASSES: list[Callable[[GraphModule], PassResult]] = [
    transpose_of_mm,
    cancel_inverse_permutes,
    mm_to_linear,
]
