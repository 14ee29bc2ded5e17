"""Python syntax trees (tree-sitter) and what the target finder reads from their nodes.

Targets, hints and edits are found from the tree alone: no code of the user's runs. The
editor keeps each open document's tree up to date incrementally; the command line parses a
file once. Both read it through these helpers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import tree_sitter_python
from tree_sitter import Language, Node, Parser, Query, QueryCursor, Tree

from agents.targets.model import TRITON_DECORATORS

PY_LANGUAGE = Language(tree_sitter_python.language())


def new_parser() -> Parser:
    """A parser of its own for each user: tree-sitter parsers are not thread-safe."""
    return Parser(PY_LANGUAGE)


def parse_text(text: str) -> Tree:
    """A one-off parse (snapshots, rewrites, a file named on the command line); not cached."""
    return new_parser().parse(text.encode("utf-8"))


@dataclass
class Dirty:
    """Where the text or the tree changed since the analysis last looked: bytes `lo..hi` and
    rows `lo_row..hi_row` of the current text, with everything before untouched and
    everything after moved by `byte_delta` bytes and `row_delta` rows."""

    lo: int
    hi: int
    lo_row: int
    hi_row: int
    byte_delta: int = 0
    row_delta: int = 0

    def add_edit(self, start: int, old_end: int, new_end: int, rows: tuple[int, int, int]) -> None:
        """Follow one more edit (old_end and rows[1] in the text before it)."""
        start_row, old_end_row, new_end_row = rows
        delta, row_delta = new_end - old_end, new_end_row - old_end_row
        lo = self.lo if self.lo < start else start
        hi = self.hi if self.hi < start else (self.hi + delta if self.hi >= old_end else new_end)
        lo_row = self.lo_row if self.lo_row < start_row else start_row
        if self.hi_row < start_row:
            hi_row = self.hi_row
        else:
            hi_row = self.hi_row + row_delta if self.hi_row > old_end_row else new_end_row
        self.lo, self.hi = min(lo, start), max(hi, new_end)
        self.lo_row, self.hi_row = min(lo_row, start_row), max(hi_row, new_end_row)
        self.byte_delta += delta
        self.row_delta += row_delta

    def add_range(self, lo: int, hi: int, lo_row: int, hi_row: int) -> None:
        self.lo, self.hi = min(self.lo, lo), max(self.hi, hi)
        self.lo_row, self.hi_row = min(self.lo_row, lo_row), max(self.hi_row, hi_row)


def walk(node: Node) -> Iterator[Node]:
    """Every node below `node`, depth first in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


_QUERIES: dict[tuple[str, ...], Query] = {}


def descendants(node: Node, types: tuple[str, ...]) -> list[Node]:
    """The nodes of `types` at or below `node`, in `walk` order, found by a tree-sitter
    query (in C: a Python walk over a 5 MB file's nodes takes seconds)."""
    query = _QUERIES.get(types)
    if query is None:
        query = _QUERIES[types] = Query(PY_LANGUAGE, f"[{' '.join(f'({t})' for t in types)}] @n")
    found = QueryCursor(query).captures(node).get("n", [])
    found.sort(key=lambda n: (n.start_byte, -n.end_byte))
    return found


def node_text(node: Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text else ""


# --- definitions ----------------------------------------------------------------------------


def definition(node: Node) -> Node:
    """The class/function definition inside a decorated definition (or the node itself)."""
    if node.type == "decorated_definition":
        inner = node.child_by_field_name("definition")
        if inner is not None:
            return inner
    return node


def decorators(node: Node) -> list[str]:
    if node.type != "decorated_definition":
        return []
    return [node_text(c).lstrip("@").strip() for c in node.children if c.type == "decorator"]


def is_triton_kernel(node: Node) -> bool:
    """Whether a (decorated) definition is a Triton kernel: launched, never called."""
    for decorator in decorators(node):
        head = decorator.split("(")[0].strip()
        if head.split(".")[-1] in TRITON_DECORATORS and (
            head.startswith("triton.") or head in TRITON_DECORATORS
        ):
            return True
    return False


def def_name(node: Node) -> str:
    """The name of a class or function definition."""
    return node_text(node.child_by_field_name("name"))


def call_name(call: Node) -> str:
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


def method(cls: Node, name: str) -> Node | None:
    """The method `name` of a class definition."""
    body = cls.child_by_field_name("body")
    if body is None:
        return None
    for child in body.named_children:
        inner = definition(child)
        if inner.type == "function_definition" and def_name(inner) == name:
            return inner
    return None


def assignment(node: Node) -> tuple[Node, Node] | None:
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


def is_load_inline(call: Node) -> bool:
    return call.type == "call" and call_name(call).split(".")[-1] == "load_inline"
