"""What the e-graph knows about each e-class: rank, sizes known by construction, and bounds.

These rules only add facts; they never add terms. A size is set only where it follows from
construction (a parameter's size, a keepdim reduction's 1), so a rule conditioned on a size
holds for every input the program accepts. Bounds (`lo`, `hi`) hold for finite inputs and
parameters, the range rules' one assumption (a NaN input makes min/clamp return NaN).
"""

from __future__ import annotations

from egglog import Bool, String, eq, f64, i64, rule, ruleset, set_, var

from agents.offline.egraph.terms import MAX_RANK, T, crank, csize, hi, lo, rank, size

MONOTONE_UP = ("relu", "sigmoid", "tanh", "exp", "softplus", "elu", "leaky_relu", "hardtanh")
SHAPE_KEEPING_UNARY = (
    "relu",
    "sigmoid",
    "tanh",
    "gelu",
    "silu",
    "exp",
    "log",
    "neg",
    "abs",
    "sqrt",
    "softplus",
    "elu",
    "leaky_relu",
    "hardtanh",
    "mish",
    "erf",
)
"""The unary ops lowering turns into `T.un`: each keeps its input's shape and dtype."""

ranges = ruleset(name="ranges")


def _shape_rules(rank, size):
    """The transfer functions of shapes, over one pair of (rank, size) functions: the sizes
    known by construction (`terms.rank/size`), or the example's sizes, for costs only
    (`terms.crank/csize`)."""

    def body(a: T, b: T, c: T, w: T, out: T, op: String, d: i64, e: i64, n: i64, r: i64):
        yield from _transfer(rank, size, a, b, c, w, out, op, d, e, n, r)

    return body


def _transfer(rank, size, a, b, c, w, out, op, d, e, n, r):
    yield rule(out == T.const(var("v", f64))).then(set_(rank(out)).to(i64(0)))
    yield from _same_shape(rank, size, a, c, w, out, op, d, e, n, r)
    yield from _binary(rank, size, a, b, out, op, d, n, r)
    yield from _reductions(rank, size, a, out, op, d, e, n, r)
    yield from _linear_maps(rank, size, a, b, c, w, out, d, e, n, r)
    yield from _views(rank, size, a, out, d, e, n, r)
    yield from _transfer_more(rank, size, a, w, out, d, e, n, r)


def _same_shape(rank, size, a, c, w, out, op, d, e, n, r):
    """Elementwise, softmax, clamp, normalisation, constant fill: the input's shape."""
    for same in (
        out == T.un(op, a),
        out == T.soft(op, a, d),
        out == T.full(var("v", f64), a),
        out == T.clamp(a, var("l", f64), var("h", f64)),
        out == T.norm(op, a, w, c, e),
    ):
        yield rule(same, rank(a) == r).then(set_(rank(out)).to(r))
        yield rule(same, size(a, d) == n).then(set_(size(out, d)).to(n))


def _binary(rank, size, a, b, out, op, d, n, r):
    """Binary: a scalar keeps the other side's shape; equal ranks combine known sizes."""
    yield rule(out == T.bin(op, a, T.const(var("s", f64))), rank(a) == r).then(
        set_(rank(out)).to(r)
    )
    yield rule(out == T.bin(op, a, T.const(var("s", f64))), size(a, d) == n).then(
        set_(size(out, d)).to(n)
    )
    yield rule(out == T.bin(op, T.const(var("s", f64)), a), rank(a) == r).then(
        set_(rank(out)).to(r)
    )
    yield rule(out == T.bin(op, T.const(var("s", f64)), a), size(a, d) == n).then(
        set_(size(out, d)).to(n)
    )
    yield rule(out == T.bin(op, a, b), rank(a) == r, rank(b) == r).then(set_(rank(out)).to(r))
    yield rule(out == T.bin(op, a, b), rank(a) == rank(b), size(a, d) == n, size(b, d) == n).then(
        set_(size(out, d)).to(n)
    )
    yield rule(
        out == T.bin(op, a, b), rank(a) == rank(b), size(a, d) == i64(1), size(b, d) == n
    ).then(set_(size(out, d)).to(n))
    yield rule(
        out == T.bin(op, a, b), rank(a) == rank(b), size(a, d) == n, size(b, d) == i64(1)
    ).then(set_(size(out, d)).to(n))


def _reductions(rank, size, a, out, op, d, e, n, r):
    """Reductions: keepdim leaves a 1 where the dim was, otherwise the dim goes."""
    yield rule(out == T.red(op, a, d, Bool(True)), rank(a) == r).then(
        set_(rank(out)).to(r), set_(size(out, d)).to(i64(1))
    )
    yield rule(out == T.red(op, a, d, Bool(True)), size(a, e) == n, e != d).then(
        set_(size(out, e)).to(n)
    )
    yield rule(out == T.red(op, a, d, Bool(False)), rank(a) == r).then(set_(rank(out)).to(r - 1))
    yield rule(out == T.red(op, a, d, Bool(False)), size(a, e) == n, e < d).then(
        set_(size(out, e)).to(n)
    )
    yield rule(out == T.red(op, a, d, Bool(False)), size(a, e) == n, e > d).then(
        set_(size(out, e - 1)).to(n)
    )


