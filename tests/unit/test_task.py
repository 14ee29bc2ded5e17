"""Loading problems and candidates gives precise, one-line errors."""

from __future__ import annotations

import pytest

from agents.task import (
    SourceFile,
    TaskLoadError,
    load_candidate,
    load_problem,
    outline_candidate,
    outline_problem,
)
from tests.conftest import PROBLEMS


def test_problem_outline_reads_classes_functions_and_size_constants():
    shape = outline_problem(SourceFile.from_path(PROBLEMS / "linear_relu.py"))
    assert "Model" in shape.classes
    assert {"get_inputs", "get_init_inputs"} <= set(shape.functions)
    assert shape.constants == {"BATCH": 64, "IN_FEATURES": 128, "OUT_FEATURES": 96}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("def get_inputs(): pass\ndef get_init_inputs(): pass\n", "no `class Model`"),
        ("class Model: pass\ndef get_init_inputs(): pass\n", "no `def get_inputs()`"),
        ("class Model: pass\ndef get_inputs(): pass\n", "no `def get_init_inputs()`"),
        ("class Model(:\n", "p.py:1: syntax error"),
    ],
)
def test_malformed_problem_gives_one_line_error(text, expected):
    with pytest.raises(TaskLoadError) as caught:
        outline_problem(SourceFile(text, "p.py"))
    assert expected in str(caught.value)
    assert "\n" not in str(caught.value)


def test_candidate_without_modelnew_is_refused_by_name():
    with pytest.raises(TaskLoadError, match="no `class ModelNew`"):
        outline_candidate(SourceFile("class Model: pass\n", "c.py"))


def test_exception_at_import_names_the_line_and_the_exception():
    source = SourceFile("import torch\n\nx = 1 / 0\nclass ModelNew: pass\n", "c.py")
    with pytest.raises(TaskLoadError) as caught:
        load_candidate(source)
    assert str(caught.value) == "c.py:3: ZeroDivisionError: division by zero (while importing)"


def test_sys_exit_at_import_becomes_a_load_error_not_an_exit():
    with pytest.raises(TaskLoadError, match="SystemExit"):
        load_candidate(SourceFile("import sys\nsys.exit(3)\nclass ModelNew: pass\n", "c.py"))


def test_problem_loads_from_source_text_without_a_path():
    text = (PROBLEMS / "two_outputs.py").read_text()
    problem = load_problem(SourceFile(text))
    assert problem.model_class.__name__ == "Model"
    assert len(problem.get_inputs()) == 2


def test_missing_file_is_a_load_error(tmp_path):
    with pytest.raises(TaskLoadError, match="no such file"):
        SourceFile.from_path(tmp_path / "absent.py")


def test_reference_module_name_cannot_be_guessed():
    source = SourceFile.from_path(PROBLEMS / "two_outputs.py")
    first, second = load_problem(source), load_problem(source)
    assert first.module.__name__ != second.module.__name__
    assert first.module.__name__.startswith("kernel_agent_reference_")
