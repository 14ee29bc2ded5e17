"""The term language of the e-graph: a forward's tensor program, as egglog expressions.

Why these constructors: they are the ops whose algebra is worth knowing (elementwise maps,
reductions, softmax, linear maps, convolutions, normalisations, views) plus `leaf` for
everything else, which the e-graph keeps as it is (an fx node of the traced graph: an input,
a parameter, or an op no rule knows). Generic constructors (`un`, `bin`, `red`) keep the rule
library small: a rule names the ops it holds for.

Analyses, as egglog functions the rules fill in:
- `rank(t)` and `size(t, d)`: only sizes known *by construction* (a parameter's, a dim a
  keepdim reduction made 1) are ever set; an input's sizes are not, so no rewrite depends on
  the sizes of the example inputs.
- `lo(t)` / `hi(t)`: bounds on every element (an interval, narrowed as facts arrive), for
  finite inputs and parameters: the one assumption of the range rules.
"""

from __future__ import annotations

from egglog import BoolLike, Expr, StringLike, f64, f64Like, function, i64, i64Like


class T(Expr):
    """A tensor-valued term."""

    @classmethod
    def leaf(cls, node: i64Like) -> T: ...

    @classmethod
    def const(cls, value: f64Like) -> T: ...

    @classmethod
    def un(cls, op: StringLike, a: T) -> T: ...

    @classmethod
    def bin(cls, op: StringLike, a: T, b: T) -> T: ...

    @classmethod
    def clamp(cls, a: T, low: f64Like, high: f64Like) -> T: ...

    @classmethod
    def red(cls, op: StringLike, a: T, dim: i64Like, keepdim: BoolLike) -> T: ...

    @classmethod
    def soft(cls, op: StringLike, a: T, dim: i64Like) -> T: ...

    @classmethod
    def linear(cls, x: T, weight: T, bias: T) -> T: ...

    @classmethod
    def scaled_linear(cls, x: T, weight: T, bias: T, alpha: T) -> T:
        """alpha * (x @ weightᵀ) + bias for a 2-D x: one addmm, the scale in its epilogue."""

    @classmethod
    def matmul(cls, a: T, b: T) -> T: ...

    @classmethod
    def conv(cls, x: T, weight: T, bias: T, spec: i64Like) -> T: ...

    @classmethod
    def norm(cls, kind: StringLike, x: T, weight: T, bias: T, spec: i64Like) -> T: ...

    @classmethod
    def transpose(cls, a: T, d0: i64Like, d1: i64Like) -> T: ...

    @classmethod
    def squeeze(cls, a: T, dim: i64Like) -> T: ...

    @classmethod
    def unsqueeze(cls, a: T, dim: i64Like) -> T: ...

    @classmethod
    def permute(cls, a: T, order: i64Like) -> T:
        """a.permute(p): `order` packs p, 4 bits a dim, each stored plus one (terms.pack)."""

    @classmethod
    def channels(cls, v: T, rank: i64Like) -> T:
        """v.reshape(-1, 1, ..., 1) of rank `rank`: a per-channel vector as a column."""

    @classmethod
    def zeros_out(cls, w: T) -> T:
        """w.new_zeros(w.size(0)): a bias of zeros for the weight w, sized at call time."""

    @classmethod
    def extent(cls, a: T, dim: i64Like) -> T:
        """a.size(dim), a Python int read at call time (a scalar: rank 0)."""

    @classmethod
    def opaque(cls, node: i64Like, arguments: T) -> T:
        """Leaf `node`'s call (an op no rule knows) on new tensor arguments, a `cons` list."""

    @classmethod
    def cons(cls, head: T, tail: T) -> T:
        """A list of terms (`none` ends it): an opaque call's tensor arguments, in order."""

    @classmethod
    def diag(cls, v: T) -> T: ...

    @classmethod
    def full(cls, value: f64Like, like: T) -> T: ...

    @classmethod
    def none(cls) -> T: ...


@function(merge=lambda old, new: old)
def rank(t: T) -> i64: ...


@function(merge=lambda old, new: old)
def size(t: T, dim: i64Like) -> i64: ...


@function(merge=lambda old, new: old)
def crank(t: T) -> i64:
    """The example's rank: for the cost model only, never for a side condition."""


@function(merge=lambda old, new: old)
def csize(t: T, dim: i64Like) -> i64:
    """The example's size: for the cost model only, never for a side condition."""


@function(merge=lambda old, new: old.max(new))
def lo(t: T) -> f64: ...


@function(merge=lambda old, new: old.min(new))
def hi(t: T) -> f64: ...


@function(merge=lambda old, new: old)
def groups(spec: i64Like) -> i64:
    """A convolution spec's groups (the spec indexes the lowering's table of conv settings)."""


MAX_RANK = 6
"""The largest rank a permutation is packed for (4 bits a dim)."""


def pack(order: list[int] | tuple[int, ...]) -> int:
    """A permutation as one integer: dim k's source plus one in bits 4k..4k+3 (no zero
    digit inside the rank, so the rank can be read back)."""
    return sum((source + 1) << (4 * k) for k, source in enumerate(order))


def unpack(code: int) -> list[int]:
    order = []
    while code:
        order.append((code & 15) - 1)
        code >>= 4
    return order
