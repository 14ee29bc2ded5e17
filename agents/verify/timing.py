"""Rigorous timing of a reference and a candidate in one process.

CPU: a fixed thread count (set by the caller), warm-up, reference and candidate runs
interleaved so the machine's drift hits both alike, and an adaptive stop once both medians are
stable (the 95% order-statistic interval of each median within `rel_precision` of it), between
`min_runs` and `max_runs`. CUDA: CUDA events, an L2 flush before every trial, the first trial
discarded, optionally replay through a CUDA graph for launch-bound kernels; a host clock around
a whole-device synchronise catches work pushed to a side stream that the events would miss.
The speedup's confidence interval is a bootstrap over the interleaved pairs.
"""

from __future__ import annotations

import math
import random
import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy
import torch

_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize

SPOT_CHECK_SHARE = 0.2
"""Share of timed candidate runs whose output is compared with the reference's (the first
timed run is always checked)."""
L2_FLUSH_BYTES = 256 * 1024 * 1024
"""What KernelBench writes between trials; several times the L2 of any current GPU."""


@dataclass(frozen=True)
class TimingConfig:
    warmup: int = 3
    min_runs: int = 10
    max_runs: int = 200
    budget_s: float = 5.0
    rel_precision: float = 0.01
    cuda_graph: bool = False
    reverify_above: float = 10.0
    bootstrap: int = 2000


@dataclass
class Sample:
    """Distribution of one side's run times, in milliseconds."""

    median_ms: float
    q1_ms: float
    q3_ms: float
    runs: int

    @property
    def iqr_ms(self) -> float:
        return self.q3_ms - self.q1_ms

    @classmethod
    def of(cls, times: list[float]) -> Sample:
        q1, median, q3 = numpy.percentile(times, [25, 50, 75])
        return cls(float(median), float(q1), float(q3), len(times))


@dataclass
class PairTiming:
    """Reference against candidate, measured in one interleaved run."""

    reference: Sample
    candidate: Sample
    speedup: float
    speedup_ci: tuple[float, float]
    method: str
    notes: list[str] = field(default_factory=list)
    suspicious: bool = False

    @property
    def runs(self) -> int:
        return self.reference.runs


def median_is_stable(times: list[float], rel_precision: float) -> bool:
    """The 95% distribution-free interval of the median lies within rel_precision of it."""
    n = len(times)
    if n < 6:
        return False
    ordered = sorted(times)
    half = 1.96 * math.sqrt(n) / 2
    low = max(math.floor(n / 2 - half), 0)
    high = min(math.ceil(n / 2 + half), n - 1)
    median = statistics.median(ordered)
    if median <= 0:
        return True
    return (ordered[high] - ordered[low]) / 2 <= rel_precision * median


def bootstrap_speedup_ci(
    reference: list[float], candidate: list[float], resamples: int, seed: int = 0
) -> tuple[float, float]:
    """95% interval of median(reference)/median(candidate), resampling interleaved pairs."""
    ref = numpy.asarray(reference)
    cand = numpy.asarray(candidate)
    n = min(len(ref), len(cand))
    if n < 2:
        value = float(numpy.median(ref) / numpy.median(cand))
        return value, value
    rng = numpy.random.default_rng(seed)
    picks = rng.integers(0, n, size=(resamples, n))
    ratios = numpy.median(ref[:n][picks], axis=1) / numpy.median(cand[:n][picks], axis=1)
    low, high = numpy.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


class _CudaTimer:
    """Event timing with an L2 flush per trial, plus a synchronised host clock."""

    def __init__(self):
        self.flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
        self.escaped = 0

    def __call__(self, call: Callable[[], Any]) -> tuple[float, Any]:
        self.flush.zero_()
        _synchronize()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        host_start = _perf_counter()
        start.record()
        output = call()
        end.record()
        _synchronize()  # the whole device: side streams included
        host_ms = (_perf_counter() - host_start) * 1e3
        event_ms = start.elapsed_time(end)
        if host_ms > 2 * event_ms + 0.1:  # work the events did not see
            self.escaped += 1
            return host_ms, output
        return event_ms, output


