"""`optimize` refuses, before it searches, a path it could not write after the search."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = ROOT / "tests/kernelbench_style/KernelBench/level1/6_Matrix_scalar_multiplication.py"


@pytest.mark.parametrize("option", ["--output", "--trajectory", "--plot"])
def test_a_missing_folder_is_one_line_before_any_work(tmp_path, option):
    target = tmp_path / "missing" / "file.out"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "agents",
            "optimize",
            str(PROBLEM),
            "--max-evals",
            "2",
            "--output",
            str(tmp_path / "out.py"),
            option,
            str(target),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert run.returncode == 2, run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr
    assert f"{option} {target}" in lines[0] and "does not exist" in lines[0]
    assert not target.parent.exists()
