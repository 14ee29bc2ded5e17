"""Algebraic rewrites on the fx graph: exact identities that remove whole passes over an
activation (a reduction moved ahead of a linear map, reductions over size-1 dims, a scale
and shift folded into a linear/conv, no-op ops).

Each pass traces the program, rewrites the graph and emits a new ModelNew whose forward
computes anything weight-derived from the current parameters on every call, so loading a
new state_dict stays correct. Graphs with in-place ops are left alone: moving a read past a
write, or aliasing a fresh tensor, could change what the code computes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

from agents.offline import fxtools as fx
from agents.offline.passes import algebra_rules as rules
from agents.offline.passes import identity_rules
from agents.offline.passes.base import Program, Rewrite

Node = torch.fx.Node


class AlgebraicSimplification:
    """sum/mean over a linear map's output features → the same reduction on the weight."""

    name = "algebraic-simplification"

    def apply(self, program: Program) -> Rewrite:
        return _run(program, self.name, _reductions_through_linear)


class Size1Reduction:
    """Reductions, softmax, pooling over dims that are 1 by construction are no-ops."""

    name = "size1-reduction"

    def apply(self, program: Program) -> Rewrite:
        return _run(program, self.name, _size1)


class FoldScaleShift:
    """A constant scale/shift after linear/conv goes into its weight and bias."""

    name = "fold-scale-shift"

    def apply(self, program: Program) -> Rewrite:
        return _run(program, self.name, _fold_scale_shift)


class RemoveIdentities:
    """x*1, x+0, dropout(p=0), redundant clone/contiguous/view, cancelling transposes."""

    name = "remove-identities"

    def apply(self, program: Program) -> Rewrite:
        return _run(program, self.name, _identities)


class _Decline(Exception):
    """Nothing applies; the message says why (one line)."""


def _run(
    program: Program,
    name: str,
    rewrite: Callable[[torch.fx.GraphModule, Program], list[str]],
) -> Rewrite:
    gm = fx.trace(program)  # TraceError (a PassError) goes to the caller
    if fx.mutates_anything(gm):
        return Rewrite(None, "forward mutates tensors in place; left alone", method="fx")
    try:
        changes = rewrite(gm, program)
        if not changes:
            return Rewrite(None, "nothing to rewrite", method="fx")
        fx.prune(gm)
        gm.graph.lint()
        fx.propagate(gm, program.inputs)  # the rewritten graph must still run
        doc = f"{name}: " + "; ".join(changes)
        source = fx.emit(program, gm, doc=doc[:300])
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
    name = fx.op_name(node)
    build = fx.Builder(gm.graph)
    if name in rules.REDUCTIONS:
        found = rules.unit_reduction(node, units)
        if found is None:
            return None
        x, dims, keepdim = found
        if fx.tensor_dtype(x) != fx.tensor_dtype(node) or not fx.can_alias(gm, node, x):
            return None
        fx.replace_uses(node, x if keepdim else _squeeze(build, x, dims))
        return f"{node.name}: {name} over size-1 dim {_dims_text(dims)} is the identity"
    if name in ("max", "min"):
        return _unit_argreduction(gm, build, node, name, units)
    if name in ("softmax", "log_softmax") or isinstance(
        fx.call_module(gm, node), nn.Softmax | nn.LogSoftmax
    ):
        return _unit_softmax(gm, build, node, units)
    if name in ("cumsum", "cumprod"):
        args = fx.arguments(node)
        x = args.get("input") if args else None
        shape = fx.tensor_shape(x)
        if not args or set(args) - {"input", "dim"} or shape is None:
            return None
        dims = fx.dims_of(args.get("dim"), len(shape))
        if dims is None or not set(dims) <= units(x) or not fx.can_alias(gm, node, x):
            return None
        fx.replace_uses(node, x)
        return f"{node.name}: {name} over size-1 dim {dims[0]} is the identity"
    x = rules.identity_pool(gm, node, units)
    if x is not None and fx.can_alias(gm, node, x):
        fx.replace_uses(node, x)
        return f"{node.name}: pooling with size-1 windows is the identity"
    return None


def _squeeze(build: fx.Builder, x: Node, dims: tuple[int, ...]) -> Node:
    return build.method("squeeze", x, dims[0] if len(dims) == 1 else dims)


def _dims_text(dims: tuple[int, ...]) -> str:
    return str(dims[0]) if len(dims) == 1 else str(dims)


def _unit_argreduction(
    gm: torch.fx.GraphModule, build: fx.Builder, node: Node, name: str, units: rules.UnitDims
) -> str | None:
    """torch.max/min(x, dim) over a size-1 dim: values are x, indices are zeros."""
    found = rules.unit_reduction(node, units)
    if found is None:
        return None
    x, dims, keepdim = found
    parts = [rules.tuple_part(user) for user in node.users]
    if any(part is None for part in parts) or not fx.can_alias(gm, node, x):
        return None
    values = x if keepdim else _squeeze(build, x, dims)
    indices: Node | None = None
    for user, part in zip(list(node.users), parts, strict=True):
        if part == 1:
            indices = indices or build.call(torch.zeros_like, values, dtype=torch.int64)
        fx.replace_uses(user, values if part == 0 else indices)
    return f"{node.name}: {name} over size-1 dim {_dims_text(dims)} is the identity"


