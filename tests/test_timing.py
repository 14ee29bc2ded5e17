"""The timing loop's mechanics: stability rule, bootstrap interval, re-verification trigger.
Speed itself is never asserted here; speed figures live in bench/RESULTS.md."""

from __future__ import annotations

import time

import numpy
import pytest

from agents.verify.timing import (
    Sample,
    TimingConfig,
    bootstrap_speedup_ci,
    measure_pair,
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


def test_runs_stay_within_min_and_max():
    config = TimingConfig(warmup=1, min_runs=7, max_runs=9, budget_s=60, rel_precision=0.0)
    result = measure_pair(lambda: None, lambda: None, "cpu", config)
    assert result.runs == 9
    assert "interleaved" in result.method


def test_a_huge_speedup_is_reverified_once_and_flagged():
    calls = []

    def slow():
        time.sleep(0.003)

    config = TimingConfig(warmup=1, min_runs=5, max_runs=12, budget_s=60)
    result = measure_pair(slow, lambda: None, "cpu", config, reverify=lambda: calls.append(1))
    assert calls == [1]
    assert result.suspicious
    assert any("re-verified" in note for note in result.notes)


def test_a_failing_reverification_stops_the_timing():
    class Caught(Exception):
        pass

    def fail():
        raise Caught

    config = TimingConfig(warmup=1, min_runs=5, max_runs=50, budget_s=60)
    with pytest.raises(Caught):
        measure_pair(lambda: time.sleep(0.003), lambda: None, "cpu", config, reverify=fail)
