"""The skill gate on real profiles of the bench problems, and the code features it reads."""

from __future__ import annotations

import pytest

from agents.profile.api import profile_file
from agents.task import SourceFile
from memory.features import ALL_FEATURES, extract_features
from memory.gate import gate, headroom_tier, op_category
from memory.skills_library import load_skills
from tests.conftest import ROOT

PROBLEMS = ROOT / "bench" / "problems"
GATED = {
    "gemm_sum": "13_gemm_divide_sum_scaling.py",
    "manual_softmax": "17_manual_softmax.py",
    "manual_layernorm": "18_manual_layernorm.py",
    "gemm_scale_shift": "15_gemm_scale_shift.py",
    "attention": "20_attention_block.py",
    "conv_batchnorm": "21_residual_conv_block.py",
}
IDENTITIES = SourceFile(
    """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.0)
        self.keep = nn.Identity()

    def forward(self, x):
        y = self.drop(x.clone()).contiguous() * 1
        return self.keep(y.transpose(0, 1).transpose(0, 1).contiguous()) + 0


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return []
""",
    "identities.py",
)


@pytest.fixture(scope="module")
def profiles(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    result = {}
    sources = {key: SourceFile.from_path(PROBLEMS / name) for key, name in GATED.items()}
    for key, source in {**sources, "identities": IDENTITIES}.items():
        result[key] = (profile_file(source, threads=1, repeat=2, cache_dir=cache), source)
    return result


def passes(result) -> set[str]:
    return {choice.skill.offline_pass for choice in result.allowed if choice.skill.offline_pass}


def test_op_categories_and_headroom_tiers():
    assert op_category("aten::addmm") == "gemm"
    assert op_category("aten::mkldnn_convolution") == "conv"
    assert op_category("aten::_softmax") == "softmax"
    assert op_category("aten::native_layer_norm") == "norm"
    assert op_category("aten::sum.dim_IntList") == "reduction"
    assert op_category("aten::relu") == "pointwise"
    assert op_category("aten::view") is None
    assert [headroom_tier(p) for p in (10, 59.9, 60, 80, 80.1)] == [
        "high",
        "high",
        "medium",
        "medium",
        "low",
    ]


def test_code_features_on_the_bench_problems():
    def features(name):
        return extract_features((PROBLEMS / name).read_text()).names

    assert {"reduction_after_gemm", "matmul"} <= features("13_gemm_divide_sum_scaling.py")
    assert "manual_softmax" in features("17_manual_softmax.py")
    assert "manual_norm" in features("18_manual_layernorm.py")
    assert "manual_attention" in features("20_attention_block.py")
    assert "scale_after_linear" in features("15_gemm_scale_shift.py")
    assert "manual_softmax" not in features("03_softmax.py")
    assert set(features("21_residual_conv_block.py")) <= set(ALL_FEATURES)


def test_gemm_then_sum_allows_equality_saturation(profiles):
    profile, source = profiles["gemm_sum"]
    result = gate(profile.metrics(), source.text)
    assert "equality-saturation" in passes(result)
    assert result.facts.hot_categories.get("gemm", 0) > 0.3


def test_hand_written_softmax_and_norm_allow_library_substitution(profiles):
    for key in ("manual_softmax", "manual_layernorm"):
        profile, source = profiles[key]
        assert "library-substitution" in passes(gate(profile.metrics(), source.text)), key


def test_what_the_pattern_passes_were_gated_for_allows_equality_saturation(profiles):
    """The equality-saturation pass replaced algebraic-simplification, fold-scale-shift and
    remove-identities: a scale after a linear, BatchNorm after a conv, and copies and
    identities still get it."""
    for key in ("gemm_scale_shift", "conv_batchnorm", "identities"):
        profile, source = profiles[key]
        assert "equality-saturation" in passes(gate(profile.metrics(), source.text)), key


def test_cpu_profiles_never_allow_cuda_or_triton_skills(profiles):
    for profile, source in profiles.values():
        result = gate(profile.metrics(), source.text)
        for choice in result.allowed:
            assert not set(choice.skill.targets) <= {"cuda", "triton"}, choice.skill.id


def test_gate_is_deterministic_and_explains_every_choice(profiles):
    profile, source = profiles["attention"]
    first, second = gate(profile.metrics(), source.text), gate(profile.metrics(), source.text)
    assert first.allowed_ids() == second.allowed_ids()
    assert first.allowed, "an attention block on the CPU should allow something"
    scores = [choice.score for choice in first.allowed]
    assert scores == sorted(scores, reverse=True)
    for choice in first.allowed:
        assert choice.why and all(reason.startswith("✓") for reason in choice.why)
    assert len(first.allowed) + len(first.forbidden) + first.not_triggered == len(load_skills())


def test_without_a_profile_profile_conditions_do_not_hold():
    """Without a profile a skill gets in only through the source: a trigger that tests no
    profile fact, or an `offer_when` the source meets (which says so)."""
    source = (PROBLEMS / "13_gemm_divide_sum_scaling.py").read_text()
    result = gate(None, source, device="cpu")
    for choice in result.allowed:
        trigger = choice.skill.trigger
        if trigger.bound or trigger.op_categories or trigger.headroom:
            assert choice.skill.offer_when is not None
            assert "offered whatever the profile says" in choice.why[-1]


def test_low_headroom_forbids_what_the_library_forbids_there(profiles):
    profile, source = profiles["gemm_sum"]
    facts_pct = profile.roofline.pct_of_peak
    profile.roofline.pct_of_peak = 95.0
    try:
        result = gate(profile.metrics(), source.text)
    finally:
        profile.roofline.pct_of_peak = facts_pct
    assert result.facts.headroom == "low"
    for choice in result.forbidden:
        assert choice.why[0].startswith("forbidden because")