def _cpu_timer(call: Callable[[], Any]) -> tuple[float, Any]:
    start = _perf_counter()
    output = call()
    return (_perf_counter() - start) * 1e3, output


def _graph_call(call: Callable[[], Any]) -> Callable[[], Any] | None:
    """Capture `call` into a CUDA graph; None when it cannot be captured."""
    try:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                call()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()
        return graph.replay
    except Exception:
        return None


def measure_pair(
    reference: Callable[[], Any],
    candidate: Callable[[], Any],
    device: str,
    config: TimingConfig = TimingConfig(),
    reverify: Callable[[], None] | None = None,
    check_output: Callable[[Any], None] | None = None,
) -> PairTiming:
    """Interleaved medians of both calls. `reverify` is called once if the running speedup
    exceeds `config.reverify_above`; it raises when the candidate fails on fresh inputs.
    `check_output` is given the candidate's output of the first and of randomly chosen timed
    runs, so a candidate cannot behave during verification and cheat while timed."""
    spot_checks = random.Random(secrets.randbits(64))
    notes: list[str] = []
    method = "cpu: interleaved, adaptive stop"
    timer: Callable[[Callable[[], Any]], tuple[float, Any]] = _cpu_timer
    if device == "cuda":
        cuda_timer = _CudaTimer()
        timer = cuda_timer
        method = "cuda: events, L2 flush, first trial discarded"
        if config.cuda_graph:
            graphs = (_graph_call(reference), _graph_call(candidate))
            if all(graphs):
                reference, candidate = graphs  # type: ignore[assignment]
                method += ", CUDA graph replay"
            else:
                notes.append("CUDA graph capture failed; timed eager launches")
    for _ in range(config.warmup):
        timer(reference)
        timer(candidate)
    if device == "cuda":  # the first timed trial is discarded, as KernelBench does
        timer(reference)
        timer(candidate)

    ref_times: list[float] = []
    cand_times: list[float] = []
    reverified = False
    started = _perf_counter()

    def run_candidate() -> float:
        # Check the output at once and let it go: holding it would change the allocator's
        # pattern for the candidate alone, and bias its time (seen: 1.5x on a memory-bound op).
        cand_ms, output = timer(candidate)
        first = not cand_times
        if check_output is not None and (first or spot_checks.random() < SPOT_CHECK_SHARE):
            check_output(output)
        return cand_ms

    while len(ref_times) < config.max_runs:
        if len(ref_times) % 2 == 0:
            ref_times.append(timer(reference)[0])
            cand_times.append(run_candidate())
        else:
            cand_times.append(run_candidate())
            ref_times.append(timer(reference)[0])
        runs = len(ref_times)
        if runs < config.min_runs:
            continue
        ratio = statistics.median(ref_times) / max(statistics.median(cand_times), 1e-12)
        if not reverified and ratio > config.reverify_above:
            reverified = True
            if reverify is not None:
                reverify()
                notes.append(
                    f"speedup over {config.reverify_above:g}x: re-verified on fresh inputs "
                    "during timing; worth a closer look"
                )
        stable = median_is_stable(ref_times, config.rel_precision) and median_is_stable(
            cand_times, config.rel_precision
        )
        if stable or _perf_counter() - started > config.budget_s:
            break
    ref_sample, cand_sample = Sample.of(ref_times), Sample.of(cand_times)
    speedup = ref_sample.median_ms / cand_sample.median_ms if cand_sample.median_ms > 0 else 0.0
    suspicious = speedup > config.reverify_above
    if device == "cuda" and cuda_timer.escaped:
        suspicious = True
        notes.append(
            f"{cuda_timer.escaped} trial(s) finished work outside the timed stream; "
            "timed with a whole-device synchronise instead"
        )
    return PairTiming(
        reference=ref_sample,
        candidate=cand_sample,
        speedup=speedup,
        speedup_ci=bootstrap_speedup_ci(ref_times, cand_times, config.bootstrap),
        method=method,
        notes=notes,
        suspicious=suspicious,
    )
