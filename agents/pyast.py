"""`ast.parse` behind one process-wide lock (why: memory/parsing.py).

Every parse of agents goes through here. The lock is memory's, so that memory's parses and
agents' never overlap (memory/ travels wherever agents/ does: agents.sandbox.jail's
SHIPPED_PACKAGES).
"""

from __future__ import annotations

import ast
from typing import Any

from memory.parsing import PARSE_LOCK as _LOCK


def parse(source: str, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any) -> Any:
    with _LOCK:
        return ast.parse(source, filename, mode, **kwargs)


def literal_eval(node_or_string: str | ast.AST) -> Any:
    """`ast.literal_eval`, with a string parsed under the lock."""
    if isinstance(node_or_string, str):
        node_or_string = parse(node_or_string.lstrip(" \t"), mode="eval")
    return ast.literal_eval(node_or_string)
