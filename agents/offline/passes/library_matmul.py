"""Hand-written attention → F.scaled_dot_product_attention, and matmul + bias → F.linear /
torch.addmm: the GEMMs of a pattern go into one library call (SDPA never materialises the
L x L scores on GPU; the bias rides in the GEMM's epilogue)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from agents.offline.fx import graph_edit, ops
from agents.offline.passes.library_match import (
    Graph,
    Match,
    Node,
    floating,
    is_tensor,
    near,
    sizes_equal,
    softmax_call,
)


def matmul_bias(g: Graph, root: Node) -> Match | None:
    """matmul(x, W.t()) + b → F.linear(x, W, b); mm(a, m) + bias → torch.addmm(bias, a, m)."""
    pair = g.binary(root, "add")
    for mm, bias in (pair, pair[::-1]) if pair else ():
        product = g.binary(mm, "matmul") or g.binary(mm, "mm")
        if product is None or not is_tensor(bias) or not sizes_equal(root, mm):
            continue
        x, other = product
        dtypes = {ops.tensor_dtype(v) for v in (x, other, bias, root)}
        if len(dtypes) != 1 or not floating(root):
            continue
        weight = _transposed(g, other, rank=2)
        w_shape = ops.tensor_shape(weight)
        if weight is not None and w_shape and ops.tensor_shape(bias) == (w_shape[0],):
            return Match(
                root,
                {root, mm, other},
                "matmul with a transposed weight + bias",
                "F.linear",
                lambda b, x=x, w=weight, bias=bias: b.call(F.linear, x, w, bias),
            )
        if len(ops.tensor_shape(x) or ()) == 2 and len(ops.tensor_shape(other) or ()) == 2:
            return Match(
                root,
                {root, mm},
                "2-D matmul + bias",
                "torch.addmm",
                lambda b, x=x, m=other, bias=bias: b.call(torch.addmm, bias, x, m),
            )
    return None


def _transposed(g: Graph, node: Any, rank: int | None = None) -> Any:
    """t when node swaps the last two dims of t (t.transpose(-2, -1), t.mT, t.T for 2-D,
    a permute that swaps only those), else None."""
    source = node.args[0] if isinstance(node, Node) and node.args else None
    shape = ops.tensor_shape(source)
    if shape is None or len(shape) < 2 or (rank is not None and len(shape) != rank):
        return None
    r = len(shape)
    name = g.kind(node)
    if name == "transpose":
        args = g.args(node, "input", "dim0", "dim1")
        dims = ops.dims_of([args.get("dim0"), args.get("dim1")], r) if args else None
        return source if dims == (r - 2, r - 1) else None
    if name == "mT" or (name in ("t", "T") and r == 2):
        return source
    if name == "permute":
        args = g.args(node)
        perm = tuple(d % r for d in args["dims"]) if args and _ints(args["dims"]) else None
        return source if perm == (*range(r - 2), r - 1, r - 2) else None
    return None


def _ints(values: Any) -> bool:
    return isinstance(values, tuple) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in values
    )


# -- attention -------------------------------------------------------------------------------


@dataclass
class _Scores:
    q: Any = None
    k: Any = None
    scale: list[tuple[str, Any]] = field(default_factory=list)  # ("mul"|"div", c), outer first
    mask: Any = None  # bool: True where the scores are set to -inf
    additive: Any = None  # float mask added after scaling


def attention(g: Graph, root: Node) -> Match | None:
    """softmax(q @ k.transpose(-2, -1) * scale (masked), -1) @ v →
    F.scaled_dot_product_attention(q, k, v, ...)."""
    pair = g.binary(root, "matmul") or g.binary(root, "bmm")
    if pair is None:
        return None
    p, v = pair
    inner = {root}
    if g.kind(p) == "dropout":
        args = g.args(p, "input", "p", "training", "inplace")
        if not args or args.get("p", 0.5) != 0 or args.get("inplace"):
            return None
        inner.add(p)
        p = args["input"]
    found = softmax_call(g, p) if g.kind(p) == "softmax" else None
    shape = ops.tensor_shape(found[0]) if found else None
    if found is None or not shape or ops.dims_of(found[1], len(shape)) != (len(shape) - 1,):
        return None
    inner.add(p)
    scores = _scores(g, found[0], inner)
    if scores is None or not _attention_shapes(scores.q, scores.k, v, root):
        return None
    causal = scores.mask is not None and _causal(g, scores.mask, found[0], inner)
    default = _default_scale(g, scores.scale, scores.q, scores.k)
    kinds = " with a causal mask" if causal else (" with a mask" if scores.mask else "")
    kinds = " with an additive mask" if scores.additive is not None else kinds
    return Match(
        root,
        inner,
        f"attention softmax(q @ kᵀ · scale) @ v{kinds}",
        "F.scaled_dot_product_attention",
        lambda b: _sdpa(b, scores, v, causal, default),
    )


def _sdpa(b: graph_edit.Builder, scores: _Scores, v: Any, causal: bool, default: bool) -> Any:
    kwargs: dict[str, Any] = {}
    if causal:
        kwargs["is_causal"] = True
    elif scores.mask is not None:
        kwargs["attn_mask"] = b.method("logical_not", scores.mask)
    elif scores.additive is not None:
        kwargs["attn_mask"] = scores.additive
    if not default:
        value: Any = None
        for op, c in reversed(scores.scale):
            value = b.mul(value, c) if op == "mul" else b.div(value, c)
        kwargs["scale"] = 1.0 if value is None else value
    return b.call(F.scaled_dot_product_attention, scores.q, scores.k, v, **kwargs)


def _scores(g: Graph, node: Any, inner: set[Node]) -> _Scores | None:
    """Walk from the softmax input down to q @ kᵀ through scaling and one mask."""
    found = _Scores()
    for _ in range(8):
        name = g.kind(node)
        if name == "masked_fill":
            args = g.args(node, "input", "mask", "value")
            value = args.get("value") if args else None
            if found.mask is not None or found.additive is not None or value != -math.inf:
                return None
            if not all(_positive(g, c) for _, c in found.scale):
                return None  # those scales apply after the fill: -inf must stay -inf
            found.mask = args["mask"]
            inner.add(node)
            node = args["input"]
            continue
        if name in ("mul", "div"):
            pair = g.binary(node, name)
            if pair is None:
                return None
            sides = [pair] if name == "div" else [pair, pair[::-1]]
            step = next(((s, c) for s, c in sides if is_tensor(s) and _factor(g, c)), None)
            if step is None:
                return None
            found.scale.append((name, step[1]))
            inner.add(node)
            node = step[0]
            continue
        if name == "add":
            pair = g.binary(node, "add")
            if pair is None or found.scale or found.mask is not None or found.additive is not None:
                return None  # an additive mask is only the same when it comes after scaling
            step = next(((s, m) for s, m in (pair, pair[::-1]) if _scoreish(g, s)), None)
            if step is None or ops.tensor_dtype(step[1]) != ops.tensor_dtype(step[0]):
                return None  # SDPA takes a float mask of the query's dtype
            found.additive = step[1]
            inner.add(node)
            node = step[0]
            continue
        product = g.binary(node, "matmul") or g.binary(node, "bmm")
        k = _transposed(g, product[1]) if product else None
        if product is None or k is None:
            return None
        inner |= {node, product[1]}
        found.q, found.k = product[0], k
        return found
    return None


def _factor(g: Graph, c: Any) -> bool:
    """A scale SDPA can take: a positive constant or a Python number computed from shapes."""
    if ops.is_scalar(c):
        return c > 0
    return isinstance(c, Node) and not is_tensor(c) and c.op == "call_function"


def _positive(g: Graph, c: Any) -> bool:
    if ops.is_scalar(c):
        return c > 0
    name = g.kind(c)
    if name == "sqrt":
        return True
    if name == "pow" and c.args[1:] and c.args[1] in (0.5, -0.5):
        return True
    pair = g.binary(c, "div")
    return pair is not None and _positive(g, pair[0]) and _positive(g, pair[1])


def _scoreish(g: Graph, node: Any) -> bool:
    return g.kind(node) in ("matmul", "bmm", "mul", "div", "masked_fill")


def _attention_shapes(q: Any, k: Any, v: Any, root: Node) -> bool:
    shapes = [ops.tensor_shape(t) for t in (q, k, v, root)]
    dtypes = {ops.tensor_dtype(t) for t in (q, k, v, root)}
    if any(s is None or len(s) < 2 for s in shapes) or len(dtypes) != 1 or not floating(q):
        return False
    sq, sk, sv, out = shapes
    assert sq and sk and sv and out
    same_batch = sq[:-2] == sk[:-2] == sv[:-2]
    return same_batch and sq[-1] == sk[-1] and sk[-2] == sv[-2] and out == (*sq[:-1], sv[-1])


def _causal(g: Graph, cond: Any, scores: Any, inner: set[Node]) -> bool:
    """Is `cond` tril(ones(.., L, S)) == 0, ~tril(..) or triu(ones(.., L, S), 1) (as bool),
    built in forward? Its nodes join `inner` when nothing else uses them."""
    shape, score_shape = ops.tensor_shape(cond), ops.tensor_shape(scores)
    if shape is None or score_shape is None or len(shape) < 2:
        return False
    if shape[-2:] != score_shape[-2:]:  # tril/triu act on the last two dims of any rank
        return False
    chain = [cond]
    node = cond
    if g.kind(node) in ("bool", "to"):
        args = g.args(node, "input", "dtype")
        if not args or (g.kind(node) == "to" and args.get("dtype") is not torch.bool):
            return False
        node = args["input"]
        chain.append(node)
    want: tuple[str, int] | None = ("triu", 1)
    pair = g.binary(node, "eq")
    if pair is not None:
        node, value = pair if ops.is_scalar(pair[1]) else pair[::-1]
        want = {0: ("tril", 0), 1: ("triu", 1)}.get(value) if ops.is_scalar(value) else None
    elif g.kind(node) == "logical_not":
        node, want = g.unary(node, "logical_not"), ("tril", 0)
    args = g.args(node, "input", "diagonal") if want and g.kind(node) == want[0] else None
    if want is None or not args or args.get("diagonal", 0) != want[1]:
        return False
    if g.kind(args["input"]) not in ("ones", "ones_like", "new_ones"):
        return False
    chain += [node, args["input"]]
    removed = set(chain)
    if all(set(n.users) <= removed | inner for n in chain):
        inner |= removed
    return True


def _default_scale(g: Graph, scale: list[tuple[str, Any]], q: Any, k: Any) -> bool:
    """Is the scale provably 1/sqrt(head_dim) at every size (so SDPA's default applies)?"""
    if len(scale) != 1:
        return False
    op, c = scale[0]
    head = _dim_source(g, q, -1)
    if op == "mul":
        pair = g.binary(c, "div")
        if pair is not None and near(pair[0], 1.0):
            op, c = "div", pair[1]
        elif ops.is_scalar(c) and ops.is_scalar(head) and head > 0:
            return near(c, 1 / math.sqrt(head))
        elif g.kind(c) == "pow" and near(c.args[1], -0.5):
            return _is_head_dim(g, c.args[0], q, k, head)
        else:
            return False
    if ops.is_scalar(c):
        return ops.is_scalar(head) and head > 0 and near(c, math.sqrt(head))
    if g.kind(c) == "sqrt" and not is_tensor(c):
        return _is_head_dim(g, c.args[0] if c.args else None, q, k, head)
    if g.kind(c) == "pow" and near(c.args[1], 0.5):
        return _is_head_dim(g, c.args[0], q, k, head)
    return False


def _is_head_dim(g: Graph, n: Any, q: Any, k: Any, head: Any) -> bool:
    """n is q's or k's last size: `q.size(-1)`, `k.shape[-1]`, or the value q was reshaped
    with in that position."""
    if n is None:
        return False
    if n is head or (ops.is_scalar(n) and ops.is_scalar(head) and n == head):
        return True
    if isinstance(k, Node) and n is _dim_source(g, k, -1):
        return True
    name = g.kind(n)
    if name == "size":
        args = g.args(n, "input", "dim")
        source, index = (args.get("input"), args.get("dim")) if args else (None, None)
    elif name == "getitem" and g.kind(n.args[0]) in ("shape", "size"):
        holder = n.args[0]
        source, index = holder.args[0], n.args[1]
        if g.kind(holder) == "size" and len(holder.args) > 1:
            return False
    else:
        return False
    shape = ops.tensor_shape(source)
    if source not in (q, k) or shape is None or not isinstance(index, int):
        return False
    return ops.dims_of(index, len(shape)) == (len(shape) - 1,)


def _dim_source(g: Graph, t: Any, axis: int, depth: int = 0) -> Any:
    """What t's size along `axis` was built from (a reshape argument: int or node), through
    permute/transpose/unbind/contiguous; None when not traceable."""
    shape = ops.tensor_shape(t)
    if shape is None or depth > 12 or not shape:
        return None
    axis %= len(shape)
    name = g.kind(t)
    if name in ("reshape", "view"):
        sizes = g.args(t)
        dims = sizes.get("dims") if sizes and len(sizes) == 2 else None
        if dims is None or len(dims) != len(shape) or dims[axis] == -1:
            return None
        return dims[axis]
    if name == "permute":
        args = g.args(t)
        if not args or len(args) != 2 or not _ints(args["dims"]):
            return None
        return _dim_source(g, t.args[0], args["dims"][axis], depth + 1)
    if name == "transpose":
        args = g.args(t, "input", "dim0", "dim1")
        dims = [args.get("dim0"), args.get("dim1")] if args else []
        if len(dims) != 2 or not _ints(tuple(dims)):
            return None
        a, b = (d % len(shape) for d in dims)
        swapped = b if axis == a else a if axis == b else axis
        return _dim_source(g, args["input"], swapped, depth + 1)
    if name == "contiguous":
        return _dim_source(g, t.args[0], axis, depth + 1)
    if name == "getitem" and g.kind(t.args[0]) == "unbind":
        args = g.args(t.args[0], "input", "dim")
        dim = args.get("dim", 0) if args else None
        if not isinstance(dim, int):
            return None
        dim %= len(shape) + 1
        return _dim_source(g, args["input"], axis if axis < dim else axis + 1, depth + 1)
    return None
