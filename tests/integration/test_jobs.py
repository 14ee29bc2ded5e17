"""The language server's background jobs: real worker processes, real searches and profiles
in the sandbox, real signals. Nothing is mocked; a stand-in interpreter (a small script passed
as `python`) records what a worker receives, or misbehaves on purpose."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import signal
import stat
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agents.search import events as ev
from server.jobs import Job, JobManager, JobRefused, JobSpec, JobUpdate, _descendants
from server.progress_text import ProgressTracker
from tests.conftest import ROOT

GEMM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
SOFTMAX = ROOT / "bench" / "problems" / "17_manual_softmax.py"
QUICK = {"evaluation.threads": 1, "evaluation.timing_budget": 1.0, "memory.enabled": False}
CANARY = "sk-ant-canary-7f3e9b2c41d04a5e"

SOFTMAX_FUNCTION = '''"""A softmax written by hand, as a plain function."""

import torch

ROWS = 256
COLS = 4096


def manual_softmax(x):
    x = x - torch.max(x, dim=1, keepdim=True)[0]
    e = torch.exp(x)
    return e / torch.sum(e, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(ROWS, COLS)]
'''


class Recorder:
    """Collects every update; lets a test wait for one."""

    def __init__(self) -> None:
        self.updates: list[JobUpdate] = []
        self.changed = asyncio.Event()

    async def __call__(self, update: JobUpdate) -> None:
        self.updates.append(update)
        self.changed.set()

    async def until(self, predicate, timeout: float = 120) -> JobUpdate:
        deadline = time.monotonic() + timeout
        seen = 0
        while True:
            for update in self.updates[seen:]:
                if predicate(update):
                    return update
            seen = len(self.updates)
            self.changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no such update in {timeout} s: {self.states()}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), timeout=left)

    def states(self) -> list[str]:
        return [u.state for u in self.updates if u.state != "event"]

    def events(self) -> list[ev.SearchEvent]:
        return [u.event for u in self.updates if u.state == "event" and u.event]


def spec(path: Path, kind: str = "optimize", **changes) -> JobSpec:
    values = {
        "kind": kind,
        "uri": path.as_uri(),
        "target": "Model",
        "target_kind": "module",
        "source": path.read_text(),
        "path": str(path),
        "settings": dict(QUICK),
    }
    values.update(changes)
    return JobSpec(**values)


def alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it is dead)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(") ", 1)[1][:1] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def stand_in(tmp_path: Path, body: str) -> str:
    """An executable that the manager runs in place of the interpreter."""
    script = tmp_path / "python-stand-in"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


@pytest.fixture
async def manager():
    jobs = JobManager(grace_s=3.0)
    yield jobs
    await jobs.shutdown()


# -- profile, secrets --------------------------------------------------------------------------


RECORDING_STAND_IN = """
import os, subprocess, sys, signal, threading
folder = os.environ["JOB_RECORD_DIR"]
with open(os.path.join(folder, "argv"), "w") as out:
    out.write("\\n".join(sys.argv))
fd = int(sys.argv[sys.argv.index("--fd") + 1])
child = subprocess.Popen([{python!r}, *sys.argv[1:]], stdin=subprocess.PIPE, pass_fds=(fd,))
os.close(fd)
signal.signal(signal.SIGTERM, lambda *a: child.send_signal(signal.SIGTERM))

def copy():
    with open(os.path.join(folder, "stdin"), "wb") as record:
        for line in sys.stdin.buffer:
            record.write(line)
            record.flush()
            child.stdin.write(line)
            child.stdin.flush()

