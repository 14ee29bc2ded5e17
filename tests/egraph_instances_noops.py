"""Drawings for the rules that remove no-ops and cancel permutations
(agents/offline/egraph/rules_identity.py) and for the view rules of the main catalogue,
registered into tests/egraph_instances.INSTANCES.

The no-ops are lowered only where their condition holds (checked by the pass tests in
tests/integration/test_egraph_algebra.py); here each rule's term is drawn around any operand."""

from __future__ import annotations

from hypothesis import strategies as st

from agents.offline.egraph.rules_identity import NO_OP_RULES
from agents.offline.egraph.terms import T, pack
from tests.egraph_harness import Inst
from tests.egraph_instances import INSTANCES, Builder, Instance, instance, operand, sized_one


def _no_op(op: str) -> Instance:
    def draw(b: Builder) -> Inst:
        return b.inst(T.un(op, operand(b, b.shape())))

    return draw


for _op, (_name, _, _) in NO_OP_RULES.items():
    INSTANCES[_name] = _no_op(_op)


@instance("pow-one")
def _(b: Builder) -> Inst:
    return b.inst(T.bin("pow", operand(b, b.shape()), T.const(1.0)))


def permutation(b: Builder, rank: int) -> list[int]:
    return b.draw(st.permutations(list(range(rank))))


@instance("transpose-as-permute")
def _(b: Builder) -> Inst:
    shape = b.shape(1, 5)
    return b.inst(T.transpose(operand(b, shape), b.dim(shape), b.dim(shape)))


@instance("permute-permute")
def _(b: Builder) -> Inst:
    shape = b.shape(1, 5)
    first, second = permutation(b, len(shape)), permutation(b, len(shape))
    inner = T.permute(operand(b, shape), pack(first))
    return b.inst(T.permute(inner, pack(second)))


@instance("permute-identity")
def _(b: Builder) -> Inst:
    shape = b.shape(0, 5)
    return b.inst(T.permute(operand(b, shape), pack(range(len(shape)))))


# -- views (agents/offline/egraph/rules.py) --------------------------------------------------


@instance("transpose-transpose")
def _(b: Builder) -> Inst:
    shape = b.shape()
    d, e = b.dim(shape), b.dim(shape)
    inner = T.transpose(operand(b, shape), d, e)
    return b.inst(T.transpose(inner, *((e, d) if b.draw(st.booleans()) else (d, e))))


@instance("squeeze-unsqueeze")
def _(b: Builder) -> Inst:
    shape = b.shape()
    d = b.draw(st.integers(0, len(shape)))
    return b.inst(T.squeeze(T.unsqueeze(operand(b, shape), d), d))


@instance("unsqueeze-squeeze")
def _(b: Builder) -> Inst:
    a, _, d = sized_one(b)
    return b.inst(T.unsqueeze(T.squeeze(a, d), d))


@instance("diag-matmul")
def _(b: Builder) -> Inst:
    n = b.draw(st.integers(1, 5))
    # M of rank >= 2 (the rule's condition; a vector M: SILENT)
    batch = b.draw(st.lists(st.integers(1, 3), max_size=2))
    m = operand(b, [*batch, n, b.draw(st.integers(1, 5))])
    return b.inst(T.matmul(T.diag(b.leaf([n])), m))
