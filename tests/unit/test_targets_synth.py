"""A target that is not the file's `Model` becomes a KernelBench problem: a `Model` that
calls it with the file's `get_inputs()`, the user's lines first and unmoved."""

from __future__ import annotations

import pytest
import torch

from agents.targets.synth import SynthesisError, synthesize_problem
from agents.task import SourceFile, load_problem, outline_problem
from tests.conftest import ROOT

GEMM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
SOFTMAX = ROOT / "bench" / "problems" / "17_manual_softmax.py"

SOFTMAX_FUNCTION = '''"""A softmax written by hand, as a plain function."""

import torch

ROWS = 256
COLS = 4096


def manual_softmax(x):
    x = x - torch.max(x, dim=1, keepdim=True)[0]
    e = torch.exp(x)
    return e / torch.sum(e, dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(ROWS, COLS)]
'''


def test_a_function_becomes_a_problem_whose_model_calls_it():
    text = synthesize_problem(SOFTMAX_FUNCTION, "manual_softmax")
    assert text.startswith(SOFTMAX_FUNCTION.rstrip())  # the user's lines keep their numbers
    source = SourceFile(text, "/virtual/softmax_function.py")
    outline_problem(source)
    problem = load_problem(source)
    (x,) = problem.get_inputs()
    model = problem.model_class(*problem.get_init_inputs())
    torch.testing.assert_close(model(x), torch.softmax(x, dim=1))


def test_a_function_without_get_inputs_is_told_what_to_add():
    text = SOFTMAX_FUNCTION.replace("def get_inputs", "def make_inputs")
    with pytest.raises(SynthesisError) as error:
        synthesize_problem(text, "manual_softmax")
    message = str(error.value)
    assert "def get_inputs(): return [torch.randn(...)]" in message
    assert "manual_softmax(x)" in message and "\n" not in message
    assert "def get_inputs():" in error.value.snippet


def test_a_file_with_its_own_model_keeps_it_under_another_name():
    text = SOFTMAX.read_text().replace(
        "def get_inputs():", "def scaled(x):\n    return Model()(x) * 2\n\n\ndef get_inputs():"
    )
    out = synthesize_problem(text, "scaled")
    user_part = out[: out.index("# --- kernel-agent")]
    assert user_part.count("\n") >= text.count("\n") and "class UserModel(" in user_part
    assert user_part.splitlines()[: len(text.splitlines())] == [
        line.replace("Model()", "UserModel()").replace("class Model(", "class UserModel(")
        for line in text.splitlines()
    ]
    problem = load_problem(SourceFile(out, "/virtual/scaled.py"))
    (x,) = problem.get_inputs()
    model = problem.model_class(*problem.get_init_inputs())
    torch.testing.assert_close(model(x), torch.softmax(x, dim=1) * 2)


def test_model_targets_pass_through_and_kernels_are_refused():
    text = GEMM.read_text()
    assert synthesize_problem(text, "Model") == text
    triton = "import triton\n\n\n@triton.jit\ndef k(x_ptr):\n    pass\n\n\n"
    triton += "def get_inputs():\n    return []\n"
    with pytest.raises(SynthesisError, match="Triton kernel"):
        synthesize_problem(triton, "k")
    with pytest.raises(SynthesisError, match="no function or class `nope`"):
        synthesize_problem(text, "nope")