def _linear_maps(rank, size, a, b, c, w, out, d, e, n, r):
    """Linear maps and convolutions: the input's rank, the weight's output size."""
    yield rule(out == T.linear(a, w, c), rank(a) == r).then(set_(rank(out)).to(r))
    yield rule(out == T.linear(a, w, c), rank(a) == r, size(w, i64(0)) == n).then(
        set_(size(out, r - 1)).to(n)
    )
    yield rule(out == T.linear(a, w, c), rank(a) == r, size(a, d) == n, d < r - 1).then(
        set_(size(out, d)).to(n)
    )
    yield rule(out == T.scaled_linear(a, w, c, b), rank(a) == r).then(set_(rank(out)).to(r))
    yield rule(out == T.scaled_linear(a, w, c, b), rank(a) == r, size(w, i64(0)) == n).then(
        set_(size(out, r - 1)).to(n)
    )
    yield rule(out == T.scaled_linear(a, w, c, b), size(a, i64(0)) == n).then(
        set_(size(out, i64(0))).to(n)
    )
    yield rule(out == T.matmul(a, w), rank(a) == r, rank(w) == i64(2)).then(set_(rank(out)).to(r))
    yield rule(out == T.matmul(a, w), rank(a) == r, rank(w) == i64(2), size(w, i64(1)) == n).then(
        set_(size(out, r - 1)).to(n)
    )
    yield rule(
        out == T.matmul(a, w), rank(w) == i64(2), size(a, d) == n, rank(a) == r, d < r - 1
    ).then(set_(size(out, d)).to(n))
    yield rule(out == T.conv(a, w, c, e), rank(a) == r).then(set_(rank(out)).to(r))
    yield rule(out == T.conv(a, w, c, e), size(w, i64(0)) == n).then(set_(size(out, i64(1))).to(n))
    yield rule(out == T.conv(a, w, c, e), size(a, i64(0)) == n).then(set_(size(out, i64(0))).to(n))


def _views(rank, size, a, out, d, e, n, r):
    """Views: transposes, unsqueezes and squeezes move or add dims of size 1."""
    yield rule(out == T.transpose(a, d, e), rank(a) == r).then(set_(rank(out)).to(r))
    yield rule(out == T.transpose(a, d, e), size(a, d) == n).then(set_(size(out, e)).to(n))
    yield rule(out == T.transpose(a, d, e), size(a, e) == n).then(set_(size(out, d)).to(n))
    yield rule(
        out == T.transpose(a, d, e), size(a, c_dim := var("f", i64)) == n, c_dim != d, c_dim != e
    ).then(set_(size(out, c_dim)).to(n))
    yield rule(out == T.unsqueeze(a, d), rank(a) == r).then(
        set_(rank(out)).to(r + 1), set_(size(out, d)).to(i64(1))
    )
    yield rule(out == T.unsqueeze(a, d), size(a, e) == n, e < d).then(set_(size(out, e)).to(n))
    yield rule(out == T.unsqueeze(a, d), size(a, e) == n, e >= d).then(set_(size(out, e + 1)).to(n))
    yield rule(out == T.squeeze(a, d), rank(a) == r).then(set_(rank(out)).to(r - 1))
    yield rule(out == T.squeeze(a, d), size(a, e) == n, e < d).then(set_(size(out, e)).to(n))
    yield rule(out == T.squeeze(a, d), size(a, e) == n, e > d).then(set_(size(out, e - 1)).to(n))


def _transfer_more(rank, size, a, w, out, d, e, n, r):
    """Permutations, per-channel columns, zero biases and sizes read at call time."""
    # permute(a, p): dim k is a's dim p[k] (stored plus one in bits 4k..4k+3)
    yield rule(out == T.permute(a, d), rank(a) == r).then(set_(rank(out)).to(r))
    for k in range(MAX_RANK):
        source = ((d >> (4 * k)) & 15) - 1
        yield rule(
            out == T.permute(a, d), rank(a) == r, r > k, size(a, e) == n, eq(e).to(source)
        ).then(set_(size(out, k)).to(n))
    # channels(v, r): (numel(v), 1, ..., 1) of rank r
    yield rule(out == T.channels(a, r)).then(set_(rank(out)).to(r))
    for k in range(1, MAX_RANK):
        yield rule(out == T.channels(a, r), r > k).then(set_(size(out, k)).to(i64(1)))
    for q in range(MAX_RANK + 1):
        extents = [var(f"n{k}", i64) for k in range(q)]
        known = [size(a, k) == extents[k] for k in range(q)]
        numel = i64(1)
        for extent in extents:
            numel = numel * extent
        yield rule(out == T.channels(a, r), rank(a) == i64(q), *known).then(
            set_(size(out, i64(0))).to(numel)
        )
    yield rule(out == T.zeros_out(w)).then(set_(rank(out)).to(i64(1)))
    yield rule(out == T.zeros_out(w), size(w, i64(0)) == n).then(set_(size(out, i64(0))).to(n))
    yield rule(out == T.extent(a, d)).then(set_(rank(out)).to(i64(0)))


