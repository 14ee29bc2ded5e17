"""The statistics of a timing: samples, their medians and spread, when a median is stable,
and a bootstrap interval for the ratio of two medians. The measuring itself happens from
outside the processes (agents/verify/clock.py); whether the ratio can be trusted as a number
at all (a busy machine, halves that disagree) is agents/verify/stability.py's rule."""

from __future__ import annotations

import contextlib
import gc
import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy


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
    calls_per_request: int = 1  # K: each timed request's calls, each on fresh inputs
    stable: bool = True
    """False when the ratio cannot be trusted as a number (agents/verify/stability.py): it is
    then reported as "unstable", never offered or ranked as a speedup."""
    unstable_reason: str = ""  # one line: what made it untrustworthy

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


@contextlib.contextmanager
def collector_held_off() -> Iterator[None]:
    """Python's cyclic collector off for the span of a timed request, in the parent and in
    both workers alike: a request of K calls makes (and its reply decodes into) thousands of
    objects, and a full collection (tens of milliseconds) would otherwise land inside one
    timed request at random. It runs after, outside any bracket."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
