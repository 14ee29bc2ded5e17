"""Code and JSON extraction from model replies: every shape a real reply takes."""

from __future__ import annotations

import io
import tokenize

import pytest

from agents.roles.extract import ExtractError, code_blocks, extract_json, extract_module

MODULE = """\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.relu(x * self.weight)
"""


def names(source: str) -> set[str]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {t.string for t in tokens if t.type == tokenize.NAME}


@pytest.mark.parametrize("lang", ["python", "py", "Python", ""])
def test_fenced_block_is_extracted_whatever_its_language_tag(lang):
    reply = f"Here is the kernel.\n\n```{lang}\n{MODULE}```\n\nIt fuses the ReLU."
    candidate = extract_module(reply)
    assert candidate.source == MODULE
    assert candidate.error == ""


def test_tilde_and_indented_fences_are_recognised():
    indented = "\n".join("   " + line if line else "" for line in MODULE.splitlines())
    reply = f"1. The code:\n   ~~~python\n{indented}\n   ~~~\n"
    assert extract_module(reply).source == MODULE


def test_several_blocks_pick_the_one_defining_modelnew():
    reply = (
        "First the idea:\n```python\ny = torch.relu(x)\n```\n"
        "The build flags:\n```bash\npip install triton\n```\n"
        f"The module:\n```python\n{MODULE}```\n"
        "Usage:\n```python\nm = ModelNew(4)\nprint(m(torch.ones(4)))\n```\n"
    )
    assert extract_module(reply).source == MODULE


def test_a_later_complete_version_wins_over_an_earlier_one():
    first = MODULE.replace("torch.relu", "torch.sigmoid")
    reply = f"```python\n{first}```\nOops, fixed:\n```python\n{MODULE}```"
    assert extract_module(reply).source == MODULE


def test_a_short_snippet_after_the_module_does_not_replace_it():
    snippet = "class ModelNew(nn.Module):\n    pass\n"
    reply = f"```python\n{MODULE}```\nThe key part is:\n```python\n{snippet}```"
    assert extract_module(reply).source == MODULE


def test_module_split_over_blocks_is_joined_when_the_class_needs_the_other_block():
    head = "import torch\nimport torch.nn as nn\n\nSCALE = 2.0\n"
    cls = "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x * SCALE\n"
    reply = f"Imports:\n```python\n{head}```\nAnd the class:\n```python\n{cls}```"
    candidate = extract_module(reply)
    assert candidate.source is not None
    assert candidate.source.index("SCALE = 2.0") < candidate.source.index("class ModelNew")
    assert "joined 2 code blocks" in candidate.notes
    compile(candidate.source, "<candidate>", "exec")


def test_blocks_the_module_does_not_need_are_not_joined():
    reply = f"```python\nprint('unrelated')\nz = 3\n```\n```python\n{MODULE}```"
    assert extract_module(reply).source == MODULE


def test_unterminated_fence_at_the_end_of_the_reply():
    reply = f"Sure:\n```python\n{MODULE}"
    candidate = extract_module(reply)
    assert candidate.source == MODULE
    assert "not closed" in candidate.notes


def test_unterminated_fence_cut_mid_statement_is_a_syntax_error_with_a_line():
    reply = "```python\n" + MODULE + "    def helper(self, x):\n        return (x +\n"
    candidate = extract_module(reply)
    assert candidate.source is None
    assert "syntax error at line" in candidate.error


def test_reply_without_fence_that_is_python():
    candidate = extract_module(MODULE)
    assert candidate.source == MODULE


def test_reply_without_fence_with_prose_around_the_code():
    reply = f"Here is the optimised module:\n\n{MODULE}\nThis avoids one pass over memory."
    assert extract_module(reply).source == MODULE


@pytest.mark.parametrize(
    "reply",
    [
        "I cannot optimise this kernel further.",
        "Done",
        "",
        "The plan is to fuse the ReLU; from my view it is import-bound.",
    ],
)
def test_prose_only_reply_has_no_code(reply):
    candidate = extract_module(reply)
    assert candidate.source is None
    assert candidate.error == "the reply has no Python code block"


def test_only_a_cuda_block_is_no_python_code():
    reply = "```cuda\n__global__ void k(float* x) { x[0] = 1.0f; }\n```"
    candidate = extract_module(reply)
    assert candidate.source is None
    assert candidate.error == "the reply has no Python code block"


def test_mislabelled_python_block_is_still_used():
    assert extract_module(f"```text\n{MODULE}```").source == MODULE


def test_code_without_any_module_class_is_a_missing_class():
    reply = "```python\nimport torch\n\ndef forward(x):\n    return x + 1\n```"
    candidate = extract_module(reply)
    assert candidate.source is None
    assert candidate.error.startswith("the reply has no ModelNew class")


def test_syntax_error_names_the_line():
    reply = "```python\nimport torch\nclass ModelNew(torch.nn.Module)\n    pass\n```"
    candidate = extract_module(reply)
    assert candidate.source is None
    assert "line 2" in candidate.error