threading.Thread(target=copy, daemon=True).start()
sys.exit(child.wait())
"""


async def test_profile_job_returns_hot_lines_and_never_shows_the_secret(tmp_path):
    jobs = JobManager(python=stand_in(tmp_path, RECORDING_STAND_IN.format(python=sys.executable)))
    record = Recorder()
    env = {"ANTHROPIC_API_KEY": CANARY, "JOB_RECORD_DIR": str(tmp_path)}
    try:
        job = await jobs.start(spec(SOFTMAX, "profile", env=env), record)
        with open(f"/proc/{job.pid}/environ", "rb") as handle:  # the worker's env only
            assert CANARY.encode() in handle.read()
        job = await jobs.wait(job.id)
    finally:
        await jobs.shutdown()
    assert job.state == "done", job.error
    profile = job.result.profile
    assert profile.schema_version == 1 and profile.lines
    hot = job.result.hot_lines
    assert hot and {line["line"] for line in hot} <= {17, 18, 19}
    assert record.states() == ["started", "done"]
    assert record.updates[-1].result == job.result and job.percent == 100
    stdin = (tmp_path / "stdin").read_text()
    assert json.loads(stdin.splitlines()[0])["target"] == "Model"
    shown = [
        stdin,
        (tmp_path / "argv").read_text(),
        repr(record.updates),
        json.dumps([dataclasses.asdict(u) for u in record.updates]),
        repr(job),
        json.dumps(dataclasses.asdict(job)),
    ]
    assert not [text for text in shown if CANARY in text]


# -- optimize ----------------------------------------------------------------------------------


@pytest.mark.slow
async def test_optimize_job_reports_monotonic_progress_and_a_verified_kernel(manager):
    record = Recorder()
    settings = {**QUICK, "budget.max_evals": 6}
    job = await manager.start(spec(GEMM, settings=settings), record)
    assert manager.find(GEMM.as_uri(), "Model") is job
    job = await manager.wait(job.id)
    assert job.state == "done", job.error
    result = job.result.search
    assert result.verdict == "correct" and result.improved
    assert "class ModelNew" in result.source
    assert result.speedup > 1 and result.methods and result.evaluations <= 7
    assert job.result.profile.lines and job.result.hot_lines  # the reference's profile
    assert not job.result.synthesized
    kinds = [event.kind for event in record.events()]
    assert kinds[0] == "started" and "candidate" in kinds and kinds[-1] == "finished"
    percents = [u.percent for u in record.updates if u.percent is not None]
    assert percents == sorted(percents) and percents[-1] == 100
    progress = [u.message for u in record.updates if u.state == "progress"]
    assert any(
        message.startswith("iteration 1/") and "candidates" in message for message in progress
    )
    assert record.states()[0] == "started" and record.states()[-1] == "done"
    assert manager.find(GEMM.as_uri(), "Model") is None and not alive(job.pid)


@pytest.mark.slow
async def test_a_plain_function_is_optimised_against_itself(manager, tmp_path):
    path = tmp_path / "softmax_function.py"
    path.write_text(SOFTMAX_FUNCTION)
    record = Recorder()
    settings = {**QUICK, "budget.max_evals": 1, "search.iterations": 1}
    job = await manager.start(
        spec(path, target="manual_softmax", target_kind="function", settings=settings), record
    )
    job = await manager.wait(job.id)
    assert job.state == "done", job.error
    result = job.result.search
    assert job.result.synthesized and job.result.target == "manual_softmax"
    assert result.verdict in ("correct", "no_improvement")
    if result.improved:
        assert "class ModelNew" in result.source and result.speedup > 1
    else:
        assert result.source is None
    # The hot lines are the user's own lines, not the wrapper's.
    assert {line["line"] for line in job.result.hot_lines} <= {10, 11, 12}


# -- cancel, crash, garbage --------------------------------------------------------------------


async def test_cancel_stops_the_worker_and_its_sandboxes_within_seconds(manager):
    record = Recorder()
    job = await manager.start(spec(GEMM, settings={**QUICK, "budget.max_evals": 50}), record)
    await record.until(lambda u: u.state == "event" and u.event.kind == "iteration")
    await asyncio.sleep(1.0)  # an evaluation in its sandbox by now
    family = _descendants(job.pid)
    started = time.monotonic()
    assert await manager.cancel(job.id)
    took = time.monotonic() - started
    assert job.state == "cancelled" and took < 5, took
    assert not alive(job.pid) and not [pid for pid in family if alive(pid)]
    assert job.result is not None and job.result.search.stopped_because == "cancelled"
    assert record.states()[-1] == "cancelled" and record.updates[-1].result == job.result
    assert not await manager.cancel(job.id)  # already over


async def test_a_killed_worker_is_a_failed_job_with_the_signal(manager):
    record = Recorder()
    job = await manager.start(spec(SOFTMAX, "profile"), record)
    os.kill(job.pid, signal.SIGKILL)
    job = await manager.wait(job.id)
    assert job.state == "failed" and "signal" in job.error and "SIGKILL" in job.error
    assert "\n" not in job.error
    assert record.updates[-1].state == "failed" and record.updates[-1].error == job.error


async def test_garbage_on_the_pipe_fails_the_job_and_ends_the_worker(tmp_path):
    python = stand_in(
        tmp_path,
        """
        import os, sys, time
        print("a stray print on stdout is harmless")
        fd = int(sys.argv[sys.argv.index("--fd") + 1])
        os.write(fd, b"this is not a message\\n")
        time.sleep(60)
        """,
    )
    jobs = JobManager(python=python, grace_s=2.0)
    try:
        job = await jobs.start(spec(SOFTMAX, "profile"), Recorder())
        job = await asyncio.wait_for(jobs.wait(job.id), timeout=20)
    finally:
        await jobs.shutdown()
    assert job.state == "failed" and "garbage" in job.error
    assert not alive(job.pid)


async def test_a_worker_that_ignores_cancel_is_killed_after_the_grace_period(tmp_path):
    python = stand_in(
        tmp_path,
        """
        import os, signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(os.environ["READY_FILE"], "w").close()
        time.sleep(60)
        """,
    )
    jobs = JobManager(python=python, grace_s=1.0)
    ready = tmp_path / "ready"
    try:
        job = await jobs.start(spec(SOFTMAX, "profile", env={"READY_FILE": str(ready)}), Recorder())
        while not ready.exists():
            await asyncio.sleep(0.05)
        started = time.monotonic()
        assert await jobs.cancel(job.id)
        assert time.monotonic() - started < 4
    finally:
        await jobs.shutdown()
    assert job.state == "cancelled" and job.result is None and not alive(job.pid)


# -- limits, shutdown, settings ------------------------------------------------------------------


async def test_one_job_per_target_a_concurrency_limit_and_shutdown_ends_all():
    jobs = JobManager(max_concurrent=2)
    records = Recorder(), Recorder()
    first = await jobs.start(spec(GEMM), records[0])
    with pytest.raises(JobRefused, match=r"already has an? optimize job") as refused:
        await jobs.start(spec(GEMM, "profile"), Recorder())
    assert "\n" not in str(refused.value)
    second = await jobs.start(spec(GEMM, uri="file:///elsewhere/13.py"), records[1])
    with pytest.raises(JobRefused, match="2 jobs are already running"):
        await jobs.start(spec(SOFTMAX, "profile"), Recorder())
    assert {job.id for job in jobs.running()} == {first.id, second.id}
    for record in records:  # both searches under way
        await record.until(lambda u: u.state == "event" and u.event.kind == "started")
    started = time.monotonic()
    await jobs.shutdown()
    assert time.monotonic() - started < 8
    for job in (first, second):
        assert job.state == "cancelled" and not alive(job.pid)
    assert jobs.running() == []
    with pytest.raises(JobRefused, match="shutting down"):
        await jobs.start(spec(SOFTMAX, "profile"), Recorder())


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"search.beam": 0}, "search.beam"),
        ({"evaluation.device": "tpu"}, "device"),
        ({"evaluation.timing_budget": "fast"}, "evaluation.timing_budget"),
        (
            {"llm.roles.planner.backend": "anthropic", "llm.roles.planner.api_key": CANARY},
            "llm.roles.planner.api_key",
        ),
        ({"beems": 3}, "beems"),
        ({"evaluation.eval_backend": "slurm"}, "evaluation.eval_backend"),
    ],
)
async def test_a_bad_setting_fails_the_job_with_one_line(manager, settings, named):
    record = Recorder()
    job = await manager.start(spec(GEMM, settings=settings), record)
    assert job.state == "failed" and job.pid is None
    assert named in job.error and "\n" not in job.error and CANARY not in job.error
    assert record.states() == ["failed"] and record.updates[0].error == job.error
    assert (await manager.wait(job.id)) is job and manager.running() == []


async def test_the_worker_sends_candidates_to_the_chosen_evaluation_backend(manager):
    """The job's eval_backend / ray_address reach the worker's pool: an unreachable cluster
    fails the job with the pool's one line, before any candidate is queued."""
    pytest.importorskip("ray")
    record = Recorder()
    settings = {
        **QUICK,
        "evaluation.eval_backend": "ray",
        "evaluation.ray_address": "127.0.0.1:1",
    }
    job = await manager.start(spec(GEMM, settings=settings), record)
    job = await manager.wait(job.id)
    assert job.state == "failed" and "cannot reach the Ray cluster at 127.0.0.1:1" in job.error
    assert "\n" not in job.error


