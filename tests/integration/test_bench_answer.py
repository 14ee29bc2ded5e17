"""`bench --optimize` never loses to a baseline (issue 21): a row offers the fastest verified
kernel of ours, torch.compile and its max-autotune mode, or the original, names it, and a
compiler's answer counts 1.0x over torch.compile. The max-autotune baseline is a real
candidate the verifier builds and judges."""

from __future__ import annotations

import ast
from dataclasses import replace

import pytest

from agents.bench.optimize import COMPILERS, OptimizeReport, OptimizeRow, choose_answer
from agents.bench.suite import baseline_candidate
from agents.evaluate import evaluate
from agents.task import SourceFile
from agents.verify.verdict import Verdict
from tests.conftest import FAST, ROOT

SOURCES = {name: f"# the {name} baseline" for name in COMPILERS}


def _row(**fields) -> OptimizeRow:
    base = dict(problem="p", path="p.py", verdict="correct", eager_ms=10.0, compile_ms=5.0)
    return OptimizeRow(**{**base, **fields})


def test_ours_stays_when_the_head_to_head_says_it_is_faster():
    row = _row(speedup=2.4, compile_speedup=2.0, vs_compile=1.2, methods=["torch-compile"])
    choose_answer(row, SOURCES)
    assert row.answer == "ours" and row.methods == ["torch-compile"] and row.speedup == 2.4


def test_torch_compile_is_the_answer_when_it_beat_ours_head_to_head():
    # Ours over eager (2.1x, confirming run) looks faster than compile over eager (2.0x,
    # baseline run), but head to head ours was 0.9x of compile: the measured ratio decides.
    row = _row(speedup=2.1, compile_speedup=2.0, vs_compile=0.9, source="ours", notes=[])
    choose_answer(row, SOURCES)
    assert row.answer == "torch.compile" and row.methods == ["torch.compile"]
    assert row.source == SOURCES["torch.compile"] and row.vs_compile == 1.0
    assert row.speedup == 2.0 and row.speedup_ms == [10.0, 5.0] and row.agent_ms == 5.0
    assert "ours was 0.90x of it" in row.notes[-1]


def test_a_compiler_is_offered_when_the_search_found_nothing():
    row = _row(verdict="no_improvement", speedup=1.0, compile_speedup=1.5, vs_compile=1 / 1.5)
    choose_answer(row, SOURCES)
    assert row.verdict == "correct" and row.answer == "torch.compile" and row.speedup == 1.5
    assert "found nothing faster" in row.notes[-1]


def test_max_autotune_wins_only_when_faster_and_verified():
    row = _row(speedup=1.8, compile_speedup=1.5, vs_compile=1.2, autotune_speedup=2.5)
    row.autotune_ms = 4.0
    choose_answer(row, SOURCES)
    assert row.answer == "torch.compile max-autotune" and row.speedup == 2.5
    assert row.speedup_ms == [10.0, 4.0] and row.vs_compile == 1.0
    slower = _row(speedup=1.8, compile_speedup=1.5, vs_compile=1.2, autotune_speedup=1.7)
    choose_answer(slower, SOURCES)
    assert slower.answer == "ours" and slower.speedup == 1.8


@pytest.mark.parametrize("compile_speedup", [None, 0.8])
def test_the_original_stays_when_no_compiler_is_correct_and_faster(compile_speedup):
    row = _row(verdict="no_improvement", speedup=1.0, compile_speedup=compile_speedup)
    choose_answer(row, SOURCES)
    assert row.answer == "original" and row.verdict == "no_improvement" and row.speedup == 1.0


def test_a_compiler_answer_counts_one_over_compile_in_the_summary():
    rows = [
        _row(problem="a", speedup=3.0, compile_speedup=1.5, vs_compile=2.0),
        _row(problem="b", speedup=1.2, compile_speedup=2.0, vs_compile=0.6),
    ]
    for row in rows:
        choose_answer(row, SOURCES)
    report = OptimizeReport("d", "m", "cpu", "default", "c", "fresh", rows=rows)
    assert report.summary()["geomean_vs_compile"] == pytest.approx(2.0**0.5)
    old = OptimizeRow(**{k: v for k, v in vars(rows[0]).items() if k != "answer"})
    assert old.answer == ""  # a report from before the choice loads as it was


@pytest.mark.long  # a max-autotune build end to end: test-all
def test_the_max_autotune_baseline_is_built_and_judged_like_any_candidate():
    reference = SourceFile.from_path(
        ROOT / "tests" / "kernelbench_style" / "KernelBench" / "level1" / "6_Matrix_scalar_"
        "multiplication.py"
    )
    tuned = baseline_candidate(reference, "torch.compile max-autotune")
    tree = ast.parse(tuned.text)
    assert [n.name for n in tree.body if isinstance(n, ast.ClassDef)] == ["Model", "ModelNew"]
    assert 'mode="max-autotune-no-cudagraphs"' in tuned.text
    result = evaluate(reference, tuned, replace(FAST, static_check=False))
    assert result.verdict is Verdict.CORRECT, result.reasons
