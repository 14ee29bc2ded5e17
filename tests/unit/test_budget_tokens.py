"""Deadlines and cancel tokens (agents/search/budget.py, agents/bench/limits.py) and the
progress line's phase (agents/search/progress.py): in-process, no sandbox."""

from __future__ import annotations

import io
import os
import time

import pytest
from rich.console import Console

from agents.bench.limits import BenchClock, check_budget
from agents.search import events as ev
from agents.search.budget import CancelToken, Deadline
from agents.search.progress import ProgressView


def test_a_deadline_cancels_with_its_reason_and_a_plain_cancel_says_cancelled():
    token = CancelToken()
    with Deadline(token, 0.05, "time budget spent (1 s, --max-time)") as deadline:
        assert token.event.wait(2.0)
    assert deadline.expired and token.stop_reason() == "time budget spent (1 s, --max-time)"
    plain = CancelToken()
    plain.cancel()
    assert plain.stop_reason() == "cancelled"


def test_leaving_a_deadline_early_stops_its_timer():
    token = CancelToken()
    with Deadline(token, 0.2, "late"):
        pass
    time.sleep(0.4)
    assert not token.cancelled


def test_the_first_reason_stands_and_a_child_follows_its_parent():
    parent = CancelToken()
    child = parent.child()
    child.cancel("problem time spent")
    assert child.cancelled and not parent.cancelled  # a problem's cut ends only the problem
    other = parent.child()
    parent.cancel("interrupted (Ctrl-C)")
    parent.cancel("a later reason")
    assert other.stop_reason() == "interrupted (Ctrl-C)"
    assert parent.stop_reason() == "interrupted (Ctrl-C)"
    assert child.stop_reason() == "problem time spent"  # its own reason came first
    assert parent.child().stop_reason() == "interrupted (Ctrl-C)"  # born cancelled


def test_a_bench_clock_cuts_a_problem_and_names_what_was_cut_and_not_run():
    clock = BenchClock(problem_time=0.05)
    with clock.running(), clock.problem() as token:
        assert token.event.wait(2.0)
        line = clock.note_cut("1_slow", "baseline", token)
    assert line == "cut during baseline: problem time spent (0.05 s, --problem-time)"
    assert not clock.stopped
    clock.run.cancel("time budget spent (60 s, --max-time)")
    clock.not_run.extend(["2_next", "3_last"])
    summary = clock.summary() or ""
    assert "1_slow (baseline): problem time spent" in summary
    assert "not run (time budget spent (60 s, --max-time)): 2_next, 3_last" in summary
    assert BenchClock().summary() is None


@pytest.mark.parametrize("seconds", [0, -1.0, float("nan")])
def test_a_budget_that_is_not_a_positive_number_is_refused(seconds):
    with pytest.raises(ValueError, match="--max-time must be a positive number"):
        check_budget("--max-time", seconds)


def test_the_optimize_line_names_iteration_phase_and_evaluation_phase():
    view = ProgressView(Console(file=io.StringIO()), iterations=6, max_evals=None)
    view(ev.PhaseStarted("profiling the reference"))
    assert view.status().startswith("profiling the reference")
    view(ev.IterationStarted(1, 6, [1.0], 1.0, 0))
    view(ev.PhaseStarted("evaluating 3 candidates"))
    view(ev.PhaseStarted("", "correctness 2/5"))
    assert view.status().startswith("iteration 1/6 · evaluating 3 candidates · correctness 2/5")
    view(ev.PhaseStarted("planning"))
    assert view.status().startswith("iteration 1/6 · planning · best")


def test_the_watchdog_finds_every_process_below_one():
    from agents.cli.interrupt import descendants

    assert os.getpid() in descendants(os.getppid())
    assert os.getpid() not in descendants(os.getpid())
