"""The rule list of library substitution, and the softmax-family and normalisation rules.

Each rule looks at one root node and returns a `Match`: the nodes the replacement removes and
how to build it. Rules are small and compose through the driver's rounds: a hand-written
log-softmax `x - m - log(sum(exp(x - m)))` becomes `log(sum(exp(.)))` → logsumexp, then
`y - logsumexp(y)` → log_softmax(y), then the max shift `m` is dropped; attention then finds
the torch.softmax that the softmax rule left behind.
"""

from __future__ import annotations

import builtins
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from agents.offline.fx import graph_edit, ops, tracing
from agents.offline.passes.library_activations import gelu, hardswish, mish, swish
from agents.offline.passes.library_match import (
    Graph,
    Match,
    Node,
    Rule,
    floating,
    is_tensor,
    near,
    one_dim,
    same_type,
    sizes_equal,
    softmax_call,
    trailing,
)
from agents.offline.passes.library_matmul import attention, matmul_bias

# -- softmax family --------------------------------------------------------------------------


def softmax(g: Graph, root: Node) -> Match | None:
    """exp(y) / sum(exp(y), d, keepdim=True) → torch.softmax(y, d)."""
    pair = g.binary(root, "div")
    if pair is None:
        return None
    e, s = pair
    y = g.unary(e, "exp")
    red = g.reduction(s, "sum")
    if y is None or red is None or red.dims is None or len(red.dims) != 1 or not red.keepdim:
        return None
    inner = {root, e, s}
    if not g.same(e, red.input, inner) or not same_type(y, root):
        return None
    dim = one_dim(red.dim)
    return Match(
        root,
        inner,
        f"softmax over dim {dim}",
        "torch.softmax",
        lambda b: b.call(torch.softmax, y, dim=dim),
    )


def shifted_softmax(g: Graph, root: Node) -> Match | None:
    """softmax/log_softmax(x - max(x, d, keepdim=True), d) → the same of x: a shift that is
    constant along d cancels."""
    name = g.kind(root)
    found = softmax_call(g, root) if name in ("softmax", "log_softmax") else None
    pair = g.binary(found[0], "sub") if found else None
    if found is None or pair is None:
        return None
    (centred, dim), (x, m) = found, pair
    inner = {root, centred}
    red = g.max_of(m, inner)
    shape = ops.tensor_shape(centred)
    if red is None or shape is None or not sizes_equal(centred, x):
        return None
    dims = ops.dims_of(dim, len(shape))
    constant = red.dims is None or (red.keepdim and dims is not None and set(dims) <= set(red.dims))
    if not constant or not g.same(x, red.input, inner):
        return None
    target = torch.softmax if name == "softmax" else torch.log_softmax
    label = "softmax" if name == "softmax" else "log-softmax"
    return Match(
        root,
        inner,
        f"{label} over dim {dim}",
        f"torch.{name}",
        lambda b: b.call(target, x, dim=dim),
        refines=True,
    )


def logsumexp(g: Graph, root: Node) -> Match | None:
    """log(sum(exp(y), d, keepdim)) → torch.logsumexp(y, d, keepdim)."""
    s = g.unary(root, "log")
    red = g.reduction(s, "sum")
    y = g.unary(red.input, "exp") if red else None
    shape = ops.tensor_shape(y)
    if red is None or y is None or not shape or not floating(y):
        return None
    if ops.tensor_dtype(root) != ops.tensor_dtype(y):
        return None
    dim = red.dim if red.dims is not None else list(range(len(shape)))
    keepdim = red.keepdim
    return Match(
        root,
        {root, s, red.input},
        f"logsumexp over dim {one_dim(dim)}",
        "torch.logsumexp",
        lambda b: b.call(torch.logsumexp, y, dim=dim, keepdim=keepdim),
    )


