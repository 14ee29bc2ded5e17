"""Accepting a rewrite (server/edits.py), incremental documents and settings."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agents.profile.report import LineStat
from agents.targets.edits import EditRefused, Rewrite, apply_changes, build_accept
from agents.targets.find import find_targets
from memory.experiences import Experience, ExperienceStore, TaskSignature
from memory.store import MemoryStore
from server.diagnostics import Finding, locate, shift
from server.documents import Document, LineEdit
from server.feedback import record_decision
from server.settings import Settings, load

ROOT = Path(__file__).resolve().parents[2]
GEMM = (ROOT / "bench/problems/13_gemm_divide_sum_scaling.py").read_text()

REWRITE = '''"""Verified by kernel-agent."""
import math

import torch
import torch.nn as nn

BATCH = 256
SCALE = 0.75


def helper(x):
    return x * SCALE * math.sqrt(1.0)


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super(ModelNew, self).__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size, input_size))
        self.scaling_factor = scaling_factor

    def forward(self, x):
        return helper(torch.matmul(x, self.weight.sum(0, keepdim=True).T))


def get_inputs():
    return [torch.randn(BATCH, 1024)]
'''


def rewrite(snapshot: str = GEMM, source: str = REWRITE, **kw) -> Rewrite:
    values = dict(job_id="j1", uri="file:///g.py", target="Model", target_kind="module")
    values.update(kw)
    return Rewrite(snapshot=snapshot, source=source, speedup=2.31, **values)


def classes(text: str) -> list[str]:
    return [n.name for n in ast.parse(text).body if isinstance(n, ast.ClassDef)]


def test_replace_puts_model_new_in_place_keeping_the_harness():
    plan = build_accept(GEMM, rewrite(), "replace")
    out = apply_changes(GEMM, plan.changes)
    ast.parse(out)
    assert classes(out) == ["Model"]
    assert "self.weight.sum(0, keepdim=True)" in out and "super(Model, self)" in out
    assert out.count("import math") == 1 and out.index("import math") < out.index("BATCH")
    assert "SCALE = 0.75" in out and out.index("def helper") < out.index("class Model")
    # the user's harness and constants stay; the rewrite's copies are not added
    assert out.count("def get_inputs") == 1 and "torch.randn(BATCH, INPUT_SIZE)" in out
    assert out.count("BATCH = 256") == 1


def test_a_demoted_docstring_of_the_rewrite_is_not_copied():
    source = 'import math\n"""Verified by kernel-agent."""\n' + REWRITE.split("\n", 1)[1]
    out = apply_changes(GEMM, build_accept(GEMM, rewrite(source=source), "replace").changes)
    assert "Verified by kernel-agent" not in out and out.count('"""') == 2


def test_alongside_adds_model_new_after_the_original():
    plan = build_accept(GEMM, rewrite(), "alongside")
    out = apply_changes(GEMM, plan.changes)
    assert plan.new_name == "ModelNew" and classes(out) == ["Model", "ModelNew"]
    assert "x = x / 2" in out  # the original is untouched


def test_clashing_helper_is_renamed_not_overwritten():
    text = GEMM.replace("SCALING_FACTOR = 1.5", "SCALING_FACTOR = 1.5\nSCALE = 3")
    plan = build_accept(text, rewrite(snapshot=text), "replace")
    out = apply_changes(text, plan.changes)
    assert plan.renamed == {"SCALE": "SCALE_opt"}
    assert "SCALE = 3" in out and "SCALE_opt = 0.75" in out and "x * SCALE_opt *" in out


def test_edit_elsewhere_is_fine_but_an_edit_of_the_target_is_refused():
    elsewhere = GEMM.replace("BATCH = 256", "BATCH = 128  # smaller")
    out = apply_changes(elsewhere, build_accept(elsewhere, rewrite(), "replace").changes)
    assert "BATCH = 128  # smaller" in out and classes(out) == ["Model"]
    edited = GEMM.replace("x = x / 2", "x = x / 3")
    with pytest.raises(EditRefused, match="changed since it was optimised"):
        build_accept(edited, rewrite(), "replace")
    gone = GEMM.replace("class Model(", "class Renamed(")
    with pytest.raises(EditRefused, match="no longer in the file"):
        build_accept(gone, rewrite(), "replace")


FUNCTION_FILE = """import torch


def fused(x, y, alpha=2.0):
    return torch.relu(x * alpha + y)


def get_inputs():
    return [torch.randn(8, 8), torch.randn(8, 8)]
"""

FUNCTION_REWRITE = """import torch


def fused(x, y, alpha=2.0):
    return torch.relu(x * alpha + y)


class ModelNew(torch.nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()

    def forward(self, x, y, alpha=2.0):
        return torch.relu(torch.addcmul(y, x, torch.tensor(alpha)))
"""


def test_function_target_gets_an_honest_optimized_twin():
    rw = rewrite(
        snapshot=FUNCTION_FILE, source=FUNCTION_REWRITE, target="fused", target_kind="function"
    )
    plan = build_accept(FUNCTION_FILE, rw, "replace")
    assert plan.mode == "alongside" and "not the file's Model" in plan.note
    out = apply_changes(FUNCTION_FILE, plan.changes)
    assert out.count("def fused(") == 1  # identical helper reused, not duplicated
    namespace: dict = {}
    exec(compile(out, "<accepted>", "exec"), namespace)
    import torch

    x, y = namespace["get_inputs"]()
    assert torch.allclose(namespace["fused_optimized"](x, y), namespace["fused"](x, y))
    assert torch.allclose(namespace["fused_optimized"](x, y, 0.5), namespace["fused"](x, y, 0.5))


