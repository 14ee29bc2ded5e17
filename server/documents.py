"""Open documents, each with its tree-sitter tree, kept up to date incrementally.

Every feature of the server (targets, hints, code actions, lenses) reads the tree, so edits
must be cheap: each change edits the old tree (`Tree.edit`) and reparses with it, and reports
which lines it touched so that diagnostics can be moved or dropped.

Positions follow LSP: lines split at "\\n", characters counted in the negotiated position
encoding ("utf-16" by default, "utf-8" or "utf-32" when the client offers them).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from tree_sitter import Node, Parser, Tree

from agents.targets.syntax import Dirty, new_parser


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
    """One open Python document: its text, its lines, version and syntax tree.

    An edit never splits or joins the whole text in Python: the lines list is patched where
    the edit is, and the text is rebuilt by slicing (both copies run in C)."""

    def __init__(self, uri: str, text: str, version: int | None, parser: Parser | None = None):
        self.uri = uri
        self.text = text
        self.version = version
        self._parser = parser or new_parser()
        self._lines: list[str] = text.split("\n")
        self.tree: Tree = self._parser.parse(text.encode("utf-8"))
        self._dirty: Dirty | None = None
        self._reparsed = True  # the whole tree is new: analyse everything
        self._edited = False  # reparsed incrementally since the tree was last settled
        self.analysis: object | None = None  # the server's incremental analysis of it

    @property
    def lines(self) -> list[str]:
        """The text split at "\\n" (a trailing "\\r" stays on its line, as LSP counts it)."""
        return self._lines

    @property
    def root(self) -> Node:
        self._settle()
        return self.tree.root_node

    def _settle(self) -> None:
        """Make the tree the one a fresh open of this text builds. tree-sitter recovers
        from a syntax error differently when it reparses with an old tree (a class it can
        reuse whole stays a class), so an edited tree with errors is parsed again from
        scratch, once per analysis rather than per keystroke, and what that changed joins
        the dirty region. A tree without errors is the same either way."""
        if not self._edited:
            return
        self._edited = False
        if not self.tree.root_node.has_error:
            return
        fresh = self._parser.parse(self.text.encode("utf-8"))
        if self._dirty is not None:
            self._add_changed_ranges(self.tree, fresh)
        self.tree = fresh

    @property
    def source_bytes(self) -> bytes:
        return self.text.encode("utf-8")

    def line(self, number: int) -> str:
        lines = self._lines
        return lines[number] if 0 <= number < len(lines) else ""

    def _locate(self, line: int, character: int, encoding: str) -> tuple[int, int, int]:
        """(string index, row, index in the row) of an LSP position, clamped to the text."""
        lines = self._lines
        if line >= len(lines):
            row = len(lines) - 1
            return len(self.text), row, len(lines[row])
        row = max(line, 0)
        column = char_to_index(lines[row].rstrip("\r"), character, encoding)
        return sum(map(len, islice(lines, row))) + row + column, row, column

    def offset(self, line: int, character: int, encoding: str = "utf-16") -> int:
        """The string index of an LSP position (positions past the end clamp to the end)."""
        return self._locate(line, character, encoding)[0]

    def take_dirty(self) -> Dirty | bool | None:
        """What changed since the last call: a `Dirty`, None for nothing, or True when the
        tree was rebuilt whole (open, full-text change)."""
        self._settle()
        if self._reparsed:
            self._reparsed, self._dirty = False, None
            return True
        dirty, self._dirty = self._dirty, None
        return dirty

    def replace_all(self, text: str, version: int | None) -> LineEdit:
        old_count = len(self._lines)
        self.text, self.version, self._lines = text, version, text.split("\n")
        self.tree = self._parser.parse(text.encode("utf-8"))
        self._reparsed, self._dirty, self._edited = True, None, False
        return LineEdit(0, max(old_count - 1, 0), len(self._lines) - old_count)

    def apply(
        self,
        start: tuple[int, int],
        end: tuple[int, int],
        new_text: str,
        version: int | None,
        encoding: str = "utf-16",
    ) -> LineEdit:
        """Apply one ranged change: edit the old tree, then reparse incrementally."""
        start_index, start_row, start_col = self._locate(*start, encoding)
        end_index, end_row, end_col = self._locate(*end, encoding)
        if end_index < start_index:
            end_index, end_row, end_col = start_index, start_row, start_col
        old, lines = self.text, self._lines
        line_edit = _line_edit(lines, old, start_index, end_index, new_text)
        head = lines[start_row][:start_col]
        tail = lines[end_row][end_col:]
        start_byte = len(old[:start_index].encode("utf-8"))
        old_end_byte = start_byte + len(old[start_index:end_index].encode("utf-8"))
        start_point = (start_row, len(head.encode("utf-8")))
        old_end_point = (end_row, len(lines[end_row][:end_col].encode("utf-8")))
        inserted = new_text.encode("utf-8")
        new_end_byte = start_byte + len(inserted)
        if b"\n" in inserted:
            new_end_point = (
                start_row + inserted.count(b"\n"),
                len(inserted) - inserted.rfind(b"\n") - 1,
            )
        else:
            new_end_point = (start_row, start_point[1] + len(inserted))
        lines[start_row : end_row + 1] = (head + new_text + tail).split("\n")
        self.text = old[:start_index] + new_text + old[end_index:]
        self.version = version
        old_tree = self.tree
        old_tree.edit(
            start_byte=start_byte,
            old_end_byte=old_end_byte,
            new_end_byte=new_end_byte,
            start_point=start_point,
            old_end_point=old_end_point,
            new_end_point=new_end_point,
        )
        self.tree = self._parser.parse(self.text.encode("utf-8"), old_tree)
        self._edited = True
        if not self._reparsed:
            self._note_change(
                (start_byte, old_end_byte, new_end_byte),
                (start_row, end_row, new_end_point[0]),
                old_tree,
            )
        return line_edit

    def _note_change(
        self, edit: tuple[int, int, int], rows: tuple[int, int, int], old_tree: Tree
    ) -> None:
        """Widen the dirty region by an edit and by what tree-sitter says it reshaped."""
        start, old_end, new_end = edit
        if self._dirty is None:
            self._dirty = Dirty(start, new_end, rows[0], rows[2], new_end - old_end, 0)
            self._dirty.row_delta = rows[2] - rows[1]
        else:
            self._dirty.add_edit(start, old_end, new_end, rows)
        self._add_changed_ranges(old_tree, self.tree)

    def _add_changed_ranges(self, old_tree: Tree, new_tree: Tree) -> None:
        assert self._dirty is not None
        for changed in old_tree.changed_ranges(new_tree):
            self._dirty.add_range(
                changed.start_byte,
                changed.end_byte,
                changed.start_point.row,
                changed.end_point.row,
            )


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
