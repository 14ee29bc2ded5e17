"""Where things are for the client: a line and index as an LSP position in the client's
encoding, the file behind a document URI, and a snippet appended at a document's end."""

from __future__ import annotations

from pathlib import Path

from lsprotocol import types
from pygls.uris import to_fs_path

from agents.targets.edits import TextChange
from server.documents import Document, index_to_char


def position(doc: Document, line: int, index: int, encoding: str) -> types.Position:
    """A string index on a line of `doc`, clamped to the line, as an LSP position."""
    text = doc.line(line).rstrip("\r") if line < len(doc.lines) else ""
    return types.Position(line=line, character=index_to_char(text, min(index, len(text)), encoding))


def text_edit_range(lines: list[str], change: TextChange, encoding: str) -> types.Range:
    """The range a change replaces, in the client's encoding (the text may not be open)."""

    def pos(line: int, index: int) -> types.Position:
        text = lines[line].rstrip("\r") if line < len(lines) else ""
        return types.Position(
            line=line, character=index_to_char(text, min(index, len(text)), encoding)
        )

    return types.Range(start=pos(*change.start), end=pos(*change.end))


def fs_path(uri: str) -> str | None:
    """The file behind `uri`, or None when it names no file."""
    try:
        return to_fs_path(uri)
    except Exception:
        return None


def read_disk(uri: str) -> str | None:
    """The saved text of `uri` (for a document that is not open), or None."""
    path = fs_path(uri)
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def insertion_edit(doc: Document, snippet: str, encoding: str) -> types.WorkspaceEdit:
    """`snippet` appended at the end of `doc`, after the blank lines PEP 8 wants."""
    last = len(doc.lines) - 1
    text = doc.line(last)
    prefix = "\n" * (3 if text.strip() else 2) if doc.text else ""
    end = position(doc, last, len(text), encoding)
    return types.WorkspaceEdit(
        changes={
            doc.uri: [
                types.TextEdit(
                    range=types.Range(start=end, end=end),
                    new_text=prefix + snippet.rstrip("\n"),
                )
            ]
        }
    )
