"""What in a document can be optimised, found from the syntax tree alone (no code runs).

- `module`: an `nn.Module` subclass in a KernelBench-format file (one that defines
  `get_inputs` / `get_init_inputs`). When the file has a `Model`, it is the target.
- `triton`: the Python function that launches `@triton.jit` kernels (`kernel[grid](...)`).
- `cuda`: the Python function that calls an extension built by `load_inline(cuda_sources=...)`;
  its `__global__` kernels are found by parsing the CUDA strings with tree-sitter-cuda.

A function target is optimised against itself on the file's `get_inputs()`. When something
it needs is missing, the target says exactly what to add (`missing`, `snippet`): the server
never guesses shapes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import tree_sitter_cuda
from tree_sitter import Language, Node, Parser

from server.documents import node_text, walk

CUDA_LANGUAGE = Language(tree_sitter_cuda.language())
_CUDA_PARSER = Parser(CUDA_LANGUAGE)
_CUDA_LOCK = threading.Lock()

MODULE_BASES = {"nn.Module", "torch.nn.Module", "Module"}
HARNESS = ("get_inputs", "get_init_inputs")
TRITON_DECORATORS = ("jit", "autotune", "heuristics")


@dataclass(frozen=True)
class Kernel:
    """A Triton or CUDA kernel a target runs; lines are 0-based in the document."""

    name: str
    language: str  # "triton" | "cuda" | "cpp" (a C++ extension, no kernel lines)
    start_line: int
    end_line: int


@dataclass(frozen=True)
class Target:
    """One optimisable thing. Lines are 0-based and inclusive; `name_line` is where its
    `class`/`def` keyword sits (code lenses go there)."""

    name: str
    kind: str  # "module" | "triton" | "cuda" | "function" (calls a C++ extension)
    start_line: int
    end_line: int
    name_line: int
    start_byte: int
    end_byte: int
    kernels: tuple[Kernel, ...] = ()
    missing: str | None = None  # one line: what to add before it can be optimised
    snippet: str | None = None  # the code to add, ready to paste
    params: tuple[str, ...] = field(default=(), compare=False)  # a function target's params

    @property
    def ready(self) -> bool:
        return self.missing is None

    @property
    def label(self) -> str:
        return {"triton": "Triton kernel", "cuda": "CUDA kernel"}.get(self.kind, "kernel")

    def covers(self, line: int) -> bool:
        """Whether a cursor on `line` is on this target or one of its kernels."""
        if self.start_line <= line <= self.end_line:
            return True
        return any(k.start_line <= line <= k.end_line for k in self.kernels)


# --- tree helpers ---------------------------------------------------------------------------


def _definition(node: Node) -> Node:
    """The class/function definition inside a decorated definition (or the node itself)."""
    if node.type == "decorated_definition":
        inner = node.child_by_field_name("definition")
        if inner is not None:
            return inner
    return node


def _decorators(node: Node) -> list[str]:
    if node.type != "decorated_definition":
        return []
    return [node_text(c).lstrip("@").strip() for c in node.children if c.type == "decorator"]


def _name(node: Node) -> str:
    return node_text(node.child_by_field_name("name"))


def _call_name(call: Node) -> str:
    return node_text(call.child_by_field_name("function"))


def top_level(root: Node) -> list[Node]:
    """Top-level statements, decorated definitions kept whole."""
    return [child for child in root.children if child.is_named]


def parameters(function: Node) -> list[str]:
    """Plain parameter names of a function (without `self`, `*args`, defaults)."""
    params = function.child_by_field_name("parameters")
    names: list[str] = []
    if params is None:
        return names
    for child in params.named_children:
        if child.type == "identifier":
            names.append(node_text(child))
        elif child.type == "typed_parameter":
            ident = next((c for c in child.named_children if c.type == "identifier"), None)
            if ident is not None:
                names.append(node_text(ident))
    return [name for name in names if name not in ("self", "cls")]


def _method(cls: Node, name: str) -> Node | None:
    body = cls.child_by_field_name("body")
    if body is None:
        return None
    for child in body.named_children:
        inner = _definition(child)
        if inner.type == "function_definition" and _name(inner) == name:
            return inner
    return None


# --- finding targets ------------------------------------------------------------------------


def find_targets(root: Node) -> list[Target]:
    """Every target in a parsed document, in source order."""
    from server.analysis import full_analysis  # built on this module's helpers

    return full_analysis(root).targets


def target_at(targets: list[Target], line: int) -> Target | None:
    """The target under a cursor: the innermost (latest-starting) one that covers it."""
    hits = [t for t in targets if t.covers(line)]
    return max(hits, key=lambda t: t.start_line) if hits else None


def find_target(root: Node, name: str) -> Target | None:
    return next((t for t in find_targets(root) if t.name == name), None)


def find_definition(root: Node, name: str, kind: str) -> Target | None:
    """The top-level class or function called `name`, whatever it is (for re-anchoring)."""
    for node in top_level(root):
        inner = _definition(node)
        if inner.type in ("class_definition", "function_definition") and _name(inner) == name:
            return _target(node, kind, [], None, None)
    return None


def _target(
    node: Node,
    kind: str,
    kernels: list[Kernel],
    missing: str | None,
    snippet: str | None,
    params: tuple[str, ...] = (),
) -> Target:
    inner = _definition(node)
    return Target(
        name=_name(inner),
        kind=kind,
        start_line=node.start_point.row,
        end_line=node.end_point.row,
        name_line=inner.start_point.row,
        start_byte=node.start_byte,
        end_byte=node.end_byte,
        kernels=tuple(kernels),
        missing=missing,
        snippet=snippet,
        params=params,
    )


def _assignment(node: Node) -> tuple[Node, Node] | None:
    """(left, right) of a top-level `name = value` statement."""
    if node.type != "expression_statement" or not node.named_children:
        return None
    inner = node.named_children[0]
    if inner.type != "assignment":
        return None
    left, right = inner.child_by_field_name("left"), inner.child_by_field_name("right")
    if left is None or right is None or left.type != "identifier":
        return None
    return left, right


def _is_load_inline(call: Node) -> bool:
    return call.type == "call" and _call_name(call).split(".")[-1] == "load_inline"


def _string_parts(node: Node) -> list[Node]:
    return [
        part
        for string in ([node] if node.type == "string" else node.named_children)
        for part in string.named_children
        if part.type == "string_content"
    ]


def _global_functions(string: Node) -> list[Kernel]:
    """`__global__` functions of a CUDA source string, at their lines in the document."""
    kernels: list[Kernel] = []
    for part in _string_parts(string):
        with _CUDA_LOCK:
            tree = _CUDA_PARSER.parse(part.text or b"")
        row = part.start_point.row
        for node in walk(tree.root_node):
            if node.type != "function_definition":
                continue
            if not any(child.type == "__global__" for child in node.children):
                continue
            declarator = node.child_by_field_name("declarator")
            while declarator is not None and declarator.type != "function_declarator":
                declarator = declarator.child_by_field_name("declarator")
            name_node = declarator.child_by_field_name("declarator") if declarator else None
            kernels.append(
                Kernel(
                    name=node_text(name_node) or "kernel",
                    language="cuda",
                    start_line=row + node.start_point.row,
                    end_line=row + node.end_point.row,
                )
            )
    return kernels


def _orphan_target(name: str, params: list[str]) -> tuple[str, str]:
    """A Triton kernel nothing launches cannot run on its own: what to add (a launcher)."""
    args = [p for p in params if not p.isupper()]
    constants = [f"{p}=..." for p in params if p.isupper()]
    snippet = (
        f"def launch_{name}({', '.join(args)}):\n"
        f"    # allocate the outputs, choose the grid and the constants, then launch {name}\n"
        f"    grid = ...  # e.g. (triton.cdiv(n_elements, BLOCK_SIZE),)\n"
        f"    {name}[grid]({', '.join(args + constants)})\n"
    )
    missing = (
        f"No Python function launches `{name}[grid](...)`: add a launcher (and get_inputs() "
        "with its arguments), then optimize the launcher."
    )
    return missing, snippet


def _missing_inputs(name: str, params: list[str], kind: str, call: str) -> tuple[str, str]:
    device = ', device="cuda"' if kind in ("triton", "cuda") else ""
    lines = ["def get_inputs():"]
    if kind == "module":
        lines.append(f"    # The inputs of {name}.forward, shaped and typed as in real use.")
    else:
        lines.append(f"    # The arguments {name} is called with, shaped and typed as in real use.")
    for param in params:
        lines.append(f"    {param} = torch.randn(...{device})  # replace ... with its shape")
    lines.append(f"    return [{', '.join(params)}]")
    missing = (
        f"Add get_inputs() to this file: kernel-agent runs {call} on the inputs it returns "
        "(it never guesses shapes)."
    )
    return missing, "\n".join(lines) + "\n"


def _missing_init(name: str, params: list[str]) -> tuple[str, str]:
    if params:
        body = (
            f"    # The arguments {name}(...) is built with: {', '.join(params)}.\n"
            f"    return [...]  # replace ... with {', '.join(params)}\n"
        )
    else:
        body = f"    return []  # {name}() takes no arguments\n"
    missing = f"Add get_init_inputs() to this file: kernel-agent builds {name}(*get_init_inputs())."
    return missing, "def get_init_inputs():\n" + body
