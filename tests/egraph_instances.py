"""How each rule's left-hand sides are drawn for its property test
(tests/integration/test_egraph_rules.py):
random ranks and sizes, random values, constants where the rule allows them, bounds built from
the term itself. One drawing per catalogued rule, in `INSTANCES` (the drawings for linear maps,
folds and reductions, and no-ops and views, are in tests/egraph_instances_linear.py, _fold.py
and _noops.py)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
from hypothesis import reject
from hypothesis import strategies as st

from agents.offline.egraph.analysis import MONOTONE_UP
from agents.offline.egraph.lower import ConvSpec
from agents.offline.egraph.rules import CATALOGUE, REDUCERS
from agents.offline.egraph.terms import T
from tests.egraph_harness import Inst, L

INF = math.inf
NAMES = [spec.name for spec in CATALOGUE]

# Unary ops that keep their input finite for finite inputs of moderate size (no log, no sqrt).
SAFE_UNARY = (
    "relu",
    "sigmoid",
    "tanh",
    "gelu",
    "silu",
    "exp",
    "neg",
    "abs",
    "softplus",
    "elu",
    "leaky_relu",
    "hardtanh",
    "mish",
    "erf",
)
ELEMENTWISE = ("add", "sub", "mul", "maximum", "minimum")


# -- drawing ----------------------------------------------------------------------------------


class Builder:
    """The leaves, conv settings and modules of one instance, drawn as its term is built."""

    def __init__(self, draw: Callable[[st.SearchStrategy[Any]], Any]) -> None:
        self.draw = draw
        self.leaves: list[torch.Tensor] = []
        self.known: set[int] = set()
        self.convs: list[ConvSpec] = []
        self.modules: list[nn.Module] = []

    def leaf(self, shape: list[int] | tuple[int, ...], known: bool | None = None) -> Any:
        """A new float64 leaf of `shape`; `known`: sizes known by construction (None: drawn)."""
        index = len(self.leaves)
        self.leaves.append(self.values(tuple(shape)))
        if known if known is not None else self.draw(st.booleans()):
            self.known.add(index)
        return L(index)

    def scalar(self, low: float = -4.0, high: float = 4.0) -> Any:
        """A scalar in [low, high]: a constant, or a rank-0 leaf (a float read from self)."""
        value = self.const(low, high)
        if self.draw(st.booleans()):
            return T.const(value)
        self.leaves.append(torch.tensor(value, dtype=torch.float64))
        return L(len(self.leaves) - 1)

    def values(self, shape: tuple[int, ...]) -> torch.Tensor:
        seed = self.draw(st.integers(0, 2**32 - 1))
        style = self.draw(st.sampled_from(["normal", "wide", "integers"]))
        generator = torch.Generator().manual_seed(seed)
        if style == "integers":  # zeros and ties
            return torch.randint(-3, 4, shape, generator=generator).to(torch.float64)
        scale = 10.0 if style == "wide" else 1.0
        return scale * torch.randn(shape, generator=generator, dtype=torch.float64)

    def shape(self, min_rank: int = 1, max_rank: int = 4) -> list[int]:
        return self.draw(st.lists(st.integers(1, 5), min_size=min_rank, max_size=max_rank))

    def dim(self, shape: list[int]) -> int:
        return self.draw(st.integers(0, len(shape) - 1))

    def const(self, low: float = -4.0, high: float = 4.0) -> float:
        nice = [v for v in (0.0, 1.0, -1.0, 0.5, -2.0, 3.0) if low <= v <= high]
        floats = st.floats(low, high, allow_nan=False, allow_infinity=False, allow_subnormal=False)
        return float(self.draw(st.sampled_from(nice) | floats if nice else floats))

    def gap(self) -> float:
        """A non-negative offset: often 0, to hit a side condition's boundary exactly."""
        return float(self.draw(st.just(0.0) | st.floats(0.0, 3.0, allow_subnormal=False)))

    def keepdim(self) -> bool:
        return self.draw(st.booleans())

    def pick(self, options: Any) -> Any:
        return self.draw(st.sampled_from(list(options)))

    def inst(self, term: Any) -> Inst:
        return Inst(term, self.leaves, set(self.known), list(self.convs), list(self.modules))


