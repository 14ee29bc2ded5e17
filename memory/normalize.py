"""Canonical source text, so that memory treats cosmetic rewrites of a kernel as the same kernel.

Agents often hand back the same code with new comments, a new docstring or black's line
breaks. Hashing the normalised text lets the memory and the logbook spot those repeats.
"""

from __future__ import annotations

import hashlib
import io
import re
import tokenize

from memory.parsing import parse

_SKIPPED = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
_C_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_SPACES = re.compile(r"[ \t\f\v]+")
_TRIPLE = ('"""', "'''")


def normalized_source(code: str) -> str:
    """The code without comments, docstrings, blank lines and cosmetic whitespace.

    Python is rewritten from its tokens: one logical line per output line, indentation as
    four spaces a level, tokens separated by one space. Triple-quoted strings that are not
    docstrings (CUDA/C++ source for `load_inline`) lose their C comments and per-line
    indentation. Text that is not valid Python falls back to whitespace collapsing only.
    """
    try:
        parse(code)
        return _python_normalized(code)
    except (SyntaxError, ValueError, tokenize.TokenError, IndentationError):
        return _whitespace_normalized(code)


def source_hash(code: str) -> str:
    """sha256 (hex) of the normalised text: equal for sources that differ only cosmetically."""
    return hashlib.sha256(normalized_source(code).encode("utf-8")).hexdigest()


def _python_normalized(code: str) -> str:
    lines: list[str] = []
    current: list[str] = []
    only_strings = True
    depth = 0

    def flush() -> None:
        nonlocal current, only_strings
        # A statement made only of string literals is a docstring (or dead text): drop it.
        if current and not only_strings:
            lines.append("    " * depth + " ".join(current))
        current, only_strings = [], True

    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        kind = token.type
        if kind in _SKIPPED:
            continue
        if kind == tokenize.INDENT:
            depth += 1
        elif kind == tokenize.DEDENT:
            depth -= 1
        elif kind in (tokenize.NEWLINE, tokenize.ENDMARKER):
            flush()
        elif kind == tokenize.STRING:
            current.append(_string_normalized(token.string))
        else:
            current.append(token.string)
            only_strings = False
    flush()
    return "\n".join(lines)


def _string_normalized(literal: str) -> str:
    """Embedded C/C++/CUDA source in triple quotes: drop C comments and cosmetic whitespace."""
    body_start = next((i for i, c in enumerate(literal) if c in "\"'"), 0)
    if not literal[body_start:].startswith(_TRIPLE):
        return literal
    quote = literal[body_start : body_start + 3]
    body = literal[body_start + 3 : -3]
    body = _C_COMMENT.sub("", body)
    return literal[:body_start] + quote + _whitespace_normalized(body) + quote


def _whitespace_normalized(text: str) -> str:
    lines = (_SPACES.sub(" ", line).strip() for line in text.splitlines())
    return "\n".join(line for line in lines if line)
