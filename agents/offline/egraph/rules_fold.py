"""Scales and shifts folded into linear maps and convolutions, whatever side they are written
on: a scalar (a constant, a float read from self, a 0-d tensor) or one value per output
channel (a parameter or buffer shaped to broadcast along the channels only).

The folded weight and bias are expressions of the live parameters, written into forward, so
a loaded state_dict is used at once. A division by a tensor is never folded: a zero in it
makes the output inf where the folded weight would give nan. Kept in `RULES`, which
agents/offline/egraph/rules.py adds to the catalogue.
"""

from __future__ import annotations

from egglog import eq, i64, rule, union, var

from agents.offline.egraph.catalogue import RuleGroup
from agents.offline.egraph.terms import T, rank, size

RULES = RuleGroup()

CONV_RANKS = (3, 4, 5)  # conv1d, conv2d, conv3d outputs: (N, C, *spatial)
LINEAR_WIDE_RANKS = (2, 3, 4)  # a per-output vector written as (1, ..., 1, n)


def _producers(x: T, w: T, b: T, s: i64, alpha: T) -> list[T]:
    return [T.linear(x, w, b), T.conv(x, w, b, s), T.scaled_linear(x, w, b, alpha)]


@RULES.law(
    "scalar-on-the-right",
    "s + x = x + s and s * x = x * s for a scalar s",
    "s of rank 0 (+ and * commute exactly in floating point)",
)
def _(a: T, s: T):
    for op in ("add", "mul"):
        yield rule(T.bin(op, s, a), rank(s) == i64(0)).then(
            union(T.bin(op, s, a)).with_(T.bin(op, a, s))
        )


@RULES.law(
    "producer-on-the-left",
    "v + P = P + v and v * P = P * v for P a linear map or a convolution",
)
def _(v: T, x: T, w: T, b: T, s: i64, alpha: T):
    for op in ("add", "mul"):
        for producer in _producers(x, w, b, s, alpha):
            yield rule(T.bin(op, v, producer)).then(
                union(T.bin(op, v, producer)).with_(T.bin(op, producer, v))
            )


@RULES.law(
    "sub-as-negated-add",
    "s - x = (-x) + s",
    "s of rank 0, or x a linear map or a convolution (s - x and s + (-x) round alike)",
)
def _(v: T, a: T, x: T, w: T, b: T, s: i64, alpha: T):
    yield rule(T.bin("sub", v, a), rank(v) == i64(0)).then(
        union(T.bin("sub", v, a)).with_(T.bin("add", T.un("neg", a), v))
    )
    for producer in _producers(x, w, b, s, alpha)[:2]:
        yield rule(T.bin("sub", v, producer)).then(
            union(T.bin("sub", v, producer)).with_(T.bin("add", T.un("neg", producer), v))
        )


@RULES.law("neg-into-linear", "-(x Wᵀ + b) = x (-W)ᵀ + (-b)")
def _(x: T, w: T, b: T):
    negated = T.un("neg", T.linear(x, w, b))
    yield rule(negated, b != T.none()).then(
        union(negated).with_(T.linear(x, T.un("neg", w), T.un("neg", b)))
    )
    plain = T.un("neg", T.linear(x, w, T.none()))
    yield rule(plain).then(union(plain).with_(T.linear(x, T.un("neg", w), T.none())))


@RULES.law("neg-into-conv", "-conv(x, W, b) = conv(x, -W, -b)")
def _(x: T, w: T, b: T, s: i64):
    negated = T.un("neg", T.conv(x, w, b, s))
    yield rule(negated, b != T.none()).then(
        union(negated).with_(T.conv(x, T.un("neg", w), T.un("neg", b), s))
    )
    plain = T.un("neg", T.conv(x, w, T.none(), s))
    yield rule(plain).then(union(plain).with_(T.conv(x, T.un("neg", w), T.none(), s)))


def _per_channel(v: T, out: T, out_rank: int, v_rank: int, axis: int, n: i64) -> list:
    """The conditions for v (of rank v_rank) to hold one value per channel of `out` (of rank
    out_rank, channels along `axis`), aligned from the right: sizes known, 1 elsewhere."""
    offset = out_rank - v_rank
    facts = [rank(out) == i64(out_rank), rank(v) == i64(v_rank), size(out, axis) == n]
    for k in range(v_rank):
        facts.append(size(v, k) == (n if k + offset == axis else i64(1)))
    return facts


def _per_output(v: T, out: T, v_rank: int, n: i64, r: i64) -> list:
    """The conditions for v (of rank v_rank) to hold one value per output of a linear map's
    `out` (of rank r >= v_rank, outputs last): sizes known, 1 but in the last dim."""
    last = var("last", i64)
    facts = [rank(out) == r, r >= i64(v_rank), rank(v) == i64(v_rank), eq(last).to(r - 1)]
    facts += [size(out, last) == n, size(v, i64(v_rank - 1)) == n]
    return facts + [size(v, i64(k)) == i64(1) for k in range(v_rank - 1)]


