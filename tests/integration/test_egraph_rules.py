"""Every rule of the e-graph's catalogue (agents/offline/egraph/rules.py), as a property.

For each rule, `INSTANCES` draws random left-hand sides that meet its side conditions: random
ranks and sizes, random values, random constants where the rule allows them. Bounds a range
condition needs come from the term itself (a leaf has none): a relu, a sigmoid, a clamp, a
minimum with a constant... wrapped around a leaf, with the bound the analyses derive for it.
`check_rule` (tests/egraph_harness.py) then runs the rule alone and checks that it fired and
that every form it added computes what the left-hand side computes, in float64.

Negative tests check that a rule stays silent when its side condition does not hold; the
regression tests keep fixed the instances these properties found unsound (2026-12-04).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn as nn
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from agents.offline.egraph.lower import ConvSpec
from agents.offline.egraph.terms import T
from tests.egraph_harness import Inst, L, check_rule, evaluate, forms
from tests.egraph_instances import INSTANCES, NAMES, Builder

# -- the properties -----------------------------------------------------------------------------

REORDERS_SUMS = {name for name in NAMES if "-through-" in name} | {"sum-of-constant"}


def run_check(name: str, inst: Inst) -> None:
    rtol = 1e-7 if name in REORDERS_SUMS else 1e-9
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # dropout draws its mask
        check_rule(name, inst, rtol=rtol)


def test_every_rule_has_a_property() -> None:
    assert sorted(INSTANCES) == sorted(NAMES)
    assert len(NAMES) == len(set(NAMES)), "two rules share a name"


RULE_SETTINGS: dict[str, Any] = {
    "deadline": None,
    "database": None,
    # no shrinking: a failure reports the example as drawn, at once (values come from a seed)
    "phases": [Phase.explicit, Phase.reuse, Phase.generate],
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=6, **RULE_SETTINGS)
@given(data=st.data())
def test_rule_is_sound(name: str, data: st.DataObject) -> None:
    """`make test`: six fresh instances per rule on every run (the draws differ run to run)."""
    run_check(name, INSTANCES[name](Builder(data.draw)))


@pytest.mark.long
@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=15, **RULE_SETTINGS)
@given(data=st.data())
def test_rule_is_sound_on_more_instances(name: str, data: st.DataObject) -> None:
    """`make test-all`: fifteen more per rule."""
    run_check(name, INSTANCES[name](Builder(data.draw)))


def test_dropout_of_zero_without_the_harness_module_call() -> None:
    """dropout-of-zero's form, checked against nn.Dropout run directly too."""
    x = torch.randn(2, 3, dtype=torch.float64)
    zeros = T.full(0.0, L(0))
    inst = Inst(T.norm("dropout", zeros, T.none(), T.none(), 0), [x], modules=[nn.Dropout(0.3)])
    new = [form for form in forms("dropout-of-zero", inst) if str(form) != str(inst.term)]
    assert [str(form) for form in new] == [str(zeros)]
    torch.manual_seed(0)
    expected = nn.Dropout(0.3)(torch.zeros_like(x))
    torch.testing.assert_close(evaluate(new[0], Inst(new[0], [x])), expected, rtol=0, atol=0)


# -- side conditions that fail: the rule stays silent -------------------------------------------


def _t(*shape: int) -> torch.Tensor:
    return torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))


CONV2D = ConvSpec(dims=2, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1)
CONV2D_GROUPS2 = ConvSpec(dims=2, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=2)

