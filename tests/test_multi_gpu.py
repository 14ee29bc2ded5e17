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
from agents.verify.verdict import EvalResult, Verdict
from tests.test_evalpool import HONEST, OPTIONS, REFERENCE

BUILD_S, MEASURE_S = 0.2, 0.6


def simulated_evaluate(reference, candidate, options: EvalOptions, cancel=None, gate=None):
    """`evaluate` with the reviewer swapped for tests/simulated/gpu_child.py."""
    outcome = run_child(
        {"build_s": BUILD_S, "measure_s": MEASURE_S},
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
    return EvalResult(Verdict.CORRECT, [json.dumps(report)], device=options.device)


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
        return await asyncio.gather(*(pool.submit(REFERENCE, HONEST, options) for _ in range(jobs)))

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
