"""Offline runs explain an empty planning round in the offline engine's terms, never in a
model's (agents/search/wording.py; issue 34: a second `make demo` said "the planner proposed
no usable plan (unreadable replies or forbidden skills)")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from agents.search.wording import no_code, no_plans

MODEL_WORDS = ("repl", "model", "planner", "unreadable", "readab")


def fake_run(label: str, failed: list[str], iteration: int = 1):
    """`failed`: the plans the logbook held as failed when the run began."""
    logbook = SimpleNamespace(store=SimpleNamespace(path=Path(".demo/memory.sqlite3")))
    return SimpleNamespace(
        roles=SimpleNamespace(planner=SimpleNamespace(label=label)),
        memory=SimpleNamespace(logbook=logbook),
        task_id="t",
        plans_failed_before=len(failed),
        state=SimpleNamespace(iteration=iteration, last_llm_error="HTTP 500"),
    )


def assert_offline_words(line: str) -> None:
    assert not any(word in line.lower() for word in MODEL_WORDS), line


def test_memory_that_tried_every_pass_is_named_with_what_to_do():
    line = no_plans(fake_run("offline", ["Fuse ... [torch-compile]"]), repeats=0)
    assert line == (
        "every offline pass that fits this kernel was already tried on it "
        "(memory: .demo/memory.sqlite3); nothing new to try: run with --no-memory, "
        "or delete that file"
    )
    assert_offline_words(line)


@pytest.mark.parametrize(
    ("repeats", "iteration", "says"),
    [
        (0, 1, "no offline pass fits this kernel"),
        (2, 1, "already tried in this run"),
        (0, 3, "already tried in this run"),
    ],
)
def test_an_offline_round_with_nothing_to_try_says_why(repeats, iteration, says):
    line = no_plans(fake_run("offline", [], iteration), repeats)
    assert says in line
    assert_offline_words(line)


def test_an_offline_sample_without_code_names_the_pass_not_a_model():
    line = no_code(fake_run("offline", []))
    assert line == "the offline pass gave no rewrite"
    assert_offline_words(line)


def test_a_model_backend_keeps_its_own_words():
    run = fake_run("anthropic", [])
    assert no_code(run) == "the model call failed: HTTP 500"
    assert no_plans(run, 0).startswith("the planner proposed no usable plan")
    assert no_plans(run, 3).startswith("the planner only repeated plans already tried")
