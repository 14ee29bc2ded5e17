"""Simplifications that hold for any op: neutral and absorbing elements, idempotent chains,
constants through activations and arithmetic, reductions and softmax over dims of size 1,
monotone maps through max and min, and views. Side conditions read the analyses
(agents/offline/egraph/analysis.py). Registered in the catalogue (catalogue.py) that
rules.py assembles.
"""

from __future__ import annotations

from egglog import Bool, String, f64, i64, rewrite, rule, union

from agents.offline.egraph.analysis import MONOTONE_UP
from agents.offline.egraph.catalogue import REDUCERS, RuleGroup
from agents.offline.egraph.terms import T, hi, lo, rank, size

RULES = RuleGroup()


# -- neutral and absorbing elements ----------------------------------------------------------


@RULES.law("add-zero", "x + 0 = x")
def _(a: T):
    yield rewrite(T.bin("add", a, T.const(0.0))).to(a)
    yield rewrite(T.bin("add", T.const(0.0), a)).to(a)


@RULES.law("sub-zero", "x - 0 = x")
def _(a: T):
    yield rewrite(T.bin("sub", a, T.const(0.0))).to(a)


@RULES.law("mul-one", "x * 1 = x")
def _(a: T):
    yield rewrite(T.bin("mul", a, T.const(1.0))).to(a)
    yield rewrite(T.bin("mul", T.const(1.0), a)).to(a)


@RULES.law("div-one", "x / 1 = x")
def _(a: T):
    yield rewrite(T.bin("div", a, T.const(1.0))).to(a)


@RULES.law("mul-zero", "x * 0 = 0", "x finite")
def _(a: T):
    yield rewrite(T.bin("mul", a, T.const(0.0))).to(T.full(0.0, a))
    yield rewrite(T.bin("mul", T.const(0.0), a)).to(T.full(0.0, a))


@RULES.law("sub-self", "x - x = 0", "x finite")
def _(a: T):
    yield rewrite(T.bin("sub", a, a)).to(T.full(0.0, a))


@RULES.law("neg-neg", "-(-x) = x")
def _(a: T):
    yield rewrite(T.un("neg", T.un("neg", a))).to(a)


@RULES.law("add-zeros-like", "x + zeros_like(x) = x")
def _(a: T):
    yield rewrite(T.bin("add", a, T.full(0.0, a))).to(a)
    yield rewrite(T.bin("add", T.full(0.0, a), a)).to(a)


@RULES.law("sub-zeros-like", "x - zeros_like(x) = x")
def _(a: T):
    yield rewrite(T.bin("sub", a, T.full(0.0, a))).to(a)


@RULES.law("mul-ones-like", "x * ones_like(x) = x")
def _(a: T):
    yield rewrite(T.bin("mul", a, T.full(1.0, a))).to(a)
    yield rewrite(T.bin("mul", T.full(1.0, a), a)).to(a)


@RULES.law("mul-zeros-like", "x * zeros_like(x) = 0", "x finite")
def _(a: T):
    yield rewrite(T.bin("mul", a, T.full(0.0, a))).to(T.full(0.0, a))


# -- idempotent and absorbing chains ----------------------------------------------------------


@RULES.law("relu-relu", "relu(relu(x)) = relu(x)")
def _(a: T):
    yield rewrite(T.un("relu", T.un("relu", a))).to(T.un("relu", a))


@RULES.law("relu-nonnegative", "relu(x) = x where x >= 0", "lo(x) >= 0")
def _(a: T, x: f64):
    yield rule(T.un("relu", a), lo(a) == x, x >= 0.0).then(union(T.un("relu", a)).with_(a))


@RULES.law("relu-nonpositive", "relu(x) = 0 where x <= 0", "hi(x) <= 0")
def _(a: T, y: f64):
    yield rule(T.un("relu", a), hi(a) == y, y <= 0.0).then(
        union(T.un("relu", a)).with_(T.full(0.0, a))
    )


@RULES.law("abs-abs", "|(|x|)| = |x|")
def _(a: T):
    yield rewrite(T.un("abs", T.un("abs", a))).to(T.un("abs", a))


@RULES.law("abs-nonnegative", "|x| = x where x >= 0", "lo(x) >= 0")
def _(a: T, x: f64):
    yield rule(T.un("abs", a), lo(a) == x, x >= 0.0).then(union(T.un("abs", a)).with_(a))


