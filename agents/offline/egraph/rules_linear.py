"""The rules about linear maps: reductions moved through linear maps and convolutions, sums
and means being linear, scales and shifts folded into weights and biases. Kept in `RULES`,
which agents/offline/egraph/rules.py adds to the catalogue."""

from __future__ import annotations

from egglog import (
    Bool,
    eq,
    f64,
    i64,
    rule,
    union,
)

from agents.offline.egraph.catalogue import RuleGroup
from agents.offline.egraph.terms import T, groups, rank, size

RULES = RuleGroup()

# -- reductions through linear maps ------------------------------------------------------------

for _op in ("sum", "mean"):

    def _through_linear(op):
        def body(x: T, w: T, b: T, r: i64, d: i64):
            out = T.linear(x, w, b)
            moved = T.linear(x, T.red(op, w, 0, Bool(True)), T.red(op, b, 0, Bool(True)))
            red = T.red(op, out, d, Bool(True))
            yield rule(red, rank(out) == r, eq(d).to(r - 1), b != T.none()).then(
                union(red).with_(moved)
            )
            plain = T.linear(x, w, T.none())
            red = T.red(op, plain, d, Bool(True))
            yield rule(red, rank(plain) == r, eq(d).to(r - 1)).then(
                union(red).with_(T.linear(x, T.red(op, w, 0, Bool(True)), T.none()))
            )

        return body

    RULES.law(
        f"{_op}-through-linear",
        f"{_op} over a linear map's outputs: {_op}_j (x Wᵀ + b)_j = x ({_op}_j W_j)ᵀ + {_op}_j b_j",
    )(_through_linear(_op))

    def _through_matmul(op):
        def body(x: T, m: T, r: i64, d: i64):
            red = T.red(op, T.matmul(x, m), d, Bool(True))
            yield rule(red, rank(T.matmul(x, m)) == r, eq(d).to(r - 1), rank(m) == i64(2)).then(
                union(red).with_(T.matmul(x, T.red(op, m, 1, Bool(True))))
            )

        return body

    RULES.law(f"{_op}-through-matmul", f"{_op} over x @ M's columns = x @ ({_op} of M's columns)")(
        _through_matmul(_op)
    )

    def _through_conv(op):
        def body(x: T, w: T, b: T, s: i64):
            out = T.conv(x, w, b, s)
            moved = T.conv(x, T.red(op, w, 0, Bool(True)), T.red(op, b, 0, Bool(True)), s)
            yield rule(T.red(op, out, 1, Bool(True)), b != T.none(), groups(s) == i64(1)).then(
                union(T.red(op, out, 1, Bool(True))).with_(moved)
            )
            plain = T.conv(x, w, T.none(), s)
            yield rule(T.red(op, plain, 1, Bool(True)), groups(s) == i64(1)).then(
                union(T.red(op, plain, 1, Bool(True))).with_(
                    T.conv(x, T.red(op, w, 0, Bool(True)), T.none(), s)
                )
            )

        return body

    RULES.law(
        f"{_op}-through-conv",
        f"{_op} over a convolution's output channels = one convolution with their {_op}",
        "groups == 1",
    )(_through_conv(_op))


# -- sums and means are linear ---------------------------------------------------------------

for _op in ("sum", "mean"):

    def _scaled(op):
        def body(a: T, s: T, d: i64, k: Bool, c: f64):
            red = T.red(op, T.bin("mul", a, s), d, k)
            yield rule(red, rank(s) == i64(0)).then(
                union(red).with_(T.bin("mul", T.red(op, a, d, k), s))
            )
            # a division only by a nonzero constant: x / 0 is inf or nan per element, and
            # the sum of those is not the sum divided by 0
            red = T.red(op, T.bin("div", a, T.const(c)), d, k)
            yield rule(red, c != 0.0).then(
                union(red).with_(T.bin("div", T.red(op, a, d, k), T.const(c)))
            )

        return body

    RULES.law(
        f"{_op}-of-scaled", f"{_op}(x * s) = {_op}(x) * s for a scalar s", "s a scalar; c != 0"
    )(_scaled(_op))


@RULES.law("mean-of-shifted", "mean(x + s) = mean(x) + s for a scalar s", "s a scalar")
def _(a: T, s: T, d: i64, k: Bool):
    for shift in ("add", "sub"):
        red = T.red("mean", T.bin(shift, a, s), d, k)
        yield rule(red, rank(s) == i64(0)).then(
            union(red).with_(T.bin(shift, T.red("mean", a, d, k), s))
        )


# -- scales and shifts into linear maps and convolutions ---------------------------------------

