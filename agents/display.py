"""How the CLI lays text out: the width it writes to, titles shortened at a word, counts.

Why: rich falls back to 80 columns whenever its stream is not a terminal, so a profile or a
table piped to a file or a CI log was wrapped mid-row; progress lines cut plan titles
mid-word and left a parenthesis open ("... structured matmuls (of"); and counts read
"1 evaluations". Every command formats through these helpers so that each fix holds
everywhere. Only the standard library is imported at module level: the CLI imports this
before it knows which command runs, and `kernel-agent --help` must stay fast.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

WIDE = 4096
"""The width for a stream that is not a terminal (and no COLUMNS): wide enough that no row
of ours is wrapped, so a log keeps one table row per line."""

_OPENERS = {"(": ")", "[": "]", "{": "}"}
_CLOSERS = {value: key for key, value in _OPENERS.items()}
_TRAILING = " ,;:-–—·/|&+=(["


def output_width(stream: IO[str]) -> int:
    """COLUMNS when the user set it; else the terminal's width on a tty; else WIDE."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        is_tty = stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        is_tty = False
    if is_tty:
        return shutil.get_terminal_size().columns
    return WIDE


def make_console(*, stderr: bool = False, quiet: bool = False) -> Console:
    """A rich Console for stdout (or stderr) at `output_width`: a terminal's own width, and no
    wrapping at 80 columns when the output goes to a pipe or a file."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, width=output_width(stream), quiet=quiet)


def plural(count: int, word: str, many: str | None = None) -> str:
    """A count in words: "1 evaluation", "2 evaluations"; `many` for irregular plurals."""
    if count == 1:
        return f"{count} {word}"
    return f"{count} {many or word + 's'}"


def format_ms(value: float) -> str:
    """Milliseconds to four significant digits ("0.03124", "12.35", "1234"), so a speedup is
    seen to follow from the two times printed beside it, even for microsecond kernels."""
    if value <= 0 or not math.isfinite(value):
        return f"{value:g}"
    if value >= 1000:
        return f"{value:.0f}"
    decimals = 3 - math.floor(math.log10(value))
    return f"{value:.{decimals}f}"


def shorten(text: str, limit: int) -> str:
    """`text` on one line in at most `limit` characters: cut at the end of a word, never
    inside an open parenthesis or bracket (the cut goes back before it), with "…" when
    anything was cut. A single word longer than `limit` is the only thing cut mid-word."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    if limit < 2:
        return "…"[:limit]
    cut = text[: limit - 1]  # room for the ellipsis
    if text[len(cut)] != " " and " " in cut:
        cut = cut[: cut.rfind(" ")]  # drop the partial word
    opened = _first_unclosed(cut)
    if opened is not None:
        cut = cut[:opened]
    cut = cut.rstrip(_TRAILING)
    if not cut:  # nothing before the bracket: cut the word itself
        cut = text[: limit - 1].rstrip(_TRAILING)
        return _close(cut, limit)
    return cut + "…"


def _first_unclosed(text: str) -> int | None:
    """Index of the outermost opening bracket that `text` leaves open, or None."""
    stack: list[int] = []
    for index, char in enumerate(text):
        if char in _OPENERS:
            stack.append(index)
        elif char in _CLOSERS and stack and text[stack[-1]] == _CLOSERS[char]:
            stack.pop()
    return stack[0] if stack else None


def _close(cut: str, limit: int) -> str:
    """`cut` + "…" + the closers its open brackets need, within `limit` characters."""
    while True:
        stack = []
        for char in cut:
            if char in _OPENERS:
                stack.append(_OPENERS[char])
            elif char in _CLOSERS and stack and stack[-1] == char:
                stack.pop()
        closers = "".join(reversed(stack))
        if len(cut) + 1 + len(closers) <= limit or not cut:
            return cut + "…" + closers
        cut = cut[:-1].rstrip(_TRAILING)
