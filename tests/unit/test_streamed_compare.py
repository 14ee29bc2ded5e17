"""An output compared part by part decides as the whole output compared at once: the same
verdict and the same figures, whatever the part size, NaN and Inf included."""

from __future__ import annotations

import math

import pytest
import torch

from agents.verify import compare, streamed
from agents.verify.streamed import GoldLeaf, compare_leaf
from agents.verify.values import NAMES, TensorSpec


def _parts(cand: torch.Tensor, ref: torch.Tensor, gold: torch.Tensor | None, step: int):
    spec = TensorSpec(NAMES[ref.dtype], tuple(ref.shape), "cpu", "tensor")
    flat = {"output": ref.reshape(-1), "anchor": None if gold is None else gold.reshape(-1)}
    mode = GoldLeaf("parts") if gold is not None else GoldLeaf("none")
    old = streamed.CHUNK_BYTES
    streamed.CHUNK_BYTES = step * ref.element_size()
    try:
        return compare_leaf(
            0,
            spec,
            ["output"],
            lambda what, leaf, start, stop: flat[what][start:stop],
            lambda what, leaf, start, stop: cand.reshape(-1)[start:stop],
            mode,
        )[0]
    finally:
        streamed.CHUNK_BYTES = old


def _same(a: compare.OutputComparison, b: compare.OutputComparison) -> None:
    assert (a.ok, a.strict_ok, a.float64_ok, a.nonfinite) == (
        b.ok,
        b.strict_ok,
        b.float64_ok,
        b.nonfinite,
    )
    for x, y in ((a.max_abs_diff, b.max_abs_diff), (a.error_ratio, b.error_ratio)):
        assert (x is None) == (y is None)
        if x is not None and math.isfinite(x):
            assert x == pytest.approx(y, rel=1e-9, abs=1e-300)


@pytest.mark.parametrize("step", [1, 7, 1000, 1 << 20])
@pytest.mark.parametrize("case", ["honest", "band", "wrong", "nan", "inf_both", "cand_inf"])
def test_parts_decide_as_the_whole(case, step):
    generator = torch.Generator().manual_seed(3)
    gold = torch.randn(4096, generator=generator, dtype=torch.float64) * 1e3
    ref = gold.float()
    cand = ref.clone()
    if case == "band":  # off the strict rule, inside the float64 band
        cand = gold + 1e3 * 3e-7 * torch.randn(4096, generator=generator, dtype=torch.float64)
        cand = cand.float()
    elif case == "wrong":
        cand[-1] += 1.0
    elif case == "nan":
        cand[100] = float("nan")
    elif case == "inf_both":
        ref[5], cand[5], gold[5] = float("inf"), float("inf"), float("inf")
    elif case == "cand_inf":
        cand[4000] = float("inf")
    for anchor in (gold, None):
        _same(_parts(cand, ref, anchor, step), compare.compare_output(cand, ref, anchor))


def test_integer_and_empty_leaves():
    ints = torch.arange(100)
    assert _parts(ints.clone(), ints, None, 7).ok
    off = ints.clone()
    off[99] = 0
    assert not _parts(off, ints, None, 7).ok
    empty = torch.empty(0)
    assert _parts(empty, empty, empty.double(), 7).ok