def shifted_logsumexp(g: Graph, root: Node) -> Match | None:
    """m + logsumexp(x - m, d) → logsumexp(x, d), m the max of x over d."""
    pair = g.binary(root, "add")
    for m, lse in (pair, pair[::-1]) if pair else ():
        red = g.reduction(lse, "logsumexp")
        sub = g.binary(red.input, "sub") if red and red.dims is not None else None
        if red is None or sub is None or not sizes_equal(root, lse):
            continue
        x, shift = sub
        inner = {root, lse, red.input}
        shift_red = g.max_of(shift, inner)
        if (
            shift_red is None
            or not sizes_equal(red.input, x)
            or not g.same(x, shift_red.input, inner)
        ):
            continue
        if shift_red.dims is not None and (shift_red.dims != red.dims or not shift_red.keepdim):
            continue
        trial = set(inner)
        if not (g.same(shift, m, trial) and (shift_red.dims is None or red.keepdim)):
            trial = set(inner)
            outer = g.max_of(m, trial)
            if outer is None or not g.same(x, outer.input, trial):
                continue
            if (outer.dims, outer.keepdim) != (shift_red.dims and red.dims, red.keepdim):
                continue
        dim, keepdim = red.dim, red.keepdim
        return Match(
            root,
            trial,
            f"logsumexp over dim {one_dim(dim)}",
            "torch.logsumexp",
            lambda b, x=x, dim=dim, keepdim=keepdim: b.call(
                torch.logsumexp, x, dim=dim, keepdim=keepdim
            ),
            refines=True,
        )
    return None


def log_of_softmax(g: Graph, root: Node) -> Match | None:
    """log(softmax(y, d)) → torch.log_softmax(y, d)."""
    s = g.unary(root, "log")
    found = softmax_call(g, s) if g.kind(s) == "softmax" else None
    if found is None or not same_type(found[0], root):
        return None
    y, dim = found
    return Match(
        root,
        {root, s},
        f"log-softmax over dim {dim}",
        "torch.log_softmax",
        lambda b: b.call(torch.log_softmax, y, dim=dim),
    )


def log_softmax(g: Graph, root: Node) -> Match | None:
    """y - logsumexp(y, d, keepdim=True) → torch.log_softmax(y, d)."""
    pair = g.binary(root, "sub")
    red = g.reduction(pair[1], "logsumexp") if pair else None
    if pair is None or red is None or red.dims is None or len(red.dims) != 1 or not red.keepdim:
        return None
    y = pair[0]
    inner = {root, red.node}
    if not g.same(y, red.input, inner) or not same_type(y, root):
        return None
    dim = one_dim(red.dim)
    return Match(
        root,
        inner,
        f"log-softmax over dim {dim}",
        "torch.log_softmax",
        lambda b: b.call(torch.log_softmax, y, dim=dim),
    )


# -- normalisation ---------------------------------------------------------------------------


def _over_root_of(g: Graph, root: Node, inner: set[Node]) -> tuple[Any, Any] | None:
    """root = n / sqrt(a) or n * rsqrt(a) (and the pow/reciprocal spellings): (n, a)."""
    pair = g.binary(root, "div")
    if pair is not None:
        a = _root_of(g, pair[1], 0.5)
        if a is not None:
            inner |= {root, pair[1]}
            return pair[0], a
    pair = g.binary(root, "mul")
    for n, r in (pair, pair[::-1]) if pair else ():
        a = _root_of(g, r, -0.5)
        if a is not None:
            inner |= {root, r}
            if g.kind(r) in ("div", "reciprocal"):
                inner.add(_inverted(g, r))
            return n, a
    return None


def _inverted(g: Graph, r: Node) -> Any:
    if g.kind(r) == "reciprocal":
        return g.unary(r, "reciprocal")
    pair = g.binary(r, "div")
    return pair[1] if pair else None


def _root_of(g: Graph, node: Any, power: float) -> Any:
    """a when node is a**power: sqrt(a)/a**0.5, or rsqrt(a)/a**-0.5/1/sqrt(a)."""
    name = g.kind(node)
    if name == ("sqrt" if power > 0 else "rsqrt") and is_tensor(node):
        return g.unary(node, name)
    if name == "pow":
        args = g.args(node, "input", "exponent")
        return args["input"] if args and near(args.get("exponent"), power) else None
    if power < 0 and name in ("div", "reciprocal"):
        pair = g.binary(node, "div")
        if name == "div" and (pair is None or not near(pair[0], 1.0)):
            return None
        return _root_of(g, _inverted(g, node), 0.5)
    return None


