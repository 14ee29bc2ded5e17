"""The timing statistics: stability rule, bootstrap interval, sample summaries (the timing
loop itself is the outside clock, tests/unit/test_clock_resolution.py and the adversarial suite).
Speed itself is never asserted here; speed figures live in bench/RESULTS.md."""

from __future__ import annotations

import numpy

from agents.verify.timing import (
    Sample,
    bootstrap_speedup_ci,
    median_is_stable,
)


def test_median_is_stable_needs_enough_runs_and_a_tight_spread():
    assert not median_is_stable([1.0] * 5, 0.01)
    assert median_is_stable([1.0] * 20, 0.01)
    spread = list(numpy.random.default_rng(0).uniform(0.5, 1.5, size=20))
    assert not median_is_stable(spread, 0.01)


def test_bootstrap_interval_brackets_the_ratio_of_medians():
    rng = numpy.random.default_rng(1)
    ref = list(2.0 + rng.normal(0, 0.05, 200))
    cand = list(1.0 + rng.normal(0, 0.05, 200))
    low, high = bootstrap_speedup_ci(ref, cand, resamples=1000)
    assert low < 2.0 < high
    assert high - low < 0.2


def test_sample_reports_median_and_quartiles():
    sample = Sample.of([1.0, 2.0, 3.0, 4.0, 5.0])
    assert sample.median_ms == 3.0 and sample.iqr_ms == 2.0 and sample.runs == 5
