"""Hand-written activations → their fused op: GELU (tanh and erf forms), swish/SiLU, mish,
hardswish. Products are flattened and the inner expressions read as polynomials in x, so the
constants may sit anywhere and be written to a few digits."""

from __future__ import annotations

import math
from typing import Any

import torch.nn.functional as F

from agents.offline.passes.library_match import (
    Graph,
    Match,
    Node,
    near,
    poly_is,
    same_type,
)

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_CUBIC = 0.044715


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
        if form is None or not isinstance(x, Node) or not same_type(x, root):
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
        if g.unary(s, "sigmoid") is x and isinstance(x, Node) and same_type(x, root):
            return _silu(root, {root, s}, x)
    pair = g.binary(root, "div")
    if pair is None or not isinstance(pair[0], Node) or not same_type(pair[0], root):
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
        if isinstance(x, Node) and same_type(x, root) and _softplus_of(g, soft, x, trial):
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
        if not isinstance(x, Node) or shifted is None or not same_type(x, root):
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
