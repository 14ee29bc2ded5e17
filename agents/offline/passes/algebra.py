"""Reductions, softmax and pooling over dims that are 1 by construction, removed on the fx
graph (size1-reduction). The other algebra (reductions moved through linear maps, scales and
shifts folded into weights, identities) is the equality-saturation pass's
(agents/offline/egraph/).

The pass traces the program, rewrites the graph and emits a new ModelNew. Graphs with
in-place ops are left alone: moving a read past a write, or aliasing a fresh tensor, could
change what the code computes.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.fx
import torch.nn as nn

from agents.offline.fx import codegen, effects, graph_edit, ops, tracing
from agents.offline.passes import algebra_rules as rules
from agents.offline.passes.base import Program, Rewrite

Node = torch.fx.Node


class Size1Reduction:
    """Reductions, softmax, pooling over dims that are 1 by construction are no-ops."""

    name = "size1-reduction"

    def apply(self, program: Program) -> Rewrite:
        return _run(program, self.name, _size1)


class _Decline(Exception):
    """Nothing applies; the message says why (one line)."""


def _run(
    program: Program,
    name: str,
    rewrite: Callable[[torch.fx.GraphModule, Program], list[str]],
) -> Rewrite:
    gm = tracing.trace(program)  # TraceError (a PassError) goes to the caller
    if effects.mutates_anything(gm):
        return Rewrite(None, "forward mutates tensors in place; left alone", method="fx")
    try:
        changes = rewrite(gm, program)
        if not changes:
            return Rewrite(None, "nothing to rewrite", method="fx")
        effects.prune(gm)
        gm.graph.lint()
        tracing.propagate(gm, program.inputs)  # the rewritten graph must still run
        doc = f"{name}: " + "; ".join(changes)
        source = codegen.emit(program, gm, doc=doc[:300])
    except _Decline as reason:
        return Rewrite(None, str(reason), method="fx")
    except Exception as error:  # a bug here must cost a rewrite, never the caller's run
        return Rewrite(None, f"{name} failed: {type(error).__name__}: {error}", method="fx")
    summary = "; ".join(changes)
    return Rewrite(source, summary, changes, method="fx")


# -- size-1 reductions -----------------------------------------------------------------------


def _size1(gm: torch.fx.GraphModule, program: Program) -> list[str]:
    units = rules.UnitDims(gm)
    changes: list[str] = []
    for node in list(gm.graph.nodes):
        if node.users:
            with gm.graph.inserting_before(node):
                change = _size1_node(gm, node, units)
            if change:
                changes.append(change)
    if not changes:
        raise _Decline("no reduction, softmax or pooling over a dimension that is always 1")
    return changes


def _size1_node(gm: torch.fx.GraphModule, node: Node, units: rules.UnitDims) -> str | None:
    name = ops.op_name(node)
    build = graph_edit.Builder(gm.graph)
    if name in rules.REDUCTIONS:
        found = rules.unit_reduction(node, units)
        if found is None:
            return None
        x, dims, keepdim = found
        if ops.tensor_dtype(x) != ops.tensor_dtype(node) or not effects.can_alias(gm, node, x):
            return None
        graph_edit.replace_uses(node, x if keepdim else _squeeze(build, x, dims))
        return f"{node.name}: {name} over size-1 dim {_dims_text(dims)} is the identity"
    if name in ("max", "min"):
        return _unit_argreduction(gm, build, node, name, units)
    if name in ("softmax", "log_softmax") or isinstance(
        ops.call_module(gm, node), nn.Softmax | nn.LogSoftmax
    ):
        return _unit_softmax(gm, build, node, units)
    if name in ("cumsum", "cumprod"):
        args = ops.arguments(node)
        x = args.get("input") if args else None
        shape = ops.tensor_shape(x)
        if not args or set(args) - {"input", "dim"} or shape is None:
            return None
        dims = ops.dims_of(args.get("dim"), len(shape))
        if dims is None or not set(dims) <= units(x) or not effects.can_alias(gm, node, x):
            return None
        graph_edit.replace_uses(node, x)
        return f"{node.name}: {name} over size-1 dim {dims[0]} is the identity"
    x = rules.identity_pool(gm, node, units)
    if x is not None and effects.can_alias(gm, node, x):
        graph_edit.replace_uses(node, x)
        return f"{node.name}: pooling with size-1 windows is the identity"
    return None


def _squeeze(build: graph_edit.Builder, x: Node, dims: tuple[int, ...]) -> Node:
    return build.method("squeeze", x, dims[0] if len(dims) == 1 else dims)


def _dims_text(dims: tuple[int, ...]) -> str:
    return str(dims[0]) if len(dims) == 1 else str(dims)


def _unit_argreduction(
    gm: torch.fx.GraphModule,
    build: graph_edit.Builder,
    node: Node,
    name: str,
    units: rules.UnitDims,
) -> str | None:
    """torch.max/min(x, dim) over a size-1 dim: values are x, indices are zeros."""
    found = rules.unit_reduction(node, units)
    if found is None:
        return None
    x, dims, keepdim = found
    parts = [rules.tuple_part(user) for user in node.users]
    if any(part is None for part in parts) or not effects.can_alias(gm, node, x):
        return None
    values = x if keepdim else _squeeze(build, x, dims)
    indices: Node | None = None
    for user, part in zip(list(node.users), parts, strict=True):
        if part == 1:
            indices = indices or build.call(torch.zeros_like, values, dtype=torch.int64)
        graph_edit.replace_uses(user, values if part == 0 else indices)
    return f"{node.name}: {name} over size-1 dim {_dims_text(dims)} is the identity"


def _unit_softmax(
    gm: torch.fx.GraphModule, build: graph_edit.Builder, node: Node, units: rules.UnitDims
) -> str | None:
    """softmax over a size-1 dim is all ones, log_softmax all zeros."""
    module = ops.call_module(gm, node)
    if module is not None:
        x, dim, log = node.args[0], module.dim, isinstance(module, nn.LogSoftmax)
        if len(node.args) != 1 or node.kwargs:
            return None
    else:
        args = ops.arguments(node, ("input", "dim", "_stacklevel", "dtype"))
        if not args or set(args) - {"input", "dim", "_stacklevel", "dtype"}:
            return None
        if args.get("dtype") is not None:
            return None
        x, dim, log = args.get("input"), args.get("dim"), ops.op_name(node) == "log_softmax"
    shape = ops.tensor_shape(x)
    if shape is None or dim is None or ops.tensor_dtype(x) != ops.tensor_dtype(node):
        return None
    dims = ops.dims_of(dim, len(shape))
    if dims is None or not set(dims) <= units(x):
        return None
    graph_edit.replace_uses(node, build.call(torch.zeros_like if log else torch.ones_like, x))
    kind = "log_softmax" if log else "softmax"
    return f"{node.name}: {kind} over size-1 dim {dims[0]} is constant"
