"""`ast.parse` behind one process-wide lock (why: memory/parsing.py).

Every parse of agents goes through here. The lock is memory's, so that memory's parses and
agents' never overlap; a sandboxed child and a Ray worker are shipped agents/ alone, and there
no code of memory parses, so a lock of their own is the same guarantee.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

try:
    from memory.parsing import PARSE_LOCK as _LOCK
except ModuleNotFoundError:  # only agents/ is on this process's path
    _LOCK = threading.RLock()  # re-entrant: a finalizer on this thread may parse too


def parse(source: str, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any) -> Any:
    with _LOCK:
        return ast.parse(source, filename, mode, **kwargs)


def literal_eval(node_or_string: str | ast.AST) -> Any:
    """`ast.literal_eval`, with a string parsed under the lock."""
    if isinstance(node_or_string, str):
        node_or_string = parse(node_or_string.lstrip(" \t"), mode="eval")
    return ast.literal_eval(node_or_string)
