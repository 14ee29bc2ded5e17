"""Shared fixtures: paths to the test problems and candidates, and a fast evaluator."""

from __future__ import annotations

import contextlib
import json
import multiprocessing.process
import os
import signal
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agents.evalpool import LocalPool
from agents.evaluate import EvalOptions, evaluate
from agents.sandbox.jail import find_jail
from agents.sandbox.process import BOOTSTRAP_PREFIX, Limits
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


def failure_reason(report: pytest.TestReport) -> str:
    """What -rfE would print: the crash message, else the report's last non-blank line; one
    line of at most 300 characters."""
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None and crash.message:
        text = crash.message
    else:
        lines = [line for line in report.longreprtext.splitlines() if line.strip()]
        text = lines[-1] if lines else ""
    return " ".join(text.split())[:300]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """One JSON line per failed test phase in $KERNEL_AGENT_FAILURE_LOG, written as it fails
    (bench/gpu_checks.sh part a sets it). Why: a run cut by a timeout never prints its summary."""
    path = os.environ.get("KERNEL_AGENT_FAILURE_LOG")
    if path and report.failed:
        record = {"nodeid": report.nodeid, "when": report.when, "reason": failure_reason(report)}
        with open(path, "a") as log:
            log.write(json.dumps(record) + "\n")
            log.flush()


# The integration and e2e tests that `make test-fast` runs beside tests/unit: one quick check
# per subsystem a unit test cannot reach. Named here, not by decorators, so that the list reads
# in one place; tests/unit/test_tiers.py checks that every name still exists.
SMOKE = (
    "integration/test_cli.py::test_correct_candidate_exits_zero_with_json_fields",
    "integration/test_cli.py::test_cheat_exits_one_with_reasons",
    "integration/test_sandbox.py::test_candidate_cannot_read_a_credential",
    "integration/test_sandbox.py::test_parent_survives_a_child_that_kills_its_own_process_group",
    "integration/test_evalpool.py::test_cancel_all_drains_the_queue_without_leftovers",
    "integration/test_search.py::test_the_cost_budget_stops_the_search",
    "integration/test_memory_cli.py::test_memory_commands_round_trip_through_json",
    "integration/test_serve_command.py::test_serve_help_names_the_servers_own_flags",
    "e2e/test_server_lsp.py::test_hints_pushed_at_once_and_kept_in_step_with_edits",
    "e2e/test_server_lsp.py::test_cancel_from_progress_ends_the_worker",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/unit `unit` and each SMOKE test `smoke`: `make test-fast`
    picks both by marker in one run."""
    unit = TESTS / "unit"
    smoke = set(SMOKE)
    for item in items:
        if not item.path.is_relative_to(TESTS):
            continue
        if item.path.is_relative_to(unit):
            item.add_marker(pytest.mark.unit)
        name = getattr(item, "originalname", item.name)
        if f"{item.path.relative_to(TESTS).as_posix()}::{name}" in smoke:
            item.add_marker(pytest.mark.smoke)


def run_eval(problem: str | Path, candidate: str | Path | SourceFile, **overrides) -> EvalResult:
    """Evaluate a candidate against a test problem with fast, strict defaults."""
    reference = SourceFile.from_path(PROBLEMS / problem if isinstance(problem, str) else problem)
    if not isinstance(candidate, SourceFile):
        path = CANDIDATES / candidate if isinstance(candidate, str) else candidate
        candidate = SourceFile.from_path(path)
    return evaluate(reference, candidate, replace(FAST, **overrides))


def candidate_source(text: str, name: str = "candidate.py") -> SourceFile:
    return SourceFile(text=text, path=f"/virtual/{name}")


SANDBOX_MARK = BOOTSTRAP_PREFIX.encode()  # every sandboxed child's bootstrap


def _start_ticks(pid: int | str) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


SESSION_TICKS = _start_ticks(os.getpid())


def _adopted(ppid: str) -> bool:
    """Reparented: to init, or to a Ray raylet (a child subreaper when Ray is set so)."""
    if ppid == "1":
        return True
    try:
        return Path(f"/proc/{ppid}/comm").read_text().strip() == "raylet"
    except OSError:
        return True  # the parent is gone already


def orphaned_sandboxes() -> dict[int, str]:
    """Sandboxed children started during this session whose parent is gone (reparented to
    init or a subreaper): nothing of ours will ever kill them. pid -> the end of their argv."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes()
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if SANDBOX_MARK not in argv or fields[0] == "Z" or not _adopted(fields[1]):
            continue
        if int(fields[19]) >= SESSION_TICKS:
            found[int(entry.name)] = argv.replace(b"\0", b" ").decode(errors="replace")[-80:]
    return found


# What a unit test may still start: `uname -p`, which platform.processor() runs for the LLM
# SDKs' client headers.
UNIT_MAY_RUN = frozenset({"uname"})


def _refuse_process(*args, **kwargs):
    raise RuntimeError("a test under tests/unit starts no process: move it to tests/integration")


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
    """tests/unit is the tier that runs in-process in under a minute; a test that starts a
    subprocess, forks or spawns belongs in tests/integration, and fails here until it moves."""
    if request.node.get_closest_marker("unit") is None:
        return
    original = subprocess.Popen.__init__

    def checked_init(self, args, *rest, **kwargs):
        argv = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
        if Path(os.fsdecode(argv[0]).split()[0]).name not in UNIT_MAY_RUN:
            _refuse_process()
        original(self, args, *rest, **kwargs)

    monkeypatch.setattr(subprocess.Popen, "__init__", checked_init)
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", _refuse_process)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse_process)


@pytest.fixture(autouse=True)
def _no_orphaned_sandbox(request):
    """A sandboxed child that outlives whatever started it is a leak (a hostile candidate's
    process left running): the test that leaves one fails, and it is killed so that later
    tests, which count sandboxed children, are not misled."""
    yield
    deadline = time.monotonic() + 5
    while (orphans := orphaned_sandboxes()) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in orphans:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if orphans:
        pytest.fail(f"{request.node.nodeid} left sandboxed processes behind: {orphans}")


@pytest.fixture(autouse=True)
def _pools_closed_after_each_test(monkeypatch):
    """Every LocalPool a test makes is closed when the test ends: a pool keeps warm reference
    workers and spare candidate workers alive for 30 s, and a later test that counts or kills
    sandboxed workers (tests/integration/test_evalpool_ray.py) must never see one left by
    another test."""
    made: list[LocalPool] = []
    original = LocalPool.__init__

    def recording_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(LocalPool, "__init__", recording_init)
    yield
    for pool in made:
        with contextlib.suppress(Exception):
            pool.close()