def test_incremental_edits_track_lines():
    doc = Document("file:///d.py", "a = 1\nb = 2\nc = 3\n", 1)
    edit = doc.apply((0, 0), (0, 0), "import os\n", 2)
    assert doc.text == "import os\na = 1\nb = 2\nc = 3\n"
    assert edit.map_line(0) == 1 and edit.map_line(2) == 3
    assert str(doc.root) == str(Document("x", doc.text, 1).root)  # same tree as a fresh parse
    edit = doc.apply((2, 4), (2, 5), "20", 3)  # b = 2 → b = 20
    assert doc.line(2) == "b = 20" and edit.map_line(2) is None and edit.map_line(3) == 3
    edit = doc.apply((1, 5), (1, 5), "\nz = 0", 4)  # Enter at the end of "a = 1"
    assert edit.map_line(1) == 1 and edit.map_line(2) == 3
    edit = doc.apply((0, 0), (1, 0), "", 5)  # delete the first line
    assert edit.map_line(0) is None and edit.map_line(1) == 0


def test_utf16_positions_and_tree_edits():
    doc = Document("file:///u.py", "s = '😀'\nt = 1\n", 1)
    doc.apply((0, 7), (0, 7), "x", 2, "utf-16")  # after the emoji (2 UTF-16 units)
    assert doc.line(0) == "s = '😀x'"
    assert not doc.root.has_error


def test_findings_move_with_edits_above_and_go_when_their_line_is_edited():
    stat = LineStat("f", 3, "forward", "x = 1", 1.0, 0.5, 0, 0, None, "memory", 10.0, 0.1)
    findings = [Finding(2, "x = 1", stat, "Model", "m", None)]
    kept, changed = shift(findings, LineEdit(0, -1, 2))  # two lines inserted above
    assert changed and kept[0].line == 4
    kept, changed = shift(kept, LineEdit(4, 4, 0))
    assert changed and kept == []
    assert locate(["a", "  x = 1", "b"], stat) == 1


def test_settings_accept_nested_and_flat_shapes_and_report_bad_values():
    nested = load(
        {
            "kernelAgent": {
                "search": {"maxEvals": 6, "timingBudget": 0.3},
                "rewriteMode": "alongside",
            }
        }
    )
    flat = load({"max_evals": 6, "timing_budget": 0.3, "rewrite_mode": "alongside"})
    assert nested.settings == flat.settings and not nested.problems
    assert nested.settings.job_settings()["budget.max_evals"] == 6
    bad = load({"beam": 0, "device": "tpu", "bogus": 1, "apiKeys": {"anthropic": "sk-x"}})
    assert bad.settings.beam is None and bad.settings.device == "cpu"
    message = bad.message
    assert message.count("\n") == 0 and "beam" in message and "bogus" in message
    assert "apiKeys are only accepted in initializationOptions" in message


def test_the_evaluation_backend_settings_reach_the_job():
    remote = load({"kernelAgent": {"evalBackend": "ray", "rayAddress": "ray://gpu-head:10001"}})
    assert not remote.problems
    job = remote.settings.job_settings()
    assert job["evaluation.eval_backend"] == "ray"
    assert job["evaluation.ray_address"] == "ray://gpu-head:10001"
    assert "evaluation.ray_address" not in load({"rayAddress": ""}).settings.job_settings()
    bad = load({"evalBackend": "slurm"})
    assert bad.settings.eval_backend == "local"
    assert "evalBackend must be one of local, ray" in bad.message


def test_api_keys_stay_out_of_reprs_and_settings(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    loaded = load({"llm": {"backend": "anthropic", "roles": {"executor": {"model": "m"}}}})
    assert loaded.settings.missing_key() and "ANTHROPIC_API_KEY" in loaded.settings.missing_key()
    keyed = load(
        {"apiKeys": {"anthropic": "sk-ant-canary-123"}}, base=loaded.settings, trust_keys=True
    )
    settings = keyed.settings
    assert settings.missing_key() is None
    assert settings.job_env() == {"ANTHROPIC_API_KEY": "sk-ant-canary-123"}
    for text in (repr(settings), settings.describe(), str(settings.job_settings())):
        assert "canary" not in text
    llm = {k: v for k, v in settings.job_settings().items() if k.startswith("llm.")}
    assert llm == {"llm.backend": "anthropic", "llm.roles.executor.model": "m"}
    offline = {k: v for k, v in settings.job_settings("offline").items() if k.startswith("llm.")}
    assert offline == {"llm.backend": "offline"}
    assert Settings().job_env() == {}


def test_feedback_marks_the_lessons_of_the_decided_rewrite(tmp_path):
    path = tmp_path / "memory.sqlite3"
    with MemoryStore(path) as store:
        experiences = ExperienceStore(store)
        (exp_id,) = experiences.add_many(
            [
                Experience(
                    signature=TaskSignature(op_categories=("gemm",)),
                    slow_source=GEMM,
                    fast_source=REWRITE,
                    speedup=2.31,
                    title="reduce first",
                )
            ]
        )
    decision = record_decision(REWRITE + "\n# a comment\n", True, str(path))
    assert decision.lessons == 1 and "accepted" in decision.summary
    with MemoryStore(path) as store:
        assert ExperienceStore(store).get(exp_id).feedback == "accepted"
    assert record_decision("class Other: pass", False, str(path)).lessons == 0
    assert record_decision(REWRITE, False, str(path), enabled=False).error


def test_find_targets_after_accept_still_finds_model():
    out = apply_changes(GEMM, build_accept(GEMM, rewrite(), "replace").changes)
    assert [t.name for t in find_targets(Document("u", out, 1).root)] == ["Model"]