@RULES.law("clamp-clamp", "clamp(clamp(x, l1, h1), l2, h2) = clamp(x, max l, min h)", "ranges meet")
def _(a: T, l1: f64, h1: f64, l2: f64, h2: f64):
    yield rule(
        T.clamp(T.clamp(a, l1, h1), l2, h2), l1 <= h1, l2 <= h2, l1.max(l2) <= h1.min(h2)
    ).then(union(T.clamp(T.clamp(a, l1, h1), l2, h2)).with_(T.clamp(a, l1.max(l2), h1.min(h2))))


@RULES.law("clamp-below", "clamp(x, l, h) = l where x <= l", "hi(x) <= l <= h")
def _(a: T, low: f64, high: f64, y: f64):
    yield rule(T.clamp(a, low, high), hi(a) == y, y <= low, low <= high).then(
        union(T.clamp(a, low, high)).with_(T.full(low, a))
    )


@RULES.law("clamp-above", "clamp(x, l, h) = h where x >= h", "lo(x) >= h >= l")
def _(a: T, low: f64, high: f64, x: f64):
    yield rule(T.clamp(a, low, high), lo(a) == x, x >= high, low <= high).then(
        union(T.clamp(a, low, high)).with_(T.full(high, a))
    )


@RULES.law("clamp-inside", "clamp(x, l, h) = x where l <= x <= h", "l <= lo(x), hi(x) <= h")
def _(a: T, low: f64, high: f64, x: f64, y: f64):
    yield rule(T.clamp(a, low, high), lo(a) == x, hi(a) == y, low <= x, y <= high).then(
        union(T.clamp(a, low, high)).with_(a)
    )


@RULES.law("clamp-of-relu", "clamp(relu(x), l, h) = clamp(x, l, h) where l >= 0", "l >= 0")
def _(a: T, low: f64, high: f64):
    yield rule(T.clamp(T.un("relu", a), low, high), low >= 0.0).then(
        union(T.clamp(T.un("relu", a), low, high)).with_(T.clamp(a, low, high))
    )


@RULES.law("relu-as-clamp", "clamp(x, 0, inf) = relu(x)")
def _(a: T):
    yield rewrite(T.clamp(a, 0.0, float("inf"))).to(T.un("relu", a))


@RULES.law("min-self", "min(x, x) = x")
def _(a: T):
    yield rewrite(T.bin("minimum", a, a)).to(a)


@RULES.law("max-self", "max(x, x) = x")
def _(a: T):
    yield rewrite(T.bin("maximum", a, a)).to(a)


@RULES.law("min-bounded", "min(x, c) = x where x <= c", "hi(x) <= c")
def _(a: T, c: f64, y: f64):
    yield rule(T.bin("minimum", a, T.const(c)), hi(a) == y, y <= c).then(
        union(T.bin("minimum", a, T.const(c))).with_(a)
    )


@RULES.law("min-absorbing", "min(x, c) = c where x >= c", "lo(x) >= c")
def _(a: T, c: f64, x: f64):
    yield rule(T.bin("minimum", a, T.const(c)), lo(a) == x, x >= c).then(
        union(T.bin("minimum", a, T.const(c))).with_(T.full(c, a))
    )


@RULES.law("max-bounded", "max(x, c) = x where x >= c", "lo(x) >= c")
def _(a: T, c: f64, x: f64):
    yield rule(T.bin("maximum", a, T.const(c)), lo(a) == x, x >= c).then(
        union(T.bin("maximum", a, T.const(c))).with_(a)
    )


@RULES.law("max-absorbing", "max(x, c) = c where x <= c", "hi(x) <= c")
def _(a: T, c: f64, y: f64):
    yield rule(T.bin("maximum", a, T.const(c)), hi(a) == y, y <= c).then(
        union(T.bin("maximum", a, T.const(c))).with_(T.full(c, a))
    )


@RULES.law("max-zero-is-relu", "max(x, 0) = relu(x)")
def _(a: T):
    yield rewrite(T.bin("maximum", a, T.const(0.0))).to(T.un("relu", a))


# -- constants through activations and arithmetic --------------------------------------------

