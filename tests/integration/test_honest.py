"""Honest rewrites pass: a verifier that refuses correct work is as useless as a lax one."""

from __future__ import annotations

import pytest

from agents.verify.verdict import Verdict
from tests.conftest import run_eval


@pytest.mark.parametrize(
    ("problem", "candidate"),
    [
        ("linear_relu.py", "linear_relu_honest.py"),
        ("two_outputs.py", "two_outputs_honest.py"),
    ],
)
def test_honest_rewrite_is_correct(problem, candidate):
    result = run_eval(problem, candidate)
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.strict_allclose is True
    assert result.speedup is not None and result.candidate_ms > 0
    assert result.trials == 5


def test_reassociation_that_strict_allclose_rejects_passes_on_float64():
    result = run_eval("wide_gemm_sum.py", "wide_gemm_sum_reassociated.py", seed=1)
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.float64_rule is True
    assert result.float64_error_ratio < 1.0
    assert result.state_dict_compatible is True and result.reload_check == "passed"


def test_renamed_parameters_are_reported_not_compatible_and_can_be_required():
    from tests.conftest import candidate_source

    text = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.fc = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.fc(x))
"""
    # Built from the same seed, the renamed layer draws the same weights.
    result = run_eval("linear_relu.py", candidate_source(text))
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.state_dict_compatible is False
    assert result.reload_check.startswith("skipped")
    strict = run_eval("linear_relu.py", candidate_source(text), require_state_dict=True)
    assert strict.verdict is Verdict.REJECTED


@pytest.mark.slow
def test_cpp_load_inline_extension_builds_and_verifies_on_cpu():
    result = run_eval("linear_relu.py", "linear_relu_cpp.py")
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.state_dict_compatible is True