def clamp_bounds(b: Builder) -> tuple[float, float]:
    """low <= high, at most one of them infinite (torch.clamp needs one bound)."""
    low = b.const()
    high = low + b.gap()
    which = b.pick(["finite", "finite", "no-low", "no-high"])
    return (-INF if which == "no-low" else low), (INF if which == "no-high" else high)


def operand(b: Builder, shape: list[int]) -> Any:
    """Any finite term of `shape`: a leaf, or one op over leaves."""
    kind = b.pick(["leaf", "leaf", "unary", "binary", "scalar", "clamp", "soft"])
    if kind == "unary":
        return T.un(b.pick(SAFE_UNARY), b.leaf(shape))
    if kind == "binary":
        return T.bin(b.pick(ELEMENTWISE), b.leaf(shape), b.leaf(shape))
    if kind == "scalar":
        op = b.pick(["add", "sub", "mul", "div", "maximum", "minimum"])
        c = b.const(0.5, 4.0) if op == "div" else b.const()
        if op in ("add", "sub", "mul") and b.draw(st.booleans()):
            return T.bin(op, T.const(c), b.leaf(shape))
        return T.bin(op, b.leaf(shape), T.const(c))
    if kind == "clamp":
        return T.clamp(b.leaf(shape), *clamp_bounds(b))
    if kind == "soft" and shape:
        return T.soft(b.pick(["softmax", "log_softmax"]), b.leaf(shape), b.dim(shape))
    return b.leaf(shape)


def bounded(b: Builder, shape: list[int], depth: int = 2) -> tuple[Any, float, float]:
    """A term of `shape` with the bounds (lo, hi) the range analysis derives for it; an
    infinite bound stands for one the analysis does not know."""
    kinds = ["relu", "sigmoid", "tanh", "exp", "abs", "clamp", "minimum", "maximum", "softmax"]
    kinds += ["log_softmax", "full"]
    if depth > 0:
        kinds += ["neg", "relu-of", "clamp-of", "add", "sub", "reduce"]
    kind = b.pick(kinds)
    if kind in ("relu", "exp", "abs"):
        return T.un(kind, operand(b, shape)), 0.0, INF
    if kind == "sigmoid":
        return T.un("sigmoid", operand(b, shape)), 0.0, 1.0
    if kind == "tanh":
        return T.un("tanh", operand(b, shape)), -1.0, 1.0
    if kind == "clamp":
        low, high = clamp_bounds(b)
        return T.clamp(operand(b, shape), low, high), low, high
    if kind == "minimum":
        c = b.const()
        return T.bin("minimum", b.leaf(shape), T.const(c)), -INF, c
    if kind == "maximum":
        c = b.const()
        return T.bin("maximum", b.leaf(shape), T.const(c)), c, INF
    if kind == "softmax":
        return T.soft("softmax", operand(b, shape), b.dim(shape)), 0.0, 1.0
    if kind == "log_softmax":
        return T.soft("log_softmax", operand(b, shape), b.dim(shape)), -INF, 0.0
    if kind == "full":
        c = b.const()
        return T.full(c, operand(b, shape)), c, c
    if kind == "neg":
        term, low, high = bounded(b, shape, depth - 1)
        return T.un("neg", term), -high, -low
    if kind == "relu-of":
        term, low, high = bounded(b, shape, depth - 1)
        return T.un("relu", term), max(low, 0.0), max(high, 0.0)
    if kind == "clamp-of":
        term, low0, high0 = bounded(b, shape, depth - 1)
        low, high = clamp_bounds(b)
        return T.clamp(term, low, high), max(low, min(low0, high)), min(high, max(high0, low))
    if kind in ("add", "sub"):
        t1, l1, h1 = bounded(b, shape, depth - 1)
        t2, l2, h2 = bounded(b, shape, depth - 1)
        if kind == "add":
            return T.bin("add", t1, t2), l1 + l2, h1 + h2
        return T.bin("sub", t1, t2), l1 - h2, h1 - l2
    # a max, min or mean over a dim the result no longer has
    d = b.draw(st.integers(0, len(shape)))
    inner = [*shape[:d], b.draw(st.integers(1, 4)), *shape[d:]]
    term, low, high = bounded(b, inner, depth - 1)
    return T.red(b.pick(["amax", "amin", "mean"]), term, d, False), low, high


