"""The evaluation pool: right verdicts under concurrency, dead workers, draining, and no two
timings overlapping on one device."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import threading
import time
from dataclasses import replace

import pytest

from agents.evalpool import EvalEvent, LocalPool, PoolSettings, make_pool, pin_env
from agents.evaluate import EvalCancelled
from agents.sandbox.jail import find_jail
from agents.sandbox.process import Limits
from agents.task import SourceFile
from agents.verify.verdict import Verdict
from tests.conftest import ADVERSARIAL, CANDIDATES, FAST, PROBLEMS

REFERENCE = SourceFile.from_path(PROBLEMS / "linear_relu.py")
HONEST = SourceFile.from_path(CANDIDATES / "linear_relu_honest.py")
CPP = SourceFile.from_path(CANDIDATES / "linear_relu_cpp.py")
WRONG = SourceFile(
    text=HONEST.text.replace("F.relu(", "F.gelu("),
    path="/virtual/wrong.py",
)
HANG = SourceFile.from_path(ADVERSARIAL / "hang.py")
OPTIONS = replace(
    FAST,
    jail=False,
    limits=Limits(build_timeout_s=60, run_timeout_s=4, address_space_bytes=6 * 1024**3),
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _overlaps(events: list[EvalEvent], lane: str) -> list[tuple[float, float]]:
    """Intervals between `measuring` and `measured` of each job on `lane`."""
    enter = {e.job: e.time for e in events if e.kind == "measuring" and e.lane == lane}
    leave = {e.job: e.time for e in events if e.kind == "measured" and e.lane == lane}
    assert enter.keys() == leave.keys()
    return sorted((enter[job], leave[job]) for job in enter)


def _most_at_once(events: list[EvalEvent]) -> int:
    """Most jobs between `building` and leaving the build lane (`measuring` or `done`)."""
    now, most, building = 0, 0, set()
    for event in sorted(events, key=lambda e: e.time):
        if event.kind == "building":
            building.add(event.job)
            now += 1
        elif event.kind in ("measuring", "done") and event.job in building:
            building.discard(event.job)
            now -= 1
        most = max(most, now)
    return most


def test_mixed_candidates_get_their_verdicts_and_timings_never_overlap():
    events: list[EvalEvent] = []
    lock = threading.Lock()

    def record(event: EvalEvent) -> None:
        with lock:
            events.append(event)

    pool = LocalPool(PoolSettings(build_slots=3), on_event=record)
    candidates = [HONEST, WRONG, HONEST, HANG, replace(HONEST, path="/virtual/honest2.py")]
    # The jailed child, as in real use: the gate pipe must pass through bubblewrap too.
    options = replace(OPTIONS, jail=find_jail() is not None)

    async def main():
        return await asyncio.gather(
            *(pool.submit(REFERENCE, c, options) for c in candidates), return_exceptions=True
        )

    started = time.monotonic()
    results = asyncio.run(main())
    verdicts = [r.verdict for r in results]
    assert verdicts == [
        Verdict.CORRECT,
        Verdict.INCORRECT,
        Verdict.CORRECT,
        Verdict.TIMEOUT,
        Verdict.CORRECT,
    ], [r.reasons for r in results]
    assert all(r.speedup for r in results if r.correct)
    intervals = _overlaps(events, "cpu")
    assert len(intervals) == 3  # only correct candidates are timed
    for (_, end), (start, _) in itertools.pairwise(intervals):
        assert start >= end, "two timings overlapped on the cpu lane"
    kinds = [e.kind for e in events]
    assert kinds.count("queued") == kinds.count("done") == len(candidates)
    # Builds did overlap: at some moment two or more jobs were building at once.
    assert _most_at_once(events) >= 2
    # Each job told its phases as they began (agents/verify/phases.py), in order.
    timed = next(e.job for e in events if e.kind == "done" and e.verdict == "correct")
    phases = [e.detail for e in events if e.kind == "phase" and e.job == timed]
    trials = [f"correctness {k}/{options.trials}" for k in range(1, options.trials + 1)]
    assert phases[:2] == ["starting workers", "building the candidate"], phases
    assert [
        p for p in dict.fromkeys(phases) if p.startswith("correctness") and ":" not in p
    ] == trials
    assert "reload check 1/2" in phases, phases
    assert "correctness 1/5: float64 anchor" in phases, phases
    assert phases[-1] == "timing", phases
    assert pool.pending == 0 and pool.running_pids() == []
    assert time.monotonic() - started < 60


def test_killed_worker_becomes_a_runtime_error_not_a_hang():
    pool = LocalPool(PoolSettings(build_slots=1))
    options = replace(OPTIONS, limits=replace(OPTIONS.limits, run_timeout_s=30))

    async def main():
        task = asyncio.ensure_future(pool.submit(REFERENCE, HANG, options))
        for _ in range(400):
            await asyncio.sleep(0.05)
            if len(pool.running_pids()) == 2:  # the reference's worker and the candidate's
                break
        await asyncio.sleep(4.0)  # well into the hanging forward
        pid = pool.running_pids()[-1]  # the candidate's
        os.kill(pid, signal.SIGKILL)
        return await asyncio.wait_for(task, timeout=20)

    result = asyncio.run(main())
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert any("SIGKILL" in reason for reason in result.reasons), result.reasons
    assert pool.pending == 0


def test_cancel_all_drains_the_queue_without_leftovers():
    events: list[EvalEvent] = []
    pool = LocalPool(PoolSettings(build_slots=1), on_event=events.append)
    options = replace(OPTIONS, limits=replace(OPTIONS.limits, run_timeout_s=60))
    pids: list[int] = []

    async def main():
        tasks = [
            asyncio.ensure_future(pool.submit(REFERENCE, c, options))
            for c in (HANG, HONEST, WRONG, HONEST)
        ]
        for _ in range(400):
            await asyncio.sleep(0.05)
            if pool.running_pids():
                break
        pids.extend(pool.running_pids())
        began = time.monotonic()
        pool.cancel_all()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*tasks, return_exceptions=True), timeout=10
        )
        return outcomes, time.monotonic() - began

    outcomes, took = asyncio.run(main())
    assert all(isinstance(o, EvalCancelled) for o in outcomes), outcomes
    assert took < 5
    assert pids and not any(_alive(pid) for pid in pids)
    assert pool.pending == 0 and pool.running_pids() == []
    # Only the first job ever built; the queued ones ended without starting a child.
    assert [e.job for e in events if e.kind == "building"] == [1]
    assert sorted(e.verdict for e in events if e.kind == "done") == ["cancelled"] * 4
    with pytest.raises(EvalCancelled):
        asyncio.run(pool.submit(REFERENCE, HONEST, options))
    pool.reopen()


def test_caller_cancel_event_and_task_cancellation_kill_the_child():
    pool = LocalPool(PoolSettings(build_slots=2))
    cancel = threading.Event()
    options = replace(OPTIONS, limits=replace(OPTIONS.limits, run_timeout_s=60))

    async def main():
        first = asyncio.ensure_future(pool.submit(REFERENCE, HANG, options, cancel))
        second = asyncio.ensure_future(pool.submit(REFERENCE, HANG, options))
        for _ in range(400):
            await asyncio.sleep(0.05)
            if len(pool.running_pids()) == 4:  # two workers for each of the two jobs
                break
        pids = pool.running_pids()
        cancel.set()
        second.cancel()
        try:
            result = await first
        except EvalCancelled:
            pass
        else:  # once seen in a full run under load: say what came back instead
            pytest.fail(f"not cancelled: {result.verdict.value}: {result.reasons}, pids {pids}")
        with pytest.raises(asyncio.CancelledError):
            await second
        for _ in range(100):
            if pool.pending == 0:
                break
            await asyncio.sleep(0.05)
        return pids

    pids = asyncio.run(main())
    assert len(pids) == 4 and not any(_alive(pid) for pid in pids)
    assert pool.pending == 0


def test_pinning_env_and_gpu_lanes():
    assert pin_env(0, 1, {}) == {}
    assert pin_env(1, 4, {}) == {"CUDA_VISIBLE_DEVICES": "1"}
    assert pin_env(1, 2, {"CUDA_VISIBLE_DEVICES": "2,3"}) == {"CUDA_VISIBLE_DEVICES": "3"}
    pool = LocalPool(PoolSettings(gpus=2))
    first = pool._new_job("a", "cuda", None, None)
    second = pool._new_job("b", "cuda", None, None)
    cpu = pool._new_job("c", "cpu", None, None)
    assert (first.lane, second.lane, cpu.lane) == ("cuda:0", "cuda:1", "cpu")
    assert first.env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert second.env == {"CUDA_VISIBLE_DEVICES": "1"}
    assert cpu.env == {}


def test_defaults_and_backend_choice():
    pool = make_pool()
    assert isinstance(pool, LocalPool)
    assert pool.build_slots == max(1, len(os.sched_getaffinity(0)) - 1)
    with pytest.raises(ValueError):
        make_pool(PoolSettings(backend="nope"))


def test_a_failing_worker_is_a_runtime_error_verdict(monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("cannot fork")

    monkeypatch.setattr("agents.evalpool.local.evaluate", broken)
    events: list[EvalEvent] = []
    result = asyncio.run(LocalPool(on_event=events.append).submit(REFERENCE, HONEST, OPTIONS))
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert "cannot fork" in result.reasons[0]
    assert [e.kind for e in events] == ["queued", "building", "done"]
    assert events[-1].verdict == "runtime_error"
