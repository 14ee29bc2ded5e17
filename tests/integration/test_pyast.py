"""Our parses survive threads: CPython 3.11's AST conversion is not thread-safe (agents/pyast)."""

from __future__ import annotations

import ast
import gc
import itertools
import sys
import threading
import time

import pytest

from agents import pyast

SOURCE = "x = " + "(" * 20 + "1" + ")" * 20 + "\n"
SOURCE += "\n".join(
    f"def f{i}(a, b):\n    return [a + b * {i} for _ in range(3)]" for i in range(200)
)


class _Cycle:
    """Garbage that only the collector frees, whose finalizer lets another thread run."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def _hammer(parse) -> list[str]:
    """Four threads parsing while the collector runs finalizers mid-conversion."""
    errors: list[str] = []

    def work() -> None:
        for _ in range(150):
            _Cycle()
            try:
                parse(SOURCE)
            except SystemError as error:
                errors.append(str(error))
                return

    threshold = gc.get_threshold()
    gc.set_threshold(50)
    try:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.set_threshold(*threshold)
    return errors


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the race is CPython 3.11's")
def test_the_stress_reaches_the_race_with_plain_ast_parse():
    """The control: without the lock this stress fails, so the next test means something."""
    errors = []
    for _ in range(5):
        errors = _hammer(ast.parse)
        if errors:
            break
    assert errors and "recursion depth mismatch" in errors[0]


def test_parses_behind_the_lock_never_fail_across_threads():
    assert _hammer(pyast.parse) == []
    assert pyast.literal_eval(" (1, 'a', [2.5])") == (1, "a", [2.5])
    assert pyast.parse("y = 1", mode="exec").body[0].targets[0].id == "y"


def test_memory_and_agents_parse_under_one_lock():
    """memory's normalisation parses beside the pool's task loading: one lock for both."""
    from memory import parsing

    assert pyast._LOCK is parsing.PARSE_LOCK
    turns = itertools.count()

    def either(source: str) -> object:
        return (pyast.parse if next(turns) % 2 else parsing.parse)(source)

    assert _hammer(either) == []