for _name, _value, _result in (
    ("sigmoid", 0.0, 0.5),
    ("tanh", 0.0, 0.0),
    ("gelu", 0.0, 0.0),
    ("silu", 0.0, 0.0),
    ("exp", 0.0, 1.0),
    ("relu", 0.0, 0.0),
    ("abs", 0.0, 0.0),
    ("neg", 0.0, 0.0),
):

    def _constant(name, value, result):
        def body(a: T):
            yield rewrite(T.un(name, T.full(value, a))).to(T.full(result, a))

        return body

    RULES.law(f"{_name}-at-{_value:g}", f"{_name}({_value:g}) = {_result:g}")(
        _constant(_name, _value, _result)
    )


@RULES.law("relu-of-constant", "relu(c) = max(c, 0)")
def _(a: T, c: f64):
    yield rewrite(T.un("relu", T.full(c, a))).to(T.full(c.max(f64(0.0)), a))


@RULES.law("neg-of-constant", "-(c) = -c")
def _(a: T, c: f64):
    yield rewrite(T.un("neg", T.full(c, a))).to(T.full(-c, a))


@RULES.law("clamp-of-constant", "clamp(c, l, h) = min(max(c, l), h)", "l <= h")
def _(a: T, c: f64, low: f64, high: f64):
    yield rule(T.clamp(T.full(c, a), low, high), low <= high).then(
        union(T.clamp(T.full(c, a), low, high)).with_(T.full(c.max(low).min(high), a))
    )


for _op, _fold in (
    ("add", lambda u, v: u + v),
    ("sub", lambda u, v: u - v),
    ("mul", lambda u, v: u * v),
):

    def _scalar(op, fold):
        def body(a: T, u: f64, v: f64):
            yield rewrite(T.bin(op, T.full(u, a), T.const(v))).to(T.full(fold(u, v), a))
            yield rewrite(T.bin(op, T.full(u, a), T.full(v, a))).to(T.full(fold(u, v), a))

        return body

    RULES.law(f"{_op}-constants", f"c1 {_op} c2 is folded")(_scalar(_op, _fold))


@RULES.law("min-max-constants", "min/max of constants are folded")
def _(a: T, u: f64, v: f64):
    yield rewrite(T.bin("minimum", T.full(u, a), T.const(v))).to(T.full(u.min(v), a))
    yield rewrite(T.bin("maximum", T.full(u, a), T.const(v))).to(T.full(u.max(v), a))


# -- a constant's shape from the cheapest term of the same shape -----------------------------
# full(v, like) takes only like's shape, dtype and device (computed on the meta device, for
# free), so any term of the same shape and dtype serves; the earlier the cheaper to emit.


@RULES.law("full-shape-source", "a constant takes only the shape of its source")
def _(a: T, b: T, c: T, v: f64, u: f64, low: f64, high: f64, op: String, d: i64, s: i64):
    yield rewrite(T.full(v, T.un(op, a))).to(T.full(v, a))
    yield rewrite(T.full(v, T.clamp(a, low, high))).to(T.full(v, a))
    yield rewrite(T.full(v, T.soft(op, a, d))).to(T.full(v, a))
    yield rewrite(T.full(v, T.norm(op, a, b, c, s))).to(T.full(v, a))
    yield rewrite(T.full(v, T.bin(op, a, T.const(u)))).to(T.full(v, a))
    yield rewrite(T.full(v, T.full(u, a))).to(T.full(v, a))


@RULES.law("dropout-of-zero", "dropout(0) = 0: every kept element is scaled, and 0 scaled is 0")
def _(a: T, b: T, c: T, s: i64):
    yield rewrite(T.norm("dropout", T.full(0.0, a), b, c, s)).to(T.full(0.0, a))


# -- reductions, softmax over dims that are 1 by construction ---------------------------------

for _op in REDUCERS:

    def _keep(op):
        def body(a: T, d: i64):
            yield rule(T.red(op, a, d, Bool(True)), size(a, d) == i64(1)).then(
                union(T.red(op, a, d, Bool(True))).with_(a)
            )
            yield rule(T.red(op, a, d, Bool(False)), size(a, d) == i64(1)).then(
                union(T.red(op, a, d, Bool(False))).with_(T.squeeze(a, d))
            )

        return body

    RULES.law(f"{_op}-over-size-1", f"{_op} over a dim of size 1 is the identity", "size 1")(
        _keep(_op)
    )


@RULES.law("softmax-over-size-1", "softmax over a dim of size 1 is 1", "size 1")
def _(a: T, d: i64):
    yield rule(T.soft("softmax", a, d), size(a, d) == i64(1)).then(
        union(T.soft("softmax", a, d)).with_(T.full(1.0, a))
    )