shapes = ruleset(name="shapes")
shapes.register(_shape_rules(rank, size))
example_shapes = ruleset(name="example_shapes")
example_shapes.register(_shape_rules(crank, csize))


@ranges.register
def _ranges(a: T, b: T, out: T, op: String, d: i64, k: Bool, x: f64, y: f64, lo_: f64, hi_: f64):
    yield rule(out == T.const(x)).then(set_(lo(out)).to(x), set_(hi(out)).to(x))
    yield rule(out == T.full(x, a)).then(set_(lo(out)).to(x), set_(hi(out)).to(x))
    yield rule(out == T.un("relu", a)).then(set_(lo(out)).to(f64(0.0)))
    yield rule(out == T.un("relu", a), hi(a) == y).then(set_(hi(out)).to(y.max(f64(0.0))))
    yield rule(out == T.un("relu", a), lo(a) == x).then(set_(lo(out)).to(x.max(f64(0.0))))
    for name, low, high in (("sigmoid", 0.0, 1.0), ("tanh", -1.0, 1.0)):
        yield rule(out == T.un(name, a)).then(
            set_(lo(out)).to(f64(low)), set_(hi(out)).to(f64(high))
        )
    yield rule(out == T.un("exp", a)).then(set_(lo(out)).to(f64(0.0)))
    yield rule(out == T.un("abs", a)).then(set_(lo(out)).to(f64(0.0)))
    yield rule(out == T.soft("softmax", a, d)).then(
        set_(lo(out)).to(f64(0.0)), set_(hi(out)).to(f64(1.0))
    )
    yield rule(out == T.soft("log_softmax", a, d)).then(set_(hi(out)).to(f64(0.0)))
    yield rule(out == T.un("neg", a), lo(a) == x).then(set_(hi(out)).to(-x))
    yield rule(out == T.un("neg", a), hi(a) == y).then(set_(lo(out)).to(-y))
    # clamp(a, l, h) lies in [l, h], and in [clamp(lo a), clamp(hi a)]
    yield rule(out == T.clamp(a, lo_, hi_)).then(set_(lo(out)).to(lo_), set_(hi(out)).to(hi_))
    yield rule(out == T.clamp(a, lo_, hi_), lo(a) == x).then(set_(lo(out)).to(x.min(hi_)))
    yield rule(out == T.clamp(a, lo_, hi_), hi(a) == y).then(set_(hi(out)).to(y.max(lo_)))
    # min(a, b) <= either; max(a, b) >= either
    yield rule(out == T.bin("minimum", a, b), hi(a) == y).then(set_(hi(out)).to(y))
    yield rule(out == T.bin("minimum", a, b), hi(b) == y).then(set_(hi(out)).to(y))
    yield rule(out == T.bin("minimum", a, b), lo(a) == x, lo(b) == y).then(
        set_(lo(out)).to(x.min(y))
    )
    yield rule(out == T.bin("maximum", a, b), lo(a) == x).then(set_(lo(out)).to(x))
    yield rule(out == T.bin("maximum", a, b), lo(b) == x).then(set_(lo(out)).to(x))
    yield rule(out == T.bin("maximum", a, b), hi(a) == x, hi(b) == y).then(
        set_(hi(out)).to(x.max(y))
    )
    yield rule(out == T.bin("add", a, b), lo(a) == x, lo(b) == y).then(set_(lo(out)).to(x + y))
    yield rule(out == T.bin("add", a, b), hi(a) == x, hi(b) == y).then(set_(hi(out)).to(x + y))
    yield rule(out == T.bin("sub", a, b), lo(a) == x, hi(b) == y).then(set_(lo(out)).to(x - y))
    yield rule(out == T.bin("sub", a, b), hi(a) == x, lo(b) == y).then(set_(hi(out)).to(x - y))
    # a max, min or mean of elements lies within their bounds
    for name in ("amax", "amin", "mean"):
        yield rule(out == T.red(name, a, d, k), lo(a) == x).then(set_(lo(out)).to(x))
        yield rule(out == T.red(name, a, d, k), hi(a) == y).then(set_(hi(out)).to(y))
    del op


ANALYSES = (shapes, example_shapes, ranges)
