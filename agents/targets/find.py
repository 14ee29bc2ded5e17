"""What in a document can be optimised, found from the syntax tree alone (no code runs).

- `module`: an `nn.Module` subclass in a KernelBench-format file (one that defines
  `get_inputs` / `get_init_inputs`). When the file has a `Model`, it is the target.
- `triton`: the Python function that launches `@triton.jit` kernels (`kernel[grid](...)`).
- `cuda`: the Python function that calls an extension built by `load_inline(cuda_sources=...)`;
  its `__global__` kernels are found by parsing the CUDA strings with tree-sitter-cuda.

A function target is optimised against itself on the file's `get_inputs()`. When something
it needs is missing, the target says exactly what to add (`missing`, `snippet`): nothing
guesses shapes.
"""

from __future__ import annotations

from tree_sitter import Node

from agents.targets.analysis import full_analysis
from agents.targets.model import Target
from agents.targets.syntax import def_name, definition, top_level


def find_targets(root: Node) -> list[Target]:
    """Every target in a parsed document, in source order."""
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
        inner = definition(node)
        if inner.type in ("class_definition", "function_definition") and def_name(inner) == name:
            return Target(
                name=def_name(inner),
                kind=kind,
                start_line=node.start_point.row,
                end_line=node.end_point.row,
                name_line=inner.start_point.row,
                start_byte=node.start_byte,
                end_byte=node.end_byte,
            )
    return None
