"""Drawings for the rules about linear maps (agents/offline/egraph/rules_linear.py):
reductions moved through linear maps, matmuls and convolutions, sums and means being linear,
scales and shifts folded into weights; and the random linear maps and convolutions the other
drawings build on. Registered into tests/egraph_instances.INSTANCES."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from agents.offline.egraph.lower import ConvSpec
from agents.offline.egraph.terms import T
from tests.egraph_harness import Inst
from tests.egraph_instances import INSTANCES, Builder, Instance, instance, operand


def conv(
    b: Builder, groups: int | None = None, bias: bool | None = None
) -> tuple[Any, Any, Any, int]:
    """(x, w, bias or none, spec index): a random batched 1-3d convolution, zero padding."""
    dims = b.draw(st.integers(1, 3))
    g = groups if groups is not None else b.pick([1, 1, 2])
    cin, cout = g * b.draw(st.integers(1, 2)), g * b.draw(st.integers(1, 2))
    kernel = [b.draw(st.integers(1, 3)) for _ in range(dims)]
    stride = [b.draw(st.integers(1, 2)) for _ in range(dims)]
    padding = [b.draw(st.integers(0, 1)) for _ in range(dims)]
    dilation = [b.draw(st.integers(1, 2)) for _ in range(dims)]
    spatial = [
        max(1, dl * (k - 1) + 1 - 2 * p) + b.draw(st.integers(0, 2))
        for k, p, dl in zip(kernel, padding, dilation, strict=True)
    ]
    x = b.leaf([b.draw(st.integers(1, 2)), cin, *spatial])
    w = b.leaf([cout, cin // g, *kernel], known=True)
    with_bias = bias if bias is not None else b.draw(st.booleans())
    c = b.leaf([cout], known=True) if with_bias else T.none()
    b.convs.append(ConvSpec(dims, tuple(stride), tuple(padding), tuple(dilation), g))
    return x, w, c, len(b.convs) - 1


def linear(
    b: Builder, bias: bool | None = None, rank: int | None = None, known_w: bool | None = None
) -> tuple[Any, Any, Any, int, int]:
    """(x, w, bias or none, x's rank, outputs): x of rank 1-4, its last dim w's inputs."""
    shape = b.shape() if rank is None else b.shape(rank, rank)
    outputs = b.draw(st.integers(1, 5))
    x = operand(b, shape)
    w = b.leaf([outputs, shape[-1]], known=known_w)
    with_bias = bias if bias is not None else b.draw(st.booleans())
    return x, w, (b.leaf([outputs]) if with_bias else T.none()), len(shape), outputs


def _through_linear(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        x, w, c, rank, _ = linear(b)
        return b.inst(T.red(op, T.linear(x, w, c), rank - 1, True))

    return draw


def _through_matmul(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        shape = b.shape()
        x = operand(b, shape)
        m = b.leaf([shape[-1], b.draw(st.integers(1, 5))])
        return b.inst(T.red(op, T.matmul(x, m), len(shape) - 1, True))

    return draw


def _through_conv(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        x, w, c, spec = conv(b, groups=1)  # a batch dim: unbatched is a known bug
        return b.inst(T.red(op, T.conv(x, w, c, spec), 1, True))

    return draw


for _op in ("sum", "mean"):
    INSTANCES[f"{_op}-through-linear"] = _through_linear(_op)
    INSTANCES[f"{_op}-through-matmul"] = _through_matmul(_op)
    INSTANCES[f"{_op}-through-conv"] = _through_conv(_op)


def _scaled(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        shape = b.shape()
        scale = b.pick(["mul", "div"])
        # a division only by a nonzero constant (x / 0 is not moved: a regression test below)
        s = T.const(b.const(0.25, 4.0) * b.pick([1.0, -1.0])) if scale == "div" else b.scalar()
        inner = T.bin(scale, operand(b, shape), s)
        return b.inst(T.red(op, inner, b.dim(shape), b.keepdim()))

    return draw


INSTANCES["sum-of-scaled"] = _scaled("sum")
INSTANCES["mean-of-scaled"] = _scaled("mean")


@instance("mean-of-shifted")
def _(b: Builder) -> Inst:
    shape = b.shape()
    inner = T.bin(b.pick(["add", "sub"]), operand(b, shape), b.scalar())
    return b.inst(T.red("mean", inner, b.dim(shape), b.keepdim()))


def _into_linear(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        # with or without a bias (a shift needs one); no division by 0 (see below)
        x, w, c, _, _ = linear(b, bias=True if op in ("add", "sub") else None)
        k = b.const(0.25, 4.0) * b.pick([1.0, -1.0]) if op == "div" else b.const()
        return b.inst(T.bin(op, T.linear(x, w, c), T.const(k)))

    return draw


def _into_conv(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        x, w, c, spec = conv(b, bias=True if op in ("add", "sub") else None)  # as above
        k = b.const(0.25, 4.0) * b.pick([1.0, -1.0]) if op == "div" else b.const()
        return b.inst(T.bin(op, T.conv(x, w, c, spec), T.const(k)))

    return draw


for _op in ("mul", "div", "add", "sub"):
    _suffix = "" if _op in ("mul", "div") else "-bias"
    INSTANCES[f"{_op}-into-linear{_suffix}"] = _into_linear(_op)
    INSTANCES[f"{_op}-into-conv{_suffix}"] = _into_conv(_op)


@instance("channel-scale-into-linear")
def _(b: Builder) -> Inst:
    if b.draw(st.booleans()):  # one scale per output: a parameter, sizes known
        x, w, c, _, outputs = linear(b, known_w=True)
        s = b.leaf([outputs], known=True)
    else:  # one scale for all (with a bias)
        x, w, c, _, _ = linear(b, bias=True)
        s = b.scalar()
    return b.inst(T.bin("mul", T.linear(x, w, c), s))


@instance("scale-into-addmm")
def _(b: Builder) -> Inst:
    x, w, c, _, _ = linear(b, bias=True, rank=2)
    if b.draw(st.booleans()):  # s * (x Wᵀ + b)
        return b.inst(T.bin("mul", T.linear(x, w, c), b.scalar()))
    # a shift of the addmm form the rule makes
    shift = b.pick(["add", "sub"])
    return b.inst(T.bin(shift, T.scaled_linear(x, w, c, b.scalar()), b.scalar()))


@instance("channel-shift-into-linear")
def _(b: Builder) -> Inst:
    x, w, c, _, outputs = linear(b, known_w=True)
    t = b.leaf([outputs], known=True)
    return b.inst(T.bin("add", T.linear(x, w, c), t))