SILENT: list[tuple[str, str, Callable[[], Inst]]] = [
    (
        "sum-over-size-1",
        "an input's size is not known, even when it is 1",
        lambda: Inst(T.red("sum", L(0), 0, True), [_t(1, 3)]),
    ),
    (
        "unsqueeze-squeeze",
        "an input's size is not known, even when it is 1",
        lambda: Inst(T.unsqueeze(T.squeeze(L(0), 0), 0), [_t(1, 3)]),
    ),
    (
        "softmax-over-size-1",
        "an input's size is not known, even when it is 1",
        lambda: Inst(T.soft("softmax", L(0), 1), [_t(3, 1)]),
    ),
    (
        "sum-of-constant",
        "n is not known for an input",
        lambda: Inst(T.red("sum", T.full(2.0, L(0)), 0, False), [_t(4, 3)]),
    ),
    ("relu-nonnegative", "a leaf has no bounds", lambda: Inst(T.un("relu", L(0)), [_t(3)])),
    ("relu-nonpositive", "a leaf has no bounds", lambda: Inst(T.un("relu", L(0)), [_t(3)])),
    ("abs-nonnegative", "a leaf has no bounds", lambda: Inst(T.un("abs", L(0)), [_t(3)])),
    (
        "clamp-below",
        "hi(sigmoid) = 1 > l",
        lambda: Inst(T.clamp(T.un("sigmoid", L(0)), 0.5, 2.0), [_t(2, 3)]),
    ),
    ("clamp-below", "a leaf has no bounds", lambda: Inst(T.clamp(L(0), 0.0, 1.0), [_t(2, 3)])),
    (
        "clamp-inside",
        "hi(tanh) = 1 > h",
        lambda: Inst(T.clamp(T.un("tanh", L(0)), -1.0, 0.5), [_t(2, 3)]),
    ),
    (
        "clamp-clamp",
        "disjoint ranges: clamp(clamp(x, 0, 1), 2, 3) is 2, clamp(x, 2, 1) is 1",
        lambda: Inst(T.clamp(T.clamp(L(0), 0.0, 1.0), 2.0, 3.0), [_t(2, 3)]),
    ),
    (
        "min-bounded",
        "hi(sigmoid) = 1 > c",
        lambda: Inst(T.bin("minimum", T.un("sigmoid", L(0)), T.const(0.5)), [_t(3)]),
    ),
    (
        "max-absorbing",
        "hi(sigmoid) = 1 > c",
        lambda: Inst(T.bin("maximum", T.un("sigmoid", L(0)), T.const(0.5)), [_t(3)]),
    ),
    (
        "amax-of-affine",
        "a negative scale turns max into min",
        lambda: Inst(T.red("amax", T.bin("mul", L(0), T.const(-2.0)), 1, False), [_t(2, 3)]),
    ),
    (
        "sum-through-conv",
        "groups=2: the channels are not all summed by one convolution",
        lambda: Inst(
            T.red("sum", T.conv(L(0), L(1), L(2), 0), 1, True),
            [_t(1, 4, 5, 5), _t(4, 2, 2, 2), _t(4)],
            known={1, 2},
            convs=[CONV2D_GROUPS2],
        ),
    ),
    (
        "sum-through-linear",
        "a sum over the batch dim, not the outputs",
        lambda: Inst(
            T.red("sum", T.linear(L(0), L(1), L(2)), 0, True),
            [_t(3, 4), _t(5, 4), _t(5)],
            known={1, 2},
        ),
    ),
    (
        "diag-matmul",
        "a vector M: diag(v) @ m is v * m, of shape (n,), not v[:, None] * m, (n, n)",
        lambda: Inst(T.matmul(T.diag(L(0)), L(1)), [_t(3), _t(3)]),
    ),
    (
        "sum-of-scaled",
        "a scale of rank 1 is not a scalar",
        lambda: Inst(T.red("sum", T.bin("mul", L(0), L(1)), 1, True), [_t(2, 3), _t(3)]),
    ),
    (
        "channel-shift-into-linear",
        "t's size is not known (an input: it may broadcast)",
        lambda: Inst(
            T.bin("add", T.linear(L(0), L(1), L(2)), L(3)),
            [_t(3, 4), _t(5, 4), _t(5), _t(5)],
            known={1, 2},
        ),
    ),
    (
        "channel-scale-into-conv",
        "a (C, 1) scale on a conv2d's output lines up with its height, not its channels",
        lambda: Inst(
            T.bin("mul", T.conv(L(0), L(1), L(2), 0), L(3)),
            [_t(1, 3, 4, 4), _t(2, 3, 2, 2), _t(2), _t(2, 1)],
            known={1, 2, 3},
            convs=[CONV2D],
        ),
    ),
    (
        "channel-shift-into-conv",
        "the shift's sizes are not known (an input: (1, C, 1, 1) at this size only)",
        lambda: Inst(
            T.bin("add", T.conv(L(0), L(1), L(2), 0), L(3)),
            [_t(1, 3, 4, 4), _t(2, 3, 2, 2), _t(2), _t(1, 2, 1, 1)],
            known={1, 2},
            convs=[CONV2D],
        ),
    ),
    (
        "shift-into-linear",
        "a (n, 1) shift broadcasts along the outputs, not one value per output",
        lambda: Inst(
            T.bin("add", T.linear(L(0), L(1), L(2)), L(3)),
            [_t(3, 4), _t(3, 4), _t(3), _t(3, 1)],
            known={1, 2, 3},
        ),
    ),
    (
        "sum-through-addmm",
        "an input of shape (rows, 1) is the same for every output: its sum is not its own",
        lambda: Inst(
            T.red("sum", T.scaled_linear(L(0), L(1), L(2), T.const(1.0)), 1, True),
            [_t(3, 4), _t(5, 4), _t(3, 1)],
            known={1, 2},
        ),
    ),
    (
        "sum-of-shifted",
        "a shift of rank 1 is not a scalar",
        lambda: Inst(T.red("sum", T.bin("add", L(0), L(1)), 1, True), [_t(2, 3), _t(3)]),
    ),
    (
        "scalar-on-the-right",
        "only a scalar moves: a tensor on the left may broadcast the other way",
        lambda: Inst(T.bin("mul", L(0), L(1)), [_t(3), _t(2, 3)]),
    ),
    (
        "scale-into-addmm",
        "x of rank 3",
        lambda: Inst(
            T.bin("mul", T.linear(L(0), L(1), L(2)), T.const(2.0)),
            [_t(2, 3, 4), _t(5, 4), _t(5)],
            known={1, 2},
        ),
    ),
]