async def test_a_missing_api_key_fails_the_job_in_the_worker(manager):
    record = Recorder()
    settings = {**QUICK, "llm.backend": "anthropic"}
    env = {"ANTHROPIC_API_KEY": ""}
    job = await manager.start(spec(GEMM, settings=settings, env=env), record)
    job = await manager.wait(job.id)
    assert job.state == "failed" and "ANTHROPIC_API_KEY" in job.error
    assert "\n" not in job.error


def test_jobs_hold_no_secrets():
    job = Job(
        "x", JobSpec("profile", "file:///a.py", "Model", "module", "", env={"K": CANARY}), "running"
    )
    assert CANARY not in repr(job.spec)


def test_progress_reads_the_search_events_honestly():
    tracker = ProgressTracker(iterations=16, max_evals=100, samples=2)
    events = [
        ev.Started("t", "cpu", "offline", "offline", 3, 6, 2, 16),
        ev.Profiled("", []),
        ev.IterationStarted(3, 16, [], 1.5, 0),
        ev.PlanMade(3, 0, "p", "m"),
        ev.PlanMade(3, 0, "q", "m"),
        *(ev.CandidateEvaluated(3, "p", i, 0, "correct", 1.2, 40 + i) for i in range(3)),
        ev.NewBest(3, 1.8, "p", 42),
        ev.CandidateEvaluated(3, "p", 0, 1, "incorrect", None, 44),
        ev.CandidateEvaluated(3, "q", 1, 0, "duplicate", None, 44),
    ]
    percents = []
    for event in events:
        tracker.observe(event)
        percents.append(tracker.percent)
    assert tracker.message == "iteration 3/16 · searching: best 1.80x so far · 4 candidates"
    assert percents == sorted(percents) and percents[-1] == 44  # 44 of 100 evaluations
    tracker.observe(ev.IterationStarted(4, 16, [], 1.8, 44))
    assert tracker.percent == 44  # never backwards
