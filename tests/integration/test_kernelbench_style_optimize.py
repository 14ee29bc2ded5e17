"""The offline optimizer on every KernelBench-style problem (tests/kernelbench_style/): `optimize`
one file at a time, and `bench DIR --levels 1,2,3 --optimize` over the whole checkout, whose
head-to-head run builds the compiled reference that issue 19's `Model = ModelNew` broke.

Slow (minutes per problem on two cores): `make test` optimizes one problem (the first of level
3), and `make test-all` every problem and the whole-checkout run. Every test runs the CLI as a
subprocess; nothing is written into the repository."""

from __future__ import annotations

import json
import subprocess

import pytest

from agents.bench.suite import discover, problem_name
from tests.conftest import requires_jail
from tests.integration.test_kernelbench_style import CHECKOUT, FAST, PROBLEMS, kernel_agent

pytestmark = [pytest.mark.slow, requires_jail]


def _untracked_here() -> list[str]:
    """Files in the checkout folder that git does not know: what a run left behind."""
    done = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all", "--ignored", str(CHECKOUT)],
        capture_output=True,
        text=True,
        cwd=CHECKOUT,
    )
    return [line for line in done.stdout.splitlines() if "__pycache__" not in line]


def _one_for_make_test(problems: list) -> list:
    """`make test` optimizes one problem: the first of the last level, a whole model, where
    the idioms meet; the others (minutes each on two cores) run in `make test-all`."""
    last = max(p.parent.name for p in problems)
    kept = next(p for p in problems if p.parent.name == last)
    return [pytest.param(p, marks=() if p == kept else pytest.mark.long) for p in problems]


@pytest.mark.parametrize("problem", _one_for_make_test(PROBLEMS), ids=problem_name)
def test_optimize_each_problem(problem, tmp_path):
    """`optimize --max-evals 2` ends with a verified kernel or "no improvement", writes only
    to --output, and a kernel it writes defines ModelNew."""
    before = _untracked_here()
    output = tmp_path / "optimized.py"
    done = kernel_agent(
        "optimize",
        str(problem),
        "--max-evals",
        "2",
        *FAST,
        "--no-memory",
        "--output",
        str(output),
        "--json",
        timeout=600,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    result = json.loads(done.stdout)
    assert result["verdict"] in ("correct", "no_improvement"), result["notes"]
    if result["verdict"] == "correct":
        assert result["output"] == str(output) and "class ModelNew" in output.read_text()
        assert result["speedup"] > 1.0 and result["methods"]
    else:
        assert result["output"] is None and not output.exists()
    assert _untracked_here() == before


@pytest.mark.long
def test_bench_optimize_over_the_whole_checkout(tmp_path):
    """Every problem of levels 1-3 gets a row; on this suite every row is a result (none an
    error), with eager's time whatever torch.compile did; a resume of the finished run keeps
    every row and measures nothing again."""
    out = tmp_path / "kernelbench_style.json"
    args = [str(CHECKOUT), "--levels", "1,2,3", "--optimize", "--max-evals", "2", *FAST]
    done = kernel_agent("bench", *args, "--resume", str(out), "--json", timeout=3600)
    report = json.loads(done.stdout)
    rows = report["rows"]
    order = [problem_name(p) for p in discover(CHECKOUT, [1, 2, 3])]
    assert [row["problem"] for row in rows] == order
    errors = {row["problem"]: row["error"] for row in rows if row["verdict"] == "error"}
    assert not errors and done.returncode == 0, (errors, done.stderr[-2000:])
    for row in rows:
        assert row["eager_ms"] > 0, row
        assert row["compile_verdict"] == "correct", (row["problem"], row["notes"])
        assert row["compile_ms"] > 0 and row["vs_compile"] > 0
        if row["verdict"] == "correct":
            assert (
                row["agent_ms"] > 0 and row["speedup"] > 1.0 and "class ModelNew" in (row["source"])
            )
    again = kernel_agent("bench", *args, "--resume", str(out), "--json", timeout=120)
    assert again.returncode == 0 and json.loads(again.stdout)["rows"] == rows
    rendered = kernel_agent("bench", "--from-json", str(out), "--markdown")
    assert rendered.returncode == 0
    assert all(f"| {row['problem']} |" in rendered.stdout for row in rows)
