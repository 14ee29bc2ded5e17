"""Budgets and signals are promises (issue 34, part 1), through the real CLI as a subprocess.

The problem here sleeps 2 s in every forward, so ONE evaluation (or the reference's profile)
outlasts the budget: a budget checked only before new work starts would overrun by minutes.
`--max-time T` must end within max(10% of T, 15 s) of T; SIGINT and SIGTERM within 5 s, with
no sandboxed worker left behind (the autouse orphan guard in tests/conftest.py) and the
partial report written.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, SANDBOX_MARK

KERNEL_AGENT = [sys.executable, "-m", "agents"]
FAST = ("--threads", "1", "--timing-budget", "0.3")
STARTUP_S = 5.0  # the interpreter and torch's import, before the budget's clock starts
SIGNAL_BOUND_S = 5.0

SLOW_PROBLEM = '''
import time
import torch
import torch.nn as nn


class Model(nn.Module):
    """Every forward takes 2 s: one evaluation outlasts a short budget."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        time.sleep(2.0)
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''

BROKEN_PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        raise RuntimeError("this reference is broken")


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
"""


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text)
    return path


def _run(*args: str, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = subprocess.run(
        [*KERNEL_AGENT, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )
    return done, time.monotonic() - started


def _sandboxed_descendant(root: int) -> bool:
    """A sandboxed worker (or the jail around one) started by `root` is running."""
    parents: dict[int, int] = {}
    marked: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        if SANDBOX_MARK in argv:
            marked.append(int(entry.name))
    for pid in marked:
        seen = 0
        while pid > 1 and seen < 64:
            if pid == root:
                return True
            pid, seen = parents.get(pid, 0), seen + 1
    return False


def _signal_in_flight(args: list[str], signum: int, settle_s: float = 1.0):
    """Start the command, wait until a sandboxed worker runs (work is in flight), send
    `signum`, and return (the finished process, its stdout, stderr, seconds to end)."""
    process = subprocess.Popen(
        [*KERNEL_AGENT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 120
        while not _sandboxed_descendant(process.pid):
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "no sandboxed worker started in 120 s"
            time.sleep(0.2)
        time.sleep(settle_s)
        sent = time.monotonic()
        process.send_signal(signum)
        out, err = process.communicate(timeout=60)
        return process, out, err, time.monotonic() - sent
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.communicate()


def test_optimize_max_time_ends_within_the_bound_with_the_report(tmp_path):
    problem = _write(tmp_path, "slow.py", SLOW_PROBLEM)
    budget = 20.0
    done, took = _run(
        "optimize",
        str(problem),
        "--no-memory",
        "--json",
        "--output",
        str(tmp_path / "out.py"),
        "--max-time",
        f"{budget:g}",
        *FAST,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    assert took <= budget + max(0.1 * budget, 15) + STARTUP_S, took
    report = json.loads(done.stdout)
    assert "--max-time" in report["stopped_because"], report["stopped_because"]
    assert report["elapsed_s"] <= budget + max(0.1 * budget, 15)


def test_bench_max_time_and_problem_time_cut_and_name_what_was_cut(tmp_path):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("1_slow.py", "2_slow.py", "3_slow.py"):
        _write(suite, name, SLOW_PROBLEM)
    out = tmp_path / "report.json"
    budget, each = 25.0, 12.0
    done, took = _run(
        "bench",
        str(suite),
        "--optimize",
        "--max-time",
        f"{budget:g}",
        "--problem-time",
        f"{each:g}",
        "--out",
        str(out),
        *FAST,
        timeout=240,
    )
    assert took <= budget + max(0.1 * budget, 15) + STARTUP_S, took
    assert done.returncode == 1, done.stderr  # a cut problem is not a finished one
    rows = json.loads(out.read_text())["rows"]
    assert rows and rows[0]["cut"], rows
    assert rows[0]["wall_s"] <= each + max(0.1 * each, 15), rows[0]
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("kernel-agent bench:")]
    assert "1_slow" in line and "--problem-time" in line, line
    assert "3_slow" in line and ("--max-time" in line or len(rows) == 3), line


def test_sigint_ends_optimize_within_5_s_with_the_partial_json(tmp_path):
    problem = _write(tmp_path, "slow.py", SLOW_PROBLEM)
    trajectory = tmp_path / "trajectory.json"
    args = ["optimize", str(problem), "--no-memory", "--json", "--trajectory", str(trajectory)]
    args += ["--output", str(tmp_path / "out.py"), *FAST]
    process, out, err, took = _signal_in_flight(args, signal.SIGINT)
    assert process.returncode == 130, err
    assert took <= SIGNAL_BOUND_S, took
    report = json.loads(out)
    assert report["stopped_because"] == "interrupted (Ctrl-C)", report["stopped_because"]
    assert json.loads(trajectory.read_text())["stopped_because"] == "interrupted (Ctrl-C)"
    assert "Traceback" not in err


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_ends_bench_within_5_s_with_the_report_written(tmp_path, signum):
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("1_slow.py", "2_slow.py"):
        _write(suite, name, SLOW_PROBLEM)
    out = tmp_path / "report.json"
    args = ["bench", str(suite), "--optimize", "--out", str(out), *FAST]
    process, _, err, took = _signal_in_flight(args, signum)
    assert process.returncode == 128 + signum, err
    assert took <= SIGNAL_BOUND_S, took
    rows = json.loads(out.read_text())["rows"]
    assert [row["problem"] for row in rows] == ["1_slow"] and rows[0]["cut"], rows
    assert "not run" in err and "2_slow" in err, err
    assert "Traceback" not in err


def test_sigterm_ends_profile_within_5_s(tmp_path):
    problem = _write(tmp_path, "slow.py", SLOW_PROBLEM)
    process, _, err, took = _signal_in_flight(["profile", str(problem)], signal.SIGTERM, 0.5)
    assert process.returncode == 143, err
    assert took <= SIGNAL_BOUND_S, took
    assert "Traceback" not in err


def test_profile_max_time_says_how_to_raise_it(tmp_path):
    problem = _write(tmp_path, "slow.py", SLOW_PROBLEM)
    done, _ = _run("profile", str(problem), "--max-time", "3", timeout=120)
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "longer than 3 s" in line and "--max-time" in line, line


def test_profile_of_a_directory_says_it_is_one(tmp_path):
    done, _ = _run("profile", str(tmp_path), timeout=60)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "is a directory" in line and "kernel-agent bench" in line, line


def test_a_reference_that_fails_ends_optimize_and_bench_non_zero_in_one_line(tmp_path):
    problem = _write(tmp_path, "broken.py", BROKEN_PROBLEM)
    done, _ = _run(
        "optimize",
        str(problem),
        "--no-memory",
        "--output",
        str(tmp_path / "o.py"),
        *FAST,
        timeout=180,
    )
    assert done.returncode != 0, done.stdout
    (line,) = done.stderr.strip().splitlines()
    assert "reference fails on its own" in line and "this reference is broken" in line, line
    done, _ = _run("bench", str(problem), "--baseline", "eager", *FAST, timeout=180)
    assert done.returncode == 1, done.stdout
    assert "this reference is broken" in done.stdout, done.stdout
