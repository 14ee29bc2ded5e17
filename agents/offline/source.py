"""Source-level surgery on a KernelBench module, for passes that do not go through fx and
for emitting the module around an fx-generated forward.

It parses with `ast` (parsing never runs the code) and cuts text by line ranges, so the
user's own code (comments, helper functions, constants) survives untouched.
"""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass, field

from agents import pyast

HARNESS_FUNCTIONS = ("get_inputs", "get_init_inputs")
_MODEL_NAME = re.compile(r"\bModel\b")


class SourceError(ValueError):
    """The module cannot be taken apart as needed; one line."""


@dataclass
class ClassParts:
    prelude: str  # module code before/around the class: imports, constants, helpers
    class_name: str
    methods: dict[str, str] = field(default_factory=dict)  # name → source, class-indented
    class_body_extra: list[str] = field(default_factory=list)  # class attributes, docstring
    forward_params: list[str] = field(default_factory=list)  # forward's parameter names

    @property
    def init(self) -> str:
        return self.methods.get("__init__", "")


def class_parts(source: str, class_name: str) -> ClassParts:
    """Split `source` into the target class's methods and everything else that a standalone
    ModelNew module needs (harness functions, `__main__` blocks and other model classes
    named Model/ModelNew are dropped)."""
    try:
        tree = pyast.parse(source)
    except SyntaxError as error:
        raise SourceError(f"line {error.lineno}: {error.msg}") from None
    lines = source.splitlines(keepends=True)
    target: ast.ClassDef | None = None
    dropped: set[int] = set()  # 0-based line numbers left out of the prelude
    for node in tree.body:
        span = range(_first_line(node) - 1, node.end_lineno or _first_line(node))
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            target = node
        elif not (
            (isinstance(node, ast.ClassDef) and node.name in ("Model", "ModelNew"))
            or (isinstance(node, ast.FunctionDef) and node.name in HARNESS_FUNCTIONS)
            or _is_main_guard(node)
            or (
                isinstance(node, ast.Assign)
                and any(
                    isinstance(t, ast.Name) and t.id in ("Model", "ModelNew") for t in node.targets
                )
            )
        ):
            continue
        dropped.update(span)
    kept = "".join(line for i, line in enumerate(lines) if i not in dropped)
    keep = [re.sub(r"\n{3,}", "\n\n", kept)]
    if target is None:
        raise SourceError(f"no class {class_name} in the module")
    parts = ClassParts(prelude="".join(keep).rstrip() + "\n", class_name=class_name)
    for item in target.body:
        start = _first_line(item)
        text = "".join(lines[start - 1 : item.end_lineno])
        if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
            parts.methods[item.name] = textwrap.indent(textwrap.dedent(text), "    ")
            if item.name == "forward":
                parts.forward_params = [a.arg for a in item.args.args[1:]]
        else:
            parts.class_body_extra.append(textwrap.indent(textwrap.dedent(text), "    "))
    if "__init__" not in parts.methods:
        raise SourceError(f"class {class_name} has no __init__")
    if "forward" not in parts.methods:
        raise SourceError(f"class {class_name} has no forward")
    return parts


def build_module(
    parts: ClassParts,
    methods: dict[str, str],
    *,
    doc: str,
    imports: tuple[str, ...] = (),
    prelude_extra: str = "",
) -> str:
    """A standalone module defining `class ModelNew(nn.Module)` with `methods` (name →
    class-indented source; __init__ taken from `parts` when absent). References to the old
    class name become ModelNew, so `super(Model, self)` keeps working."""
    ordered = {"__init__": methods.get("__init__", parts.init)}
    ordered.update((name, text) for name, text in methods.items() if name != "__init__")
    body = [f'    """{doc}"""\n'] if doc else []
    body += [extra for extra in parts.class_body_extra if not _is_docstring(extra)]
    body += [_rename(text.rstrip() + "\n") for text in ordered.values()]
    prelude = _rename(parts.prelude)
    wanted = [line for line in imports if line not in prelude]
    header = "\n".join(["import torch", "import torch.nn as nn", *wanted])
    missing = "\n".join(line for line in header.splitlines() if line not in prelude.splitlines())
    head, rest = _split_module_head(prelude)
    imports_end = _leading_imports_end(rest)
    if missing and imports_end:  # beside the module's own imports, not above them
        lines = rest.splitlines(keepends=True)
        block = "".join(lines[:imports_end]).rstrip("\n")
        rest = f"{block}\n{missing}\n{''.join(lines[imports_end:])}"
        missing = ""
    chunks = [c for c in (head.strip(), missing, rest.strip(), prelude_extra.strip()) if c]
    return "\n\n".join(chunks) + "\n\n\nclass ModelNew(nn.Module):\n" + "\n".join(body)


def _leading_imports_end(text: str) -> int:
    """The last line of the import statements `text` starts with (0 when it starts with
    something else)."""
    try:
        statements = pyast.parse(text).body
    except SyntaxError:
        return 0
    end = 0
    for node in statements:
        if not isinstance(node, ast.Import | ast.ImportFrom):
            break
        end = node.end_lineno or end
    return end


def _split_module_head(prelude: str) -> tuple[str, str]:
    """The module docstring and `from __future__` imports, which must stay first (an import
    put above a docstring turns it into a stray string), and the rest."""
    try:
        statements = pyast.parse(prelude).body
    except SyntaxError:
        return "", prelude
    end = 0
    for index, node in enumerate(statements):
        docstring = (
            index == 0
            and isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        )
        future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if not (docstring or future):
            break
        end = node.end_lineno or end
    lines = prelude.splitlines(keepends=True)
    return "".join(lines[:end]), "".join(lines[end:])


def _rename(text: str) -> str:
    return _MODEL_NAME.sub("ModelNew", text)


def _first_line(node: ast.stmt) -> int:
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def _is_main_guard(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
    )


def _is_docstring(text: str) -> bool:
    stripped = text.strip()
    return stripped.startswith(('"""', "'''", '"', "'"))
