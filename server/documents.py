"""Open documents, each with its tree-sitter tree, kept up to date incrementally.

Every feature of the server (targets, hints, code actions, lenses) reads the tree, so edits
must be cheap: each change edits the old tree (`Tree.edit`) and reparses with it, and reports
which lines it touched so that diagnostics can be moved or dropped.

Positions follow LSP: lines split at "\\n", characters counted in the negotiated position
encoding ("utf-16" by default, "utf-8" or "utf-32" when the client offers them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import tree_sitter_python
from tree_sitter import Language, Node, Parser, Tree

PY_LANGUAGE = Language(tree_sitter_python.language())


def new_parser() -> Parser:
    """A parser of its own for each user: tree-sitter parsers are not thread-safe."""
    return Parser(PY_LANGUAGE)


@dataclass(frozen=True)
class LineEdit:
    """What one change did to the lines: old lines `changed_from..changed_to` (0-based,
    inclusive; empty when from > to) had their text edited, lines after them moved by
    `delta`. Inserting or deleting whole lines edits no surviving line: they only move."""

    changed_from: int
    changed_to: int
    delta: int

    def map_line(self, line: int) -> int | None:
        """Where old `line` is after the change, or None when its text was edited."""
        if line < self.changed_from:
            return line
        if line > self.changed_to:
            return line + self.delta
        return None


def char_to_index(line: str, character: int, encoding: str = "utf-16") -> int:
    """An LSP character offset on `line` → a Python string index (clamped to the line)."""
    if character <= 0:
        return 0
    if encoding == "utf-32" or line.isascii():
        return min(character, len(line))
    units = 0
    for index, char in enumerate(line):
        if units >= character:
            return index
        code = ord(char)
        if encoding == "utf-8":
            units += 1 if code < 0x80 else 2 if code < 0x800 else 3 if code < 0x10000 else 4
        else:
            units += 2 if code > 0xFFFF else 1
    return len(line)


def index_to_char(line: str, index: int, encoding: str = "utf-16") -> int:
    """A Python string index on `line` → an LSP character offset."""
    prefix = line[:index]
    if encoding == "utf-32" or prefix.isascii():
        return len(prefix)
    if encoding == "utf-8":
        return len(prefix.encode("utf-8"))
    return len(prefix.encode("utf-16-le")) // 2


def byte_col_to_char(line: str, byte_col: int, encoding: str = "utf-16") -> int:
    """A tree-sitter column (bytes into the UTF-8 line) → an LSP character offset."""
    if line.isascii():
        return byte_col
    prefix = line.encode("utf-8")[:byte_col].decode("utf-8", "replace")
    return index_to_char(prefix, len(prefix), encoding)


class Document:
    """One open Python document: its text, version and syntax tree."""

    def __init__(self, uri: str, text: str, version: int | None, parser: Parser | None = None):
        self.uri = uri
        self.text = text
        self.version = version
        self._parser = parser or new_parser()
        self._lines: list[str] | None = None
        self.tree: Tree = self._parser.parse(text.encode("utf-8"))

    @property
    def lines(self) -> list[str]:
        """The text split at "\\n" (a trailing "\\r" stays on its line, as LSP counts it)."""
        if self._lines is None:
            self._lines = self.text.split("\n")
        return self._lines

    @property
    def root(self) -> Node:
        return self.tree.root_node

    @property
    def source_bytes(self) -> bytes:
        return self.text.encode("utf-8")

    def line(self, number: int) -> str:
        lines = self.lines
        return lines[number] if 0 <= number < len(lines) else ""

    def offset(self, line: int, character: int, encoding: str = "utf-16") -> int:
        """The string index of an LSP position (positions past the end clamp to the end)."""
        lines = self.lines
        if line >= len(lines):
            return len(self.text)
        start = sum(len(text) + 1 for text in lines[:line])
        text = lines[line].rstrip("\r")
        return start + char_to_index(text, character, encoding)

    def replace_all(self, text: str, version: int | None) -> LineEdit:
        old_count = len(self.lines)
        self.text, self.version, self._lines = text, version, None
        self.tree = self._parser.parse(text.encode("utf-8"))
        return LineEdit(0, max(old_count - 1, 0), len(self.lines) - old_count)

    def apply(
        self,
        start: tuple[int, int],
        end: tuple[int, int],
        new_text: str,
        version: int | None,
        encoding: str = "utf-16",
    ) -> LineEdit:
        """Apply one ranged change: edit the old tree, then reparse incrementally."""
        start_index = self.offset(*start, encoding)
        end_index = max(self.offset(*end, encoding), start_index)
        old = self.text
        lines = self.lines
        start_byte = len(old[:start_index].encode("utf-8"))
        old_end_byte = start_byte + len(old[start_index:end_index].encode("utf-8"))
        start_point = _point(old, start_index)
        old_end_point = _point(old, end_index)
        inserted = new_text.encode("utf-8")
        new_end_byte = start_byte + len(inserted)
        if b"\n" in inserted:
            new_end_point = (
                start_point[0] + inserted.count(b"\n"),
                len(inserted) - inserted.rfind(b"\n") - 1,
            )
        else:
            new_end_point = (start_point[0], start_point[1] + len(inserted))
        line_edit = _line_edit(lines, old, start_index, end_index, new_text)
        self.text = old[:start_index] + new_text + old[end_index:]
        self.version = version
        self._lines = None
        self.tree.edit(
            start_byte=start_byte,
            old_end_byte=old_end_byte,
            new_end_byte=new_end_byte,
            start_point=start_point,
            old_end_point=old_end_point,
            new_end_point=new_end_point,
        )
        self.tree = self._parser.parse(self.text.encode("utf-8"), self.tree)
        return line_edit


def _line_edit(lines: list[str], text: str, start: int, end: int, new_text: str) -> LineEdit:
    """Which old lines a change edits: a line whose text survives whole only moves."""
    start_row = text.count("\n", 0, start)
    end_row = start_row + text.count("\n", start, end)
    start_col = start - (text.rfind("\n", 0, start) + 1)
    end_col = end - (text.rfind("\n", 0, end) + 1)
    at_eol = start_col >= len(lines[start_row].rstrip("\r"))
    end_at_eol = end_col >= len(lines[end_row].rstrip("\r"))
    keep_end = end_col == 0 and (
        new_text.endswith("\n") or (not new_text and start_col == 0 and end_row > start_row)
    )
    keep_start = at_eol and (
        new_text.startswith("\n") or (not new_text and end_at_eol and end_row > start_row)
    )
    if keep_end and start_row == end_row:
        keep_start = False
    return LineEdit(
        changed_from=start_row + (1 if keep_start else 0),
        changed_to=end_row - (1 if keep_end else 0),
        delta=new_text.count("\n") - (end_row - start_row),
    )


def _point(text: str, index: int) -> tuple[int, int]:
    """(row, byte column) of a string index, as tree-sitter counts them."""
    row = text.count("\n", 0, index)
    line_start = text.rfind("\n", 0, index) + 1
    return row, len(text[line_start:index].encode("utf-8"))


class DocumentStore:
    """The open documents by URI. Lives on the event loop thread only."""

    def __init__(self) -> None:
        self._docs: dict[str, Document] = {}
        self._parser = new_parser()

    def open(self, uri: str, text: str, version: int | None) -> Document:
        doc = Document(uri, text, version, self._parser)
        self._docs[uri] = doc
        return doc

    def get(self, uri: str) -> Document | None:
        return self._docs.get(uri)

    def close(self, uri: str) -> None:
        self._docs.pop(uri, None)

    def __contains__(self, uri: str) -> bool:
        return uri in self._docs

    def uris(self) -> list[str]:
        return list(self._docs)


def parse_text(text: str) -> Tree:
    """A one-off parse (snapshots, rewrites); not cached."""
    return new_parser().parse(text.encode("utf-8"))


def walk(node: Node) -> Iterator[Node]:
    """Every node below `node`, depth first in source order."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(current.children))


def node_text(node: Node | None) -> str:
    return node.text.decode("utf-8", "replace") if node is not None and node.text else ""
