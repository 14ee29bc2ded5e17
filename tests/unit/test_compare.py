"""The two comparison rules: KernelBench's strict allclose, and the float64-anchored band."""

from __future__ import annotations

import pytest
import torch

from agents.verify.compare import OutputMismatch, check_structure, compare_output, flatten


def _gemm_sum(x, w, dtype):
    return (x.to(dtype) @ w.to(dtype).T).sum(dim=1, keepdim=True).to(torch.float32)


@pytest.fixture
def wide_gemm():
    torch.manual_seed(3)
    x, w = torch.randn(32, 4096), torch.randn(4096, 4096)
    ref = _gemm_sum(x, w, torch.float32)
    gold = (x.double() @ w.double().T).sum(dim=1, keepdim=True)
    return x, w, ref, gold


def test_reassociated_sum_passes_float64_rule(wide_gemm):
    x, w, ref, gold = wide_gemm
    rewrite = (x @ w.sum(dim=0)).unsqueeze(1)
    result = compare_output(rewrite, ref, gold)
    assert result.float64_ok and result.ok
    assert result.error_ratio < 1.0


def test_bfloat16_downgrade_fails_both_rules(wide_gemm):
    x, w, ref, gold = wide_gemm
    result = compare_output(_gemm_sum(x, w, torch.bfloat16), ref, gold)
    assert not result.strict_ok
    assert result.float64_ok is False
    assert result.error_ratio > 10


def test_nan_where_reference_is_finite_fails_even_with_float64():
    ref = torch.ones(4)
    cand = torch.ones(4)
    cand[2] = float("nan")
    result = compare_output(cand, ref, ref.double())
    assert result.nonfinite and not result.ok


def test_matching_nan_positions_are_accepted():
    ref = torch.tensor([1.0, float("nan")])
    assert compare_output(ref.clone(), ref, None).ok


def test_one_bad_element_cannot_hide_in_a_large_norm():
    torch.manual_seed(0)
    gold = torch.randn(1_000_000, dtype=torch.float64)
    ref = gold.float()
    cand = ref.clone()
    cand[17] += 1e-3
    result = compare_output(cand, ref, gold)
    assert not result.strict_ok
    assert result.float64_ok is False


def test_structure_refuses_broadcastable_shape_dtype_and_subclass():
    ref = [torch.zeros(4, 1)]
    with pytest.raises(OutputMismatch, match="shape"):
        check_structure([torch.zeros(4)], ref)
    with pytest.raises(OutputMismatch, match="dtype"):
        check_structure([torch.zeros(4, 1, dtype=torch.float64)], ref)

    class Lazy(torch.Tensor):
        pass

    with pytest.raises(OutputMismatch, match=r"plain torch\.Tensor"):
        check_structure([torch.zeros(4, 1).as_subclass(Lazy)], ref)
    with pytest.raises(OutputMismatch, match="returned 2 outputs"):
        check_structure([torch.zeros(4, 1), torch.zeros(4, 1)], ref)


def test_integer_outputs_must_match_exactly():
    ref = torch.tensor([1, 2, 3])
    assert compare_output(ref.clone(), ref, None).ok
    assert not compare_output(torch.tensor([1, 2, 4]), ref, None).ok


def test_flatten_walks_nested_outputs_in_order():
    a, b, c = torch.zeros(1), torch.ones(1), torch.full((1,), 2.0)
    assert [t.item() for t in flatten((a, [b, {"z": c}]))] == [0.0, 1.0, 2.0]
