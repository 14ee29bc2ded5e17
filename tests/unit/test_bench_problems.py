"""The benchmark problem suite in bench/problems loads, runs at CPU size and scales to GPU size."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from agents.task import SourceFile, apply_size, load_problem, outline_problem

BENCH_PROBLEMS = Path(__file__).resolve().parents[2] / "bench" / "problems"
PROBLEM_FILES = sorted(BENCH_PROBLEMS.glob("[0-9]*.py"))


@pytest.fixture(autouse=True, scope="module")
def two_threads():
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(previous)


def test_suite_has_at_least_sixteen_problems():
    assert len(PROBLEM_FILES) >= 16


@pytest.mark.parametrize("path", PROBLEM_FILES, ids=lambda path: path.stem)
def test_problem_forward_at_default_size_gives_finite_output(path):
    source = SourceFile.from_path(path)
    problem = load_problem(source)
    torch.manual_seed(0)
    model = problem.model_class(*problem.get_init_inputs())
    inputs = problem.get_inputs()
    assert inputs, "get_inputs() returned no tensors"
    for value in inputs:
        assert isinstance(value, torch.Tensor)
        assert value.dtype == torch.float32
    with torch.no_grad():
        output = model(*inputs)
    outputs = output if isinstance(output, tuple | list) else (output,)
    for value in outputs:
        assert torch.isfinite(value).all()


@pytest.mark.parametrize("path", PROBLEM_FILES, ids=lambda path: path.stem)
def test_problem_gpu_sizes_override_only_its_own_constants(path):
    source = SourceFile.from_path(path)
    constants = outline_problem(source).constants
    problem = load_problem(source)
    gpu_sizes = problem.module.GPU_SIZES
    assert isinstance(gpu_sizes, dict)
    assert gpu_sizes, "GPU_SIZES overrides nothing"
    unknown = set(gpu_sizes) - (set(constants) - {"GPU_SIZES"})
    assert not unknown, f"GPU_SIZES names non-constants: {sorted(unknown)}"


@pytest.mark.parametrize("path", PROBLEM_FILES, ids=lambda path: path.stem)
def test_problem_file_starts_with_one_line_docstring(path):
    source = SourceFile.from_path(path)
    first = source.text.splitlines()[0]
    assert first.startswith('"""') and first.endswith('"""') and len(first) > 6


def test_apply_size_gpu_replaces_module_constants():
    # Smallest file; the model is never built at GPU size, only the constants are checked.
    path = min(PROBLEM_FILES, key=lambda path: path.stat().st_size)
    source = SourceFile.from_path(path)
    problem = load_problem(source)
    module = vars(problem.module)
    gpu_sizes = dict(problem.module.GPU_SIZES)
    before = {name: module[name] for name in gpu_sizes}
    assert before != gpu_sizes, "GPU_SIZES repeats the default sizes"

    apply_size(problem, "gpu", source)

    assert {name: module[name] for name in gpu_sizes} == gpu_sizes


def test_apply_size_default_keeps_file_sizes():
    path = min(PROBLEM_FILES, key=lambda path: path.stat().st_size)
    source = SourceFile.from_path(path)
    problem = load_problem(source)
    constants = outline_problem(source).constants
    apply_size(problem, "default", source)
    module = vars(problem.module)
    assert all(module[name] == constants[name] for name in problem.module.GPU_SIZES)