@pytest.mark.parametrize(
    ("name", "build"),
    [pytest.param(name, build, id=f"{name}: {why}") for name, why, build in SILENT],
)
def test_rule_is_silent_when_its_condition_fails(name: str, build: Callable[[], Inst]) -> None:
    inst = build()
    assert [str(form) for form in forms(name, inst)] == [str(inst.term)]


# -- regressions: instances where a rule was unsound, found by these properties ------------------
# (2026-12-04, each fixed in the rules or the lowering; the tests keep them fixed)


def _no_bias(op: str, kind: str, scale: Any) -> Inst:
    if kind == "linear":
        inner, leaves = T.linear(L(0), L(1), T.none()), [_t(3, 4), _t(5, 4)]
    else:
        inner, leaves = T.conv(L(0), L(1), T.none(), 0), [_t(1, 3, 5, 5), _t(5, 3, 2, 2)]
    if scale is None:  # one value per output, a parameter
        scale, leaves = L(2), [*leaves, _t(5)]
    return Inst(T.bin(op, inner, scale), leaves, known={1, 2}, convs=[CONV2D])


def test_a_missing_bias_is_never_an_operand():
    """mul/div into linear and conv, and the per-output scale and shift, once rewrote an op of
    the missing bias (torch.mul(None, s): a TypeError in the rewritten forward)."""
    for op in ("mul", "div"):
        for kind in ("linear", "conv"):
            run_check(f"{op}-into-{kind}", _no_bias(op, kind, T.const(2.0)))
    run_check("channel-scale-into-linear", _no_bias("mul", "linear", None))
    run_check("channel-shift-into-linear", _no_bias("add", "linear", None))


def test_a_division_by_zero_is_not_moved():
    """(x Wᵀ + b) / 0 is inf where x Wᵀ = 1, but x (W / 0)ᵀ sums 1 * inf + 0 * inf = nan; and
    sum(x / 0) for x = (1, -2) is nan, sum(x) / 0 is -inf."""
    by_zero = [
        (
            "div-into-linear",
            Inst(
                T.bin("div", T.linear(L(0), L(1), L(2)), T.const(0.0)),
                [
                    torch.tensor([[1.0, 0.0]]).double(),
                    torch.ones(1, 2).double(),
                    torch.zeros(1).double(),
                ],
                known={1, 2},
            ),
        ),
        (
            "sum-of-scaled",
            Inst(
                T.red("sum", T.bin("div", L(0), T.const(0.0)), 0, True),
                [torch.tensor([1.0, -2.0], dtype=torch.float64)],
            ),
        ),
    ]
    for name, inst in by_zero:
        assert [str(f) for f in forms(name, inst)] == [str(inst.term)], name


def test_an_unbatched_conv_is_not_a_conv_term():
    """nn.Conv2d on (C, H, W) has its channels in dim 0: the analyses and the through-conv
    rules assume a batch dim, so lowering keeps such a call as a leaf."""
    from agents.offline.egraph.lower import lower
    from agents.offline.fx import tracing
    from agents.offline.passes.base import Program

    class Unbatched(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 2)

        def forward(self, x):
            return torch.sum(self.conv(x), dim=1, keepdim=True)

    inputs = [torch.randn(3, 5, 5)]
    gm = tracing.trace(Program("", "Model", Unbatched(), inputs, [], "cpu"))
    low = lower(gm)
    conv = next(node for node in gm.graph.nodes if node.op == "call_module")
    assert "T.leaf" in str(low.terms[conv]) and "conv" not in str(low.terms[conv])
    for op in ("sum", "mean"):  # built by hand, a batched conv's rule still holds
        run_check(f"{op}-through-conv", _batched_conv(op))


def _batched_conv(op: str) -> Inst:
    return Inst(
        T.red(op, T.conv(L(0), L(1), L(2), 0), 1, True),
        [_t(2, 3, 5, 5), _t(4, 3, 2, 2), _t(4)],
        known={1, 2},
        convs=[CONV2D],
    )


def test_two_constants_whose_python_hashes_collide_stay_two():
    """hash(-1.0) == hash(-2.0) in CPython, and egglog's hash of a term mixes its literals'
    hashes: the emitter once keyed its memo by that hash and wrote one node for both."""
    x = torch.randn(2, 3, dtype=torch.float64)
    inst = Inst(T.bin("mul", T.full(-1.0, L(0)), T.full(-2.0, L(0))), [x])
    torch.testing.assert_close(evaluate(inst.term, inst), torch.full_like(x, 2.0))
