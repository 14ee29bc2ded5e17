"""Memory never hides a rewrite and never makes a later run return less: a plan that paid on a
task is not a failed plan because it found nothing on another kernel of it, the logbook's
plan text reads back as the plan, and memory's best kernel that no longer passes is said so
in one line of the result."""

from __future__ import annotations

import json
import re

import pytest

from agents.offline.roles import OfflinePlanner
from agents.roles.base import Plan, PlanningContext, SkillBrief
from agents.search.recall import RECALLED, lineage, plan_of
from memory.logbook import Logbook, task_id_for
from memory.store import MemoryStore
from tests.conftest import ROOT
from tests.integration.test_search import optimize

PROBLEM = ROOT / "tests" / "algebra_problems" / "4_Gemm_RowMax_Centre_GELU.py"
EGRAPH = Plan(
    "Find the cheapest equivalent form of the whole forward (equality saturation)",
    "equality-saturation",
    "Gate: allowed.",
    skill_id="torch-equality-saturation",
)


@pytest.fixture
def logbook(tmp_path):
    with MemoryStore(tmp_path / "memory.sqlite3") as store:
        yield Logbook(store)


def test_a_plan_that_paid_is_not_hidden_by_a_miss_on_another_kernel(logbook):
    """Run 1: the e-graph paid on the reference; later the same plan, its details now naming
    what memory measured, found nothing on another kernel of the beam. It stays plannable."""
    root = logbook.record("t", verdict="correct", source="ref", speedup=1.0)
    paid = logbook.record(
        "t", verdict="correct", source="zeros", plan=EGRAPH.text(), parent_id=root.id,
        speedup=40.0,
    )  # fmt: skip
    other = logbook.record(
        "t", verdict="correct", source="compiled", plan="Compile it [torch-compile]",
        parent_id=root.id, speedup=1.3,
    )  # fmt: skip
    noted = Plan(EGRAPH.title, EGRAPH.method, "Gate: allowed. Memory: 40.00x on 1 task.")
    logbook.record("t", verdict="no_code", source="#0", plan=noted.text(), parent_id=other.id)
    logbook.record("t", verdict="no_code", source="#1", plan="Tile it [tiling]", parent_id=root.id)
    failed = logbook.failed_plans("t")
    assert failed == ["Tile it [tiling]"]
    brief = SkillBrief("torch-equality-saturation", EGRAPH.title, offline_pass=EGRAPH.method)
    context = PlanningContext(
        task_source="", candidate_source="ref", candidate_speedup=1.0, device="cpu",
        allowed_skills=[brief], avoid_plans=failed, gated=True,
    )  # fmt: skip
    assert [p.name for p in OfflinePlanner(None, "cpu").rank(context)] == [EGRAPH.method]
    assert [a.id for a in lineage(logbook, paid)] == [paid.id]


def test_the_logbook_text_reads_back_as_the_plan_and_its_lineage(logbook):
    root = logbook.record("t", verdict="correct", source="ref", speedup=1.0)
    first = logbook.record(
        "t", verdict="correct", source="a", plan=EGRAPH.text(), parent_id=root.id,
        skills=("torch-equality-saturation",), speedup=3.0,
    )  # fmt: skip
    tile = Plan("Tile the GEMM", "tiling", "64 by 64\nthen 128")
    broken = logbook.record(
        "t", verdict="runtime_error", source="b", plan=tile.text(), parent_id=first.id
    )
    repaired = logbook.record(
        "t", verdict="correct", source="c", plan=tile.text(), parent_id=broken.id, speedup=5.0
    )
    assert plan_of(first) == EGRAPH
    assert plan_of(repaired) == tile
    # The repair's failed try is not a kernel of the lineage: two plans applied, not three.
    assert [a.id for a in lineage(logbook, repaired)] == [first.id, repaired.id]
    assert plan_of(logbook.record("t", verdict="correct", source="d", plan="free text")) == Plan(
        "free text", "free text", ""
    )


WRONG = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.ones(x.shape[0], 1, device=x.device)
"""


@pytest.mark.slow
def test_memory_s_best_that_fails_re_verification_is_said_so(tmp_path):
    """A kernel memory holds as verified (40x) that is wrong for this problem is judged
    again, is not offered, and the result says why in one line."""
    memory = tmp_path / "memory.sqlite3"
    with MemoryStore(memory) as store:
        book = Logbook(store)
        task = task_id_for(PROBLEM.read_text(), "cpu")
        root = book.record(task, verdict="correct", source=PROBLEM.read_text(), speedup=1.0)
        book.record(
            task, verdict="correct", source=WRONG, plan=EGRAPH.text(), parent_id=root.id,
            speedup=40.0,
        )  # fmt: skip
    trajectory = tmp_path / "trajectory.json"
    done = optimize(
        str(PROBLEM), "--json", "--no-profile", "--threads", "1", "--timing-budget", "1.0",
        "--max-evals", "1", "--iters", "1", "--memory", str(memory),
        "--trajectory", str(trajectory), "--output", str(tmp_path / "out.py"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["improved"] is False and report["verdict"] == "no_improvement", report
    said = [note for note in report["notes"] if "failed re-verification" in note]
    assert len(said) == 1 and "40.00x" in said[0] and "incorrect" in said[0], report["notes"]
    first = json.loads(trajectory.read_text())["trajectory"][0]
    assert first["plan"].startswith(RECALLED) and first["verdict"] == "incorrect"
    assert not (tmp_path / "out.py").exists()


@pytest.mark.slow
def test_memory_s_rewrite_measured_no_faster_is_judged_again(tmp_path):
    """A verified rewrite memory holds at 1.00x (its plan now never planned again, as a
    failed plan) comes back and is judged on fresh inputs: one timing on a busy machine must
    not hide it for good (issue 34: a second `make demo` had nothing left to try)."""
    memory = tmp_path / "memory.sqlite3"
    copy = re.sub(r"\bModel\b", "ModelNew", PROBLEM.read_text())  # an A/A copy
    with MemoryStore(memory) as store:
        book = Logbook(store)
        task = task_id_for(PROBLEM.read_text(), "cpu")
        root = book.record(task, verdict="correct", source=PROBLEM.read_text(), speedup=1.0)
        book.record(
            task, verdict="correct", source=copy, plan=EGRAPH.text(), parent_id=root.id,
            speedup=1.0,
        )  # fmt: skip
    trajectory = tmp_path / "trajectory.json"
    done = optimize(
        str(PROBLEM), "--json", "--no-profile", "--threads", "1", "--timing-budget", "0.3",
        "--max-evals", "1", "--iters", "1", "--memory", str(memory),
        "--trajectory", str(trajectory), "--output", str(tmp_path / "out.py"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    first = json.loads(trajectory.read_text())["trajectory"][0]
    assert first["plan"].startswith(RECALLED) and first["verdict"] == "correct", first
