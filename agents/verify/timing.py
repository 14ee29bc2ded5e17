"""Simple, fair timing: warm up, then interleave reference and candidate calls and take medians.

Interleaving makes the machine's drift hit both sides alike. On CUDA the whole device is
synchronized before a timer stops, so work pushed to a side stream is counted.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

_perf_counter = time.perf_counter
_synchronize = torch.cuda.synchronize


@dataclass
class TimingResult:
    reference_ms: float
    candidate_ms: float
    runs: int

    @property
    def speedup(self) -> float:
        return self.reference_ms / self.candidate_ms if self.candidate_ms > 0 else float("inf")


def time_call(call: Callable[[], Any], device: str) -> float:
    """Milliseconds of one call, device work included."""
    if device == "cuda":
        _synchronize()
    start = _perf_counter()
    call()
    if device == "cuda":
        _synchronize()
    return (_perf_counter() - start) * 1e3


def time_interleaved(
    reference: Callable[[], Any],
    candidate: Callable[[], Any],
    device: str,
    *,
    warmup: int = 2,
    min_runs: int = 5,
    max_runs: int = 50,
    budget_s: float = 2.0,
) -> TimingResult:
    """Medians of interleaved runs; stops after `budget_s` once `min_runs` pairs are in."""
    for _ in range(warmup):
        time_call(reference, device)
        time_call(candidate, device)
    ref_times: list[float] = []
    cand_times: list[float] = []
    started = _perf_counter()
    while len(ref_times) < max_runs:
        if len(ref_times) % 2 == 0:
            ref_times.append(time_call(reference, device))
            cand_times.append(time_call(candidate, device))
        else:
            cand_times.append(time_call(candidate, device))
            ref_times.append(time_call(reference, device))
        if len(ref_times) >= min_runs and _perf_counter() - started > budget_s:
            break
    return TimingResult(statistics.median(ref_times), statistics.median(cand_times), len(ref_times))
