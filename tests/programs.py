"""A test problem loaded as the offline passes see it: shared by the e-graph's end-to-end
tests (tests/integration/test_egraph_pass.py) and its cost model's unit test, so that a unit
test imports no integration test module."""

from __future__ import annotations

import types
from pathlib import Path

import torch

from agents.offline.passes.base import Program
from agents.task import SourceFile, build_model, call_factory, load_problem


def loaded_program(path: Path) -> tuple[Program, types.ModuleType]:
    """The problem at `path` built on the CPU with seed 0, and its module."""
    source = SourceFile.from_path(path)
    problem = load_problem(source)
    torch.manual_seed(0)
    init = call_factory(problem.get_init_inputs, source, "get_init_inputs")
    model = build_model(problem.model_class, init, source)
    inputs = call_factory(problem.get_inputs, source, "get_inputs")
    return Program(source.text, "Model", model, inputs, init, "cpu"), problem
