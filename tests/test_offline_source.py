"""Module surgery for generated ModelNew sources: what the passes build must be valid Python
that keeps the user's module docstring a docstring."""

from __future__ import annotations

import ast

from agents.offline.source import build_module, class_parts

PROBLEM = '''"""A problem with a docstring."""

from __future__ import annotations

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super(Model, self).__init__()

    def forward(self, x):
        return x * 2
'''


def test_added_imports_go_after_the_docstring_and_future_imports():
    parts = class_parts(PROBLEM, "Model")
    source = build_module(
        parts,
        {"forward": "    def forward(self, x):\n        return F.relu(x)\n"},
        doc="Rewritten.",
        imports=("import torch.nn.functional as F",),
    )
    module = ast.parse(source)
    assert ast.get_docstring(module) == "A problem with a docstring."
    future = [n for n in module.body if isinstance(n, ast.ImportFrom) and n.module == "__future__"]
    assert module.body.index(future[0]) == 1
    assert source.index("import torch.nn.functional as F") > source.index("from __future__")
    assert "super(ModelNew, self)" in source
    strays = [n for n in module.body[1:] if isinstance(n, ast.Expr)]
    assert not strays
