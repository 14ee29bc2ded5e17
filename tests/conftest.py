"""Shared fixtures: paths to the test problems and candidates, and a fast evaluator."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from agents.evaluate import EvalOptions, evaluate
from agents.sandbox.jail import find_jail
from agents.sandbox.process import Limits
from agents.task import SourceFile
from agents.verify.verdict import EvalResult

TESTS = Path(__file__).parent
PROBLEMS = TESTS / "problems"
CANDIDATES = TESTS / "candidates"
ADVERSARIAL = TESTS / "adversarial"
ROOT = TESTS.parent

FAST = EvalOptions(
    trials=5,
    threads=1,
    timing_budget_s=0.2,
    limits=Limits(build_timeout_s=120, run_timeout_s=30, address_space_bytes=6 * 1024**3),
)

requires_jail = pytest.mark.skipif(
    find_jail() is None, reason="bubblewrap is not installed or cannot run here"
)


def run_eval(problem: str | Path, candidate: str | Path | SourceFile, **overrides) -> EvalResult:
    """Evaluate a candidate against a test problem with fast, strict defaults."""
    reference = SourceFile.from_path(PROBLEMS / problem if isinstance(problem, str) else problem)
    if not isinstance(candidate, SourceFile):
        path = CANDIDATES / candidate if isinstance(candidate, str) else candidate
        candidate = SourceFile.from_path(path)
    return evaluate(reference, candidate, replace(FAST, **overrides))


def candidate_source(text: str, name: str = "candidate.py") -> SourceFile:
    return SourceFile(text=text, path=f"/virtual/{name}")
