"""Reading fx graphs for the library-substitution rules: one op name and named arguments
whatever the spelling (`x.exp()`, `torch.exp(x)`, `nn.Sigmoid()`), structural equality of two
subgraphs (hand-written code often computes `x - mean` twice), the little algebra that
hand-written formulas are matched by (flattened products, polynomials in one tensor), and the
`Match` every rule returns.
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
import torch.nn as nn

from agents.offline.fx import effects, graph_edit, ops

Node = torch.fx.Node

_MODULE_OPS: dict[type, str] = {
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.Softmax: "softmax",
    nn.LogSoftmax: "log_softmax",
    nn.Dropout: "dropout",
    nn.ReLU6: "relu6",
}
_ATTRIBUTES = ("values", "shape", "mT", "T")
_UNARY = ("exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh", "erf", "neg", "square")
_UNARY += ("reciprocal", "detach", "logical_not", "bool", "t", "contiguous", "log1p")
_SIGNATURES: dict[str, tuple[str, ...]] = {
    **{name: ("input",) for name in _UNARY},
    **{name: ("input", "name") for name in _ATTRIBUTES},
    **{name: ("input", "dim", "keepdim") for name in ("sum", "mean", "max", "amax", "logsumexp")},
    **{name: ("input", "dim", "_stacklevel", "dtype") for name in ("softmax", "log_softmax")},
    **{name: ("input", "other") for name in ("add", "sub", "mul", "div", "eq", "matmul")},
    **{name: ("input", "mat2") for name in ("mm", "bmm")},
    **{name: ("input", "diagonal") for name in ("tril", "triu")},
    "pow": ("input", "exponent"),
    "var": ("input", "dim", "unbiased", "keepdim", "correction"),
    "masked_fill": ("input", "mask", "value"),
    "transpose": ("input", "dim0", "dim1"),
    "dropout": ("input", "p", "training", "inplace"),
    "size": ("input", "dim"),
    "getitem": ("input", "index"),
    "to": ("input", "dtype"),
    "layer_norm": ("input", "normalized_shape", "weight", "bias", "eps"),
    "rms_norm": ("input", "normalized_shape", "weight", "eps"),
    "unbind": ("input", "dim"),
    "softplus": ("input", "beta", "threshold"),
    "relu6": ("input", "inplace"),
    "hardtanh": ("input", "min_val", "max_val", "inplace"),
    "clamp": ("input", "min", "max"),
}
_VARARGS = ("permute", "reshape", "view")  # x.permute(0, 2, 1) and x.permute((0, 2, 1))


@dataclass
class Reduction:
    """A reduction call: its input, dims (normalised; None: over everything), keepdim."""

    node: Node
    input: Any
    dims: tuple[int, ...] | None
    keepdim: bool
    dim: Any  # the dim argument as written (for the replacement call)


@dataclass
class Graph:
    """The graph being rewritten, with the readers every rule uses."""

    gm: torch.fx.GraphModule
    notes: list[str] = field(default_factory=list)  # near misses, for the decline summary

    def kind(self, value: Any) -> str | None:
        """One op name per spelling; None for placeholders, constants and unknown calls."""
        if not isinstance(value, Node):
            return None
        if value.op == "call_module":
            module = ops.call_module(self.gm, value)
            return _MODULE_OPS.get(type(module))
        if value.op == "call_function":
            if value.target is builtins.getattr and len(value.args) == 2:
                return value.args[1] if value.args[1] in _ATTRIBUTES else None
            if value.target is math.sqrt:
                return "sqrt"
            if value.target is operator.eq:
                return "eq"
        return ops.op_name(value)

    def args(self, value: Any, *allowed: str) -> dict[str, Any] | None:
        """The call's arguments by name; None when the op is unknown or passes an argument
        outside `allowed` (when given) or not in its signature."""
        name = self.kind(value)
        if name is None:
            return None
        assert isinstance(value, Node)
        if value.op == "call_module":
            if len(value.args) != 1 or value.kwargs:
                return None
            module = ops.call_module(self.gm, value)
            bound = {"input": value.args[0]}
            if name in ("softmax", "log_softmax"):
                bound["dim"] = module.dim
            elif name == "dropout":
                bound["p"] = module.p
        elif name in _VARARGS:
            rest = value.args[1:]
            if len(rest) == 1 and isinstance(rest[0], list | tuple):
                rest = tuple(rest[0])
            bound = {"input": value.args[0], "dims": tuple(rest), **value.kwargs}
            if "dims" in value.kwargs or "shape" in value.kwargs:
                return None
        else:
            signature = _SIGNATURES.get(name)
            found = ops.arguments(value, signature) if signature else None
            if found is None or set(found) - set(signature or ()):
                return None
            bound = found
        if name in ("mm", "bmm"):
            bound["other"] = bound.pop("mat2", None)
        if allowed and set(bound) - set(allowed):
            return None
        return bound

    def unary(self, value: Any, *names: str) -> Any:
        """The input of a one-argument op named in `names`, else None."""
        if self.kind(value) not in names:
            return None
        args = self.args(value, "input")
        return args.get("input") if args else None

    def binary(self, value: Any, name: str) -> tuple[Any, Any] | None:
        """(input, other) of a plain binary op (no alpha, no rounding mode)."""
        if self.kind(value) != name:
            return None
        args = self.args(value, "input", "other")
        if not args or set(args) != {"input", "other"}:
            return None
        return args["input"], args["other"]

    def reduction(self, value: Any, *names: str) -> Reduction | None:
        """sum/mean/max/amax/logsumexp over dims (max only with a dim: it returns values and
        indices then, read through `max_of`)."""
        if self.kind(value) not in names:
            return None
        args = self.args(value, "input", "dim", "keepdim")
        shape = ops.tensor_shape(args.get("input")) if args else None
        if not args or shape is None:
            return None
        keepdim = args.get("keepdim", False)
        if not isinstance(keepdim, bool):
            return None
        dim = args.get("dim")
        if dim is None:
            return Reduction(value, args["input"], None, keepdim, None)
        dims = ops.dims_of(dim, len(shape))
        if dims is None:
            return None
        return Reduction(value, args["input"], dims, keepdim, dim)

    def max_of(self, value: Any, inner: set[Node]) -> Reduction | None:
        """`torch.max(x, d, keepdim)[0]`, `.values`, `x.amax(d, keepdim)` or `x.max()`,
        optionally detached; the nodes read are added to `inner`."""
        seen: set[Node] = set()
        if self.kind(value) == "detach":
            seen.add(value)
            value = self.unary(value, "detach")
        name = self.kind(value)
        if name in ("getitem", "values"):
            if name == "getitem" and value.args[1:] != (0,):
                return None
            found = self.reduction(value.args[0], "max")
            if found is None or found.dims is None or len(found.node.users) != 1:
                return None
            seen.add(value)
        elif name in ("amax", "max"):
            found = self.reduction(value, name)
            if found is None or (name == "max" and found.dims is not None):
                return None  # max over a dim is a (values, indices) pair
        else:
            return None
        inner |= seen | {found.node}
        return found

    def same(self, keep: Any, dup: Any, inner: set[Node], depth: int = 0) -> bool:
        """Do `keep` and `dup` compute the same value? Identical nodes, or pure calls of one
        op on the same arguments; the duplicate's own nodes go into `inner` (they die too)."""
        a, b = keep, dup
        if a is b:
            return True
        if isinstance(a, list | tuple) and isinstance(b, list | tuple):
            return len(a) == len(b) and all(
                self.same(x, y, inner, depth) for x, y in zip(a, b, strict=True)
            )
        if not isinstance(a, Node) or not isinstance(b, Node):
            return type(a) is type(b) and a == b
        calls = ("call_function", "call_method")
        if depth > 24 or (a.op != b.op and not (a.op in calls and b.op in calls)):
            return False
        if a.op in ("placeholder", "output"):
            return False
        if a.op == "get_attr":
            return a.target == b.target
        if effects.has_effects(self.gm, a) or effects.has_effects(self.gm, b):
            return False
        args_a: Any = None
        args_b: Any = None
        if a.op != "call_module" and self.kind(a) is not None and self.kind(a) == self.kind(b):
            args_a, args_b = self.args(a), self.args(b)
        if args_a is None or args_b is None:
            if a.op != b.op or a.target != b.target:
                return False
            args_a = dict(enumerate(a.args), **a.kwargs)
            args_b = dict(enumerate(b.args), **b.kwargs)
        if set(args_a) != set(args_b):
            return False
        pairs = [(args_a[key], args_b[key]) for key in args_a]
        found: set[Node] = set()
        if not all(self.same(x, y, found, depth + 1) for x, y in pairs):
            return False
        inner |= found | {b}
        return True

    def product(self, root: Node, inner: set[Node]) -> tuple[float, list[Any]]:
        """root = coef * f1 * f2 ...: mul, neg and division by constants are flattened
        through nodes used only once; everything else is a factor."""
        coef = 1.0
        factors: list[Any] = []

        def walk(value: Any, top: bool) -> None:
            nonlocal coef
            if ops.is_scalar(value):
                coef *= value
                return
            if isinstance(value, Node) and (top or len(value.users) == 1):
                pair = self.binary(value, "mul")
                if pair is not None:
                    inner.add(value)
                    walk(pair[0], False)
                    walk(pair[1], False)
                    return
                pair = self.binary(value, "div")
                if pair is not None and ops.is_scalar(pair[1]) and pair[1] != 0:
                    inner.add(value)
                    coef /= pair[1]
                    walk(pair[0], False)
                    return
                negated = self.unary(value, "neg")
                if negated is not None:
                    inner.add(value)
                    coef = -coef
                    walk(negated, False)
                    return
            factors.append(value)

        walk(root, True)
        return coef, factors

    def poly(
        self, value: Any, x: Node, inner: set[Node], depth: int = 0
    ) -> dict[int, float] | None:
        """`value` as a polynomial in `x` (exponent → coefficient, degree ≤ 4), through
        + - * / by constants, neg, integer powers and square; None if it is not one."""
        if value is x:
            return {1: 1.0}
        if ops.is_scalar(value):
            return {0: float(value)}
        if not isinstance(value, Node) or depth > 16:
            return None
        result: dict[int, float] | None = None
        name = self.kind(value)
        if name in ("add", "sub", "mul", "div"):
            pair = self.binary(value, name)
            if pair is None:
                return None
            left = self.poly(pair[0], x, inner, depth + 1)
            right = self.poly(pair[1], x, inner, depth + 1)
            if left is None or right is None:
                return None
            if name in ("add", "sub"):
                sign = 1.0 if name == "add" else -1.0
                result = dict(left)
                for power, c in right.items():
                    result[power] = result.get(power, 0.0) + sign * c
            elif name == "mul":
                result = _poly_mul(left, right)
            elif set(right) == {0} and right[0] != 0:
                result = {power: c / right[0] for power, c in left.items()}
        elif name in ("neg", "square"):
            inside = self.poly(self.unary(value, name), x, inner, depth + 1)
            if inside is not None:
                negated = {power: -c for power, c in inside.items()}
                result = negated if name == "neg" else _poly_mul(inside, inside)
        elif name == "pow":
            args = self.args(value, "input", "exponent")
            exponent = args.get("exponent") if args else None
            base = self.poly(args.get("input"), x, inner, depth + 1) if args else None
            if base is not None and ops.is_scalar(exponent) and exponent in (1, 2, 3, 4):
                result = {0: 1.0}
                for _ in range(int(exponent)):
                    result = _poly_mul(result, base)
        if result is None or max(result, default=0) > 4:
            return None
        inner.add(value)
        return result


