"""`kernel-agent eval` through the real console script, as a subprocess."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import ADVERSARIAL, CANDIDATES, PROBLEMS, ROOT

EXECUTABLE = shutil.which("kernel-agent", path=str(Path(sys.executable).parent))


def cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    command = [EXECUTABLE] if EXECUTABLE else [sys.executable, "-m", "agents"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


FAST = ("--threads", "1", "--timing-budget", "0.2")


def test_correct_candidate_exits_zero_with_json_fields():
    done = cli(
        "eval",
        str(PROBLEMS / "linear_relu.py"),
        str(CANDIDATES / "linear_relu_honest.py"),
        "--json",
        *FAST,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    for key in (
        "verdict",
        "correct",
        "speedup",
        "reference_ms",
        "candidate_ms",
        "reasons",
        "strict_allclose",
        "float64_error_ratio",
        "state_dict_compatible",
        "isolation",
    ):
        assert key in report
    assert report["verdict"] == "correct" and report["correct"] is True
    assert report["speedup"] > 0 and report["reference_ms"] > 0 and report["candidate_ms"] > 0
    assert report["trials"] == 5
    assert "address space" in report["isolation"] and len(report["isolation"]) > 150  # whole
    # Where the time went: each phase the child announced, accounted within the wall time.
    phases = report["phase_s"]
    assert {"build", "run", "measure"} <= set(phases) and min(phases.values()) >= 0
    assert sum(v for k, v in phases.items() if k != "paused") <= report["elapsed_s"] + 0.05


def test_readable_summary_names_verdict_rules_and_timing():
    done = cli(
        "eval",
        str(PROBLEMS / "wide_gemm_sum.py"),
        str(CANDIDATES / "wide_gemm_sum_reassociated.py"),
        "--trials",
        "6",
        *FAST,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("verdict: correct")
    assert "6 trials" in done.stdout
    # Both rules are named with their outcome. Which one carries a reassociated sum depends on
    # the CPU's GEMM blocking (it differs between machines), so either may be the one that fails.
    assert re.search(r"strict allclose (pass|fail)", done.stdout)
    float64 = r"float64 rule (pass|fail \(error [0-9.]+x of the allowed band\))"
    assert re.search(float64, done.stdout)
    assert "speedup" in done.stdout
    assert re.search(
        r"took [0-9.]+ s \(.*imports and build [0-9.]+ s, correctness [0-9.]+ s", done.stdout
    )


def test_cheat_exits_one_with_reasons():
    done = cli(
        "eval",
        str(PROBLEMS / "linear_relu.py"),
        str(ADVERSARIAL / "cached_output.py"),
        "--json",
        *FAST,
    )
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["verdict"] == "incorrect" and report["correct"] is False
    assert report["reasons"]


def test_usage_errors_exit_two_with_one_line_and_no_traceback(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("class Model(:\n")
    cases = [
        ("eval",),
        ("eval", str(tmp_path / "missing.py"), str(CANDIDATES / "linear_relu_honest.py")),
        ("eval", str(broken), str(CANDIDATES / "linear_relu_honest.py")),
        (
            "eval",
            str(PROBLEMS / "linear_relu.py"),
            str(CANDIDATES / "linear_relu_honest.py"),
            "--trials",
            "0",
        ),
        (
            "eval",
            str(PROBLEMS / "linear_relu.py"),
            str(CANDIDATES / "linear_relu_honest.py"),
            "--device",
            "tpu",
        ),
        ("frobnicate",),
    ]
    for args in cases:
        done = cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.count("\n") == 1, (args, done.stderr)
        assert "Traceback" not in done.stderr
        prefix = "kernel-agent: error:" if args[0] == "frobnicate" else "kernel-agent eval: error:"
        assert done.stderr.startswith(prefix), (args, done.stderr)


def test_reference_that_fails_to_build_is_a_usage_error(tmp_path):
    reference = tmp_path / "ref.py"
    reference.write_text(
        (PROBLEMS / "linear_relu.py")
        .read_text()
        .replace("return [IN_FEATURES, OUT_FEATURES]", "return [IN_FEATURES]")
    )
    done = cli("eval", str(reference), str(CANDIDATES / "linear_relu_honest.py"))
    assert done.returncode == 2
    assert "building Model" in done.stderr and "TypeError" in done.stderr


def test_candidate_with_syntax_error_is_a_compile_error():
    done = cli("eval", str(PROBLEMS / "linear_relu.py"), __file__.replace(".py", "_missing.py"))
    assert done.returncode == 2  # a missing candidate file is a usage error
    broken = ROOT / "tests" / "candidates" / "linear_relu_honest.py"
    text = broken.read_text().replace("def forward(self, x):", "def forward(self, x)")
    path = Path(__import__("tempfile").mkdtemp()) / "c.py"
    path.write_text(text)
    done = cli("eval", str(PROBLEMS / "linear_relu.py"), str(path), "--json")
    assert done.returncode == 1
    report = json.loads(done.stdout)
    assert report["verdict"] == "compile_error"
    assert "syntax error" in report["reasons"][0]


def test_eval_times_only_while_no_other_process_times_on_its_device(tmp_path):
    """The measure lane is machine-wide outside a pool too: while another process holds the
    CPU's timing lock, `kernel-agent eval` gets through its correctness trials but does not
    time, and it times once the lock is free."""
    from agents.sandbox.devicelock import DeviceLock

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}  # platformdirs' user cache dir
    held = DeviceLock(tmp_path / "kernel-agent" / "locks", "cpu")
    assert held.acquire()
    command = [EXECUTABLE] if EXECUTABLE else [sys.executable, "-m", "agents"]
    process = subprocess.Popen(
        [
            *command,
            "eval",
            str(PROBLEMS / "linear_relu.py"),
            str(CANDIDATES / "linear_relu_honest.py"),
            "--json",
            *FAST,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 8  # eval alone takes about 2 s here
        while time.monotonic() < deadline:
            assert process.poll() is None, "eval finished while another process was timing"
            time.sleep(0.2)
        released = time.monotonic()
    finally:
        held.release()
    stdout, stderr = process.communicate(timeout=180)
    done = time.monotonic()
    assert process.returncode == 0, stderr
    report = json.loads(stdout)
    assert report["verdict"] == "correct"
    # Its timing began after the release: the run ended no earlier than release + timing.
    assert done - report["phase_s"]["measure"] >= released - 0.1