for _op in ("mul", "div"):

    def _scale_linear(op):
        def body(x: T, w: T, b: T, c: f64):
            scaled = T.bin(op, T.linear(x, w, b), T.const(c))
            nonzero = [c != 0.0] if op == "div" else []  # x / 0 is inf or nan, not foldable
            yield rule(scaled, b != T.none(), *nonzero).then(
                union(scaled).with_(T.linear(x, T.bin(op, w, T.const(c)), T.bin(op, b, T.const(c))))
            )
            plain = T.bin(op, T.linear(x, w, T.none()), T.const(c))
            yield rule(plain, *nonzero).then(
                union(plain).with_(T.linear(x, T.bin(op, w, T.const(c)), T.none()))
            )

        return body

    RULES.law(f"{_op}-into-linear", f"(x Wᵀ + b) {_op} c = x (W {_op} c)ᵀ + b {_op} c")(
        _scale_linear(_op)
    )

    def _scale_conv(op):
        def body(x: T, w: T, b: T, s: i64, c: f64):
            scaled = T.bin(op, T.conv(x, w, b, s), T.const(c))
            nonzero = [c != 0.0] if op == "div" else []  # x / 0 is inf or nan, not foldable
            yield rule(scaled, b != T.none(), *nonzero).then(
                union(scaled).with_(
                    T.conv(x, T.bin(op, w, T.const(c)), T.bin(op, b, T.const(c)), s)
                )
            )
            plain = T.bin(op, T.conv(x, w, T.none(), s), T.const(c))
            yield rule(plain, *nonzero).then(
                union(plain).with_(T.conv(x, T.bin(op, w, T.const(c)), T.none(), s))
            )

        return body

    RULES.law(f"{_op}-into-conv", f"conv(x, W, b) {_op} c = conv(x, W {_op} c, b {_op} c)")(
        _scale_conv(_op)
    )

for _op in ("add", "sub"):

    def _shift_linear(op):
        def body(x: T, w: T, b: T, c: f64):
            yield rule(T.bin(op, T.linear(x, w, b), T.const(c)), b != T.none()).then(
                union(T.bin(op, T.linear(x, w, b), T.const(c))).with_(
                    T.linear(x, w, T.bin(op, b, T.const(c)))
                )
            )

        return body

    RULES.law(f"{_op}-into-linear-bias", f"(x Wᵀ + b) {_op} c = x Wᵀ + (b {_op} c)")(
        _shift_linear(_op)
    )

    def _shift_conv(op):
        def body(x: T, w: T, b: T, s: i64, c: f64):
            yield rule(T.bin(op, T.conv(x, w, b, s), T.const(c)), b != T.none()).then(
                union(T.bin(op, T.conv(x, w, b, s), T.const(c))).with_(
                    T.conv(x, w, T.bin(op, b, T.const(c)), s)
                )
            )

        return body

    RULES.law(f"{_op}-into-conv-bias", f"conv(x, W, b) {_op} c = conv(x, W, b {_op} c)")(
        _shift_conv(_op)
    )


@RULES.law(
    "channel-scale-into-linear",
    "(x Wᵀ + b) * s = x (W * s[:, None])ᵀ + b * s, s a scalar or one value per output",
    "s of rank 0, or of rank 1 with one value per output",
)
def _(x: T, w: T, b: T, s: T, n: i64):
    out = T.linear(x, w, b)
    scaled = T.linear(x, T.bin("mul", w, T.unsqueeze(s, 1)), T.bin("mul", b, s))
    yield rule(
        T.bin("mul", out, s), rank(s) == i64(1), size(s, 0) == n, size(w, 0) == n, b != T.none()
    ).then(union(T.bin("mul", out, s)).with_(scaled))
    yield rule(T.bin("mul", out, s), rank(s) == i64(0), b != T.none()).then(
        union(T.bin("mul", out, s)).with_(T.linear(x, T.bin("mul", w, s), T.bin("mul", b, s)))
    )
    plain = T.linear(x, w, T.none())
    yield rule(T.bin("mul", plain, s), rank(s) == i64(1), size(s, 0) == n, size(w, 0) == n).then(
        union(T.bin("mul", plain, s)).with_(
            T.linear(x, T.bin("mul", w, T.unsqueeze(s, 1)), T.none())
        )
    )


@RULES.law(
    "scale-into-addmm",
    "s * (x Wᵀ + b) + t = addmm(s b + t, x, Wᵀ, alpha=s) for a 2-D x and scalars s, t",
    "x of rank 2, s and t of rank 0",
)
def _(x: T, w: T, b: T, s: T, t: T):
    out = T.linear(x, w, b)
    yield rule(T.bin("mul", out, s), rank(s) == i64(0), rank(x) == i64(2), b != T.none()).then(
        union(T.bin("mul", out, s)).with_(T.scaled_linear(x, w, T.bin("mul", b, s), s))
    )
    scaled = T.scaled_linear(x, w, b, s)
    for shift in ("add", "sub"):
        yield rule(T.bin(shift, scaled, t), rank(t) == i64(0)).then(
            union(T.bin(shift, scaled, t)).with_(T.scaled_linear(x, w, T.bin(shift, b, t), s))
        )


@RULES.law(
    "channel-shift-into-linear",
    "(x Wᵀ + b) + t = x Wᵀ + (b + t), t a scalar or one value per output",
    "t of rank 0, or of rank 1 with one value per output",
)
def _(x: T, w: T, b: T, t: T, n: i64):
    out = T.linear(x, w, b)
    yield rule(
        T.bin("add", out, t), rank(t) == i64(1), size(t, 0) == n, size(w, 0) == n, b != T.none()
    ).then(union(T.bin("add", out, t)).with_(T.linear(x, w, T.bin("add", b, t))))
    plain = T.linear(x, w, T.none())
    yield rule(T.bin("add", plain, t), rank(t) == i64(1), size(t, 0) == n, size(w, 0) == n).then(
        union(T.bin("add", plain, t)).with_(T.linear(x, w, t))
    )