def _poly_mul(a: dict[int, float], b: dict[int, float]) -> dict[int, float]:
    out: dict[int, float] = {}
    for pa, ca in a.items():
        for pb, cb in b.items():
            out[pa + pb] = out.get(pa + pb, 0.0) + ca * cb
    return out


def near(value: Any, target: float, rel: float = 1e-6) -> bool:
    """A Python number within `rel` of `target` (constants are written to a few digits)."""
    return ops.is_scalar(value) and abs(value - target) <= rel * max(1.0, abs(target))


def poly_is(found: dict[int, float] | None, expected: dict[int, float]) -> bool:
    """The polynomial has exactly the expected (nonzero) coefficients, each to 1e-6."""
    if found is None:
        return False
    terms = {power: c for power, c in found.items() if abs(c) > 1e-12}
    return set(terms) == set(expected) and all(near(terms[p], c) for p, c in expected.items())


def floating(value: Any) -> bool:
    dtype = ops.tensor_dtype(value)
    return dtype is not None and dtype.is_floating_point


def is_tensor(value: Any) -> bool:
    return ops.tensor_meta(value) is not None


def trailing(dims: tuple[int, ...] | None, rank: int) -> int | None:
    """k when `dims` are exactly the last k of `rank` dims, else None."""
    if not dims or rank == 0:
        return None
    k = len(dims)
    return k if dims == tuple(range(rank - k, rank)) else None


