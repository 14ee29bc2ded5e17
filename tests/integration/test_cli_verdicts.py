"""`kernel-agent eval`'s readable report for every verdict, through the real command line.

Why: the readable summary once crashed (KeyError 'build' in the phase breakdown) for verdicts
reached before every phase ran, while --json worked; only the correct verdict was pinned. Each
case here runs a small candidate in the jail and checks the verdict line, the reason the user
needs, exit status 1 (0 for correct) and the closing `took` line, with nothing on stderr.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ADVERSARIAL, PROBLEMS, ROOT, requires_jail

EXECUTABLE = shutil.which("kernel-agent", path=str(Path(sys.executable).parent))
FAST = ("--threads", "1", "--timing-budget", "0.2")

REFERENCE = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) + 1.0


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
"""

CANDIDATES = {
    "correct": """\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0) + 1.0
""",
    "incorrect": """\
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 0
""",
    "no_model_new": """\
import torch.nn as nn


class NotTheModel(nn.Module):
    def forward(self, x):
        return x
""",
    "import_fails": """\
import torch.nn as nn

import no_such_module_anywhere


class ModelNew(nn.Module):
    def forward(self, x):
        return x
""",
    "raises": """\
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        raise ValueError("this kernel is broken")
""",
    "sleeps": """\
import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            time.sleep(1)
""",
}

# (case, reference, candidate, extra arguments, verdict, what the report must say)
CASES = [
    ("correct", None, "correct", (), "correct", r"correctness: 5 trials on cpu"),
    ("incorrect", None, "incorrect", (), "incorrect", r"reason: .*fails allclose"),
    (
        "compile_error: no ModelNew",
        None,
        "no_model_new",
        (),
        "compile_error",
        r"reason: .*no `class ModelNew`",
    ),
    (
        "compile_error: import fails in the jail",
        None,
        "import_fails",
        (),
        "compile_error",
        r"reason: .*no_such_module_anywhere",
    ),
    (
        "runtime_error",
        None,
        "raises",
        (),
        "runtime_error",
        r"reason: .*ValueError: this kernel is broken",
    ),
    (
        "timeout while running",
        None,
        "sleeps",
        ("--run-timeout", "3"),
        "timeout",
        r"reason: .*longer than 3 s",
    ),
    (
        "timeout while building",
        PROBLEMS / "linear_relu.py",
        ADVERSARIAL / "hang_in_init.py",
        ("--build-timeout", "4"),
        "timeout",
        r"reason: .*longer than 4 s",
    ),
    (
        "rejected at run time",
        PROBLEMS / "linear_relu.py",
        ADVERSARIAL / "grad_and_threads.py",
        (),
        "rejected",
        r"reason: global state changed",
    ),
    (
        "rejected by the static check",
        PROBLEMS / "linear_relu.py",
        ADVERSARIAL / "cpu_hog_thread.py",
        (),
        "rejected",
        r"isolation: static check only",
    ),
]


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    command = [EXECUTABLE] if EXECUTABLE else [sys.executable, "-m", "agents"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def _paths(tmp_path: Path, reference: Path | None, candidate: str | Path) -> tuple[str, str]:
    if reference is None:
        reference = tmp_path / "reference.py"
        reference.write_text(REFERENCE)
    if isinstance(candidate, str):
        written = tmp_path / f"{candidate}.py"
        written.write_text(CANDIDATES[candidate])
        candidate = written
    return str(reference), str(candidate)


@requires_jail
@pytest.mark.parametrize(
    ("reference", "candidate", "extra", "verdict", "says"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_readable_report_for_every_verdict(tmp_path, reference, candidate, extra, verdict, says):
    done = cli("eval", *_paths(tmp_path, reference, candidate), *FAST, *extra)
    assert done.returncode == (0 if verdict == "correct" else 1), done.stderr
    assert done.stderr == "", done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"verdict: {verdict}", done.stdout
    assert re.search(says, done.stdout), done.stdout
    assert re.fullmatch(r"  took [0-9.]+ s( \(.+\))?", lines[-1]), done.stdout
    if verdict == "timeout" and "build" in " ".join(extra):
        assert "correctness" not in lines[-1], lines[-1]  # it never began
    # Only a correct candidate is timed; nothing else shows a speedup.
    assert ("speedup" in done.stdout) == (verdict == "correct"), done.stdout


def _number(pattern: str, text: str) -> float:
    found = re.search(pattern, text)
    assert found, text
    return float(found.group(1))


@requires_jail
def test_speedup_follows_from_the_times_shown(tmp_path):
    """One speedup: the JSON's is reference_ms / candidate_ms exactly, and the readable one
    is that ratio of the two times it prints (four significant digits each)."""
    paths = _paths(tmp_path, None, "correct")
    report = json.loads(cli("eval", *paths, *FAST, "--json").stdout)
    assert report["speedup"] == pytest.approx(
        report["reference_ms"] / report["candidate_ms"], rel=1e-9
    )
    text = cli("eval", *paths, *FAST).stdout
    reference = _number(r"timing: reference ([0-9.]+) ms", text)
    candidate = _number(r"candidate ([0-9.]+) ms", text)
    speedup = _number(r"speedup ([0-9.]+)x", text)
    assert reference / candidate == pytest.approx(speedup, abs=0.005 + 0.002 * speedup), text


CARRIED_MODULE = """\
import torch


def relu_plus_one(x):
    return torch.clamp_min(x, 0.0) + 1.0
"""

IMPORTS_CARRIED = """\
import torch.nn as nn
from carried_relu import relu_plus_one


class ModelNew(nn.Module):
    def forward(self, x):
        return relu_plus_one(x)
"""


@pytest.mark.parametrize(
    "jail", [pytest.param(True, marks=requires_jail), False], ids=["jail", "no-jail"]
)
def test_a_candidate_imports_what_pythonpath_carries(tmp_path, jail):
    """Packages installed with `pip --target` and named by PYTHONPATH (how the GPU image gets
    wheels it lacks) reach the isolated child too: once they did not, and every triton-gemm
    candidate failed on a missing module while the parent imported it fine."""
    carried = tmp_path / "carried"
    carried.mkdir()
    (carried / "carried_relu.py").write_text(CARRIED_MODULE)
    reference, candidate = tmp_path / "reference.py", tmp_path / "candidate.py"
    reference.write_text(REFERENCE)
    candidate.write_text(IMPORTS_CARRIED)
    command = [EXECUTABLE] if EXECUTABLE else [sys.executable, "-m", "agents"]
    args = ["eval", str(reference), str(candidate), *FAST, *([] if jail else ["--no-jail"])]
    done = subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(carried)},
    )
    assert done.stdout.splitlines()[0] == "verdict: correct", done.stdout + done.stderr