def bounded_where(b: Builder, shape: list[int], ok: Callable[[float, float], bool]) -> Any:
    """A bounded term whose (lo, hi) satisfy `ok`, with its bounds."""
    for _ in range(50):
        term, low, high = bounded(b, shape)
        if ok(low, high):
            return term, low, high
    reject()  # give up on this example: hypothesis draws another


def sized_one(b: Builder) -> tuple[Any, list[int], int]:
    """A term with a dim `d` whose size is 1 by construction (the analysis knows it)."""
    shape = b.shape()
    d = b.dim(shape)
    shape[d] = 1
    kind = b.pick(["parameter", "keepdim", "unsqueeze", "unary"])
    if kind == "keepdim":
        inner = list(shape)
        inner[d] = b.draw(st.integers(1, 5))
        term = T.red(b.pick(REDUCERS), b.leaf(inner), d, True)
    elif kind == "unsqueeze":
        term = T.unsqueeze(b.leaf(shape[:d] + shape[d + 1 :]), d)
    else:
        term = b.leaf(shape, known=True)
    if kind == "unary":
        term = T.un(b.pick(SAFE_UNARY), term)
    return term, shape, d


# -- one drawing of a left-hand side per rule --------------------------------------------------

Instance = Callable[[Builder], Inst]
INSTANCES: dict[str, Instance] = {}


def instance(*names: str) -> Callable[[Instance], Instance]:
    def register(fn: Instance) -> Instance:
        for name in names:
            INSTANCES[name] = fn
        return fn

    return register


def either(b: Builder, op: str, a: Any, other: Any) -> Any:
    """op(a, other) or, for a commutative pattern, op(other, a)."""
    return T.bin(op, other, a) if b.draw(st.booleans()) else T.bin(op, a, other)


@instance("add-zero")
def _(b: Builder) -> Inst:
    return b.inst(either(b, "add", operand(b, b.shape()), T.const(0.0)))


@instance("sub-zero")
def _(b: Builder) -> Inst:
    return b.inst(T.bin("sub", operand(b, b.shape()), T.const(0.0)))


@instance("mul-one")
def _(b: Builder) -> Inst:
    return b.inst(either(b, "mul", operand(b, b.shape()), T.const(1.0)))


@instance("div-one")
def _(b: Builder) -> Inst:
    return b.inst(T.bin("div", operand(b, b.shape()), T.const(1.0)))


@instance("mul-zero")
def _(b: Builder) -> Inst:
    return b.inst(either(b, "mul", operand(b, b.shape()), T.const(0.0)))


@instance("sub-self")
def _(b: Builder) -> Inst:
    a = operand(b, b.shape())
    return b.inst(T.bin("sub", a, a))


@instance("neg-neg")
def _(b: Builder) -> Inst:
    return b.inst(T.un("neg", T.un("neg", operand(b, b.shape()))))


@instance("add-zeros-like")
def _(b: Builder) -> Inst:
    a = operand(b, b.shape())
    return b.inst(either(b, "add", a, T.full(0.0, a)))


@instance("sub-zeros-like")
def _(b: Builder) -> Inst:
    a = operand(b, b.shape())
    return b.inst(T.bin("sub", a, T.full(0.0, a)))


@instance("mul-ones-like")
def _(b: Builder) -> Inst:
    a = operand(b, b.shape())
    return b.inst(either(b, "mul", a, T.full(1.0, a)))


@instance("mul-zeros-like")
def _(b: Builder) -> Inst:
    a = operand(b, b.shape())
    return b.inst(T.bin("mul", a, T.full(0.0, a)))


@instance("relu-relu")
def _(b: Builder) -> Inst:
    return b.inst(T.un("relu", T.un("relu", operand(b, b.shape()))))


@instance("abs-abs")
def _(b: Builder) -> Inst:
    return b.inst(T.un("abs", T.un("abs", operand(b, b.shape()))))


