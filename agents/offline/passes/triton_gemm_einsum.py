"""A two-operand einsum that is a GEMM, rewritten in the graph as views around one matmul so
the triton-gemm pass takes it like any other GEMM.

Each index of a GEMM einsum is a batch index (in both operands and the output), a row index
(a and the output), a column index (b and the output) or a contracted one (both operands, not
the output). Then `a` permuted to (batch, rows, contracted) and `b` to (batch, contracted,
columns), each group flattened to one dim, give a batched matmul whose (batch, M, N) result,
unflattened and permuted to the output's order, is the einsum (without batch indices the
rows stay leading dims: matmul folds them into M). With one index per group (or leading
rows) and the output already in (batch, rows, columns) order ("bij,bjk->bik", "ij,jk->ik",
"bik,kj->bij") no view is written at all, so the epilogue after it still fuses. A permute is
a view the kernel reads through its strides; flattening a permuted group may copy.

Sums no GEMM computes (an index of one operand alone, a diagonal, an outer product, `...`)
are left to torch, each with a one-line reason.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from agents.offline.fx import graph_edit, ops
from agents.offline.passes.triton_gemm_read import LABEL

Node = torch.fx.Node


@dataclass(frozen=True)
class EinsumGemm:
    """The index groups of a GEMM einsum, each in the order the lowering uses."""

    a: str
    b: str
    out: str
    batch: str
    rows: str
    cols: str
    contracted: str


def parse(equation: str) -> EinsumGemm | str:
    """The GEMM an einsum equation describes, or why it is none."""
    text = equation.replace(" ", "")
    if "." in text:
        return "an einsum with '...' (its batch dims are left to torch)"
    inputs, arrow, out = text.partition("->")
    operands = inputs.split(",")
    if len(operands) != 2:
        return f"an einsum of {len(operands)} operands, not 2"
    a, b = operands
    if not arrow:  # implicit output: the indices seen once, in alphabetical order
        out = "".join(sorted(c for c in set(a + b) if (a + b).count(c) == 1))
    letters = a + b + out
    if not all(c.isalpha() for c in letters):
        return f"einsum equation {equation!r} is not plain letters"
    if any(len(set(s)) != len(s) for s in (a, b, out)):
        return "an einsum with a repeated index in one term (a diagonal or trace)"
    if set(out) - set(a + b):
        return "an einsum whose output has an index no operand has"
    lonely = (set(a) ^ set(b)) - set(out)
    if lonely:
        return f"an einsum that sums index {sorted(lonely)[0]!r} of one operand alone"
    contracted = "".join(c for c in a if c in b and c not in out)
    if not contracted:
        return "an einsum with no contracted index (an outer or elementwise product)"
    batch = "".join(c for c in out if c in a and c in b)
    rows = "".join(c for c in out if c in a and c not in b)
    cols = "".join(c for c in out if c in b and c not in a)
    return EinsumGemm(a, b, out, batch, rows, cols, contracted)


def lower_einsums(gm: torch.fx.GraphModule) -> tuple[int, list[str]]:
    """Rewrite every fp32 GEMM einsum of `gm` as views around a matmul (labelled for the
    summary): how many were, and why the others were left alone. Shapes must then be
    propagated again."""
    lowered, declined = 0, []
    for node in list(gm.graph.nodes):
        if ops.op_name(node) != "einsum":
            continue
        found = _read(node)
        if isinstance(found, str):
            declined.append(f"{node.name}: {found}")
            continue
        gemm, a, b = found
        _lower(gm.graph, node, gemm, a, b)
        lowered += 1
    return lowered, declined


def _read(node: Node) -> tuple[EinsumGemm, Node, Node] | str:
    args = list(node.args)
    if node.kwargs or not args or not isinstance(args[0], str):
        return "an einsum called with arguments the pass does not read"
    operands = args[1:]
    if len(operands) == 1 and isinstance(operands[0], list | tuple):
        operands = list(operands[0])
    if len(operands) != 2 or not all(isinstance(x, Node) for x in operands):
        return f"an einsum of {len(operands)} operands, not 2 tensors"
    gemm = parse(args[0])
    if isinstance(gemm, str):
        return gemm
    a, b = operands
    shapes = ops.tensor_shape(a), ops.tensor_shape(b)
    if shapes[0] is None or shapes[1] is None:
        return "an einsum of operands of unknown shape"
    if len(shapes[0]) != len(gemm.a) or len(shapes[1]) != len(gemm.b):
        return "an einsum whose terms do not match its operands' ranks"
    dtypes = {ops.tensor_dtype(a), ops.tensor_dtype(b)}
    if dtypes != {torch.float32}:
        return "an einsum that is not fp32"
    size_a = dict(zip(gemm.a, shapes[0], strict=True))
    size_b = dict(zip(gemm.b, shapes[1], strict=True))
    if any(size_a[c] != size_b[c] for c in set(gemm.a) & set(gemm.b)):
        return "an einsum whose shared indices differ in size (broadcast)"
    return gemm, a, b


def _lower(graph: torch.fx.Graph, node: Node, gemm: EinsumGemm, a: Node, b: Node) -> None:
    nb = len(gemm.batch)
    with graph.inserting_before(node):
        a_view = _grouped(graph, a, gemm.a, gemm.batch + gemm.rows + gemm.contracted, nb)
        a_view = _merge(graph, a_view, nb + len(gemm.rows), len(gemm.contracted))
        leading = not gemm.batch and gemm.rows  # matmul folds a's leading dims into M itself
        a_view = a_view if leading else _merge(graph, a_view, nb, len(gemm.rows))
        b_view = _grouped(graph, b, gemm.b, gemm.batch + gemm.contracted + gemm.cols, nb)
        b_view = _merge(graph, b_view, nb + len(gemm.contracted), len(gemm.cols))
        b_view = _merge(graph, b_view, nb, len(gemm.contracted))
        product = graph.call_function(torch.matmul, (a_view, b_view))
        product.meta[LABEL] = f"einsum('{gemm.a},{gemm.b}->{gemm.out}')"
        result = product
        if len(gemm.cols) != 1:
            sizes = tuple(_size(graph, b, gemm.b.index(c)) for c in gemm.cols)
            result = _unmerge(graph, result, -1, sizes)  # N is the last dim
        if len(gemm.rows) != 1 and not leading:
            sizes = tuple(_size(graph, a, gemm.a.index(c)) for c in gemm.rows)
            result = _unmerge(graph, result, nb, sizes)
        natural = gemm.batch + gemm.rows + gemm.cols
        if natural != gemm.out:
            order = tuple(natural.index(c) for c in gemm.out)
            result = graph.call_method("permute", (result, *order))
    graph_edit.replace_uses(node, result)
    graph.erase_node(node)


def _grouped(graph: torch.fx.Graph, x: Node, term: str, order: str, nb: int) -> Node:
    """x permuted to `order` (no node when it already is)."""
    if term == order:
        return x
    return graph.call_method("permute", (x, *(term.index(c) for c in order)))


def _merge(graph: torch.fx.Graph, x: Node, start: int, count: int) -> Node:
    """Dims start..start+count-1 as one (a new dim of size 1 when count is 0)."""
    if count == 1:
        return x
    if count == 0:
        return graph.call_method("unsqueeze", (x, start))
    return graph.call_method("flatten", (x, start, start + count - 1))


def _unmerge(graph: torch.fx.Graph, x: Node, dim: int, sizes: tuple[Node, ...]) -> Node:
    if not sizes:
        return graph.call_method("squeeze", (x, dim))
    return graph.call_method("unflatten", (x, dim, sizes))


def _size(graph: torch.fx.Graph, x: Node, dim: int) -> Node:
    """x.size(dim) read at call time, so no size is written into the source."""
    return graph.call_method("size", (x, dim))