def test_class_named_model_is_renamed_everywhere_so_no_model_name_remains():
    source = MODULE.replace("ModelNew", "Model").replace(
        "super().__init__()", "super(Model, self).__init__()"
    )
    candidate = extract_module(f"```python\n{source}```")
    assert candidate.source is not None
    assert "Model" not in names(candidate.source)
    assert "super(ModelNew, self)" in candidate.source
    assert "renamed class Model to ModelNew" in candidate.notes


@pytest.mark.parametrize("name", ["ModelOptimized", "FastModel", "OptimizedNet"])
def test_single_renamed_class_becomes_modelnew(name):
    candidate = extract_module(f"```python\n{MODULE.replace('ModelNew', name)}```")
    assert candidate.source == MODULE
    assert f"renamed class {name}" in candidate.notes


def test_helper_modules_keep_their_names():
    source = (
        "import torch.nn as nn\n\n"
        "class Block(nn.Module):\n    def forward(self, x):\n        return x\n\n"
        "class FastModel(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.block = Block()\n\n    def forward(self, x):\n        return self.block(x)\n"
    )
    candidate = extract_module(f"```python\n{source}```")
    assert candidate.source is not None
    assert "class Block(nn.Module)" in candidate.source
    assert "class ModelNew(nn.Module)" in candidate.source


def test_ambiguous_rename_appends_an_alias():
    source = (
        "import torch.nn as nn\n\n"
        "class FastGelu(nn.Module):\n    def forward(self, x):\n        return x\n\n"
        "class FusedModel(nn.Module):\n    def forward(self, x):\n        return x\n"
    )
    candidate = extract_module(f"```python\n{source}```")
    assert candidate.source is not None
    assert candidate.source.rstrip().endswith("ModelNew = FusedModel")
    assert "aliased" in candidate.notes


def test_copied_reference_model_next_to_a_renamed_class_is_left_out():
    reference = "class Model(nn.Module):\n    def forward(self, x):\n        return x\n\n"
    ours = MODULE.split("\n\n\n")[1].replace("ModelNew", "FastModel")
    source = f"import torch\nimport torch.nn as nn\n\n{reference}{ours}"
    candidate = extract_module(f"```python\n{source}```")
    assert candidate.source is not None
    assert "Model" not in names(candidate.source)
    assert "class ModelNew(nn.Module)" in candidate.source


def test_unused_reference_copy_and_main_guard_are_dropped():
    source = (
        MODULE
        + "\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return x\n"
        + '\n\nif __name__ == "__main__":\n    print(ModelNew(3)(torch.ones(3)))\n'
    )
    candidate = extract_module(f"```python\n{source}```")
    assert candidate.source is not None
    assert "Model" not in names(candidate.source)
    assert "__main__" not in candidate.source
    assert "class ModelNew" in candidate.source


def test_reference_model_that_is_used_is_kept_for_the_checker_to_judge():
    source = MODULE + "\n\nclass Model(nn.Module):\n    pass\n\n\nREF = Model\n"
    candidate = extract_module(f"```python\n{source}```")
    assert candidate.source is not None
    assert "class Model(nn.Module)" in candidate.source


def test_code_blocks_reports_languages_and_open_fences():
    blocks = code_blocks("```json\n{}\n```\ntext\n````python\n```inner```\nx = 1\n")
    assert [(b.lang, b.closed) for b in blocks] == [("json", True), ("python", False)]
    assert blocks[1].text == "```inner```\nx = 1"


# -- JSON --------------------------------------------------------------------------------------


def test_json_block_is_parsed():
    reply = 'Reasoning...\n```json\n{"title": "t", "method": "m", "skill_id": null}\n```'
    assert extract_json(reply) == {"title": "t", "method": "m", "skill_id": None}


def test_json_without_fence_is_found_by_balanced_braces():
    reply = 'I pick {this}. Plan: {"title": "use {braces} in text", "n": {"a": 1}} done.'
    assert extract_json(reply) == {"title": "use {braces} in text", "n": {"a": 1}}


def test_trailing_commas_and_comments_are_tolerated():
    reply = '```json\n{\n  "title": "t", // short\n  "list": [1, 2,],\n}\n```'
    assert extract_json(reply) == {"title": "t", "list": [1, 2]}


def test_python_style_dict_is_tolerated():
    assert extract_json("{'title': 'it works', 'skill_id': None}") == {
        "title": "it works",
        "skill_id": None,
    }


def test_json_in_an_untagged_fence():
    assert extract_json('```\n{"lesson": "x"}\n```') == {"lesson": "x"}


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("no json here", "no JSON object"),
        ('```json\n{"title": "t" "method": "m"}\n```', "invalid JSON"),
        ("```json\n[1, 2]\n```", "a list, not an object"),
    ],
)
def test_json_errors_are_one_line(reply, message):
    with pytest.raises(ExtractError) as info:
        extract_json(reply)
    assert message in str(info.value)
    assert "\n" not in str(info.value)
