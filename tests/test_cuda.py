"""The GPU path: models and inputs on CUDA, CUDA load_inline candidates built and verified.
Skipped cleanly where no NVIDIA GPU is present (CI, this development machine)."""

from __future__ import annotations

import pytest
import torch

from agents.verify.verdict import Verdict
from tests.conftest import TESTS, run_eval

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
]
CUDA = TESTS / "cuda"


def test_cuda_load_inline_candidate_builds_verifies_and_is_timed():
    result = run_eval(
        CUDA / "elementwise.py", CUDA / "elementwise_cuda.py", device="cuda", threads=None
    )
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert result.device == "cuda"
    assert result.speedup is not None and result.speedup > 0


def test_side_stream_work_is_refused_on_cuda():
    result = run_eval(CUDA / "elementwise.py", CUDA / "elementwise_side_stream.py", device="cuda")
    assert result.verdict is Verdict.REJECTED, result.reasons
    assert "side-stream" in {f["rule"] for f in result.static_findings}


def test_side_stream_work_is_timed_in_full_by_the_runtime_alone():
    result = run_eval(
        CUDA / "elementwise.py",
        CUDA / "elementwise_side_stream.py",
        device="cuda",
        static_check=False,
    )
    # Either its race is caught as a wrong answer, or, synchronised, it is slower than eager.
    assert result.verdict is not Verdict.CORRECT or result.speedup < 1.0, result


def test_torch_cheats_are_refused_on_cuda():
    for cheat in ("empty_output.py", "cached_output.py", "patch_cuda_event.py"):
        result = run_eval(
            "linear_relu.py", TESTS / "adversarial" / cheat, device="cuda", static_check=False
        )
        assert result.verdict is not Verdict.CORRECT, (cheat, result.reasons)
