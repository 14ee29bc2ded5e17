"""`bench --optimize` tables: every ratio comes with the two medians it divides, from one run,
and a ratio divided out of two runs says "derived". Reports saved before the times were kept
still render and merge. Driven through the CLI (`kernel-agent bench --from-json`)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agents.bench.optimize import OptimizeReport, OptimizeRow
from tests.conftest import ROOT

KERNEL_AGENT = [sys.executable, "-m", "agents", "bench"]
RATIO_WITH_TIMES = re.compile(r"(\d+\.\d+)x \((\d+(?:\.\d+)?)/(\d+(?:\.\d+)?) ms")
SETUP = ("2026-12-04 10:00 UTC", "H200", "cuda", "gpu")


def _bench(*args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "400"}  # the terminal table on one line per row
    return subprocess.run(
        [*KERNEL_AGENT, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
    )


def _save(path: Path, rows: list[dict[str, Any]], command: str = "kb --optimize") -> Path:
    report = {
        "date": SETUP[0],
        "machine": SETUP[1],
        "device": SETUP[2],
        "size": SETUP[3],
        "command": command,
        "memory": "fresh (cold) memory",
        "rows": rows,
        "total_s": 10.0,
    }
    path.write_text(json.dumps(report))
    return path


def _new_rows() -> list[dict[str, Any]]:
    """The user's case (ours 2.21 ms in the confirming run, compile 2.04 ms in the baseline,
    1.14x head to head), a derived ratio, and a problem where the original is returned."""
    rows = [
        OptimizeRow(
            "level1/1_measured",
            "a.py",
            "correct",
            eager_ms=3.3,
            compile_ms=2.04,
            agent_ms=2.21,
            compile_speedup=3.3 / 2.04,
            compile_verdict="correct",
            speedup=3.25 / 2.21,
            speedup_ci=[1.40, 1.55],
            speedup_ms=[3.25, 2.21],
            vs_compile=2.04 / 1.79,
            vs_compile_ms=[2.04, 1.79],
        ),
        OptimizeRow(
            "level1/2_derived",
            "b.py",
            "correct",
            eager_ms=4.0,
            compile_ms=2.5,
            agent_ms=2.0,
            compile_speedup=1.6,
            compile_verdict="correct",
            speedup=2.0,
            speedup_ms=[4.0, 2.0],
            vs_compile=1.25,
            vs_compile_derived=True,
            notes=["ours/compile derived from the two runs against eager: refused"],
        ),
        OptimizeRow(
            "level1/3_original",
            "c.py",
            "no_improvement",
            eager_ms=1.0,
            compile_ms=0.5,
            compile_speedup=2.0,
            compile_verdict="correct",
            vs_compile=0.5,
            vs_compile_ms=[0.5, 1.0],
        ),
    ]
    return OptimizeReport(*SETUP, "kb", "fresh", rows=rows).to_json()["rows"]


def _old_rows() -> list[dict[str, Any]]:
    """Rows as reports saved them before the times behind each ratio were kept."""
    common = {"compile_verdict": "correct", "methods": [], "evaluations": 3, "wall_s": 9.0}
    return [
        {
            **common,
            "problem": "level1/4_old",
            "path": "d.py",
            "verdict": "correct",
            "eager_ms": 2.0,
            "compile_ms": 1.0,
            "agent_ms": 0.5,
            "compile_speedup": 2.0,
            "speedup": 4.0,
            "speedup_ci": None,
            "vs_compile": 2.2,
            "evaluations_to_best": 2,
            "stage_s": {},
            "notes": [],
            "source": None,
        },
        {
            **common,
            "problem": "level1/5_old_derived",
            "path": "e.py",
            "verdict": "correct",
            "eager_ms": 2.0,
            "compile_ms": 1.0,
            "agent_ms": 0.25,
            "compile_speedup": 2.0,
            "speedup": 8.0,
            "vs_compile": 4.0,
            "notes": ["ours/compile derived from the two runs against eager: the head-to-head"],
        },
    ]


def _row_line(output: str, problem: str, sep: str) -> list[str]:
    line = next(line for line in output.splitlines() if f"{sep} {problem} " in line)
    return [cell.strip() for cell in line.strip().strip(sep).split(sep)]


def _assert_ratios_follow_from_their_times(text: str) -> int:
    found = RATIO_WITH_TIMES.findall(text)
    for ratio, first, second in found:
        # The ratio is printed to 2 decimals and each time to 4 significant digits, so the
        # times' own rounding (up to 0.05% each) adds up to 0.1% of the ratio.
        tolerance = 0.005 + 1e-3 * float(ratio)
        assert float(first) / float(second) == pytest.approx(float(ratio), abs=tolerance), found
    return len(found)


def test_each_ratio_is_shown_with_the_two_times_of_its_own_run(tmp_path):
    saved = _save(tmp_path / "new.json", _new_rows())
    done = _bench("--from-json", str(saved), "--markdown")
    assert done.returncode == 0, done.stderr
    headers = _row_line(done.stdout, "problem", "|")
    measured = dict(zip(headers, _row_line(done.stdout, "level1/1_measured", "|"), strict=True))
    assert measured["ours ms"] == "2.210" and measured["compile ms"] == "2.040"
    assert measured["ours/compile"] == "1.14x (2.040/1.790 ms)"  # the head-to-head's own pair
    assert measured["ours/eager"] == "1.47x (3.250/2.210 ms; CI 1.40-1.55)"
    assert measured["compile/eager"] == "1.62x (3.300/2.040 ms)"
    derived = dict(zip(headers, _row_line(done.stdout, "level1/2_derived", "|"), strict=True))
    assert derived["ours/compile"] == "1.25x (derived)"
    original = dict(zip(headers, _row_line(done.stdout, "level1/3_original", "|"), strict=True))
    assert original["ours/eager"] == "1.00x (original)"
    assert original["ours/compile"] == "0.50x (0.5000/1.000 ms)"  # eager against compile
    assert _assert_ratios_follow_from_their_times(done.stdout) == 7
    assert "derived: ours/eager ÷ compile/eager, from two runs" in done.stdout

    terminal = _bench("--from-json", str(saved))
    assert terminal.returncode == 0, terminal.stderr
    assert "1.14x (2.040/1.790 ms)" in terminal.stdout
    assert "1.25x (derived)" in terminal.stdout
    assert _assert_ratios_follow_from_their_times(terminal.stdout) == 7

    again = _bench("--from-json", str(saved), "--json")  # the times survive a round trip
    assert again.returncode == 0, again.stderr
    (row, *_) = json.loads(again.stdout)["rows"]
    assert row["vs_compile_ms"] == [2.04, 1.79] and row["speedup_ms"] == [3.25, 2.21]


def test_reports_saved_before_the_times_render_and_merge_with_new_ones(tmp_path):
    old = _save(tmp_path / "old.json", _old_rows(), "kb --optimize old")
    done = _bench("--from-json", str(old), "--markdown")
    assert done.returncode == 0, done.stderr
    headers = _row_line(done.stdout, "problem", "|")
    plain = dict(zip(headers, _row_line(done.stdout, "level1/4_old", "|"), strict=True))
    assert plain["ours/compile"] == "2.20x" and plain["ours/eager"] == "4.00x"
    assert plain["compile/eager"] == "2.00x (2.000/1.000 ms)"  # both columns of one run
    derived = dict(zip(headers, _row_line(done.stdout, "level1/5_old_derived", "|"), strict=True))
    assert derived["ours/compile"] == "4.00x (derived)"  # recognised by its note

    new = _save(tmp_path / "new.json", _new_rows(), "kb --optimize new")
    merged = _bench("--from-json", str(old), str(new), "--markdown")
    assert merged.returncode == 0, merged.stderr
    assert "kb --optimize old && kb --optimize new" in merged.stdout
    assert "1.14x (2.040/1.790 ms)" in merged.stdout and "| level1/4_old |" in merged.stdout
    as_json = _bench("--from-json", str(old), str(new), "--json")
    assert as_json.returncode == 0, as_json.stderr
    rows = {row["problem"]: row for row in json.loads(as_json.stdout)["rows"]}
    assert rows["level1/4_old"]["vs_compile_ms"] is None
    assert rows["level1/5_old_derived"]["vs_compile_derived"] is True
    assert rows["level1/1_measured"]["vs_compile_derived"] is False


@pytest.mark.long  # a bench --optimize run end to end: test-all
@pytest.mark.slow
def test_a_measured_row_keeps_the_times_behind_its_ratios(tmp_path):
    """`bench --optimize` end to end on one problem: each ratio in the JSON row is the
    quotient of the pair saved beside it."""
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
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["compile_verdict"] == "correct"
    if row["verdict"] == "correct":
        eager, ours = row["speedup_ms"]
        assert ours == row["agent_ms"] and eager / ours == pytest.approx(row["speedup"], rel=1e-3)
    if row["vs_compile_derived"]:
        assert row["vs_compile_ms"] is None and any("derived" in n for n in row["notes"])
    else:
        compiled, ours = row["vs_compile_ms"]
        assert compiled / ours == pytest.approx(row["vs_compile"], rel=1e-6)
    assert _assert_ratios_follow_from_their_times(done.stdout) >= 2
