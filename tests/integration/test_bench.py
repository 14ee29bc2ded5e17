"""`kernel-agent bench`: problem discovery, baselines, fast_p under both rules, the command."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from agents.bench.report import BenchReport, BenchRow
from agents.bench.suite import baseline_candidate, discover, problem_name
from agents.search.fates import CandidateFate, Fate, fates_summary
from agents.task import SourceFile, outline_candidate
from tests.conftest import PROBLEMS, ROOT

KERNEL_AGENT = [sys.executable, "-m", "agents"]


def _bench(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    """`kernel-agent bench ARGS` as a subprocess, output captured."""
    return subprocess.run(
        [*KERNEL_AGENT, "bench", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def test_discover_reads_our_suite_in_numeric_order():
    files = discover(ROOT / "bench" / "problems")
    assert len(files) >= 16
    numbers = [int(f.name.split("_")[0]) for f in files]
    assert numbers == sorted(numbers)


def test_discover_reads_a_kernelbench_checkout_unchanged(tmp_path):
    for level, name in ((1, "1_Square_matmul.py"), (1, "10_Relu.py"), (2, "3_Gemm_Add.py")):
        folder = tmp_path / "KernelBench" / f"level{level}"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROBLEMS / "linear_relu.py", folder / name)
    everything = discover(tmp_path)
    assert [problem_name(f) for f in everything] == [
        "level1/1_Square_matmul",
        "level1/10_Relu",
        "level2/3_Gemm_Add",
    ]
    assert [problem_name(f) for f in discover(tmp_path, levels=[2])] == ["level2/3_Gemm_Add"]


def test_baselines_are_valid_candidates():
    reference = SourceFile.from_path(PROBLEMS / "linear_relu.py")
    for baseline in ("torch.compile", "eager"):
        candidate = baseline_candidate(reference, baseline)
        outline_candidate(candidate)
        assert "class ModelNew(Model)" in candidate.text


def _row(name, verdict, strict, speedup):
    return BenchRow(
        name, name, "torch.compile", verdict, strict, True, 1.0, 1.0, speedup, None, [], 0.0
    )


def test_fast_p_counts_all_problems_and_respects_each_rule():
    report = BenchReport(
        "d",
        "m",
        "cpu",
        "default",
        "c",
        rows=[
            _row("a", "correct", True, 2.5),
            _row("b", "correct", False, 1.2),  # passes only the float64 rule
            _row("c", "incorrect", False, None),
            _row("d", "correct", True, 0.8),
        ],
    )
    assert report.fast_p(0, "float64") == 0.75
    assert report.fast_p(0, "strict") == 0.5
    assert report.fast_p(1.0, "float64") == 0.5
    assert report.fast_p(1.0, "strict") == 0.25
    assert report.fast_p(2.0, "strict") == 0.25
    assert abs(report.geomean_speedup("strict") - (2.5 * 0.8) ** 0.5) < 1e-9
    assert BenchReport.from_json(json.loads(json.dumps(report.to_json()))) == report


def test_bench_command_writes_json_and_plot(tmp_path):
    out, plot = tmp_path / "results.json", tmp_path / "speedups.png"
    done = _bench(
        str(PROBLEMS),
        "--baseline",
        "eager",
        "--limit",
        "2",
        "--threads",
        "1",
        "--timing-budget",
        "0.3",
        "--json",
        "--out",
        str(out),
        "--plot",
        str(plot),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert json.loads(out.read_text()) == report
    assert len(report["rows"]) == 2
    assert all(row["verdict"] == "correct" for row in report["rows"])
    assert set(report["summary"]["fast_p"]) == {"strict", "float64"}
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.long  # a bench run end to end: test-all
def test_bench_compares_torch_compile_with_eager():
    done = _bench(
        str(PROBLEMS / "linear_relu.py"), "--threads", "1", "--timing-budget", "0.3", timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "linear_relu" in done.stdout and "correct" in done.stdout
    assert "fast_1" in done.stdout and "geomean" in done.stdout


def test_bench_on_a_missing_folder_is_a_usage_error(tmp_path):
    done = _bench(str(tmp_path / "nope"))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no such file or folder" in done.stderr


def test_a_saved_report_renders_as_markdown(tmp_path):
    report = BenchReport(
        "2026-12-02 10:00 UTC",
        "cpu model",
        "cpu",
        "default",
        "kernel-agent bench",
        rows=[_row("a", "correct", True, 2.0), _row("b", "incorrect", False, None)],
    )
    saved = tmp_path / "r.json"
    saved.write_text(json.dumps(report.to_json()))
    done = _bench("--from-json", str(saved), "--markdown")
    assert done.returncode == 0, done.stderr
    assert "| a | correct | pass |" in done.stdout
    assert "- strict rule: fast_0 50%" in done.stdout


def _saved(tmp_path, name, machine, rows):
    report = BenchReport(
        "2026-12-02 10:00 UTC", machine, "cuda", "gpu", f"kernel-agent bench {name}", rows=rows
    )
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(report.to_json()))
    return path


def test_parts_of_a_split_run_merge_into_one_table(tmp_path):
    a = _saved(tmp_path, "a", "H200", [_row("p1", "correct", True, 2.0)])
    b = _saved(tmp_path, "b", "H200", [_row("p2", "correct", True, 0.5)])
    done = _bench("--from-json", str(a), str(b), "--markdown")
    assert done.returncode == 0, done.stderr
    assert "| p1 |" in done.stdout and "| p2 |" in done.stdout
    assert "kernel-agent bench a && kernel-agent bench b" in done.stdout
    assert "fast_1 50%" in done.stdout


def test_parts_from_different_machines_do_not_merge(tmp_path):
    a = _saved(tmp_path, "a", "H200", [_row("p1", "correct", True, 2.0)])
    b = _saved(tmp_path, "b", "A100", [_row("p2", "correct", True, 0.5)])
    done = _bench("--from-json", str(a), str(b))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "cannot merge" in done.stderr


def test_parts_of_a_split_optimize_run_merge_into_one_table(tmp_path):
    from agents.bench.optimize import OptimizeReport, OptimizeRow

    paths = []
    for name, row in (
        ("a", OptimizeRow("p1", "p1.py", "correct", 2.0, 1.0, 1.0, 2.0, "correct", 2.0)),
        ("b", OptimizeRow("p2", "p2.py", "no_improvement", 1.0, 2.0, None, 0.5, "correct")),
    ):
        report = OptimizeReport(
            "2026-12-02 10:00 UTC", "H200", "cuda", "gpu", f"kb --optimize {name}", "fresh"
        )
        report.rows.append(row)
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(report.to_json()))
    done = _bench("--from-json", *map(str, paths), "--markdown")
    assert done.returncode == 0, done.stderr
    assert "| p1 |" in done.stdout and "| p2 |" in done.stdout
    assert "kb --optimize a && kb --optimize b" in done.stdout
    # Mixed kinds (an optimize report with a plain bench report) are refused in one line.
    plain = _saved(tmp_path, "c", "H200", [_row("p3", "correct", True, 2.0)])
    done = _bench("--from-json", str(paths[0]), str(plain))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.long  # bench --optimize end to end: test-all
@pytest.mark.slow
def test_bench_optimize_runs_the_offline_optimizer_and_says_where_time_went(tmp_path):
    """`bench DIR --optimize` end to end: baselines, the offline search, the head-to-head run,
    one JSON row per problem with its stages; the Markdown renders from the saved JSON."""
    problems = tmp_path / "problems"
    problems.mkdir()
    shutil.copy(ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py", problems)
    out = tmp_path / "optimize.json"
    done = _bench(
        str(problems),
        "--optimize",
        "--max-evals",
        "3",
        "--threads",
        "1",
        "--timing-budget",
        "0.2",
        "--out",
        str(out),
        "--json",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert json.loads(out.read_text()) == report
    (row,) = report["rows"]
    assert row["problem"] == "13_gemm_divide_sum_scaling"
    assert row["verdict"] in ("correct", "no_improvement") and row["evaluations"] >= 1
    assert row["compile_verdict"] == "correct" and row["eager_ms"] > 0
    if row["verdict"] == "correct":  # a returned kernel is verified source with its methods
        assert "class ModelNew" in row["source"] and row["methods"]
    stages = row["stage_s"]
    assert {"baseline", "baseline_phases", "search"} <= set(stages)
    assert {"build", "run", "measure"} <= set(stages["baseline_phases"])
    spent = sum(v for k, v in stages.items() if k != "baseline_phases")
    assert spent <= row["wall_s"] + 0.5  # the stages lie within the row's wall time
    summary = report["summary"]
    assert summary["problems"] == 1 and summary["slower_than_original"] == 0
    # every candidate's fate; the one offered carries the row's own time
    fates = [CandidateFate.from_json(entry) for entry in row["candidates"]]
    assert fates and [f.to_json() for f in fates] == row["candidates"]
    chosen = [f for f in fates if f.fate is Fate.CHOSEN]
    if row["answer"] == "ours":
        assert len(chosen) == 1 and chosen[0].time_ms == row["agent_ms"]
    else:
        assert not chosen
    rendered = _bench("--from-json", str(out), "--markdown")
    assert rendered.returncode == 0 and "| 13_gemm_divide_sum_scaling |" in rendered.stdout
    assert f"13_gemm_divide_sum_scaling: the search's {fates_summary(fates)}" in rendered.stdout
