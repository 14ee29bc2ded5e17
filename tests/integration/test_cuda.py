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


# The adversarial families of tests/adversarial/, on the GPU: each must be refused there too.
ON_CUDA = [
    "empty_output",
    "cached_output",
    "forge_reply_out_of_turn",
    "patch_own_harness",
    "switch_after_verification",
    "timing_by_identity",
    "aten_override_faithful",
    "double_fork_daemon",
    "flood_reply",
]


@pytest.mark.parametrize("cheat", ON_CUDA)
def test_adversarial_families_are_refused_on_cuda(cheat):
    from tests.integration.test_adversarial import header

    path = TESTS / "adversarial" / f"{cheat}.py"
    spec = header(path)
    result = run_eval(spec["problem"], path, device="cuda", static_check=False)
    if spec.get("expect") == "true-speed":
        assert result.verdict is Verdict.CORRECT and result.speedup < 2.0, result.reasons
    else:
        assert result.verdict is not Verdict.CORRECT, result.reasons


def test_patched_clocks_buy_nothing_on_cuda():
    result = run_eval(
        "linear_relu.py",
        TESTS / "adversarial" / "patch_cuda_event.py",
        device="cuda",
        static_check=False,
    )
    assert result.verdict is Verdict.CORRECT and result.speedup < 2.0, result


def test_work_left_on_the_gpu_after_the_reply_is_refused():
    """Its side-stream work would slow the reference's runs: the parent's L2 flushes, timed
    from its host, wait for it."""
    result = run_eval(
        CUDA / "elementwise.py", CUDA / "gpu_hog_after_reply.py", device="cuda", static_check=False
    )
    assert result.verdict is not Verdict.CORRECT or result.speedup < 1.5, result


def test_a_reply_before_the_kernels_finish_is_refused_or_timed_in_full():
    result = run_eval(
        CUDA / "elementwise.py", CUDA / "unsynced_reply.py", device="cuda", static_check=False
    )
    assert result.verdict is not Verdict.CORRECT or result.speedup < 1.0, result


def test_the_jail_holds_with_cuda():
    """bubblewrap with the GPU's device nodes bound: the escape attempts fail there too."""
    result = run_eval(
        "linear_relu.py",
        TESTS / "adversarial" / "jail_escape.py",
        device="cuda",
        static_check=False,
    )
    assert result.verdict is Verdict.CORRECT, result.reasons
    assert "bubblewrap" in result.isolation
