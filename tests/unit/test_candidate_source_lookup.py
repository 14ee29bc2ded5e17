"""Code loaded from a candidate's text can read its own source (`inspect.getsource`), as
Triton's @jit does when it decorates a kernel: candidates are text with a label such as
"<candidate 1>", never a file."""

from __future__ import annotations

import inspect

import pytest

from agents.task import SourceFile, TaskLoadError, load_module

KERNEL = """
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)
"""


def test_a_function_from_candidate_text_has_its_source():
    module = load_module(SourceFile("def f(x):\n    return x + 1\n", "<candidate 7>"), "c7")
    assert inspect.getsource(module.f) == "def f(x):\n    return x + 1\n"


def test_a_triton_kernel_in_candidate_text_is_decorated():
    pytest.importorskip("triton")
    try:
        module = load_module(SourceFile(KERNEL, "<candidate 1>"), "candidate_triton")
    except TaskLoadError as error:  # before the fix: "@jit functions should be defined in a
        pytest.fail(str(error))  # Python file"
    assert "tl.store" in module.add_one.src
