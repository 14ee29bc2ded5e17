"""The rules that remove ops returning their input: copies, casts to the same dtype, views to
the same shape, dropout that drops nothing, x ** 1, and permutations that cancel.

The no-ops are lowered as `T.un(name, x)` only where their side condition holds by
construction (agents/offline/egraph/lower_ops.py), so each rule here is unconditional on the
term; its `needs` says what the lowering checked. Kept in `RULES`, which
agents/offline/egraph/rules.py adds to the catalogue.
"""

from __future__ import annotations

from egglog import i64, rewrite, rule, union

from agents.offline.egraph.catalogue import RuleGroup
from agents.offline.egraph.terms import MAX_RANK, T, pack, rank

RULES = RuleGroup()

NO_OP_RULES = {
    "clone": (
        "clone-is-identity",
        "x.clone() = x",
        "nothing writes x or its clone in place (the lowering makes a written tensor a leaf); "
        "an output that would be an input or a parameter is cloned",
    ),
    "contiguous": (
        "contiguous-is-identity",
        "x.contiguous() has x's values",
        "values, not layout: an output the original returned contiguous is made contiguous",
    ),
    "identity": ("identity-module-is-identity", "nn.Identity()(x) = x", ""),
    "inactive_dropout": (
        "inactive-dropout-is-identity",
        "dropout(x) = x where it drops nothing",
        "p == 0, or training=False in the call (checked when lowered); it draws no random number",
    ),
    "same_cast": (
        "same-dtype-cast-is-identity",
        "x.to(x.dtype) = x",
        "the cast's dtype is x's (checked when lowered)",
    ),
    "same_view": (
        "same-shape-view-is-identity",
        "x.view(x.shape) = x",
        "every size is x's own at that position (x.size(i), x.shape[i]) or one -1 (checked when "
        "lowered): the same shape at any input size",
    ),
}

for _op, (_name, _law, _needs) in NO_OP_RULES.items():

    def _no_op(op):
        def body(a: T):
            yield rewrite(T.un(op, a)).to(a)

        return body

    RULES.law(_name, _law, _needs)(_no_op(_op))


@RULES.law("pow-one", "x ** 1 = x")
def _(a: T):
    yield rewrite(T.bin("pow", a, T.const(1.0))).to(a)


# -- permutations ---------------------------------------------------------------------------
# A permutation p is packed into one integer: p[k] + 1 in bits 4k..4k+3 (terms.pack).


def _digit(code, k: int):
    """p[k] + 1 of a packed permutation, as an egglog integer expression."""
    return (code >> i64(4 * k)) & i64(15)


@RULES.law(
    "transpose-as-permute",
    "transpose(x, i, j) = permute(x, the order with i and j swapped)",
    f"x of rank at most {MAX_RANK}",
)
def _(a: T, d: i64, e: i64):
    for r in range(MAX_RANK + 1):
        identity = i64(pack(range(r)))
        swapped = identity + ((e - d) << (d * 4)) + ((d - e) << (e * 4))
        yield rule(T.transpose(a, d, e), rank(a) == i64(r)).then(
            union(T.transpose(a, d, e)).with_(T.permute(a, swapped))
        )


@RULES.law(
    "permute-permute",
    "permute(permute(x, p), q) = permute(x, [p[q[k]] for each k])",
    f"x of rank at most {MAX_RANK}",
)
def _(a: T, p: i64, q: i64):
    for r in range(1, MAX_RANK + 1):
        composed = i64(0)
        for k in range(r):
            source = (_digit(q, k) - 1) * 4  # q[k], as a bit offset into p
            composed = composed + (((p >> source) & i64(15)) << i64(4 * k))
        twice = T.permute(T.permute(a, p), q)
        yield rule(twice, rank(a) == i64(r)).then(union(twice).with_(T.permute(a, composed)))


@RULES.law("permute-identity", "permute(x, (0, 1, ..., r - 1)) = x")
def _(a: T):
    for r in range(MAX_RANK + 1):
        yield rewrite(T.permute(a, i64(pack(range(r))))).to(a)