def _plus_eps(g: Graph, a: Any, inner: set[Node]) -> tuple[Any, Any] | None:
    """a = v + eps (eps a non-negative constant, or a float attribute `self.eps` passed on
    as it is; 0 when there is none): (v, eps)."""
    pair = g.binary(a, "add")
    for v, eps in (pair, pair[::-1]) if pair else ():
        if not is_tensor(v):
            continue
        if tracing.self_scalar(eps) is not None:
            inner.add(a)
            return v, eps
        if ops.is_scalar(eps) and eps >= 0:
            inner.add(a)
            return v, float(eps)
    return (a, 0.0) if is_tensor(a) else None


def _square_of(g: Graph, node: Any, inner: set[Node]) -> Any:
    """t when node is t**2, t*t or t.square()."""
    name = g.kind(node)
    if name == "square":
        inner.add(node)
        return g.unary(node, "square")
    if name == "pow":
        args = g.args(node, "input", "exponent")
        if args and args.get("exponent") in (2, 2.0):
            inner.add(node)
            return args["input"]
    pair = g.binary(node, "mul")
    if pair is not None and g.same(pair[0], pair[1], inner):
        inner.add(node)
        return pair[0]
    return None


def _trailing_shape(b: graph_edit.Builder, x: Any, k: int) -> Any:
    """`x.shape[-k:]`: the normalized shape, read at run time."""
    shape = b.call(builtins.getattr, x, "shape")
    return b.call(operator.getitem, shape, slice(-k, None))


def _dims_text(k: int) -> str:
    return "the last dim" if k == 1 else f"the last {k} dims"


def normalisation(g: Graph, root: Node) -> Match | None:
    """(x - mean) / sqrt(var + eps) → F.layer_norm; x / sqrt(mean(x**2) + eps) →
    F.rms_norm; over the trailing dims only (what both ops normalise)."""
    inner: set[Node] = set()
    found = _over_root_of(g, root, inner)
    eps_found = _plus_eps(g, found[1], inner) if found else None
    if found is None or eps_found is None:
        return None
    numerator, (v, eps) = found[0], eps_found
    match = _layer_norm(g, root, numerator, v, eps, set(inner))
    return match or _rms_norm(g, root, numerator, v, eps, inner)


def _layer_norm(
    g: Graph, root: Node, centred: Any, v: Any, eps: Any, inner: set[Node]
) -> Match | None:
    pair = g.binary(centred, "sub")
    mean = g.reduction(pair[1], "mean") if pair else None
    if pair is None or mean is None or not mean.keepdim or not g.same(pair[0], mean.input, inner):
        return None
    x = pair[0]
    inner |= {centred, mean.node}
    if g.kind(v) == "var":
        args = g.args(v, "input", "dim", "unbiased", "keepdim", "correction")
        if not args or args.get("keepdim") is not True or {"unbiased", "correction"} <= set(args):
            return None
        if args.get("unbiased") is not False and args.get("correction") not in (0, 0.0):
            return None
        shape = ops.tensor_shape(x)
        dims = ops.dims_of(args.get("dim"), len(shape)) if shape else None
        if args.get("dim") is None or not g.same(x, args["input"], inner):
            return None
    else:
        var = g.reduction(v, "mean")
        square = _square_of(g, var.input, inner) if var and var.keepdim else None
        if var is None or square is None or not g.same(centred, square, inner):
            return None
        dims = var.dims
    inner.add(v)
    rank = len(ops.tensor_shape(x) or ())
    k = trailing(dims, rank)
    if k is None or dims != mean.dims or not same_type(x, root):
        if k is None and dims == mean.dims and dims:
            g.notes.append(f"{root.name}: layer norm over dims {dims}, not the trailing dims")
        return None
    return Match(
        root,
        inner,
        f"layer norm over {_dims_text(k)}",
        "F.layer_norm",
        lambda b: b.call(F.layer_norm, x, _trailing_shape(b, x, k), eps=eps),
    )


