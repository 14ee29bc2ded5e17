"""The gate orders equality saturation but never hides it: wherever the source has what the
e-graph reads, no profile (a GEMM at 100% of its peak, nothing hot it names, a low headroom)
keeps it out; where the source has nothing of that, the profile still decides."""

from __future__ import annotations

import itertools

import pytest
import torch

from agents.profile.report import Ceilings, LineStat, OpStat, Profile, Roofline
from memory.gate import gate
from memory.profile_metrics import ProfileMetrics
from memory.skills_library import SkillError, load_skills
from tests.conftest import ROOT

EGRAPH = "torch-equality-saturation"
PROBLEMS = ROOT / "bench" / "problems"
ALGEBRA = ROOT / "tests" / "algebra_problems"


def profile_of(ops: list[tuple[str, float]], pct_of_peak: float, bound: str) -> ProfileMetrics:
    """What the gate reads of a CPU profile whose ops take the given shares, the whole forward
    at `pct_of_peak`."""
    stats = [
        OpStat(name, 1, 10.0 * share, share, [[256, 1024]], "torch.float32", 10**9, 10**6,
               1000.0, bound, pct_of_peak, 10.0 * share * pct_of_peak / 100)
        for name, share in ops
    ]  # fmt: skip
    line = LineStat("problem.py", 12, "forward", "x = self.gemm(x)", 10.0, 1.0, 10**9, 10**6,
                    1000.0, bound, pct_of_peak, 10.0 * pct_of_peak / 100, stats)  # fmt: skip
    roofline = Roofline(10**9, 10**6, 10**7, 1000.0, 10.0, 0.1, 10.0, bound, pct_of_peak)
    ceilings = Ceilings("cpu", "test cpu", 1, 10.0, 100.0, None, "2026-01-01T00:00:00+00:00")
    profile = Profile("problem.py", "cpu", "default", 1, 3, torch.__version__, 10.0, 10.0, 10.0,
                      1.0, [line], stats, roofline, ceilings)  # fmt: skip
    return profile.metrics()


GEMM_AT_PEAK = profile_of([("aten::addmm", 0.99), ("aten::gelu", 0.01)], 100.0, "compute")
PROFILES = {
    "gemm at 100% of peak": GEMM_AT_PEAK,
    "conv at 100% of peak": profile_of([("aten::mkldnn_convolution", 1.0)], 100.0, "compute"),
    "only pooling hot": profile_of([("aten::max_pool2d", 1.0)], 95.0, "memory"),
    "only attention hot": profile_of(
        [("aten::_scaled_dot_product_flash_attention_for_cpu", 1.0)], 85.0, "compute"
    ),
    "no ops at all": profile_of([], 100.0, "overhead"),
}


def _sources() -> dict[str, str]:
    """Every problem of ours whose source the e-graph reads (a linear map, a reduction...)."""
    offer = next(s for s in load_skills() if s.id == EGRAPH).offer_when
    assert offer is not None and offer.any_code_features
    found = {}
    for path in sorted(PROBLEMS.glob("*.py")) + sorted(ALGEBRA.glob("*.py")):
        text = path.read_text()
        if any(feature in text for feature in ("nn.Linear", "torch.matmul", ".sum(", "Conv")):
            found[path.stem] = text
    return found


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_no_profile_hides_equality_saturation_from_a_source_it_reads(name):
    for problem, source in _sources().items():
        result = gate(PROFILES[name], source, device="cpu")
        assert EGRAPH in result.allowed_ids(), (name, problem, result.to_json())
        assert EGRAPH not in {c.skill.id for c in result.forbidden}


def test_a_gemm_at_its_peak_keeps_the_e_graph_and_says_why():
    source = (ALGEBRA / "1_Gemm_Max_SubtractMean_GELU.py").read_text()
    result = gate(GEMM_AT_PEAK, source, device="cpu")
    assert result.facts.headroom == "low" and result.facts.pct_of_peak == 100.0
    choice = next(c for c in result.allowed if c.skill.id == EGRAPH)
    assert choice.score > 0 and all(reason.startswith("✓") for reason in choice.why)
    # Where the profile alone would have kept it out, the reason says it was offered anyway.
    pooled = gate(PROFILES["only pooling hot"], source, device="cpu")
    why = next(c.why for c in pooled.allowed if c.skill.id == EGRAPH)
    assert "offered whatever the profile says" in why[-1] and "linear at line" in why[0]


