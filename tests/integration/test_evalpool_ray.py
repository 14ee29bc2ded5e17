"""The Ray backend of the evaluation pool, on a real local Ray (no mocks): verdicts, dead
workers, draining, CPU timings kept apart per node, and the beam search running on it."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

# It counts and kills the sandboxed workers it finds in /proc: alone, never beside an xdist worker.
pytestmark = pytest.mark.serial

from agents.evalpool import EvalEvent, PoolSettings, make_pool  # noqa: E402
from agents.evalpool.ray_pool import (  # noqa: E402
    CANCEL_GRACE_S,
    CPU_TIMER,
    RayPool,
    check_cluster,
    task_runtime_env,
)
from agents.evaluate import EvalCancelled, EvalError, EvalOptions  # noqa: E402
from agents.sandbox.env import is_sensitive  # noqa: E402
from agents.sandbox.jail import SHIPPED_PACKAGES, find_jail  # noqa: E402
from agents.search.beam import Search, SearchConfig, run_search  # noqa: E402
from agents.search.budget import Budget  # noqa: E402
from agents.task import SourceFile  # noqa: E402
from agents.verify.verdict import Verdict  # noqa: E402
from tests.conftest import ROOT  # noqa: E402
from tests.integration.test_evalpool import HANG, HONEST, OPTIONS, REFERENCE, WRONG, _overlaps  # noqa: E402
from tests.integration.test_search import (  # noqa: E402
    PLAN_SUM,
    PLANTED,
    PROBLEM,
    SUMMARY,
    Script,
    code_reply,
    plan_reply,
    scripted_roles,
)
from tests.llm_server import ScriptedLLMServer  # noqa: E402

BROKEN_SYNTAX = SourceFile(text="class ModelNew(:\n    pass\n", path="/virtual/syntax.py")
LONG = replace(OPTIONS, limits=replace(OPTIONS.limits, run_timeout_s=60))


CANARY = "sk-ant-api03-RAYCANARY-0f1e2d3c4b5a69788796a5b4c3d2e1f0"


@pytest.fixture(scope="module")
def pool():
    """One local Ray of 2 CPUs for the module, started by the pool itself, from an
    environment holding an API key (neither the Ray workers nor the sandbox may see it)."""
    if ray.is_initialized():
        pytest.skip("a Ray is already running in this process")
    os.environ["KERNEL_AGENT_RAY_TEST_API_KEY"] = CANARY
    try:
        pool = make_pool(PoolSettings(backend="ray", ray_num_cpus=2))
    finally:
        del os.environ["KERNEL_AGENT_RAY_TEST_API_KEY"]
    assert isinstance(pool, RayPool) and pool.owns_ray
    yield pool
    pool.close()
    assert not ray.is_initialized()


@pytest.fixture(autouse=True)
def _reopened(pool):
    """A test that failed while draining must not fail the next ones."""
    yield
    pool.reopen()


def _under_this_process_ray(pid: int) -> bool:
    """Under the raylet that this test process started (the pool starts a local Ray): not a
    local pool's worker (a child of this process with no raylet between), and nothing that
    another run on the machine started (another pytest, a benchmark, an xdist worker)."""
    me = os.getpid()
    through_raylet = False
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        through_raylet |= stat.split("(", 1)[1].rsplit(")", 1)[0] == "raylet"
        pid = int(stat.rsplit(")", 1)[1].split()[1])
        if pid == me:
            return through_raylet
    return False


def _sandbox_children() -> dict[int, tuple[int, list[str]]]:
    """The candidates' sandboxed workers that Ray's workers started (zombies are dead; each
    evaluation also has a reference worker, left out; only those under this process's own
    Ray count): pid → (parent pid, argv)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text()
        except OSError:  # gone while we looked
            continue
        if not any(b"agents.verify.serve" in arg for arg in argv) or b"candidate" not in argv:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        if state != "Z" and _under_this_process_ray(int(entry.name)):
            found[int(entry.name)] = (int(ppid), [a.decode(errors="replace") for a in argv if a])
    return found


async def _wait_for(predicate, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"nothing after {timeout} s")


def test_mixed_candidates_get_their_verdicts(pool):
    events: list[EvalEvent] = []
    candidates = [HONEST, WRONG, BROKEN_SYNTAX, HANG]
    # The jailed child where bubblewrap runs, as in real use: the shipped package must be
    # visible inside the jail.
    options = replace(OPTIONS, jail=find_jail() is not None)

    async def main():
        return await asyncio.gather(
            *(pool.submit(REFERENCE, c, options, on_event=events.append) for c in candidates),
            return_exceptions=True,
        )

    started = time.monotonic()
    results = asyncio.run(main())
    assert [getattr(r, "verdict", r) for r in results] == [
        Verdict.CORRECT,
        Verdict.INCORRECT,
        Verdict.COMPILE_ERROR,
        Verdict.TIMEOUT,
    ], [getattr(r, "reasons", r) for r in results]
    assert results[0].speedup and results[0].elapsed_s > 0
    kinds = [e.kind for e in events]
    assert kinds.count("queued") == kinds.count("done") == len(candidates)
    assert kinds.count("measuring") == kinds.count("measured") == 1  # only the correct one
    assert [e.verdict for e in events if e.kind == "done"].count("correct") == 1
    assert pool.pending == 0
    assert time.monotonic() - started < 40


