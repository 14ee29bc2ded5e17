"""The skill library: the shipped files load and cover the areas, and bad files fail clearly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memory.skills_library import (
    CODE_FEATURES,
    OFFLINE_PASSES,
    SKILLS_DIR,
    TARGETS,
    Skill,
    SkillError,
    Trigger,
    load_skills,
    skill_to_json,
)

AREA_PREFIXES = ("torch-", "cpu-", "cuda-", "triton-")

# Each area the library must cover, as keywords found in a skill's id or title.
AREAS = {
    "algebraic simplification": ("algebra", "reduction ahead"),
    "fusion": ("fuse", "fusion"),
    "library substitution": ("library substitution",),
    "memory format": ("channels_last", "memory format"),
    "host sync": ("host sync",),
    "vectorisation": ("vectoris", "vectorize"),
    "OpenMP": ("openmp", "parallel_for"),
    "cache blocking": ("cache blocking", "tiling"),
    "oneDNN": ("onednn", "mkldnn"),
    "coalescing": ("coalesc",),
    "shared-memory tiling": ("shared-memory tiling",),
    "tensor cores": ("tensor core",),
    "warp reduction": ("warp-shuffle", "warp shuffle"),
    "vectorised loads": ("vectorised 128-bit loads", "float4"),
    "occupancy": ("occupancy",),
    "CUDA graphs": ("cuda graph",),
    "Triton block sizes / autotune": ("autotune",),
    "num_warps / num_stages": ("num_warps", "num_stages"),
    "persistent kernels": ("persistent",),
}

VALID = """
[[skill]]
id = "torch-example"
title = "An example"
targets = ["torch"]
strategy = "Do the thing."
pitfalls = []
forbidden_patterns = []
expected_gain = "some"
gain_estimate = 1.5

