"""`FILE.py::NAME` names what the editor can optimise, and the file the command line writes
for it is the user's file with the rewrite added alongside, as the editor's Accept adds it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.request.settings import RequestError
from agents.search.result import SearchResult
from agents.targets.load import load_target, named_targets, split_spec
from agents.targets.synth import WRAPPER_MARK
from agents.targets.write_back import rewritten_file
from tests.conftest import TESTS

TARGETS = TESTS / "data" / "targets"
SOFTMAX = TARGETS / "softmax_function.py"
TRITON = TARGETS / "triton_add.py"
GEMM = TESTS.parent / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"

FASTER_SOFTMAX = """

class ModelNew(torch.nn.Module):
    def __init__(self, *init_inputs):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=1)
"""


def result_for(source: str) -> SearchResult:
    return SearchResult(
        task="manual_softmax",
        device="cpu",
        improved=True,
        verdict="correct",
        speedup=3.5,
        speedup_ci=[3.0, 4.0],
        confirmed=True,
        source=source,
        methods=["library-substitution"],
        evaluations=2,
        iterations=1,
        stopped_because="ran all 1 iterations",
        elapsed_s=1.0,
        cost={},
        planner="offline",
        executor="offline",
    )


def test_spec_names_a_file_or_a_target_in_it():
    assert split_spec("a/b.py") == (Path("a/b.py"), None)
    assert split_spec("a/b.py::launch") == (Path("a/b.py"), "launch")
    with pytest.raises(RequestError, match="class or function name"):
        split_spec("a/b.py::not a name")


def test_a_plain_function_becomes_a_problem_around_the_users_file():
    target = load_target(f"{SOFTMAX}::manual_softmax")
    text = SOFTMAX.read_text()
    assert (target.name, target.kind, target.original) == ("manual_softmax", "function", text)
    assert target.synthesized and target.problem.text.startswith(text.rstrip())
    assert WRAPPER_MARK in target.problem.text and target.problem.label == str(SOFTMAX)


def test_the_whole_file_is_its_model_as_before():
    target = load_target(str(GEMM))
    assert target.kind == "module" and not target.synthesized
    assert target.problem.text == GEMM.read_text() and target.name == GEMM.stem
    named = load_target(f"{GEMM}::Model")
    assert named.kind == "module" and named.problem.text == GEMM.read_text()


def test_a_triton_launcher_is_found_from_the_tree_without_importing_triton():
    kinds = {t.name: t.kind for t in named_targets(TRITON.read_text())}
    assert kinds == {"add": "triton"}  # the kernel is launched: its launcher is the target
    target = load_target(f"{TRITON}::add")
    assert target.kind == "triton" and target.synthesized


def test_an_unknown_name_is_one_line_listing_the_files_targets():
    with pytest.raises(RequestError) as error:
        load_target(f"{TRITON}::nope")
    message = str(error.value)
    assert "no target `nope`" in message and "add (Triton launcher)" in message
    assert "\n" not in message


def test_a_launched_kernel_says_to_optimise_its_launcher():
    with pytest.raises(RequestError, match="optimise the Python function that launches it"):
        load_target(f"{TRITON}::add_kernel")


def test_a_target_without_inputs_says_what_to_add(tmp_path):
    path = tmp_path / "no_inputs.py"
    path.write_text(SOFTMAX.read_text().replace("def get_inputs", "def make_inputs"))
    with pytest.raises(RequestError) as error:
        load_target(f"{path}::manual_softmax")
    assert "def get_inputs()" in str(error.value) and "\n" not in str(error.value)
    launcher = tmp_path / "launcher.py"
    launcher.write_text(TRITON.read_text().replace("def get_inputs", "def make_inputs"))
    with pytest.raises(RequestError, match="Add get_inputs"):
        load_target(f"{launcher}::add")


def test_a_file_without_model_points_at_its_targets():
    with pytest.raises(RequestError) as error:
        load_target(str(SOFTMAX))
    assert f"{SOFTMAX}::NAME" in str(error.value) and "manual_softmax (function)" in str(
        error.value
    )


def test_the_written_file_is_the_users_with_a_drop_in_alongside():
    target = load_target(f"{SOFTMAX}::manual_softmax")
    written = rewritten_file(target, result_for(target.problem.text + FASTER_SOFTMAX))
    original = SOFTMAX.read_text()
    assert written.call == "manual_softmax_optimized" and not written.note
    assert written.text.startswith(original[: original.index("def get_inputs")])
    assert WRAPPER_MARK not in written.text and "class ModelNew" not in written.text
    namespace: dict = {}
    exec(compile(written.text, "written.py", "exec"), namespace)
    (x,) = namespace["get_inputs"]()
    torch.testing.assert_close(
        namespace["manual_softmax_optimized"](x), namespace["manual_softmax"](x)
    )


def test_a_models_file_is_the_searchs_module_and_a_misplaced_rewrite_is_kept():
    model = load_target(str(GEMM))
    source = GEMM.read_text() + "\n\nclass ModelNew(Model):\n    pass\n"
    assert rewritten_file(model, result_for(source)).text == source
    function = load_target(f"{SOFTMAX}::manual_softmax")
    no_class = function.problem.text + "\n\ndef unrelated():\n    return 1\n"
    kept = rewritten_file(function, result_for(no_class))
    assert kept.text == no_class and "defines no ModelNew" in kept.note
