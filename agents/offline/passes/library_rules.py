"""Hand-written formulas and the fused library ops that replace them.

Each rule looks at one root node and returns a `Match`: the nodes the replacement removes and
how to build it. Rules are small and compose through the driver's fixpoint: a hand-written
log-softmax `x - m - log(sum(exp(x - m)))` becomes `log(sum(exp(.)))` → logsumexp, then
`y - logsumexp(y)` → log_softmax(y), then the max shift `m` is dropped; attention then finds
the torch.softmax that the softmax rule left behind.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F

from agents.offline import fxtools as fx
from agents.offline.passes.library_match import (
    Graph,
    Node,
    floating,
    is_tensor,
    near,
    poly_is,
    sizes_equal,
    trailing,
)

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715


@dataclass
class Match:
    root: Node
    inner: set[Node]  # nodes that die with the rewrite (root included)
    what: str  # "softmax over dim 1"
    target: str  # "torch.softmax"
    build: Callable[[fx.Builder], Any]  # adds the replacement before root
    refines: bool = False  # the site keeps the description it already had


Rule = Callable[[Graph, Node], Match | None]


def _same_type(x: Any, root: Node) -> bool:
    """x is a float tensor and the pattern's result has its shape and dtype."""
    return floating(x) and sizes_equal(root, x) and fx.tensor_dtype(root) == fx.tensor_dtype(x)


def _one_dim(dim: Any) -> Any:
    return dim[0] if isinstance(dim, list | tuple) and len(dim) == 1 else dim


