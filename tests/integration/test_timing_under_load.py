"""Timing beside two busy processes (a Python loop per core): an A/A copy (the reference's
own code as the candidate) is never reported faster than the band; it is either within it or
marked unstable. Red team, before: 0.15x to 2.9x, each reported as a number."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agents.bench.suite import baseline_candidate
from agents.task import SourceFile
from agents.verify.stability import BAND
from agents.verify.verdict import Verdict
from tests.conftest import ADVERSARIAL, PROBLEMS, run_eval

BUSY = "while True: pass"


@contextmanager
def two_busy_processes() -> Iterator[None]:
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2)]
    try:
        yield
    finally:
        for process in busy:
            process.kill()
            process.wait()


@pytest.mark.serial  # it loads the machine: never beside an xdist neighbour
def test_an_aa_copy_beside_two_busy_processes_is_never_reported_faster():
    reference = SourceFile.from_path(PROBLEMS / "linear_relu.py")
    itself = baseline_candidate(reference, "eager")
    seen = []
    with two_busy_processes():
        for _ in range(5):
            result = run_eval("linear_relu.py", itself, static_check=False, timing_budget_s=0.3)
            assert result.verdict is Verdict.CORRECT, result.reasons
            assert result.speedup is not None
            seen.append((round(result.speedup, 2), result.timing_stable))
            if result.timing_stable:
                assert result.speedup <= BAND, seen
            else:
                assert result.timing_unstable_reason, seen


@pytest.mark.serial  # it loads the machine: never beside an xdist neighbour
def test_a_background_precompute_thread_gains_nothing_from_the_load():
    """tests/adversarial/background_precompute_thread.py, its static rule off: a thread from
    import recomputes every call beside forward (the red team measured such a candidate at
    21.5x under load). Refused, or correct and never reported faster than the band."""
    cheat = ADVERSARIAL / "background_precompute_thread.py"
    with two_busy_processes():
        for _ in range(3):
            result = run_eval("linear_relu.py", cheat, static_check=False, timing_budget_s=0.3)
            if result.verdict is not Verdict.CORRECT:
                assert result.reasons
                continue
            assert result.speedup is not None
            assert not result.timing_stable or result.speedup <= BAND, result.speedup