@RULES.law(
    "channel-scale-into-conv",
    "conv(x, W, b) * s = conv(x, W * s[:, None, ...], b * s), s a scalar or one value per channel",
    "s of rank 0, or of shape (C, 1, ...) or (1, C, 1, ...) with C the output channels",
)
def _(x: T, w: T, b: T, s: i64, v: T, n: i64):
    out = T.conv(x, w, b, s)
    plain = T.conv(x, w, T.none(), s)
    yield rule(T.bin("mul", out, v), rank(v) == i64(0), b != T.none()).then(
        union(T.bin("mul", out, v)).with_(T.conv(x, T.bin("mul", w, v), T.bin("mul", b, v), s))
    )
    yield rule(T.bin("mul", plain, v), rank(v) == i64(0)).then(
        union(T.bin("mul", plain, v)).with_(T.conv(x, T.bin("mul", w, v), T.none(), s))
    )
    for r in CONV_RANKS:
        column = T.bin("mul", w, T.channels(v, r))
        for q in (r - 1, r):
            yield rule(T.bin("mul", out, v), b != T.none(), *_per_channel(v, out, r, q, 1, n)).then(
                union(T.bin("mul", out, v)).with_(
                    T.conv(x, column, T.bin("mul", b, T.channels(v, 1)), s)
                )
            )
            yield rule(T.bin("mul", plain, v), *_per_channel(v, plain, r, q, 1, n)).then(
                union(T.bin("mul", plain, v)).with_(T.conv(x, column, T.none(), s))
            )


def _shifted(op: str, bias: T | None, w: T, v: T, per_channel: bool) -> T:
    """The bias after `op` v: b op v, or from no bias (None): zeros sized by W, or v."""
    value = T.channels(v, 1) if per_channel else v
    if bias is not None:
        return T.bin(op, bias, value)
    if per_channel:
        return value if op == "add" else T.un("neg", value)
    return T.bin(op, T.zeros_out(w), value)


@RULES.law(
    "channel-shift-into-conv",
    "conv(x, W, b) + t = conv(x, W, b + t), t a scalar or one value per channel",
    "t of rank 0, or of shape (C, 1, ...) or (1, C, 1, ...) with C the output channels",
)
def _(x: T, w: T, b: T, s: i64, v: T, n: i64):
    for op in ("add", "sub"):
        for bias in (b, None):
            out = T.conv(x, w, T.none() if bias is None else b, s)
            has_bias = [] if bias is None else [b != T.none()]
            yield rule(T.bin(op, out, v), rank(v) == i64(0), *has_bias).then(
                union(T.bin(op, out, v)).with_(T.conv(x, w, _shifted(op, bias, w, v, False), s))
            )
            for r in CONV_RANKS:
                for q in (r - 1, r):
                    facts = _per_channel(v, out, r, q, 1, n)
                    yield rule(T.bin(op, out, v), *has_bias, *facts).then(
                        union(T.bin(op, out, v)).with_(
                            T.conv(x, w, _shifted(op, bias, w, v, True), s)
                        )
                    )


@RULES.law(
    "shift-into-linear",
    "(x Wᵀ + b) ± t = x Wᵀ + (b ± t), t a scalar or one value per output",
    "t of rank 0, or of shape (1, ..., 1, n) with n the outputs, no wider than the output",
)
def _(x: T, w: T, b: T, v: T, n: i64, r: i64):
    for op in ("add", "sub"):
        for bias in (b, None):
            out = T.linear(x, w, T.none() if bias is None else b)
            has_bias = [] if bias is None else [b != T.none()]
            yield rule(T.bin(op, out, v), rank(v) == i64(0), *has_bias).then(
                union(T.bin(op, out, v)).with_(T.linear(x, w, _shifted(op, bias, w, v, False)))
            )
            for q in (1, *LINEAR_WIDE_RANKS):
                facts = _per_output(v, out, q, n, r)
                yield rule(T.bin(op, out, v), *has_bias, *facts).then(
                    union(T.bin(op, out, v)).with_(T.linear(x, w, _shifted(op, bias, w, v, True)))
                )


@RULES.law(
    "wide-scale-into-linear",
    "(x Wᵀ + b) * s = x (W * s.reshape(-1, 1))ᵀ + b * s.reshape(-1), s of shape (1, ..., 1, n)",
    "s of rank 2 to 4, 1 everywhere but its last dim, the outputs (rank 1: "
    "channel-scale-into-linear)",
)
def _(x: T, w: T, b: T, v: T, n: i64, r: i64):
    for bias in (b, None):
        out = T.linear(x, w, T.none() if bias is None else b)
        has_bias = [] if bias is None else [b != T.none()]
        new_bias = T.none() if bias is None else T.bin("mul", b, T.channels(v, 1))
        for q in LINEAR_WIDE_RANKS:
            facts = _per_output(v, out, q, n, r)
            yield rule(T.bin("mul", out, v), *has_bias, *facts).then(
                union(T.bin("mul", out, v)).with_(
                    T.linear(x, T.bin("mul", w, T.channels(v, 2)), new_bias)
                )
            )
