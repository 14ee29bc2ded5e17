"""bench/gpu_checks.sh part a keeps a failed test's reason when its time budget cuts pytest
before the -rfE summary: tests/conftest.py writes each failure as it happens, and the part's
bookkeeping (bench/gpu_checks_parts.py) reads it back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import gpu_checks_parts as parts
from tests.conftest import pytest_runtest_logreport


def _report(nodeid: str, outcome: str, longrepr: object, when: str = "call") -> pytest.TestReport:
    return pytest.TestReport(nodeid, (nodeid, 0, "t"), {}, outcome, longrepr, when)


def _assertion_failure() -> object:
    try:
        assert 1 == 2
    except AssertionError:
        return pytest.ExceptionInfo.from_current().getrepr(style="short")
    raise AssertionError("unreachable")


def test_failures_are_logged_as_they_happen_and_read_back(tmp_path, monkeypatch):
    log = tmp_path / "a-failures.jsonl"
    monkeypatch.setenv("KERNEL_AGENT_FAILURE_LOG", str(log))
    pytest_runtest_logreport(_report("tests/t.py::test_ok", "passed", None))
    pytest_runtest_logreport(_report("tests/t.py::test_fail", "failed", _assertion_failure()))
    pytest_runtest_logreport(
        _report("tests/t.py::test_setup", "failed", "trace\nRuntimeError: no GPU\n\n", "setup")
    )
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(r["nodeid"], r["when"]) for r in records] == [
        ("tests/t.py::test_fail", "call"),
        ("tests/t.py::test_setup", "setup"),
    ]
    log.write_text(log.read_text() + '{"nodeid": "tests/t.py::test_cut", "rea')  # cut mid-line
    assert parts.failure_reasons(log) == {
        "tests/t.py::test_fail": "assert 1 == 2",
        "tests/t.py::test_setup": "RuntimeError: no GPU",
    }


def test_a_cut_run_reports_the_logged_reason(tmp_path: Path, monkeypatch):
    """a.log of a run cut before pytest's summary: the outcome line, no reason line."""
    monkeypatch.setattr(parts, "OUT", tmp_path)
    monkeypatch.setattr(parts, "WORK", tmp_path)
    (tmp_path / "a-collected.txt").write_text("tests/t.py::test_fail\ntests/t.py::test_ok\n")
    (tmp_path / "a.log").write_text("tests/t.py::test_fail FAILED [ 50%]\n")
    record = {"nodeid": "tests/t.py::test_fail", "when": "call", "reason": "assert 1 == 2"}
    (tmp_path / parts.FAILURE_LOG).write_text(json.dumps(record) + "\n")
    _, _, fail, _, _, pending = parts.a_finish({})
    assert fail == ["FAILED tests/t.py::test_fail: assert 1 == 2"]
    assert pending == ["tests/t.py::test_ok"]
