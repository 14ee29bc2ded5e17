"""KernelBench's shipped (GPU) sizes on any machine, through the CLI as a subprocess: the
meta-device estimate refuses what cannot fit with one line, quickly and without allocating,
and `--size fit` runs a level 1 problem at its shipped sizes, naming the sizes it used.

The problems are in tests/shipped_sizes/ (never run at their own sizes)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

from tests.conftest import ROOT, TESTS, requires_jail

KERNEL_AGENT = [sys.executable, "-m", "agents"]
SHIPPED = TESTS / "shipped_sizes"
LEVEL1 = SHIPPED / "19_ReLU_level1_shipped.py"  # 4096 x 393216 fp32: 6.4 GB in, 6.4 GB out
LEVEL1_CANDIDATE = SHIPPED / "19_ReLU_candidate.py"
TERABYTE = SHIPPED / "terabyte_gemm.py"  # 1.1 TB of input: no machine holds it
FAST = ["--threads", "1", "--timing-budget", "0.1"]


def kernel_agent(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*KERNEL_AGENT, *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


@requires_jail
def test_the_estimate_refuses_a_problem_no_machine_holds_in_one_line(tmp_path):
    """eval (in the reference's worker) and optimize (in its profile of the reference, before
    any search) at the file's own sizes: exit 2, one line that says how much is needed, how
    much there is and what to do; no real allocation (1.1 TB would not come back as a line at
    all), so it is quick."""
    candidate = tmp_path / "candidate.py"
    candidate.write_text(re.sub(r"\bModel\b", "ModelNew", TERABYTE.read_text()))
    output = tmp_path / "out.py"
    commands = (
        ["eval", str(TERABYTE), str(candidate), *FAST],
        ["optimize", str(TERABYTE), "--iterations", "1", "--output", str(output), *FAST],
    )
    for command in commands:
        started = time.monotonic()
        done = kernel_agent(*command)
        took = time.monotonic() - started
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1, done.stderr
        assert re.search(r"at its default sizes this problem needs about [\d.]+ GB", lines[0])
        assert "inputs 1099.5 GB, weights 67 MB" in lines[0]
        assert re.search(r"available memory is [\d.]+ GB|address space", lines[0])
        assert re.search(r"use --size fit, or a machine with \d+ GB", lines[0])
        assert took < 90, f"{command[0]} took {took:.0f} s to refuse"
        assert not output.exists()


@requires_jail
def test_size_fit_runs_a_level1_problem_at_its_shipped_sizes_and_names_them():
    """KernelBench's ReLU as it ships (51 GB for an evaluation) is verified with its batch
    scaled down; its feature size stays; stderr names the sizes in one line and the JSON as
    {constant: [shipped, used]}."""
    done = kernel_agent(
        "eval", str(LEVEL1), str(LEVEL1_CANDIDATE), "--size", "fit", "--json", "--no-timing", *FAST
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(done.stdout)
    assert result["verdict"] == "correct"
    shipped, used = result["sizes"]["batch_size"]
    assert shipped == 4096 and 1 <= used < 4096
    assert list(result["sizes"]) == ["batch_size"]  # dim (393216) is the math: never scaled
    line = rf"sizes: batch_size {used} \(shipped 4096\) to fit [\d.]+ GB and 0\.02 s a forward"
    assert re.search(rf"^{line}$", done.stderr, re.MULTILINE), done.stderr
