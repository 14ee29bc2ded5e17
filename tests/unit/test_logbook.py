"""The per-task logbook (KernelSkill's short-term memory), through a real SQLite file."""

from __future__ import annotations

import pytest

from memory.logbook import Logbook, plan_key, plan_similarity, task_id_for
from memory.store import MemoryStore

REFERENCE = "class Model:\n    def forward(self, x):\n        return x @ self.w + self.b\n"


@pytest.fixture
def path(tmp_path):
    return tmp_path / "memory.sqlite3"


@pytest.fixture
def logbook(path):
    with MemoryStore(path) as store:
        yield Logbook(store)


def kernel(i: int) -> str:
    return f"def forward(x, w, b):\n    return variant_{i}(x, w, b)\n"


def test_attempts_form_a_tree_in_order(logbook):
    root = logbook.record("t", verdict="correct", source=kernel(0), speedup=1.0)
    a = logbook.record("t", verdict="correct", source=kernel(1), parent_id=root.id, plan="a")
    b = logbook.record("t", verdict="incorrect", source=kernel(2), parent_id=root.id, plan="b")
    c = logbook.record("t", verdict="correct", source=kernel(3), parent_id=a.id, plan="c")
    logbook.record("other", verdict="correct", source=kernel(0))
    assert [x.id for x in logbook.attempts("t")] == [root.id, a.id, b.id, c.id]
    assert [x.id for x in logbook.children(root.id)] == [a.id, b.id]
    assert [x.depth for x in logbook.attempts("t")] == [0, 1, 1, 2]
    assert logbook.get(c.id) == c
    assert logbook.tasks() == ["other", "t"]


def test_a_parent_from_another_task_is_refused(logbook):
    root = logbook.record("t", verdict="correct", source=kernel(0))
    with pytest.raises(ValueError, match="not an attempt of task"):
        logbook.record("u", verdict="correct", source=kernel(1), parent_id=root.id)
    assert logbook.attempts("u") == []


def test_best_is_the_fastest_correct_attempt(logbook):
    logbook.record("t", verdict="correct", source=kernel(0), speedup=1.0)
    fast = logbook.record("t", verdict="correct", source=kernel(1), speedup=2.5)
    logbook.record("t", verdict="incorrect", source=kernel(2), speedup=9.0)
    logbook.record("t", verdict="correct", source=kernel(3), speedup=2.5)  # later, equal
    assert logbook.best("t").id == fast.id
    assert logbook.best("nothing") is None


def test_was_tried_matches_the_same_code_with_other_comments(logbook):
    tried = logbook.record("t", verdict="compile_error", source=kernel(1), error="nvcc: boom")
    cosmetic = (
        "def forward(x, w, b):\n"
        '    """Now with a docstring."""\n'
        "    # and a comment\n"
        "    return variant_1( x, w, b )   \n\n"
    )
    assert logbook.was_tried("t", source=cosmetic).id == tried.id
    assert logbook.was_tried("t", source=kernel(2)) is None
    assert logbook.was_tried("other-task", source=kernel(1)) is None


def test_was_tried_matches_a_paraphrased_plan(logbook):
    tried = logbook.record(
        "t",
        verdict="incorrect",
        source=kernel(1),
        plan="Fuse the bias add and ReLU into the GEMM epilogue.",
    )
    assert logbook.was_tried("t", plan="fuse bias-add + relu into gemm epilogue").id == tried.id
    assert logbook.was_tried("t", plan="Fusing the bias-add and the ReLU into GEMM's epilogue").id
    assert logbook.was_tried("t", plan="Tile the GEMM in shared memory") is None
    assert logbook.was_tried("t", plan="") is None


def test_plan_keys_keep_numbers_apart():
    a, b = plan_key("Use 128x128 tiles"), plan_key("use 64x64 tiles")
    assert a != b and plan_similarity(a, b) < 0.85
    assert plan_key("Fuse the bias add.") == plan_key("fuse bias-add")


def test_failed_plans_lists_failures_and_slowdowns_once(logbook):
    root = logbook.record("t", verdict="correct", source=kernel(0), speedup=1.0, plan="")
    logbook.record("t", verdict="compile_error", source=kernel(1), parent_id=root.id, plan="A")
    logbook.record(
        "t", verdict="correct", source=kernel(2), parent_id=root.id, plan="B", speedup=0.9
    )
    logbook.record(
        "t", verdict="correct", source=kernel(3), parent_id=root.id, plan="C", speedup=1.4
    )
    logbook.record("t", verdict="timeout", source=kernel(4), parent_id=root.id, plan="A")
    assert logbook.failed_plans("t") == ["A", "B"]


def test_errors_are_digested_and_failed_code_is_kept_only_as_a_hash(logbook):
    error = "Traceback: token=0123456789abcdef0123456789 " + "x" * 1000
    failed = logbook.record("t", verdict="runtime_error", source=kernel(1), error=error)
    assert len(failed.error_digest) == 300
    assert "0123456789abcdef" not in failed.error_digest and "[redacted]" in failed.error_digest
    assert logbook.source(failed.id) is None
    good = logbook.record("t", verdict="correct", source=kernel(2), speedup=1.2)
    assert logbook.source(good.id) == kernel(2)
    assert logbook.get(failed.id).error_digest == failed.error_digest


def test_a_job_resumes_from_its_beam_after_the_file_is_reopened(path):
    with MemoryStore(path) as store:
        logbook = Logbook(store)
        root = logbook.record("t", verdict="correct", source=kernel(0), speedup=1.0)
        speedups = [1.2, 0.8, 1.9, 1.5, 2.4, 1.1]
        for i, speedup in enumerate(speedups, start=1):
            logbook.record(
                "t", verdict="correct", source=kernel(i), parent_id=root.id, speedup=speedup
            )
        logbook.record("t", verdict="incorrect", source=kernel(9), parent_id=root.id, plan="X")
        expected = [a.id for a in logbook.resume_point("t", beam_width=3)]

    with MemoryStore(path) as store:
        logbook = Logbook(store)
        beam = logbook.resume_point("t", beam_width=3)
        assert [a.id for a in beam] == expected
        assert [a.speedup for a in beam] == [2.4, 1.9, 1.5]
        assert [logbook.source(a.id) for a in beam] == [kernel(5), kernel(3), kernel(4)]
        assert logbook.failed_plans("t") == ["X"]
        assert max(a.depth for a in logbook.attempts("t")) + 1 == 2
        assert logbook.resume_point("t", beam_width=1)[0].id == logbook.best("t").id
        assert logbook.resume_point("unknown") == []


def test_task_ids_ignore_cosmetic_edits_but_not_the_device():
    edited = "# comment\n" + REFERENCE.replace("x @ self.w", "x  @  self.w")
    assert task_id_for(REFERENCE, "H200") == task_id_for(edited, "H200")
    assert task_id_for(REFERENCE, "H200") != task_id_for(REFERENCE, "A100")


def test_a_plan_that_paid_after_a_repair_is_not_a_failed_plan(logbook):
    task = "t"
    root = logbook.record(task, verdict="correct", source="ref", speedup=1.0)
    broken = logbook.record(
        task, verdict="runtime_error", source="bad", plan="fuse it", parent_id=root.id
    )
    logbook.record(
        task, verdict="correct", source="good", plan="fuse it", parent_id=broken.id, speedup=2.0
    )
    logbook.record(task, verdict="incorrect", source="worse", plan="tile it", parent_id=root.id)
    assert logbook.failed_plans(task) == ["tile it"]
