"""The test tiers hold what they say: every test module sits in a tier, tests/unit starts no
process, and every smoke test `make test-fast` names still exists.

Why: `make test-fast` runs tests/unit whole plus the smoke list; a test left at the top of
tests/ or renamed off the list would silently drop out of the quick run.
"""

from __future__ import annotations

import ast
import multiprocessing
import os
import subprocess
import sys

import pytest

from tests.conftest import SMOKE, TESTS

TIERS = ("unit", "integration", "e2e")


def test_every_test_module_sits_in_a_tier():
    stray = [
        str(path.relative_to(TESTS))
        for path in TESTS.rglob("test_*.py")
        if path.relative_to(TESTS).parts[0] not in TIERS
    ]
    assert not stray, f"test modules outside tests/unit, integration, e2e: {stray}"


def test_no_unit_test_imports_an_integration_or_e2e_test_module():
    """A helper two tiers share lives in tests/ (edit_scripts.py, programs.py): importing
    another tier's test module would run its module-level set-up in the unit tier."""
    crossing = []
    for path in sorted((TESTS / "unit").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            crossing += [
                f"{path.name}:{node.lineno} imports {name}"
                for name in names
                if name.startswith(("tests.integration", "tests.e2e"))
            ]
    assert not crossing, crossing


def test_every_smoke_test_exists_outside_the_unit_tier():
    for entry in SMOKE:
        file, name = entry.split("::")
        assert file.split("/")[0] in ("integration", "e2e"), entry
        tree = ast.parse((TESTS / file).read_text())
        defined = {
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        assert name in defined, f"SMOKE names {entry}, which is gone: update tests/conftest.py"


def test_a_unit_test_that_starts_a_process_is_told_to_move():
    with pytest.raises(RuntimeError, match="tests/integration"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    with pytest.raises(RuntimeError, match="tests/integration"):
        os.fork()
    with pytest.raises(RuntimeError, match="tests/integration"):
        multiprocessing.get_context("spawn").Process(target=print).start()


def test_unit_tests_are_marked_unit(request):
    assert request.node.get_closest_marker("unit") is not None
