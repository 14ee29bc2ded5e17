"""`bench --optimize` rows keep every candidate's fate (issue 31): a saved row (real data, from
`bench --optimize` on problem 13 on a CPU: tests/data/bench_optimize_13.json) renders its
candidates in the terminal and in Markdown, survives `--from-json` and a merge with an older
report that has none, is kept as it was by `--resume`, and names no winner of its own once a
compiler is the row's answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

from agents.bench.optimize import (
    COMPILERS,
    OptimizeBenchOptions,
    OptimizeReport,
    choose_answer,
    run_optimize_bench,
)
from agents.bench.runner import machine_name
from agents.request.settings import BudgetSettings
from agents.search.fates import CandidateFate, Fate, fates_summary
from tests.conftest import ROOT

SAVED = ROOT / "tests" / "data" / "bench_optimize_13.json"
PROBLEM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"


def _bench(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-m", "agents", "bench", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=env,
    )


def _saved_row() -> dict:
    (row,) = json.loads(SAVED.read_text())["rows"]
    return row


def test_the_saved_row_is_consistent_with_its_own_result():
    row = _saved_row()
    fates = [CandidateFate.from_json(entry) for entry in row["candidates"]]
    assert [f.to_json() for f in fates] == row["candidates"]
    (chosen,) = [f for f in fates if f.fate is Fate.CHOSEN]
    assert chosen.time_ms == row["agent_ms"] and chosen.vs_reference == row["speedup"]
    assert chosen.method == row["methods"][-1] and row["answer"] == "ours"


def test_from_json_renders_and_merges_without_losing_candidates(tmp_path):
    row = _saved_row()
    old = json.loads(SAVED.read_text())  # a report from before fates were kept: no key
    old_row = {k: v for k, v in row.items() if k != "candidates"}
    old["rows"] = [{**old_row, "problem": "level1/1_older"}]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(old))

    again = _bench("--from-json", str(SAVED), "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["rows"][0]["candidates"] == row["candidates"]
    merged = _bench("--from-json", str(older), str(SAVED), "--json")
    assert merged.returncode == 0, merged.stderr
    rows = {r["problem"]: r for r in json.loads(merged.stdout)["rows"]}
    assert rows[row["problem"]]["candidates"] == row["candidates"]
    assert rows["level1/1_older"]["candidates"] == []

    summary = fates_summary(CandidateFate.from_json(c) for c in row["candidates"])
    assert summary.startswith("3 candidates: 1 chosen")
    markdown = _bench("--from-json", str(older), str(SAVED), "--markdown")
    assert markdown.returncode == 0, markdown.stderr
    assert f"- {row['problem']}: the search's {summary}" in markdown.stdout
    assert "level1/1_older: the search's" not in markdown.stdout
    terminal = _bench("--from-json", str(SAVED))
    assert terminal.returncode == 0, terminal.stderr
    assert "pass/plan" in terminal.stdout and "vs best" in terminal.stdout
    chosen = next(line for line in terminal.stdout.splitlines() if "chosen: offered" in line)
    assert "equality-saturation" in chosen and "0.2897" in chosen  # its confirmed time
    assert "did not apply: no hand-written softmax" in terminal.stdout


def test_resume_keeps_a_finished_rows_candidates(tmp_path):
    previous = OptimizeReport.from_json(json.loads(SAVED.read_text()))
    previous.machine = machine_name("cpu")  # resumed here: the saved row ran on another CPU
    options = OptimizeBenchOptions(budget=BudgetSettings(max_evals=1))
    resumed = run_optimize_bench([PROBLEM], options, previous=previous)
    (row,) = resumed.rows
    assert row.candidates == previous.rows[0].candidates and len(row.candidates) == 3
    assert resumed.to_json()["rows"][0]["candidates"] == _saved_row()["candidates"]


def test_a_compiler_answer_leaves_no_chosen_candidate():
    report = OptimizeReport.from_json(json.loads(SAVED.read_text()))
    row = replace(report.rows[0], notes=[])
    row.compile_speedup, row.compile_ms = 40.0, row.eager_ms / 40.0  # faster than ours
    choose_answer(row, {name: f"# {name}" for name in COMPILERS})
    assert row.answer == "torch.compile"
    assert Fate.CHOSEN not in {f.fate for f in row.candidates}
    (demoted,) = [f for f in row.candidates if f.method == "equality-saturation" and f.evaluation]
    assert demoted.fate is Fate.SLOWER and "torch.compile was faster" in demoted.reason