@RULES.law("log-softmax-over-size-1", "log_softmax over a dim of size 1 is 0", "size 1")
def _(a: T, d: i64):
    yield rule(T.soft("log_softmax", a, d), size(a, d) == i64(1)).then(
        union(T.soft("log_softmax", a, d)).with_(T.full(0.0, a))
    )


for _op in ("amax", "amin", "mean"):

    def _of_constant(op):
        def body(a: T, c: f64, d: i64, k: Bool):
            yield rewrite(T.red(op, T.full(c, a), d, k)).to(T.full(c, T.red(op, a, d, k)))

        return body

    RULES.law(f"{_op}-of-constant", f"{_op} of a constant is the constant")(_of_constant(_op))


@RULES.law("sum-of-constant", "sum of a constant c over n elements is n * c", "n known")
def _(a: T, c: f64, d: i64, k: Bool, n: i64):
    yield rule(T.red("sum", T.full(c, a), d, k), size(a, d) == n).then(
        union(T.red("sum", T.full(c, a), d, k)).with_(
            T.full(c * f64.from_i64(n), T.red("sum", a, d, k))
        )
    )


# -- monotone maps commute with max and min -----------------------------------------------------

for _fn in MONOTONE_UP:
    for _op in ("amax", "amin"):

        def _monotone(fn, op):
            def body(a: T, d: i64, k: Bool):
                yield rewrite(T.red(op, T.un(fn, a), d, k)).to(T.un(fn, T.red(op, a, d, k)))

            return body

        RULES.law(f"{_op}-of-{_fn}", f"{_op}({_fn}(x)) = {_fn}({_op}(x)): {_fn} is non-decreasing")(
            _monotone(_fn, _op)
        )


@RULES.law("amax-of-neg", "max(-x) = -min(x)")
def _(a: T, d: i64, k: Bool):
    yield rewrite(T.red("amax", T.un("neg", a), d, k)).to(T.un("neg", T.red("amin", a, d, k)))
    yield rewrite(T.red("amin", T.un("neg", a), d, k)).to(T.un("neg", T.red("amax", a, d, k)))


for _op in ("amax", "amin"):

    def _positive_scale(op):
        def body(a: T, d: i64, k: Bool, c: f64):
            red = T.red(op, T.bin("mul", a, T.const(c)), d, k)
            yield rule(red, c >= 0.0).then(
                union(red).with_(T.bin("mul", T.red(op, a, d, k), T.const(c)))
            )
            shifted = T.red(op, T.bin("add", a, T.const(c)), d, k)
            yield rewrite(shifted).to(T.bin("add", T.red(op, a, d, k), T.const(c)))

        return body

    RULES.law(f"{_op}-of-affine", f"{_op}(c x + s) = c {_op}(x) + s for c >= 0", "c >= 0")(
        _positive_scale(_op)
    )


# -- views --------------------------------------------------------------------------------------


@RULES.law("transpose-transpose", "transpose(transpose(x, i, j), i, j) = x")
def _(a: T, d: i64, e: i64):
    yield rewrite(T.transpose(T.transpose(a, d, e), d, e)).to(a)
    yield rewrite(T.transpose(T.transpose(a, d, e), e, d)).to(a)


@RULES.law("squeeze-unsqueeze", "squeeze(unsqueeze(x, d), d) = x")
def _(a: T, d: i64):
    yield rewrite(T.squeeze(T.unsqueeze(a, d), d)).to(a)


@RULES.law("unsqueeze-squeeze", "unsqueeze(squeeze(x, d), d) = x where dim d has size 1", "size 1")
def _(a: T, d: i64):
    yield rule(T.unsqueeze(T.squeeze(a, d), d), size(a, d) == i64(1)).then(
        union(T.unsqueeze(T.squeeze(a, d), d)).with_(a)
    )


@RULES.law("diag-matmul", "diag(v) @ M = v[:, None] * M", "M of rank 2 or more")
def _(v: T, m: T, r: i64):
    yield rule(T.matmul(T.diag(v), m), rank(v) == i64(1), rank(m) == r, r >= 2).then(
        union(T.matmul(T.diag(v), m)).with_(T.bin("mul", T.unsqueeze(v, 1), m))
    )