def _unit_softmax(
    gm: torch.fx.GraphModule, build: fx.Builder, node: Node, units: rules.UnitDims
) -> str | None:
    """softmax over a size-1 dim is all ones, log_softmax all zeros."""
    module = fx.call_module(gm, node)
    if module is not None:
        x, dim, log = node.args[0], module.dim, isinstance(module, nn.LogSoftmax)
        if len(node.args) != 1 or node.kwargs:
            return None
    else:
        args = fx.arguments(node, ("input", "dim", "_stacklevel", "dtype"))
        if not args or set(args) - {"input", "dim", "_stacklevel", "dtype"}:
            return None
        if args.get("dtype") is not None:
            return None
        x, dim, log = args.get("input"), args.get("dim"), fx.op_name(node) == "log_softmax"
    shape = fx.tensor_shape(x)
    if shape is None or dim is None or fx.tensor_dtype(x) != fx.tensor_dtype(node):
        return None
    dims = fx.dims_of(dim, len(shape))
    if dims is None or not set(dims) <= units(x):
        return None
    fx.replace_uses(node, build.call(torch.zeros_like if log else torch.ones_like, x))
    kind = "log_softmax" if log else "softmax"
    return f"{node.name}: {kind} over size-1 dim {dims[0]} is constant"


# -- reductions through linear maps ----------------------------------------------------------


def _reductions_through_linear(gm: torch.fx.GraphModule, program: Program) -> list[str]:
    changes: list[str] = []
    expected: dict[Node, tuple[int, ...] | None] = {}
    for node in list(gm.graph.nodes):
        if fx.op_name(node) in ("sum", "mean") and node.users:
            with gm.graph.inserting_before(node):
                moved = _reduce_before_linear(gm, node)
            if moved is not None:
                expected[moved[0]] = fx.tensor_shape(node)
                changes.append(moved[1])
    if not changes:
        raise _Decline("no sum/mean over the output features of a linear map")
    fx.prune(gm)
    fx.propagate(gm, program.inputs)
    for new, shape in expected.items():
        if fx.tensor_shape(new) != shape:
            raise RuntimeError(f"{new.name} has shape {fx.tensor_shape(new)}, expected {shape}")
    with contextlib.suppress(_Decline):  # the reduced dim is now 1: reductions over it go
        changes += _size1(gm, program)
    return changes


def _reduce_before_linear(gm: torch.fx.GraphModule, node: Node) -> tuple[Node, str] | None:
    """sum_j (x W^T + b)_j = x (sum_j W_j)^T + sum_j b_j, and likewise mean; scalar ops
    in between are replayed on the (batch, 1) result, a shift times the reduced size."""
    reduction = str(fx.op_name(node))
    args = fx.arguments(node)
    y = args.get("input") if args else None
    shape = fx.tensor_shape(y)
    if not args or set(args) - {"input", "dim", "keepdim"} or not shape:
        return None
    if fx.dims_of(args.get("dim"), len(shape)) != (len(shape) - 1,) or args.get("dim") is None:
        return None
    chain: list[rules.Step] = []
    current = y
    while len(current.users) == 1 and (step := rules.scalar_step(current)) is not None:
        chain.append(step)
        current = step.source
    linear = rules.linear_map(gm, current)
    dtype = fx.tensor_dtype(current)
    if linear is None or len(current.users) != 1 or dtype is None or not dtype.is_floating_point:
        return None
    build = fx.Builder(gm.graph)
    weight, matrix = linear.resolve(build)
    bias = linear.resolve_bias(build)
    if bias is not None:
        bias = build.method(reduction, bias, -1, keepdim=True)
    if weight is not None:  # (out, in) -> (1, in): a linear map to one feature
        size = build.method("size", weight, 0)
        reduced = build.method(reduction, weight, 0, keepdim=True)
        if linear.kind == "addmm":
            mat2 = build.method("t", reduced)
            out = build.call(torch.addmm, bias, linear.x, mat2, **linear.scales)
        else:
            out = build.call(F.linear, linear.x, reduced, *(() if bias is None else (bias,)))
    else:  # (in, out) -> (in, 1)
        assert matrix is not None
        size = build.method("size", matrix, -1)
        reduced = build.method(reduction, matrix, -1, keepdim=True)
        if linear.kind == "addmm":
            out = build.call(torch.addmm, bias, linear.x, reduced, **linear.scales)
        else:
            out = build.call(torch.matmul, linear.x, reduced)
    for step in reversed(chain):
        out = step.replay(build, out, size if reduction == "sum" else None)
    if not args.get("keepdim", False):
        out = build.method("squeeze", out, -1)
    fx.replace_uses(node, out)
    ops = "".join(f" {step.describe()}" for step in reversed(chain))
    where = f"{linear.label}{ops}"
    return out, f"{node.name}: {reduction} over the outputs of {where} → {reduction} of the weight"