def _nonnegative(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        a, _, _ = bounded_where(b, b.shape(), lambda low, high: low >= 0.0)
        return b.inst(T.un(op, a))

    return draw


INSTANCES["relu-nonnegative"] = _nonnegative("relu")
INSTANCES["abs-nonnegative"] = _nonnegative("abs")


@instance("relu-nonpositive")
def _(b: Builder) -> Inst:
    a, _, _ = bounded_where(b, b.shape(), lambda low, high: high <= 0.0)
    return b.inst(T.un("relu", a))


@instance("clamp-clamp")
def _(b: Builder) -> Inst:
    # both ranges hold [p, q]: max(l1, l2) <= p <= q <= min(h1, h2)
    p = b.const()
    q = p + b.gap()
    bounds = []
    for _ in range(2):
        low, high = p - b.gap(), q + b.gap()
        which = b.pick(["finite", "finite", "no-low", "no-high"])
        bounds.append((-INF if which == "no-low" else low, INF if which == "no-high" else high))
    (l1, h1), (l2, h2) = bounds
    return b.inst(T.clamp(T.clamp(operand(b, b.shape()), l1, h1), l2, h2))


@instance("clamp-below")
def _(b: Builder) -> Inst:
    a, _, high = bounded_where(b, b.shape(), lambda low, high: high < INF)
    low = high + b.gap()
    top = INF if b.draw(st.booleans()) else low + b.gap()
    return b.inst(T.clamp(a, low, top))


@instance("clamp-above")
def _(b: Builder) -> Inst:
    a, low, _ = bounded_where(b, b.shape(), lambda low, high: low > -INF)
    top = low - b.gap()
    bottom = -INF if b.draw(st.booleans()) else top - b.gap()
    return b.inst(T.clamp(a, bottom, top))


@instance("clamp-inside")
def _(b: Builder) -> Inst:
    a, low, high = bounded_where(b, b.shape(), lambda low, high: low > -INF and high < INF)
    which = b.pick(["finite", "finite", "no-low", "no-high"])
    bottom = -INF if which == "no-low" else low - b.gap()
    top = INF if which == "no-high" else high + b.gap()
    return b.inst(T.clamp(a, bottom, top))


@instance("clamp-of-relu")
def _(b: Builder) -> Inst:
    low = b.const(0.0, 4.0)
    # no low <= high condition: clamp(relu(x), l, h) = clamp(x, l, h) = h where h < l
    high = b.pick([INF, low + b.gap(), b.const()])
    return b.inst(T.clamp(T.un("relu", operand(b, b.shape())), low, high))


@instance("relu-as-clamp")
def _(b: Builder) -> Inst:
    return b.inst(T.clamp(operand(b, b.shape()), 0.0, INF))


def _self(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        a = operand(b, b.shape())
        return b.inst(T.bin(op, a, a))

    return draw


INSTANCES["min-self"] = _self("minimum")
INSTANCES["max-self"] = _self("maximum")


def _against_constant(op: str, bound: str) -> Instance:
    """op(a, c) where c is on the side of a's `bound` ("hi": c >= hi, "lo": c <= lo)."""

    def draw(b: Builder) -> Inst:
        if bound == "hi":
            a, _, high = bounded_where(b, b.shape(), lambda low, high: high < INF)
            c = high + b.gap()
        else:
            a, low, _ = bounded_where(b, b.shape(), lambda low, high: low > -INF)
            c = low - b.gap()
        return b.inst(T.bin(op, a, T.const(c)))

    return draw


INSTANCES["min-bounded"] = _against_constant("minimum", "hi")
INSTANCES["min-absorbing"] = _against_constant("minimum", "lo")
INSTANCES["max-bounded"] = _against_constant("maximum", "lo")
INSTANCES["max-absorbing"] = _against_constant("maximum", "hi")


@instance("max-zero-is-relu")
def _(b: Builder) -> Inst:
    return b.inst(T.bin("maximum", operand(b, b.shape()), T.const(0.0)))


def _at_zero(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        return b.inst(T.un(op, T.full(0.0, operand(b, b.shape()))))

    return draw


for _op in ("sigmoid", "tanh", "gelu", "silu", "exp", "relu", "abs", "neg"):
    INSTANCES[f"{_op}-at-0"] = _at_zero(_op)


def _of_constant(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        return b.inst(T.un(op, T.full(b.const(), operand(b, b.shape()))))

    return draw


INSTANCES["relu-of-constant"] = _of_constant("relu")
INSTANCES["neg-of-constant"] = _of_constant("neg")


@instance("clamp-of-constant")
def _(b: Builder) -> Inst:
    low, high = clamp_bounds(b)
    return b.inst(T.clamp(T.full(b.const(), operand(b, b.shape())), low, high))


def _fold(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        a = operand(b, b.shape())
        u, v = b.const(), b.const()
        other = T.full(v, a) if op in ("add", "sub", "mul") and b.draw(st.booleans()) else None
        return b.inst(T.bin(op, T.full(u, a), other if other is not None else T.const(v)))

    return draw


for _op in ("add", "sub", "mul"):
    INSTANCES[f"{_op}-constants"] = _fold(_op)


@instance("min-max-constants")
def _(b: Builder) -> Inst:
    return _fold(b.pick(["minimum", "maximum"]))(b)


@instance("full-shape-source")
def _(b: Builder) -> Inst:
    shape = b.shape()
    a = operand(b, shape)
    kind = b.pick(["unary", "clamp", "soft", "scalar", "full", "norm"])
    if kind == "unary":
        source = T.un(b.pick(SAFE_UNARY), a)
    elif kind == "clamp":
        source = T.clamp(a, *clamp_bounds(b))
    elif kind == "soft":
        source = T.soft(b.pick(["softmax", "log_softmax"]), a, b.dim(shape))
    elif kind == "scalar":
        source = T.bin(b.pick(["add", "sub", "mul", "div", "maximum", "minimum"]), a, T.const(1.5))
    elif kind == "full":
        source = T.full(b.const(), a)
    else:  # a module replayed as it is (dropout keeps its input's shape)
        b.modules.append(nn.Dropout(0.5))
        source = T.norm("dropout", a, T.none(), T.none(), 0)
    return b.inst(T.full(b.const(), source))


@instance("dropout-of-zero")
def _(b: Builder) -> Inst:
    b.modules.append(nn.Dropout(b.draw(st.floats(0.0, 0.9))))
    zeros = T.full(0.0, operand(b, b.shape()))
    return b.inst(T.norm("dropout", zeros, T.none(), T.none(), 0))


def _over_size_one(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        a, _, d = sized_one(b)
        return b.inst(T.red(op, a, d, b.keepdim()))

    return draw


for _op in REDUCERS:
    INSTANCES[f"{_op}-over-size-1"] = _over_size_one(_op)


def _soft_over_size_one(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        a, _, d = sized_one(b)
        return b.inst(T.soft(op, a, d))

    return draw


INSTANCES["softmax-over-size-1"] = _soft_over_size_one("softmax")
INSTANCES["log-softmax-over-size-1"] = _soft_over_size_one("log_softmax")


def _reduce_constant(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        shape = b.shape()
        if op == "sum":  # n known: a parameter's size, maybe through a shape-keeping op
            a = b.leaf(shape, known=True)
            if b.draw(st.booleans()):
                a = T.un(b.pick(SAFE_UNARY), a)
        else:
            a = operand(b, shape)
        return b.inst(T.red(op, T.full(b.const(), a), b.dim(shape), b.keepdim()))

    return draw


for _op in ("amax", "amin", "mean", "sum"):
    INSTANCES[f"{_op}-of-constant"] = _reduce_constant(_op)


def _monotone(fn: str, op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        shape = b.shape()
        return b.inst(T.red(op, T.un(fn, operand(b, shape)), b.dim(shape), b.keepdim()))

    return draw


for _fn in MONOTONE_UP:
    for _op in ("amax", "amin"):
        INSTANCES[f"{_op}-of-{_fn}"] = _monotone(_fn, _op)


@instance("amax-of-neg")
def _(b: Builder) -> Inst:
    shape = b.shape()
    op = b.pick(["amax", "amin"])
    return b.inst(T.red(op, T.un("neg", operand(b, shape)), b.dim(shape), b.keepdim()))


def _affine(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        shape = b.shape()
        a = operand(b, shape)
        if b.draw(st.booleans()):
            inner = T.bin("mul", a, T.const(b.const(0.0, 4.0)))  # a scale needs c >= 0
        else:
            inner = T.bin("add", a, T.const(b.const()))
        return b.inst(T.red(op, inner, b.dim(shape), b.keepdim()))

    return draw


INSTANCES["amax-of-affine"] = _affine("amax")
INSTANCES["amin-of-affine"] = _affine("amin")


# The drawings of the other rule modules' rules join INSTANCES when imported.
from tests import (  # noqa: E402, F401
    egraph_instances_fold,
    egraph_instances_linear,
    egraph_instances_noops,
)
