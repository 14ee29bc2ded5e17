"""The local pool's multi-GPU path on a machine without GPUs (issue 10's CPU part): with
simulated devices, candidates are spread over one lane per GPU, each child sees only its
GPU through CUDA_VISIBLE_DEVICES, timings on one GPU never overlap, and timings on different
GPUs do run at the same time. The child is real (a sandboxed process through the measure
gate); only the work it does stands in for a GPU's."""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import threading
from dataclasses import replace

import pytest

from agents.evalpool import EvalEvent, LocalPool, PoolSettings
from agents.evaluate import EvalOptions, cache_dir
from agents.sandbox.process import run_child
from agents.task import SourceFile
from agents.verify.verdict import EvalResult, Verdict
from tests.integration.test_evalpool import OPTIONS, REFERENCE

BUILD_S, MEASURE_S = 0.2, 0.6


def simulated(build_s: float, measure_s: float) -> SourceFile:
    return SourceFile(f"{build_s} {measure_s}", "/virtual/simulated.py")


def simulated_evaluate(reference, candidate, options: EvalOptions, cancel=None, gate=None, **_):
    """`evaluate` with the reviewer swapped for tests/simulated/gpu_child.py (no warm or spare
    workers to keep: the simulated child judges in one process)."""
    build_s, measure_s = (float(v) for v in candidate.text.split())
    outcome = run_child(
        {"build_s": build_s, "measure_s": measure_s},
        device="cpu",  # no CUDA here: the lane and the pinning are what is under test
        threads=1,
        build_cache=cache_dir(options) / "build" / "simulated",
        limits=options.limits,
        entry="tests.simulated.gpu_child",
        use_jail=False,
        cancel=cancel,
        gate=gate,
    )
    report = (outcome.result or {}).get("report")
    if report is None:
        return EvalResult(Verdict.RUNTIME_ERROR, [outcome.stderr_tail or "no report"])
    return EvalResult(
        Verdict.CORRECT, [json.dumps(report)], device=options.device, phase_s=outcome.phase_s
    )


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_candidates_spread_over_simulated_gpus_with_one_timing_per_gpu(monkeypatch, gpus):
    monkeypatch.setattr("agents.evalpool.local.evaluate", simulated_evaluate)
    events: list[EvalEvent] = []
    lock = threading.Lock()

    def record(event: EvalEvent) -> None:
        with lock:
            events.append(event)

    jobs = 2 * gpus
    pool = LocalPool(PoolSettings(build_slots=jobs, gpus=gpus), on_event=record)
    options = replace(OPTIONS, device="cuda")

    async def main():
        return await asyncio.gather(
            *(pool.submit(REFERENCE, simulated(BUILD_S, MEASURE_S), options) for _ in range(jobs))
        )

    results = asyncio.run(main())
    reports = [json.loads(r.reasons[0]) for r in results]  # each child's own report
    assert all(r.verdict is Verdict.CORRECT for r in results)

    # Every lane got its share, and every child saw only its lane's GPU.
    lanes = {e.job: e.lane for e in events if e.kind == "measuring"}
    assert collections.Counter(lanes.values()) == {f"cuda:{i}": 2 for i in range(gpus)}
    seen = collections.Counter(r["visible"] for r in reports)
    if gpus == 1:
        assert seen == {None: 2}  # one GPU: nothing to pin
    else:
        assert seen == {str(i): 2 for i in range(gpus)}

    # On one GPU the timings follow one another; different GPUs time at the same time.
    intervals = collections.defaultdict(list)
    for report in reports:
        intervals[report["visible"]].append((report["began"], report["ended"]))
    for spans in intervals.values():
        spans.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
    if gpus > 1:
        firsts = [min(spans)[0] for spans in intervals.values()]
        assert max(firsts) - min(firsts) < MEASURE_S, "the GPUs' lanes did not run in parallel"


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_builds_stop_while_a_timing_on_their_device_runs(monkeypatch, device):
    """No build makes progress while a timing it would disturb runs, and the time it spent
    stopped does not count against its own wall clock."""
    monkeypatch.setattr("agents.evalpool.local.evaluate", simulated_evaluate)
    pool = LocalPool(PoolSettings(build_slots=5, gpus=2))
    options = replace(OPTIONS, device=device, limits=replace(OPTIONS.limits, run_timeout_s=3.0))
    # Staggered builds, so timings start while other builds are in full swing.
    candidates = [simulated(0.3 + 0.4 * i, 0.5) for i in range(4)] + [simulated(2.5, 0.5)]

    async def main():
        return await asyncio.gather(*(pool.submit(REFERENCE, c, options) for c in candidates))

    results = asyncio.run(main())
    assert all(r.verdict is Verdict.CORRECT for r in results), [r.reasons for r in results]
    reports = [json.loads(r.reasons[0]) for r in results]
    for timing in reports:
        for build in reports:
            if build is timing or (device == "cuda" and build["visible"] != timing["visible"]):
                continue
            inside = [b for b in build["beats"] if timing["began"] + 0.05 < b < timing["ended"]]
            assert not inside, f"a build ran {len(inside)} beats into a timing"
    # The last build (2.5 s of work, 3 s allowed) was stopped for others' timings (2 s in
    # all on the CPU) and still finished: stopped time is not its time.
    if device == "cpu":  # and its result says how long it was stopped
        assert results[-1].phase_s.get("paused", 0.0) > 0.5, results[-1].phase_s


def test_two_pools_never_time_one_device_at_once(monkeypatch, tmp_path):
    """Two processes' pools (two server jobs, or a CLI run beside the editor) share the
    machine-wide lock of each device: their timings follow one another too."""
    monkeypatch.setattr("agents.evalpool.local.evaluate", simulated_evaluate)
    pools = [LocalPool(PoolSettings(build_slots=2, lock_dir=tmp_path)) for _ in range(2)]
    candidate = simulated(0.1, 0.4)

    async def main():
        jobs = [pool.submit(REFERENCE, candidate, OPTIONS) for pool in pools for _ in range(2)]
        return await asyncio.gather(*jobs)

    reports = [json.loads(r.reasons[0]) for r in asyncio.run(main())]
    spans = sorted((r["began"], r["ended"]) for r in reports)
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans)), spans
    assert (tmp_path / "measure-cpu.lock").exists()