# -- scale and shift folding -----------------------------------------------------------------


@dataclass
class _Affine:
    """y = producer(x) * scale + shift; None is the neutral value."""

    scale: Any = None
    shift: Any = None


def _fold_scale_shift(gm: torch.fx.GraphModule, program: Program) -> list[str]:
    changes: list[str] = []
    skipped: list[str] = []
    for node in list(gm.graph.nodes):
        producer = rules.producer(gm, node)
        if producer is None or len(node.users) != 1:
            continue
        chain = rules.affine_chain(node, producer.channel_axis)
        if not chain:
            continue
        last = chain[-1].node
        with gm.graph.inserting_before(last):
            result = _fold_site(gm, producer, chain)
        if isinstance(result, str):
            skipped.append(result)
            continue
        fx.replace_uses(last, result)
        ops = " ".join(step.describe() for step in chain)
        changes.append(f"{node.name}: {ops} folded into the {producer.label}'s weight and bias")
    if not changes:
        raise _Decline("; ".join(skipped) or "no constant scale/shift right after linear or conv")
    return changes


def _maybe(op: Callable[[Any, Any], Any], shift: Any, c: Any) -> Any:
    """Scale a shift that may be absent (None is 0 here, not 1)."""
    return None if shift is None else op(shift, c)


def _fold_site(
    gm: torch.fx.GraphModule, producer: rules.Producer, chain: list[rules.Step]
) -> Node | str:
    """The folded producer call, or why folding here would not pay."""
    build = fx.Builder(gm.graph)
    affine = _Affine()
    vectors: dict[Node, Node] = {}

    def vector(value: Any) -> Any:  # per-channel constants as flat (C,) or (1,) tensors
        if isinstance(value, Node) and value not in vectors:
            vectors[value] = build.method("reshape", value, -1)
        return vectors.get(value, value)

    for step in chain:
        c = vector(step.const)
        if step.kind == "mul":
            affine = _Affine(build.mul(affine.scale, c), _maybe(build.mul, affine.shift, c))
        elif step.kind == "div":
            affine = _Affine(build.div(affine.scale, c), _maybe(build.div, affine.shift, c))
        elif step.kind == "add":
            affine.shift = build.add(affine.shift, c)
        elif step.kind == "neg" or (step.kind == "sub" and step.const_left):
            affine = _Affine(build.mul(affine.scale, -1.0), build.neg(affine.shift))
            if step.kind == "sub":
                affine.shift = build.add(affine.shift, c)
        else:
            affine.shift = build.sub(affine.shift, c)
    weight_elems, out_elems = producer.weight_numel(gm), producer.out_numel()
    if affine.scale is None and affine.shift is None:
        return f"{producer.label}: the scale and shift cancel"
    use_addmm = producer.kind == "linear" and producer.x_rank == 2
    use_addmm = use_addmm and (affine.scale is None or fx.is_scalar(affine.scale))
    if affine.scale is not None and not use_addmm and weight_elems >= out_elems:
        return (
            f"{producer.label}: scaling the weight ({weight_elems} elements) costs more than "
            f"scaling its output ({out_elems})"
        )
    weight = producer.resolve_weight(build)
    bias = producer.resolve_bias(build)
    if bias is not None:
        bias = build.add(build.mul(bias, affine.scale), affine.shift)
    elif affine.shift is not None:
        zeros = build.method("new_zeros", weight, build.method("size", weight, 0))
        bias = build.add(zeros, affine.shift)
    if use_addmm:
        kwargs = {} if affine.scale is None else {"alpha": affine.scale}
        mat2 = build.method("t", weight)
        if bias is None:  # beta=0: the zero input is never read
            zero = build.method("new_zeros", producer.x, ())
            return build.call(torch.addmm, zero, producer.x, mat2, beta=0, **kwargs)
        return build.call(torch.addmm, bias, producer.x, mat2, **kwargs)
    scale = affine.scale
    if isinstance(scale, Node):
        scale = build.method("reshape", scale, -1, *[1] * (producer.weight_rank(gm) - 1))
    return producer.call(build, build.mul(weight, scale), bias)


# -- identities ------------------------------------------------------------------------------


def _identities(gm: torch.fx.GraphModule, program: Program) -> list[str]:
    changes: list[str] = []
    for _ in range(4):  # removing one identity can expose another (transpose pairs)
        found = False
        for node in list(gm.graph.nodes):
            if not node.users or node.op in ("placeholder", "output", "get_attr"):
                continue
            hit = identity_rules.identity_of(gm, node)
            if hit is None:
                continue
            replacement, what, fresh = hit
            if fresh and not fx.can_alias(gm, node, replacement):
                continue  # returning the input itself would alias the caller's tensor
            fx.replace_uses(node, replacement)
            changes.append(f"{node.name}: {what}")
            found = True
        if not found:
            break
        fx.prune(gm)
    if not changes:
        raise _Decline("no identity ops (x*1, x+0, dropout(p=0), no-op clone/view/transpose)")
    return changes
