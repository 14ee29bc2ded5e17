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


def test_added_imports_join_the_modules_own_import_block():
    """`import torch.nn.functional as F` lands under `import torch.nn as nn`, not above
    `import torch` with a blank line of its own; a module whose first statement is not an
    import gets it before that statement."""
    parts = class_parts(
        PROBLEM.replace("import torch.nn as nn\n", "import torch.nn as nn\n\nN = 4\n"), "Model"
    )
    source = build_module(
        parts,
        {"forward": "    def forward(self, x):\n        return F.relu(x)\n"},
        doc="Rewritten.",
        imports=("import torch.nn.functional as F",),
    )
    assert (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\nN = 4\n" in source
    )
    bare = class_parts(
        "N = 4\nimport torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n\n"
        "    def forward(self, x):\n        return x\n",
        "Model",
    )
    source = build_module(
        bare,
        {"forward": "    def forward(self, x):\n        return F.relu(x)\n"},
        doc="",
        imports=("import torch.nn.functional as F",),
    )
    assert source.index("import torch.nn.functional as F") < source.index("N = 4")
    ast.parse(source)