def test_a_jailed_child_on_a_ray_worker_imports_memory(pool):
    """memory/ travels beside agents/ (the offline child's triton-gemm pass reads
    memory/tuning.py), each in its own py_modules folder: the jail binds both where the
    worker found them, and a candidate importing memory there loads and is judged."""
    shipped = (  # the job's copy beside agents/, not a checkout the node happens to have
        "from pathlib import Path\nimport agents, memory.tuning\n"
        "assert Path(memory.__file__).parents[2] == Path(agents.__file__).parents[2]\n"
    )
    candidate = SourceFile(text=shipped + HONEST.text, path="/virtual/imports_memory.py")
    options = replace(OPTIONS, jail=find_jail() is not None, static_check=False, measure=False)
    result = asyncio.run(pool.submit(REFERENCE, candidate, options))
    assert result.verdict is Verdict.CORRECT, result.reasons


def test_cpu_timings_never_overlap_on_the_node(pool):
    events: list[EvalEvent] = []
    lock = threading.Lock()

    def record(event: EvalEvent) -> None:
        with lock:
            events.append(event)

    candidates = [replace(HONEST, path=f"/virtual/honest{i}.py") for i in range(4)]

    async def main():
        return await asyncio.gather(
            *(pool.submit(REFERENCE, c, OPTIONS, on_event=record) for c in candidates)
        )

    results = asyncio.run(main())
    assert all(r.verdict is Verdict.CORRECT for r in results), [r.reasons for r in results]
    intervals = _overlaps(events, "cpu")
    assert len(intervals) == len(candidates)
    for (_, end), (start, _) in itertools.pairwise(intervals):
        assert start >= end, "two timings overlapped on the node's cpu"
    # Each measure task came after its own build task.
    building = {e.job: e.time for e in events if e.kind == "building"}
    measuring = {e.job: e.time for e in events if e.kind == "measuring"}
    assert all(building[job] < measuring[job] for job in measuring)


def test_a_worker_killed_twice_becomes_a_verdict_not_a_hang(pool):
    """SIGKILL the Ray worker running the hanging candidate's build task; Ray retries it once,
    so kill the retry's worker too. The sandboxed child dies with each worker."""
    killed: list[int] = []

    async def main():
        task = asyncio.ensure_future(pool.submit(REFERENCE, HANG, LONG))
        seen: set[int] = set()
        for _ in range(2):
            children = await _wait_for(
                lambda: {p: v for p, v in _sandbox_children().items() if p not in seen}, 30
            )
            ((child, (worker, _argv)),) = children.items()
            seen.add(child)
            await asyncio.sleep(1.0)  # into the hanging forward
            assert worker not in (os.getpid(), os.getppid()), "never kill the test runner"
            os.kill(worker, signal.SIGKILL)
            killed.append(worker)
            # PR_SET_PDEATHSIG: the orphaned child does not outlive its worker.
            await _wait_for(lambda c=child: c not in _sandbox_children(), 5)
        return await asyncio.wait_for(task, timeout=30)

    started = time.monotonic()
    result = asyncio.run(main())
    assert len(killed) == 2 and killed[0] != killed[1]
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert result.reasons[0].startswith("the Ray worker died twice: "), result.reasons
    assert pool.pending == 0 and not _sandbox_children()
    assert time.monotonic() - started < 60


def test_cancel_all_drains_the_queue_and_kills_the_children(pool):
    events: list[EvalEvent] = []
    environments: list[bytes] = []
    workers: list[bytes] = []  # the Ray workers that started the children
    candidates = [HANG, HANG, HONEST, WRONG]

    async def main():
        tasks = [
            asyncio.ensure_future(pool.submit(REFERENCE, c, LONG, on_event=events.append))
            for c in candidates
        ]
        children = await _wait_for(
            lambda: len(_sandbox_children()) >= 2 and _sandbox_children(), 30
        )
        for pid, (ppid, _argv) in children.items():
            with contextlib.suppress(OSError):
                environments.append(Path(f"/proc/{pid}/environ").read_bytes())
            with contextlib.suppress(OSError):
                workers.append(Path(f"/proc/{ppid}/environ").read_bytes())
        began = time.monotonic()
        pool.cancel_all()
        outcomes = await asyncio.wait_for(
            asyncio.gather(*tasks, return_exceptions=True), timeout=10
        )
        took = time.monotonic() - began
        # Killed by the worker itself, or on a loaded machine by the forced cancel after
        # CANCEL_GRACE_S; either way none is left behind.
        await _wait_for(lambda: not _sandbox_children(), CANCEL_GRACE_S + 10)
        return children, outcomes, took

    children, outcomes, took = asyncio.run(main())
    assert all(isinstance(o, EvalCancelled) for o in outcomes), outcomes
    assert took < 5
    assert sorted(e.verdict for e in events if e.kind == "done") == ["cancelled"] * 4
    assert len([e for e in events if e.kind == "building"]) == 2  # two CPUs: two ever built
    # The children ran the package Ray shipped, not this checkout, and without the key.
    for _ppid, argv in children.values():
        assert argv[4] != str(ROOT) and "runtime_resources" in argv[4], argv
    assert environments and all(CANARY.encode() not in env for env in environments)
    # The local Ray was started without the key, so not even its workers hold it.
    assert workers and all(CANARY.encode() not in env for env in workers)
    names = [v.split(b"=")[0].decode() for env in environments for v in env.split(b"\0") if v]
    assert names and not [name for name in names if is_sensitive(name)]
    assert pool.pending == 0
    with pytest.raises(EvalCancelled):
        asyncio.run(pool.submit(REFERENCE, HONEST, OPTIONS))
    pool.reopen()
    assert asyncio.run(pool.submit(REFERENCE, HONEST, OPTIONS)).verdict is Verdict.CORRECT