def _rms_norm(g: Graph, root: Node, x: Any, v: Any, eps: Any, inner: set[Node]) -> Match | None:
    ms = g.reduction(v, "mean")
    square = _square_of(g, ms.input, inner) if ms and ms.keepdim else None
    if ms is None or square is None or not g.same(x, square, inner) or not same_type(x, root):
        return None
    inner.add(v)
    k = trailing(ms.dims, len(ops.tensor_shape(x) or ()))
    if k is None:
        g.notes.append(f"{root.name}: RMS norm over dims {ms.dims}, not the trailing dims")
        return None
    return Match(
        root,
        inner,
        f"RMS norm over {_dims_text(k)}",
        "F.rms_norm",
        lambda b: b.call(F.rms_norm, x, _trailing_shape(b, x, k), eps=eps),
    )


def _normalized_rank(g: Graph, shape: Any) -> int | None:
    if isinstance(shape, list | tuple | torch.Size):
        return len(shape)
    if isinstance(shape, int):
        return 1
    if g.kind(shape) == "getitem" and g.kind(shape.args[0]) == "shape":
        index = shape.args[1]
        if isinstance(index, slice) and (index.stop, index.step) == (None, None):
            start = index.start
            return -start if isinstance(start, int) and start < 0 else None
    return None


def norm_affine(g: Graph, root: Node) -> Match | None:
    """layer_norm/rms_norm(x) * w (+ b) → the same call with weight (and bias)."""
    for op, slot in (("mul", "weight"), ("add", "bias")):
        pair = g.binary(root, op)
        for norm, w in (pair, pair[::-1]) if pair else ():
            name = g.kind(norm)
            if name not in ("layer_norm", "rms_norm") or (name, op) == ("rms_norm", "add"):
                continue
            signature = ("input", "normalized_shape", "weight", "bias", "eps")
            args = g.args(norm, *signature)
            taken = ("weight", "bias") if op == "mul" else ("bias",)
            if not args or any(args.get(key) is not None for key in taken):
                continue
            k = _normalized_rank(g, args.get("normalized_shape"))
            x = args["input"]
            x_shape, w_shape = ops.tensor_shape(x), ops.tensor_shape(w)
            if k is None or x_shape is None or w_shape != x_shape[len(x_shape) - k :]:
                continue
            if ops.tensor_dtype(w) != ops.tensor_dtype(x) or not sizes_equal(root, norm):
                continue
            kwargs = {key: value for key, value in args.items() if key not in ("input",)}
            kwargs[slot] = w
            parts = [key for key in ("weight", "bias") if kwargs.get(key) is not None]
            label = "layer norm" if name == "layer_norm" else "RMS norm"
            target = F.layer_norm if name == "layer_norm" else F.rms_norm
            return Match(
                root,
                {root, norm},
                f"{label} over {_dims_text(k)} with {' and '.join(parts)}",
                f"F.{name}",
                lambda b, t=target, x=x, kw=kwargs: _norm_call(b, t, x, kw),
            )
    return None


def _norm_call(
    b: graph_edit.Builder, target: Callable[..., Any], x: Any, kwargs: dict[str, Any]
) -> Any:
    shape = kwargs["normalized_shape"]
    present = {k: kwargs[k] for k in ("weight", "bias", "eps") if kwargs.get(k) is not None}
    return b.call(target, x, shape, **present)


RULES: tuple[Rule, ...] = (
    softmax,
    logsumexp,
    shifted_logsumexp,
    log_of_softmax,
    log_softmax,
    shifted_softmax,
    normalisation,
    norm_affine,
    gelu,
    swish,
    mish,
    hardswish,
    attention,
    matmul_bias,
)
"""Tried in this order, each over the whole graph, in rounds: the softmax family first
(attention reads the torch.softmax they leave), matmul + bias last (attention scores plus a
mask are not a linear layer)."""
