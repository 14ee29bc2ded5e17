"""A benchmark survives its problems: a problem that fails is a row with its reason and the
run goes on; the exit status is nonzero iff a row errored; `--resume OUT.json` continues a run
that was cut (the report is written after every row); a row keeps every time measured.

Broken problems live in temporary folders here, never in tests/kernelbench_style/. Every test
runs the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, TESTS, requires_jail

KERNEL_AGENT = [sys.executable, "-m", "agents"]
LEVEL1 = TESTS / "kernelbench_style" / "KernelBench" / "level1"
FAST = ["--threads", "1", "--timing-budget", "0.1"]

BROKEN_FORWARD = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        raise RuntimeError("deliberately broken forward")


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
"""

BROKEN_IMPORT = BROKEN_FORWARD.replace(
    "import torch.nn as nn\n",
    "import torch.nn as nn\n\nraise ImportError('deliberately broken import')\n",
)

COMPILE_DIFFERS = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Takes another branch under torch.compile, so the compiled baseline is wrong while
    eager runs fine: the row must keep eager's time."""

    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        if torch.compiler.is_compiling():
            return x * 2.0 + 1.0
        return x * 2.0


batch_size = 16
dim = 256


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''


def _bench(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*KERNEL_AGENT, "bench", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _suite(folder: Path, good: list[str], extra: dict[str, str]) -> Path:
    """A KernelBench-like level1 folder: copies of good problems plus the given sources."""
    level = folder / "KernelBench" / "level1"
    level.mkdir(parents=True)
    for name in good:
        (level / name).write_text((LEVEL1 / name).read_text())
    for name, text in extra.items():
        (level / name).write_text(text)
    return folder


@requires_jail
def test_broken_problems_are_rows_and_the_run_goes_on(tmp_path):
    """A problem that cannot be imported and one whose forward raises sit between good
    ones: every problem gets a row, the errors say which file and why, exit status 1."""
    suite = _suite(
        tmp_path / "suite",
        ["1_Rectangular_matrix_multiplication_.py", "6_Matrix_scalar_multiplication.py"],
        {"2_Broken_import.py": BROKEN_IMPORT, "3_Broken_forward.py": BROKEN_FORWARD},
    )
    out = tmp_path / "plain.json"
    done = _bench(str(suite), "--baseline", "eager", *FAST, "--out", str(out), "--json")
    assert done.returncode == 1, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert json.loads(out.read_text()) == report
    rows = {row["problem"]: row for row in report["rows"]}
    assert list(rows) == [
        "level1/1_Rectangular_matrix_multiplication_",
        "level1/2_Broken_import",
        "level1/3_Broken_forward",
        "level1/6_Matrix_scalar_multiplication",
    ]
    assert rows["level1/2_Broken_import"]["verdict"] == "error"
    (reason,) = rows["level1/2_Broken_import"]["reasons"]
    assert "2_Broken_import.py:4: ImportError: deliberately broken import" in reason
    assert rows["level1/3_Broken_forward"]["verdict"] == "error"
    assert "deliberately broken forward" in rows["level1/3_Broken_forward"]["reasons"][0]
    for name in (
        "level1/1_Rectangular_matrix_multiplication_",
        "level1/6_Matrix_scalar_multiplication",
    ):
        assert rows[name]["verdict"] == "correct" and rows[name]["eager_ms"] > 0
    # The readable table names each error's reason under it, and the status is the same.
    readable = _bench(
        str(suite), "--baseline", "eager", *FAST, "--levels", "1", "--start", "1", "--limit", "1"
    )
    assert readable.returncode == 1
    assert "level1/2_Broken_import: error: " in readable.stdout, readable.stdout
    # Without the broken ones, the same run exits 0.
    fine = _bench(str(suite), "--baseline", "eager", *FAST, "--start", "3")
    assert fine.returncode == 0, fine.stdout[-2000:] + fine.stderr[-2000:]


def _rows_in(path: Path) -> int:
    try:
        return len(json.loads(path.read_text())["rows"])
    except (OSError, ValueError, KeyError):
        return 0


@requires_jail
def test_a_cut_run_continues_with_resume(tmp_path):
    """The run is killed after its first row; the same command with --resume keeps that row
    as it is and runs only the others."""
    suite = _suite(
        tmp_path / "suite",
        [
            "1_Rectangular_matrix_multiplication_.py",
            "3_Sum_reduction_over_a_dimension.py",
            "6_Matrix_scalar_multiplication.py",
        ],
        {},
    )
    out = tmp_path / "run.json"
    command = [*KERNEL_AGENT, "bench", str(suite), "--baseline", "eager", *FAST]
    command += ["--resume", str(out)]
    cut = subprocess.Popen(
        command,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while _rows_in(out) < 1 and cut.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        os.killpg(cut.pid, signal.SIGKILL)  # the time limit: it and its workers end now
        cut.wait(timeout=30)
    first = json.loads(out.read_text())
    assert len(first["rows"]) == 1, "the first row should be written before the cut"
    done = subprocess.run(
        [*command, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert json.loads(out.read_text()) == report
    assert [row["problem"] for row in report["rows"]] == [
        "level1/1_Rectangular_matrix_multiplication_",
        "level1/3_Sum_reduction_over_a_dimension",
        "level1/6_Matrix_scalar_multiplication",
    ]
    assert report["rows"][0] == first["rows"][0]  # kept, not measured again
    assert report["date"] == first["date"] and report["total_s"] >= first["total_s"]
    # Resuming a finished run measures nothing again.
    again = subprocess.run(
        [*command, "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0 and json.loads(again.stdout)["rows"] == report["rows"]


def test_resume_refuses_another_setup_or_kind_in_one_line(tmp_path):
    saved = tmp_path / "saved.json"
    saved.write_text(
        json.dumps(
            {
                "date": "2026-01-01 00:00 UTC",
                "machine": "NVIDIA H200",
                "device": "cuda",
                "size": "default",
                "command": "kernel-agent bench",
                "rows": [],
                "total_s": 0.0,
            }
        )
    )
    problem = str(LEVEL1 / "6_Matrix_scalar_multiplication.py")
    done = _bench(problem, "--resume", str(saved), *FAST)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "--resume: that report's machine is 'NVIDIA H200'" in done.stderr
    done = _bench(problem, "--optimize", "--resume", str(saved))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "is a plain bench report, but this run makes a bench --optimize report" in done.stderr
    saved.write_text("{not json")
    done = _bench(problem, "--resume", str(saved))
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.long  # bench --optimize over a suite: test-all
@requires_jail
@pytest.mark.slow
def test_bench_optimize_keeps_going_and_keeps_every_time(tmp_path):
    """`bench --optimize`: a problem whose forward raises is an error row naming its stage;
    a problem whose torch.compile baseline is wrong keeps eager's time and is still searched;
    exit status 1. A resume keeps the finished row and retries only the error."""
    suite = _suite(
        tmp_path / "suite",
        [],
        {"1_Broken_forward.py": BROKEN_FORWARD, "2_Compile_differs.py": COMPILE_DIFFERS},
    )
    out = tmp_path / "optimize.json"
    args = [str(suite), "--levels", "1", "--optimize", "--max-evals", "1", *FAST]
    done = _bench(*args, "--resume", str(out), "--json", timeout=600)
    assert done.returncode == 1, done.stderr[-2000:]
    report = json.loads(done.stdout)
    broken, differs = report["rows"]
    assert broken["problem"] == "level1/1_Broken_forward" and broken["verdict"] == "error"
    assert broken["error"].startswith("baseline: ")
    assert "deliberately broken forward" in broken["error"]
    assert differs["compile_verdict"] == "incorrect", differs
    assert differs["eager_ms"] > 0 and differs["compile_ms"] is None
    assert differs["verdict"] in ("correct", "no_improvement")
    assert {"baseline", "eager", "search"} <= set(differs["stage_s"])  # eager timed on its own
    assert report["summary"]["errors"] == 1
    again = _bench(*args, "--resume", str(out), "--json", timeout=300)
    assert again.returncode == 1
    resumed = json.loads(again.stdout)
    assert resumed["rows"][1] == differs  # finished: kept
    assert resumed["rows"][0]["verdict"] == "error"  # an error is retried (and fails again)
    assert resumed["rows"][0]["wall_s"] > 0


@requires_jail
def test_a_wrong_torch_compile_row_keeps_eager_time(tmp_path):
    """Plain `bench`: torch.compile's answer is wrong, which is that row's verdict, not an
    error (exit status 0); eager ran fine, so its time is in the row."""
    suite = _suite(tmp_path / "suite", [], {"1_Compile_differs.py": COMPILE_DIFFERS})
    done = _bench(str(suite), *FAST, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = json.loads(done.stdout)["rows"]
    assert row["verdict"] == "incorrect" and row["baseline_ms"] is None, row
    assert row["eager_ms"] > 0