def users_inside(inner: set[Node], root: Node) -> bool:
    """Every node that the rewrite removes is used only by other removed nodes (otherwise
    the work would still be needed), and none of them has effects."""
    return all(
        node.op not in ("placeholder", "get_attr", "output")
        and (node is root or set(node.users) <= inner)
        for node in inner
    )


def sizes_equal(a: Any, b: Any) -> bool:
    shape_a, shape_b = ops.tensor_shape(a), ops.tensor_shape(b)
    return shape_a is not None and shape_a == shape_b


# -- what the rules return -------------------------------------------------------------------


@dataclass
class Match:
    """A found pattern: the driver checks `inner` is used only inside it, then builds."""

    root: Node
    inner: set[Node]  # nodes that die with the rewrite (root included)
    what: str  # "softmax over dim 1"
    target: str  # "torch.softmax"
    build: Callable[[graph_edit.Builder], Any]  # adds the replacement before root
    refines: bool = False  # the site keeps the description it already had


Rule = Callable[[Graph, Node], Match | None]


def same_type(x: Any, root: Node) -> bool:
    """x is a float tensor and the pattern's result has its shape and dtype."""
    return floating(x) and sizes_equal(root, x) and ops.tensor_dtype(root) == ops.tensor_dtype(x)


def one_dim(dim: Any) -> Any:
    return dim[0] if isinstance(dim, list | tuple) and len(dim) == 1 else dim


def softmax_call(g: Graph, node: Any) -> tuple[Any, int] | None:
    """(input, dim) of a softmax/log_softmax without a dtype cast."""
    args = g.args(node, "input", "dim", "_stacklevel", "dtype")
    if not args or args.get("dtype") is not None or not isinstance(args.get("dim"), int):
        return None
    if not isinstance(args.get("_stacklevel", 3), int):  # torch.softmax(x, d, dtype)
        return None
    return args["input"], args["dim"]
