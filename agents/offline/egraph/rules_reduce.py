"""Reductions through shifts, negations, transposes and addmm, and a reduction without keepdim
as one with keepdim then a squeeze: the forms the rules about linear maps match.

A sum of x + s over n elements is the sum of x plus n * s, with n read at call time
(`T.extent`), never written into the code. Kept in `RULES`, which
agents/offline/egraph/rules.py adds to the catalogue.
"""

from __future__ import annotations

from egglog import Bool, RewriteOrRule, String, eq, f64, i64, rewrite, rule, union, var

from agents.offline.egraph.catalogue import REDUCERS, RuleGroup
from agents.offline.egraph.terms import T, rank, size

RULES = RuleGroup()

for _op in REDUCERS:

    def _keepdim(op):
        def body(a: T, d: i64):
            yield rewrite(T.red(op, a, d, Bool(False))).to(
                T.squeeze(T.red(op, a, d, Bool(True)), d)
            )

        return body

    RULES.law(
        f"{_op}-keepdim-then-squeeze",
        f"{_op}(x, d) = {_op}(x, d, keepdim=True).squeeze(d)",
    )(_keepdim(_op))

    def _of_transpose(op):
        def body(a: T, d: i64, e: i64, k: i64):
            def moved(dim):
                return T.transpose(T.red(op, a, dim, Bool(True)), d, e)

            red = T.red(op, T.transpose(a, d, e), k, Bool(True))
            yield rule(red, k == d).then(union(red).with_(moved(e)))
            yield rule(red, k == e, k != d).then(union(red).with_(moved(d)))
            yield rule(red, k != d, k != e).then(union(red).with_(moved(k)))

        return body

    RULES.law(
        f"{_op}-of-transpose",
        f"{_op} over dim k of xᵀ (keepdim) = the transpose of {_op} over x's dim that became k",
    )(_of_transpose(_op))


@RULES.law(
    "sum-of-shifted",
    "sum(x + s) over n elements = sum(x) + n * s for a scalar s (n read at call time)",
    "s a scalar",
)
def _(a: T, s: T, d: i64, k: Bool):
    for shift in ("add", "sub"):
        red = T.red("sum", T.bin(shift, a, s), d, k)
        summed = T.bin("mul", s, T.extent(a, d))
        yield rule(red, rank(s) == i64(0)).then(
            union(red).with_(T.bin(shift, T.red("sum", a, d, k), summed))
        )


for _op in ("sum", "mean"):

    def _of_neg(op):
        def body(a: T, d: i64, k: Bool):
            yield rewrite(T.red(op, T.un("neg", a), d, k)).to(T.un("neg", T.red(op, a, d, k)))

        return body

    RULES.law(f"{_op}-of-neg", f"{_op}(-x) = -{_op}(x)")(_of_neg(_op))

    def _through_addmm(op):
        def body(x: T, w: T, c: T, alpha: T, r: i64, n: i64):
            def moved(bias):
                return T.scaled_linear(x, T.red(op, w, 0, Bool(True)), bias, alpha)

            red = T.red(op, T.scaled_linear(x, w, c, alpha), 1, Bool(True))
            m = var("m", i64)
            last = rank(c) == r, eq(m).to(r - 1), size(c, m) == n, size(w, i64(0)) == n
            yield rule(red, c != T.none(), r >= i64(1), *last).then(
                union(red).with_(moved(T.red(op, c, r - 1, Bool(True))))
            )
            yield rule(red, rank(c) == i64(0)).then(
                union(red).with_(moved(c if op == "mean" else T.bin("mul", c, T.extent(w, i64(0)))))
            )
            plain = T.red(op, T.scaled_linear(x, w, T.none(), alpha), 1, Bool(True))
            yield rewrite(plain).to(
                T.scaled_linear(x, T.red(op, w, 0, Bool(True)), T.none(), alpha)
            )

        return body

    RULES.law(
        f"{_op}-through-addmm",
        f"{_op} over the columns of addmm(c, x, M, alpha=a) = addmm({_op} of c's columns, x, "
        f"{_op} of M's columns, alpha=a)",
        "c's last dim is the output's (a parameter's), or c a scalar, or no c",
    )(_through_addmm(_op))


# -- sizes read at call time ----------------------------------------------------------------


def _from(term: T, d: i64, source: T, dim, *facts) -> RewriteOrRule:
    """extent(term, d) is extent(source, dim) where `facts` hold."""
    return rule(T.extent(term, d), *facts).then(
        union(T.extent(term, d)).with_(T.extent(source, dim))
    )


@RULES.law(
    "size-from-source",
    "a size of an op's output is the size of the input dim it comes from",
    "the dim maps by the op's shape rule (same shape, a weight's rows, a moved dim)",
)
def _(a: T, b: T, c: T, x: T, w: T, op: String, d: i64, e: i64, f: i64, r: i64, s: i64):
    v, low, high = var("v", f64), var("l", f64), var("h", f64)
    for same in (T.un(op, a), T.clamp(a, low, high), T.soft(op, a, e), T.full(v, a)):
        yield _from(same, d, a, d)
    yield _from(T.norm(op, a, b, c, s), d, a, d)
    yield _from(T.bin(op, a, b), d, a, d, rank(b) == i64(0))  # a scalar keeps a's shape
    yield _from(T.bin(op, b, a), d, a, d, rank(b) == i64(0))
    for linear in (T.linear(x, w, b), T.scaled_linear(x, w, b, c)):
        yield _from(linear, d, w, i64(0), rank(x) == r, eq(d).to(r - 1))
        yield _from(linear, d, x, d, rank(x) == r, d < r - 1)
    yield _from(T.matmul(x, w), d, w, i64(1), rank(w) == i64(2), rank(x) == r, eq(d).to(r - 1))
    yield _from(T.matmul(x, w), d, x, d, rank(w) == i64(2), rank(x) == r, d < r - 1)
    yield _from(T.conv(x, w, b, s), d, x, d, eq(d).to(i64(0)))
    yield _from(T.conv(x, w, b, s), d, w, i64(0), eq(d).to(i64(1)))
    yield _from(T.red(op, a, e, Bool(True)), d, a, d, d != e)
    yield _from(T.red(op, a, e, Bool(False)), d, a, d, d < e)
    yield _from(T.red(op, a, e, Bool(False)), d, a, d + 1, d >= e)
    yield _from(T.transpose(a, e, f), d, a, f, eq(d).to(e))
    yield _from(T.transpose(a, e, f), d, a, e, eq(d).to(f), e != f)
    yield _from(T.transpose(a, e, f), d, a, d, d != e, d != f)
    yield _from(T.permute(a, e), d, a, ((e >> (d * 4)) & i64(15)) - 1)
    yield _from(T.unsqueeze(a, e), d, a, d, d < e)
    yield _from(T.unsqueeze(a, e), d, a, d - 1, d > e)
    yield _from(T.squeeze(a, e), d, a, d, d < e)
    yield _from(T.squeeze(a, e), d, a, d + 1, d >= e)