def test_the_profile_still_orders_it():
    """Low headroom lowers every score alike; a skill the profile favours can rank first."""
    source = (ALGEBRA / "1_Gemm_Max_SubtractMean_GELU.py").read_text()
    quiet = profile_of([("aten::addmm", 0.99), ("aten::gelu", 0.01)], 20.0, "compute")
    high = next(c.score for c in gate(quiet, source).allowed if c.skill.id == EGRAPH)
    low = next(c.score for c in gate(GEMM_AT_PEAK, source).allowed if c.skill.id == EGRAPH)
    assert 0 < low < high


def test_a_source_without_anything_the_e_graph_reads_is_left_to_the_profile():
    """The negative control: a lone max-pool has no feature the e-graph reads, so a profile
    with nothing the skill's trigger names keeps it out."""
    source = (PROBLEMS / "06_maxpool2d.py").read_text()
    result = gate(PROFILES["only pooling hot"], source, device="cpu")
    assert EGRAPH not in result.allowed_ids()


def test_offer_when_overrides_forbid_when_and_every_profile(tmp_path):
    """A library skill whose trigger and forbid_when both say no, on every profile, is still
    allowed where its offer_when holds, and only there."""
    (tmp_path / "a.toml").write_text(
        SKILL
        + '\n[skill.trigger]\nop_categories = ["softmax"]\nheadroom = ["high"]\n'
        + '\n[skill.forbid_when]\nheadroom = ["low", "medium", "high"]\n'
        + '\n[skill.offer_when]\nany_code_features = ["linear"]\n'
    )
    skills = load_skills(tmp_path)
    with_linear = (ALGEBRA / "1_Gemm_Max_SubtractMean_GELU.py").read_text()
    without = (PROBLEMS / "06_maxpool2d.py").read_text()
    for profile, source in itertools.product([*PROFILES.values(), None], [with_linear, without]):
        result = gate(profile, source, device="cpu", skills=skills)
        assert (result.allowed_ids() == ["torch-proof"]) == (source is with_linear)


@pytest.mark.parametrize(
    "key", ['headroom = ["low"]', 'op_categories = ["gemm"]', "min_launches = 2"]
)
def test_offer_when_may_not_test_the_profile(tmp_path, key):
    (tmp_path / "a.toml").write_text(SKILL + f"\n[skill.offer_when]\n{key}\n")
    with pytest.raises(SkillError, match="offer_when may test only"):
        load_skills(tmp_path)


SKILL = """[[skill]]
id = "torch-proof"
title = "A pass that proves a cheaper form"
targets = ["torch"]
strategy = "Prove it."
pitfalls = []
forbidden_patterns = []
expected_gain = "any"
gain_estimate = 2.0
offline_pass = "equality-saturation"
"""


TRITON_GEMM = "triton-gemm-3xtf32-epilogue"
GEMM_SHAPES = ROOT / "bench" / "gemm_shapes"


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_no_profile_hides_triton_gemm_from_a_cuda_gemm(name):
    """Every GEMM spelling of bench/gemm_shapes keeps the tensor-core GEMM on CUDA, whatever
    the profile says (a ceiling measured under load can put the GEMM at its peak or make it
    look memory-bound); on the CPU the pass has nothing to offer and the gate keeps it out."""
    for path in sorted(GEMM_SHAPES.glob("*.py")):
        source = path.read_text()
        on_cuda = gate(PROFILES[name], source, device="cuda")
        assert TRITON_GEMM in on_cuda.allowed_ids(), (name, path.stem, on_cuda.to_json())
        assert TRITON_GEMM not in gate(PROFILES[name], source, device="cpu").allowed_ids()
