"""Drawings for the rules that fold scales and shifts written on either side
(agents/offline/egraph/rules_fold.py) and move reductions through shifts, negations,
transposes and addmm (agents/offline/egraph/rules_reduce.py), registered into
tests/egraph_instances.INSTANCES."""

from __future__ import annotations

from typing import Any

import torch
from egglog import get_callable_args, get_literal_value
from hypothesis import strategies as st

from agents.offline.egraph.rules import REDUCERS
from agents.offline.egraph.terms import T, pack
from tests.egraph_harness import Inst
from tests.egraph_instances import INSTANCES, Builder, Instance, either, instance, operand
from tests.egraph_instances_linear import conv, linear


def value_of(b: Builder, leaf: Any) -> torch.Tensor:
    """The tensor a leaf term was drawn with."""
    return b.leaves[int(get_literal_value(get_callable_args(leaf)[0]))]


def scaled_linear(b: Builder, bias: str) -> tuple[Any, Any, Any, int]:
    """(x, w, c, outputs) of addmm(c, x, M) as lowered: a scaled linear map of Mᵀ (or of a
    weight), with c one value per output (rank 1 or 2), a scalar, or none."""
    rows, inputs, outputs = (b.draw(st.integers(1, 5)) for _ in range(3))
    x = operand(b, [rows, inputs])
    if b.draw(st.booleans()):
        w = T.transpose(b.leaf([inputs, outputs], known=True), 0, 1)
    else:
        w = b.leaf([outputs, inputs], known=True)
    if bias == "per-output":
        c = b.leaf(b.pick([[outputs], [1, outputs], [rows, outputs]]), known=True)
    elif bias == "scalar":  # a 0-d tensor: addmm's input is a tensor
        c = b.leaf([])
    else:
        c = T.none()
    return x, w, c, outputs


def producer(b: Builder) -> tuple[Any, list[int]]:
    """A linear map, a convolution or a scaled linear map, with a shape v may broadcast to
    along the outputs (1 elsewhere)."""
    kind = b.pick(["linear", "conv", "scaled_linear"])
    if kind == "linear":
        x, w, c, rank, outputs = linear(b)
        return T.linear(x, w, c), [1] * (rank - 1) + [outputs]
    if kind == "conv":
        x, w, c, spec = conv(b)
        dims = len(value_of(b, w).shape) - 2
        return T.conv(x, w, c, spec), [1, value_of(b, w).shape[0]] + [1] * dims
    x, w, c, outputs = scaled_linear(b, b.pick(["per-output", "scalar", "none"]))
    return T.scaled_linear(x, w, c, b.scalar()), [1, outputs]


def broadcast(b: Builder, shape: list[int]) -> Any:
    """A scalar, or a tensor of `shape` with some leading dims dropped."""
    if b.draw(st.booleans()):
        return b.scalar()
    return b.leaf(shape[b.draw(st.integers(0, len(shape) - 1)) :])


@instance("scalar-on-the-right")
def _(b: Builder) -> Inst:
    return b.inst(T.bin(b.pick(["add", "mul"]), b.scalar(), operand(b, b.shape())))


@instance("producer-on-the-left")
def _(b: Builder) -> Inst:
    out, shape = producer(b)
    return b.inst(T.bin(b.pick(["add", "mul"]), broadcast(b, shape), out))


@instance("sub-as-negated-add")
def _(b: Builder) -> Inst:
    if b.draw(st.booleans()):
        return b.inst(T.bin("sub", b.scalar(), operand(b, b.shape())))
    out, shape = producer(b)
    if "scaled_linear" in str(out):  # the rule holds for linear maps and convolutions
        return b.inst(T.bin("sub", b.scalar(), out))
    return b.inst(T.bin("sub", broadcast(b, shape), out))


@instance("neg-into-linear")
def _(b: Builder) -> Inst:
    x, w, c, _, _ = linear(b)
    return b.inst(T.un("neg", T.linear(x, w, c)))


@instance("neg-into-conv")
def _(b: Builder) -> Inst:
    x, w, c, spec = conv(b)
    return b.inst(T.un("neg", T.conv(x, w, c, spec)))


def per_channel_of_conv(b: Builder, w: Any, x: Any) -> Any:
    """A scalar, or one value per output channel shaped (C, 1, ...) or (1, C, 1, ...)."""
    if b.draw(st.booleans()):
        return b.scalar()
    channels, rank = value_of(b, w).shape[0], value_of(b, x).dim()
    shape = [channels] + [1] * (rank - 2)
    return b.leaf([1, *shape] if b.draw(st.booleans()) else shape, known=True)


@instance("channel-scale-into-conv")
def _(b: Builder) -> Inst:
    x, w, c, spec = conv(b)
    return b.inst(T.bin("mul", T.conv(x, w, c, spec), per_channel_of_conv(b, w, x)))


@instance("channel-shift-into-conv")
def _(b: Builder) -> Inst:
    x, w, c, spec = conv(b)
    shifted = T.bin(b.pick(["add", "sub"]), T.conv(x, w, c, spec), per_channel_of_conv(b, w, x))
    return b.inst(shifted)


def per_output_of_linear(b: Builder, rank: int, outputs: int, min_rank: int) -> Any:
    """One value per output, shaped (1, ..., 1, n), of rank min_rank up to the output's."""
    q = b.draw(st.integers(min_rank, max(min_rank, min(rank, 4))))
    return b.leaf([1] * (q - 1) + [outputs], known=True)


