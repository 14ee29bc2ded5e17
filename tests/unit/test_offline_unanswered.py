"""Why an offline pass's child gave no answer, in one line (agents/offline/roles.py)."""

from __future__ import annotations

from agents.offline.roles import unanswered
from agents.sandbox.process import ChildOutcome, Limits

LIMITS = Limits(build_timeout_s=120, run_timeout_s=60)


def test_a_run_limit_is_named_with_its_seconds():
    outcome = ChildOutcome(timed_out_phase="run", stderr_tail="")
    assert unanswered("torch-compile", outcome, LIMITS) == (
        "the torch-compile pass ran past its 60 s run limit"
    )


def test_a_cancel_is_not_a_crash():
    outcome = ChildOutcome(cancelled=True)
    assert unanswered("torch-compile", outcome, LIMITS) == "the torch-compile pass was cancelled"


def test_a_crash_gives_the_last_words_or_the_exit_status():
    said = ChildOutcome(stderr_tail="Traceback ...\nRuntimeError: boom\n", returncode=1)
    assert unanswered("p", said, LIMITS) == "the p pass crashed: RuntimeError: boom"
    silent = ChildOutcome(returncode=-9)
    assert unanswered("p", silent, LIMITS) == "the p pass crashed without a word (exit status -9)"