def test_caller_cancel_event_and_task_cancellation_cancel_the_ray_tasks(pool):
    cancel = threading.Event()

    async def main():
        first = asyncio.ensure_future(pool.submit(REFERENCE, HANG, LONG, cancel))
        second = asyncio.ensure_future(pool.submit(REFERENCE, HANG, LONG))
        await _wait_for(lambda: len(_sandbox_children()) == 2, 30)
        cancel.set()
        second.cancel()
        with pytest.raises(EvalCancelled):
            await first
        with pytest.raises(asyncio.CancelledError):
            await second
        await _wait_for(lambda: not _sandbox_children(), CANCEL_GRACE_S + 10)

    asyncio.run(main())
    assert pool.pending == 0


def test_clusters_that_cannot_run_a_job_are_refused_in_one_line(pool):
    with pytest.raises(EvalError) as error:
        check_cluster({"CPU": 8.0, "memory": 1e9}, "cpu", "ray://head:10001")
    message = str(error.value)
    assert "\n" not in message and "ray://head:10001" in message
    assert f"--resources='{{\"{CPU_TIMER}\": 1}}'" in message
    with pytest.raises(EvalError, match="has no GPUs"):
        check_cluster({"CPU": 8.0, CPU_TIMER: 1.0}, "cuda", "ray://head:10001")
    check_cluster({"CPU": 8.0, CPU_TIMER: 1.0}, "cpu", "ray://head:10001")
    check_cluster({"CPU": 8.0, "GPU": 2.0}, "cuda", "ray://head:10001")
    # The pool's own cluster: cpu jobs are feasible; this machine has no GPU for a cuda job,
    # which is refused at once instead of waiting forever.
    check_cluster(ray.cluster_resources(), "cpu", "local")
    if not ray.cluster_resources().get("GPU"):
        started = time.monotonic()
        with pytest.raises(EvalError, match="has no GPUs"):
            asyncio.run(pool.submit(REFERENCE, HONEST, replace(OPTIONS, device="cuda")))
        assert time.monotonic() - started < 5
    # For a Ray initialised elsewhere the packages travel per task, as uploaded URIs.
    uris = task_runtime_env()["py_modules"]
    assert len(uris) == len(SHIPPED_PACKAGES) and all(uri.startswith("gcs://") for uri in uris)


def test_the_beam_search_runs_unchanged_on_the_ray_backend(pool, tmp_path):
    script = Script(
        planner=[plan_reply(PLAN_SUM)],
        executor=[code_reply(PLANTED)],
        summarizer=[SUMMARY],
        repairer=[code_reply(PLANTED)],
    )
    ray_pool = make_pool(PoolSettings(backend="ray"))  # joins the running Ray
    assert isinstance(ray_pool, RayPool) and not ray_pool.owns_ray

    async def go(server):
        roles, meter, model = scripted_roles(server)
        search = Search(
            SourceFile(PROBLEM.read_text(), str(PROBLEM)),
            roles,
            meter,
            options=EvalOptions(threads=1, timing_budget_s=0.3, jail=False),
            config=SearchConfig(beam=1, plans=1, samples=1, iterations=1, profile=False),
            budget=Budget(max_evals=4),
            pool=ray_pool,
        )
        try:
            return await run_search(search)
        finally:
            await model.aclose()

    with ScriptedLLMServer(script) as server:
        result = asyncio.run(go(server))
    assert result.verdict == "correct" and result.improved, result
    assert "self.weight.sum(dim=0)" in (result.source or "")
    assert ray_pool.pending == 0


def test_without_ray_the_backend_is_a_one_line_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails
    with pytest.raises(ValueError) as error:
        make_pool(PoolSettings(backend="ray"))
    assert str(error.value) == "the ray backend needs Ray: pip install 'kernel-agent[ray]'"