def _softmax_call(g: Graph, node: Any) -> tuple[Any, int] | None:
    """(input, dim) of a softmax/log_softmax without a dtype cast."""
    args = g.args(node, "input", "dim", "_stacklevel", "dtype")
    if not args or args.get("dtype") is not None or not isinstance(args.get("dim"), int):
        return None
    if not isinstance(args.get("_stacklevel", 3), int):  # torch.softmax(x, d, dtype)
        return None
    return args["input"], args["dim"]


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
    if not g.same(e, red.input, inner) or not _same_type(y, root):
        return None
    dim = _one_dim(red.dim)
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
    found = _softmax_call(g, root) if name in ("softmax", "log_softmax") else None
    pair = g.binary(found[0], "sub") if found else None
    if found is None or pair is None:
        return None
    (centred, dim), (x, m) = found, pair
    inner = {root, centred}
    red = g.max_of(m, inner)
    shape = fx.tensor_shape(centred)
    if red is None or shape is None or not sizes_equal(centred, x):
        return None
    dims = fx.dims_of(dim, len(shape))
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
    shape = fx.tensor_shape(y)
    if red is None or y is None or not shape or not floating(y):
        return None
    if fx.tensor_dtype(root) != fx.tensor_dtype(y):
        return None
    dim = red.dim if red.dims is not None else list(range(len(shape)))
    keepdim = red.keepdim
    return Match(
        root,
        {root, s, red.input},
        f"logsumexp over dim {_one_dim(dim)}",
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
            f"logsumexp over dim {_one_dim(dim)}",
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
    found = _softmax_call(g, s) if g.kind(s) == "softmax" else None
    if found is None or not _same_type(found[0], root):
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
    if not g.same(y, red.input, inner) or not _same_type(y, root):
        return None
    dim = _one_dim(red.dim)
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


def _plus_eps(g: Graph, a: Any, inner: set[Node]) -> tuple[Any, float] | None:
    """a = v + eps (eps a non-negative constant; 0 when there is none): (v, eps)."""
    pair = g.binary(a, "add")
    for v, eps in (pair, pair[::-1]) if pair else ():
        if fx.is_scalar(eps) and eps >= 0 and is_tensor(v):
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


def _trailing_shape(b: fx.Builder, x: Any, k: int) -> Any:
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
    g: Graph, root: Node, centred: Any, v: Any, eps: float, inner: set[Node]
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
        shape = fx.tensor_shape(x)
        dims = fx.dims_of(args.get("dim"), len(shape)) if shape else None
        if args.get("dim") is None or not g.same(x, args["input"], inner):
            return None
    else:
        var = g.reduction(v, "mean")
        square = _square_of(g, var.input, inner) if var and var.keepdim else None
        if var is None or square is None or not g.same(centred, square, inner):
            return None
        dims = var.dims
    inner.add(v)
    rank = len(fx.tensor_shape(x) or ())
    k = trailing(dims, rank)
    if k is None or dims != mean.dims or not _same_type(x, root):
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


def _rms_norm(g: Graph, root: Node, x: Any, v: Any, eps: float, inner: set[Node]) -> Match | None:
    ms = g.reduction(v, "mean")
    square = _square_of(g, ms.input, inner) if ms and ms.keepdim else None
    if ms is None or square is None or not g.same(x, square, inner) or not _same_type(x, root):
        return None
    inner.add(v)
    k = trailing(ms.dims, len(fx.tensor_shape(x) or ()))
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
            x_shape, w_shape = fx.tensor_shape(x), fx.tensor_shape(w)
            if k is None or x_shape is None or w_shape != x_shape[len(x_shape) - k :]:
                continue
            if fx.tensor_dtype(w) != fx.tensor_dtype(x) or not sizes_equal(root, norm):
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


def _norm_call(b: fx.Builder, target: Callable[..., Any], x: Any, kwargs: dict[str, Any]) -> Any:
    shape = kwargs["normalized_shape"]
    present = {k: kwargs[k] for k in ("weight", "bias", "eps") if kwargs.get(k) is not None}
    return b.call(target, x, shape, **present)


# -- activations -----------------------------------------------------------------------------


def gelu(g: Graph, root: Node) -> Match | None:
    """0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x**3))) → F.gelu(x, approximate="tanh");
    0.5*x*(1+erf(x/sqrt(2))) → F.gelu(x)."""
    if g.kind(root) not in ("mul", "div"):
        return None
    inner: set[Node] = set()
    coef, factors = g.product(root, inner)
    if len(factors) != 2 or not near(coef, 0.5):
        return None
    for x, bracket in (factors, factors[::-1]):
        trial = inner | {root}
        form = _gelu_bracket(g, bracket, x, trial)
        if form is None or not isinstance(x, Node) or not _same_type(x, root):
            continue
        if form == "tanh":
            return Match(
                root,
                trial,
                "GELU (tanh approximation)",
                'F.gelu(approximate="tanh")',
                lambda b, x=x: b.call(F.gelu, x, approximate="tanh"),
            )
        return Match(root, trial, "GELU (erf form)", "F.gelu", lambda b, x=x: b.call(F.gelu, x))
    return None


def _gelu_bracket(g: Graph, node: Any, x: Any, inner: set[Node]) -> str | None:
    """'tanh' or 'erf' when node is 1 + tanh(...) or 1 + erf(x / sqrt(2)) of x."""
    pair = g.binary(node, "add")
    for one, t in (pair, pair[::-1]) if pair else ():
        if not near(one, 1.0) or not isinstance(x, Node):
            continue
        name = g.kind(t)
        if name not in ("tanh", "erf"):
            continue
        trial = inner | {node, t}
        found = g.poly(g.unary(t, name), x, trial)
        expected = (
            {1: SQRT_2_OVER_PI, 3: SQRT_2_OVER_PI * GELU_CUBIC}
            if name == "tanh"
            else {1: 1 / math.sqrt(2.0)}
        )
        if poly_is(found, expected):
            inner |= trial
            return name
    return None


def swish(g: Graph, root: Node) -> Match | None:
    """x * sigmoid(x) and x / (1 + exp(-x)) → F.silu(x)."""
    pair = g.binary(root, "mul")
    for x, s in (pair, pair[::-1]) if pair else ():
        if g.unary(s, "sigmoid") is x and isinstance(x, Node) and _same_type(x, root):
            return _silu(root, {root, s}, x)
    pair = g.binary(root, "div")
    if pair is None or not isinstance(pair[0], Node) or not _same_type(pair[0], root):
        return None
    x, d = pair
    inner = {root, d}
    added = g.binary(d, "add")
    for one, e in (added, added[::-1]) if added else ():
        if near(one, 1.0) and g.kind(e) == "exp":
            trial = inner | {e}
            if poly_is(g.poly(g.unary(e, "exp"), x, trial), {1: -1.0}):
                return _silu(root, trial, x)
    return None


def _silu(root: Node, inner: set[Node], x: Node) -> Match:
    return Match(root, inner, "swish x * sigmoid(x)", "F.silu", lambda b: b.call(F.silu, x))


def mish(g: Graph, root: Node) -> Match | None:
    """x * tanh(softplus(x)) (softplus also as log1p(exp(x)) or log(1 + exp(x))) → F.mish."""
    inner: set[Node] = {root}
    coef, factors = g.product(root, inner) if g.kind(root) == "mul" else (0.0, [])
    for x, t in (factors, factors[::-1]) if len(factors) == 2 and near(coef, 1.0) else ():
        soft = g.unary(t, "tanh")
        trial = inner | {t}
        if isinstance(x, Node) and _same_type(x, root) and _softplus_of(g, soft, x, trial):
            return Match(
                root,
                trial,
                "mish x * tanh(softplus(x))",
                "F.mish",
                lambda b, x=x: b.call(F.mish, x),
            )
    return None


def _softplus_of(g: Graph, node: Any, x: Any, inner: set[Node]) -> bool:
    if g.kind(node) == "softplus":
        args = g.args(node, "input", "beta", "threshold")
        default = args and args.get("beta", 1) == 1 and args.get("threshold", 20) == 20
        inner.add(node)
        return bool(default) and args["input"] is x
    if g.kind(node) == "log1p":
        e = g.unary(node, "log1p")
        inner |= {node, e}
        return g.unary(e, "exp") is x
    pair = g.binary(g.unary(node, "log"), "add")
    for one, e in (pair, pair[::-1]) if pair else ():
        if near(one, 1.0) and g.unary(e, "exp") is x:
            inner |= {node, node.args[0], e}
            return True
    return False


def hardswish(g: Graph, root: Node) -> Match | None:
    """x * relu6(x + 3) / 6 (relu6 also as hardtanh(., 0, 6) or clamp(., 0, 6)) →
    F.hardswish."""
    inner: set[Node] = {root}
    coef, factors = g.product(root, inner) if g.kind(root) in ("mul", "div") else (0.0, [])
    for x, r in (factors, factors[::-1]) if len(factors) == 2 and near(coef, 1 / 6) else ():
        trial = inner | {r}
        shifted = _relu6_input(g, r)
        if not isinstance(x, Node) or shifted is None or not _same_type(x, root):
            continue
        if poly_is(g.poly(shifted, x, trial), {0: 3.0, 1: 1.0}):
            return Match(
                root,
                trial,
                "hardswish x * relu6(x + 3) / 6",
                "F.hardswish",
                lambda b, x=x: b.call(F.hardswish, x),
            )
    return None


def _relu6_input(g: Graph, node: Any) -> Any:
    name = g.kind(node)
    args = g.args(node) if name in ("relu6", "hardtanh", "clamp") else None
    if not args or args.get("inplace"):
        return None
    if name == "hardtanh":
        bounds = (args.get("min_val", -1.0), args.get("max_val", 1.0))
    elif name == "clamp":
        bounds = (args.get("min"), args.get("max"))
    else:
        bounds = (0, 6)
    return args["input"] if bounds == (0, 6) else None


# -- matmul + bias ---------------------------------------------------------------------------


def matmul_bias(g: Graph, root: Node) -> Match | None:
    """matmul(x, W.t()) + b → F.linear(x, W, b); mm(a, m) + bias → torch.addmm(bias, a, m)."""
    pair = g.binary(root, "add")
    for mm, bias in (pair, pair[::-1]) if pair else ():
        product = g.binary(mm, "matmul") or g.binary(mm, "mm")
        if product is None or not is_tensor(bias) or not sizes_equal(root, mm):
            continue
        x, other = product
        dtypes = {fx.tensor_dtype(v) for v in (x, other, bias, root)}
        if len(dtypes) != 1 or not floating(root):
            continue
        weight = _transposed(g, other, rank=2)
        w_shape = fx.tensor_shape(weight)
        if weight is not None and w_shape and fx.tensor_shape(bias) == (w_shape[0],):
            return Match(
                root,
                {root, mm, other},
                "matmul with a transposed weight + bias",
                "F.linear",
                lambda b, x=x, w=weight, bias=bias: b.call(F.linear, x, w, bias),
            )
        if len(fx.tensor_shape(x) or ()) == 2 and len(fx.tensor_shape(other) or ()) == 2:
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
    shape = fx.tensor_shape(source)
    if shape is None or len(shape) < 2 or (rank is not None and len(shape) != rank):
        return None
    r = len(shape)
    name = g.kind(node)
    if name == "transpose":
        args = g.args(node, "input", "dim0", "dim1")
        dims = fx.dims_of([args.get("dim0"), args.get("dim1")], r) if args else None
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
    found = _softmax_call(g, p) if g.kind(p) == "softmax" else None
    shape = fx.tensor_shape(found[0]) if found else None
    if found is None or not shape or fx.dims_of(found[1], len(shape)) != (len(shape) - 1,):
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


def _sdpa(b: fx.Builder, scores: _Scores, v: Any, causal: bool, default: bool) -> Any:
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
            sides = [pair] if name == "div" or pair is None else [pair, pair[::-1]]
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
            if step is None or fx.tensor_dtype(step[1]) != fx.tensor_dtype(step[0]):
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
    if fx.is_scalar(c):
        return c > 0
    return isinstance(c, Node) and not is_tensor(c) and c.op == "call_function"


def _positive(g: Graph, c: Any) -> bool:
    if fx.is_scalar(c):
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
    shapes = [fx.tensor_shape(t) for t in (q, k, v, root)]
    dtypes = {fx.tensor_dtype(t) for t in (q, k, v, root)}
    if any(s is None or len(s) < 2 for s in shapes) or len(dtypes) != 1 or not floating(q):
        return False
    sq, sk, sv, out = shapes
    assert sq and sk and sv and out
    same_batch = sq[:-2] == sk[:-2] == sv[:-2]
    return same_batch and sq[-1] == sk[-1] and sk[-2] == sv[-2] and out == (*sq[:-1], sv[-1])


def _causal(g: Graph, cond: Any, scores: Any, inner: set[Node]) -> bool:
    """Is `cond` tril(ones(.., L, S)) == 0, ~tril(..) or triu(ones(.., L, S), 1) (as bool),
    built in forward? Its nodes join `inner` when nothing else uses them."""
    shape, score_shape = fx.tensor_shape(cond), fx.tensor_shape(scores)
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
        node, value = pair if fx.is_scalar(pair[1]) else pair[::-1]
        want = {0: ("tril", 0), 1: ("triu", 1)}.get(value) if fx.is_scalar(value) else None
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
        elif fx.is_scalar(c) and fx.is_scalar(head) and head > 0:
            return near(c, 1 / math.sqrt(head))
        elif g.kind(c) == "pow" and near(c.args[1], -0.5):
            return _is_head_dim(g, c.args[0], q, k, head)
        else:
            return False
    if fx.is_scalar(c):
        return fx.is_scalar(head) and head > 0 and near(c, math.sqrt(head))
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
    if n is head or (fx.is_scalar(n) and fx.is_scalar(head) and n == head):
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
    shape = fx.tensor_shape(source)
    if source not in (q, k) or shape is None or not isinstance(index, int):
        return False
    return fx.dims_of(index, len(shape)) == (len(shape) - 1,)


def _dim_source(g: Graph, t: Any, axis: int, depth: int = 0) -> Any:
    """What t's size along `axis` was built from (a reshape argument: int or node), through
    permute/transpose/unbind/contiguous; None when not traceable."""
    shape = fx.tensor_shape(t)
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
"""Tried in this order, each over the whole graph, after every rewrite: the softmax family
first (attention reads the torch.softmax they leave), matmul + bias last (attention scores
plus a mask are not a linear layer)."""
