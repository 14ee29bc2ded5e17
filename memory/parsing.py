"""`ast.parse` behind the one process-wide parse lock.

Why: on CPython 3.11, two threads in `ast.parse` at once can fail with "SystemError: AST
constructor recursion depth mismatch": the depth counter of the C-to-Python AST conversion is
per interpreter, and a garbage collection inside the conversion can run a finalizer that
switches threads. The evaluation pool runs a thread per job, each loading its task and
candidate, while the search normalises sources for memory (memory/normalize.py); a full test
run saw a candidate judged a worker failure because of it. So every parse of ours holds
PARSE_LOCK: memory's here, agents' through agents/pyast.py, which takes this same lock
(third-party parsers, e.g. TorchScript's, cannot). The lock lives in memory because memory
is the bottom layer: agents may import it, never the reverse.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

PARSE_LOCK = threading.RLock()  # re-entrant: a finalizer on this thread may parse too


def parse(source: str, filename: str = "<unknown>", mode: str = "exec", **kwargs: Any) -> Any:
    with PARSE_LOCK:
        return ast.parse(source, filename, mode, **kwargs)