@instance("shift-into-linear")
def _(b: Builder) -> Inst:
    x, w, c, rank, outputs = linear(b, known_w=True)
    scalar = b.draw(st.booleans())
    t = b.scalar() if scalar else per_output_of_linear(b, rank, outputs, 1)
    return b.inst(T.bin(b.pick(["add", "sub"]), T.linear(x, w, c), t))


@instance("wide-scale-into-linear")
def _(b: Builder) -> Inst:
    x, w, c, rank, outputs = linear(b, known_w=True, rank=b.draw(st.integers(2, 4)))
    return b.inst(T.bin("mul", T.linear(x, w, c), per_output_of_linear(b, rank, outputs, 2)))


def _keepdim(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        shape = b.shape()
        return b.inst(T.red(op, operand(b, shape), b.dim(shape), False))

    return draw


def _of_transpose(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        shape = b.shape()
        inner = T.transpose(operand(b, shape), b.dim(shape), b.dim(shape))
        return b.inst(T.red(op, inner, b.dim(shape), True))

    return draw


for _op in REDUCERS:
    INSTANCES[f"{_op}-keepdim-then-squeeze"] = _keepdim(_op)
    INSTANCES[f"{_op}-of-transpose"] = _of_transpose(_op)


@instance("sum-of-shifted")
def _(b: Builder) -> Inst:
    shape = b.shape()
    inner = T.bin(b.pick(["add", "sub"]), operand(b, shape), b.scalar())
    if b.draw(st.booleans()):  # the size read off a linear map's weight
        x, w, c, rank, _ = linear(b)
        inner, shape = T.bin(b.pick(["add", "sub"]), T.linear(x, w, c), b.scalar()), [0] * rank
    return b.inst(T.red("sum", inner, b.dim(shape), b.keepdim()))


def _of_neg(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        shape = b.shape()
        return b.inst(T.red(op, T.un("neg", operand(b, shape)), b.dim(shape), b.keepdim()))

    return draw


def _through_addmm(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        x, w, c, _ = scaled_linear(b, b.pick(["per-output", "scalar", "none"]))
        return b.inst(T.red(op, T.scaled_linear(x, w, c, b.scalar()), 1, True))

    return draw


for _op in ("sum", "mean"):
    INSTANCES[f"{_op}-of-neg"] = _of_neg(_op)
    INSTANCES[f"{_op}-through-addmm"] = _through_addmm(_op)


@instance("size-from-source")
def _(b: Builder) -> Inst:
    """full(1, z) * extent(op(...), d): the size is read off the op's input or weight."""
    kind = b.pick(["unary", "scalar", "linear", "matmul", "conv", "reduce", "moves", "addmm"])
    shape = b.shape()
    if kind == "unary":
        source, rank = T.un(b.pick(["relu", "exp", "neg"]), operand(b, shape)), len(shape)
    elif kind == "scalar":
        source, rank = either(b, b.pick(["add", "mul"]), operand(b, shape), b.scalar()), len(shape)
    elif kind == "linear":
        x, w, c, rank, _ = linear(b)
        source = T.linear(x, w, c)
    elif kind == "matmul":
        m = b.leaf([shape[-1], b.draw(st.integers(1, 5))])
        source, rank = T.matmul(operand(b, shape), m), len(shape)
    elif kind == "conv":
        x, w, c, spec = conv(b)
        return b.inst(T.bin("mul", T.full(1.0, x), T.extent(T.conv(x, w, c, spec), b.dim([0, 0]))))
    elif kind == "reduce":
        e, keep = b.dim(shape), b.keepdim()
        source, rank = T.red(b.pick(REDUCERS), operand(b, shape), e, keep), len(shape) - (not keep)
        if (keep and len(shape) == 1) or rank == 0:
            source, rank = T.un("neg", operand(b, shape)), len(shape)
        elif keep:  # not the reduced dim: that one is 1, read off nothing
            d = b.pick([k for k in range(rank) if k != e])
            return b.inst(T.bin("mul", T.full(1.0, operand(b, [2])), T.extent(source, d)))
    elif kind == "moves":
        a = operand(b, shape)
        move = b.pick(["transpose", "permute", "unsqueeze", "squeeze"])
        if move == "transpose":
            source = T.transpose(a, b.dim(shape), b.dim(shape))
        elif move == "permute":
            source = T.permute(a, pack(b.draw(st.permutations(list(range(len(shape)))))))
        elif move == "unsqueeze":
            e = b.draw(st.integers(0, len(shape)))
            source, shape = T.unsqueeze(a, e), [*shape[:e], 1, *shape[e:]]
            d = b.pick([k for k in range(len(shape)) if k != e])
            return b.inst(T.bin("mul", T.full(1.0, a), T.extent(source, d)))
        else:  # a dim made 1, squeezed
            e = b.draw(st.integers(0, len(shape)))
            source = T.squeeze(T.unsqueeze(a, e), e)
        rank = len(shape)
    else:
        x, w, c, _ = scaled_linear(b, b.pick(["per-output", "scalar", "none"]))
        source, rank = T.scaled_linear(x, w, c, T.const(b.const())), 2  # meta: no 0-d alpha
    return b.inst(T.bin("mul", T.full(1.0, operand(b, [2])), T.extent(source, b.dim([0] * rank))))