[skill.trigger]
bound = ["memory"]
"""


@pytest.fixture(scope="module")
def shipped() -> list[Skill]:
    return load_skills()


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def load_error(folder: Path) -> str:
    with pytest.raises(SkillError) as caught:
        load_skills(folder)
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- the shipped library --


def test_shipped_library_loads_with_at_least_forty_skills(shipped):
    assert len(shipped) >= 40
    assert [s.id for s in shipped] == sorted(s.id for s in shipped)


def test_default_folder_is_the_package_skills_folder(shipped):
    assert load_skills(SKILLS_DIR) == shipped
    assert {Path(s.source).name for s in shipped} == {
        "torch.toml",
        "cpu.toml",
        "cuda.toml",
        "triton.toml",
    }


def test_shipped_ids_are_unique_and_prefixed_by_area(shipped):
    ids = [s.id for s in shipped]
    assert len(ids) == len(set(ids))
    for skill in shipped:
        assert skill.id.startswith(AREA_PREFIXES), skill.id
        assert skill.id.split("-")[0] == Path(skill.source).stem, skill.id


def test_every_target_is_covered(shipped):
    covered = {target for skill in shipped for target in skill.targets}
    assert covered == set(TARGETS)


@pytest.mark.parametrize("area", sorted(AREAS))
def test_every_listed_area_has_a_skill(shipped, area):
    keywords = AREAS[area]
    assert any(
        keyword in f"{skill.id} {skill.title}".lower() for skill in shipped for keyword in keywords
    ), area


def test_offline_passes_are_valid_and_all_used(shipped):
    used = {s.offline_pass for s in shipped if s.offline_pass is not None}
    assert used <= set(OFFLINE_PASSES)
    assert used == set(OFFLINE_PASSES)


def test_gpu_skills_trigger_only_on_cuda(shipped):
    for skill in shipped:
        if {"cuda", "triton"} & set(skill.targets):
            assert skill.trigger.devices == ("cuda",), skill.id


def test_cpu_cpp_only_skills_trigger_only_on_cpu(shipped):
    for skill in shipped:
        if skill.targets == ("cpu-cpp",):
            assert skill.trigger.devices == ("cpu",), skill.id


def test_every_skill_has_a_trigger_and_a_full_text(shipped):
    for skill in shipped:
        assert skill.trigger.present(), skill.id
        assert 1 <= len(skill.pitfalls) <= 3, skill.id
        assert 1 <= len(skill.forbidden_patterns) <= 3, skill.id
        assert skill.gain_estimate > 0


# Tensor-core skills that keep fp32 accuracy (split products), allowed on fp32 on purpose.
FP32_ACCURATE = {"triton-gemm-3xtf32-epilogue"}


def test_tensor_core_skill_is_forbidden_for_fp32(shipped):
    tensor_core = [
        s for s in shipped if "tensor core" in s.title.lower() and s.id not in FP32_ACCURATE
    ]
    assert tensor_core
    for skill in tensor_core:
        assert skill.forbid_when is not None and skill.forbid_when.dtypes == ("float32",)
        assert "float32" not in (skill.trigger.dtypes or ())


def test_fp32_accurate_tensor_core_skills_forbid_plain_tf32(shipped):
    accurate = [s for s in shipped if s.id in FP32_ACCURATE]
    assert [s.id for s in accurate] == sorted(FP32_ACCURATE)
    for skill in accurate:
        assert skill.trigger.dtypes == ("float32",)
        assert any("tf32" in p and "never" in p for p in skill.forbidden_patterns)


def test_skill_to_json_is_plain_json(shipped):
    for skill in shipped:
        data = skill_to_json(skill)
        assert json.loads(json.dumps(data)) == data
        assert data["id"] == skill.id
        assert isinstance(data["targets"], list)
        assert all(isinstance(v, list | int) for v in data["trigger"].values())


# -- a valid file --


def test_valid_file_loads_with_optional_fields_absent(tmp_path):
    write(tmp_path, "a.toml", VALID)
    (skill,) = load_skills(tmp_path)
    assert skill.id == "torch-example"
    assert skill.offline_pass is None
    assert skill.forbid_when is None
    assert skill.trigger == Trigger(bound=("memory",))
    assert skill.source == str(tmp_path / "a.toml")


def test_empty_folder_gives_no_skills(tmp_path):
    assert load_skills(tmp_path) == []


def test_missing_folder_is_an_error(tmp_path):
    message = load_error(tmp_path / "nope")
    assert "no such folder" in message


# -- invalid files --


def test_unknown_field_names_file_skill_and_field(tmp_path):
    write(tmp_path, "a.toml", VALID.replace("pitfalls = []", "pitfalls = []\npitfals = []"))
    message = load_error(tmp_path)
    assert message.startswith(str(tmp_path / "a.toml"))
    assert "skill 'torch-example'" in message
    assert "field 'pitfals'" in message and "unknown field" in message


def test_unknown_trigger_key_is_rejected(tmp_path):
    write(tmp_path, "a.toml", VALID.replace("bound = ", "bund = "))
    message = load_error(tmp_path)
    assert "field 'trigger.bund'" in message and "did you mean 'bound'" in message


def test_missing_required_field_names_the_field(tmp_path):
    write(tmp_path, "a.toml", VALID.replace('expected_gain = "some"\n', ""))
    message = load_error(tmp_path)
    assert "skill 'torch-example'" in message
    assert "field 'expected_gain'" in message and "missing" in message


def test_missing_id_names_the_skill_by_index(tmp_path):
    write(tmp_path, "a.toml", VALID + VALID.replace('id = "torch-example"\n', "", 1))
    message = load_error(tmp_path)
    assert "skill #2" in message and "field 'id'" in message


def test_wrong_type_names_the_field(tmp_path):
    write(tmp_path, "a.toml", VALID.replace('targets = ["torch"]', 'targets = "torch"'))
    message = load_error(tmp_path)
    assert "skill 'torch-example'" in message
    assert "field 'targets'" in message and "list" in message


def test_boolean_gain_estimate_is_not_a_number(tmp_path):
    write(tmp_path, "a.toml", VALID.replace("gain_estimate = 1.5", "gain_estimate = true"))
    assert "field 'gain_estimate'" in load_error(tmp_path)


def test_non_positive_gain_estimate_is_rejected(tmp_path):
    write(tmp_path, "a.toml", VALID.replace("gain_estimate = 1.5", "gain_estimate = 0"))
    assert "field 'gain_estimate'" in load_error(tmp_path)


def test_unknown_target_lists_the_allowed_ones(tmp_path):
    write(tmp_path, "cuda.toml", VALID.replace('targets = ["torch"]', 'targets = ["gpu"]'))
    message = load_error(tmp_path)
    assert message == (
        f"{tmp_path / 'cuda.toml'}: skill 'torch-example': field 'targets': "
        "unknown target 'gpu' (allowed: torch, cpu-cpp, cuda, triton)"
    )


def test_unknown_code_feature_is_rejected(tmp_path):
    text = VALID + 'code_features = ["manual_sofmax"]\n'
    write(tmp_path, "a.toml", text)
    message = load_error(tmp_path)
    assert "field 'trigger.code_features'" in message
    assert "unknown code feature 'manual_sofmax'" in message
    assert "manual_softmax" in message  # the allowed list


def test_unknown_offline_pass_is_rejected(tmp_path):
    write(
        tmp_path,
        "a.toml",
        VALID.replace("gain_estimate = 1.5", 'gain_estimate = 1.5\noffline_pass = "fold"'),
    )
    assert "field 'offline_pass'" in load_error(tmp_path)


def test_unknown_enum_value_in_forbid_when_is_rejected(tmp_path):
    write(tmp_path, "a.toml", VALID + '\n[skill.forbid_when]\nheadroom = ["lo"]\n')
    message = load_error(tmp_path)
    assert "field 'forbid_when.headroom'" in message and "'lo'" in message


def test_empty_trigger_list_is_rejected(tmp_path):
    write(tmp_path, "a.toml", VALID.replace('bound = ["memory"]', "bound = []"))
    assert "field 'trigger.bound'" in load_error(tmp_path)


def test_empty_forbid_when_is_rejected(tmp_path):
    write(tmp_path, "a.toml", VALID + "\n[skill.forbid_when]\n")
    assert "field 'forbid_when'" in load_error(tmp_path)


def test_invalid_id_is_rejected(tmp_path):
    write(tmp_path, "a.toml", VALID.replace('"torch-example"', '"Torch_Example"'))
    assert "field 'id'" in load_error(tmp_path)


def test_duplicate_id_across_two_files_names_both(tmp_path):
    write(tmp_path, "a.toml", VALID)
    write(tmp_path, "b.toml", VALID)
    message = load_error(tmp_path)
    assert message.startswith(str(tmp_path / "b.toml"))
    assert "skill 'torch-example'" in message and "field 'id'" in message
    assert "duplicate" in message and str(tmp_path / "a.toml") in message


def test_toml_syntax_error_reports_the_line(tmp_path):
    write(tmp_path, "a.toml", VALID.replace('title = "An example"', "title = An example"))
    message = load_error(tmp_path)
    assert message.startswith(str(tmp_path / "a.toml"))
    assert "TOML syntax error" in message and "line 4" in message


def test_min_launches_above_max_launches_is_rejected(tmp_path):
    write(tmp_path, "a.toml", VALID + "min_launches = 10\nmax_launches = 2\n")
    message = load_error(tmp_path)
    assert "skill 'torch-example'" in message
    assert "field 'trigger.min_launches'" in message and "10 > max_launches 2" in message


def test_unknown_top_level_key_is_rejected(tmp_path):
    write(tmp_path, "a.toml", "[[skills]]\n" + VALID.split("[[skill]]\n", 1)[1])
    assert "unknown top-level key 'skills'" in load_error(tmp_path)


def test_every_code_feature_is_accepted(tmp_path):
    features = ", ".join(f'"{f}"' for f in CODE_FEATURES)
    write(tmp_path, "a.toml", VALID + f"any_code_features = [{features}]\n")
    (skill,) = load_skills(tmp_path)
    assert skill.trigger.any_code_features == CODE_FEATURES
