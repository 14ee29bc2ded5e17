"""`ast.parse` behind one process-wide lock.

Why: on CPython 3.11, two threads in `ast.parse` at once can fail with "SystemError: AST
constructor recursion depth mismatch": the depth counter of the C-to-Python AST conversion is
per interpreter, and a garbage collection inside the conversion can run a finalizer that
switches threads. The evaluation pool runs a thread per job, each loading its task and
candidate; a full test run saw a candidate judged a worker failure because of it. Every parse
of ours goes through here (third-party parsers, e.g. TorchScript's, cannot).
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_LOCK = threading.RLock()  # re-entrant: a finalizer on this thread may parse too


def parse(source: str, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any) -> Any:
    with _LOCK:
        return ast.parse(source, filename, mode, **kwargs)


def literal_eval(node_or_string: str | ast.AST) -> Any:
    """`ast.literal_eval`, with a string parsed under the lock."""
    if isinstance(node_or_string, str):
        node_or_string = parse(node_or_string.lstrip(" \t"), mode="eval")
    return ast.literal_eval(node_or_string)
