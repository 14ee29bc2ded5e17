"""The child's side of the sandbox protocol: read the request, answer on the result pipe.

Every sandboxed entry point (the reviewer, the profiler, the benchmark) starts with
`open_request(argv)`. The request file is deleted as soon as it is read, before any user code
is imported, and its nonce tags every message, so printing cannot forge an answer.
"""

from __future__ import annotations

import json
import os
from typing import Any


class ResultChannel:
    """Nonce-tagged JSON lines on a pipe the parent reads."""

    def __init__(self, fd: int, nonce: str, gate_fd: int | None = None):
        self._fd = fd
        self._nonce = nonce
        self._gate_fd = gate_fd
        os.set_inheritable(fd, False)
        if gate_fd is not None:
            os.set_inheritable(gate_fd, False)

    def send(self, kind: str, **payload: Any) -> None:
        line = json.dumps({"kind": kind, **payload}, default=str)
        data = f"{self._nonce} {line}\n".encode()
        while data:
            written = os.write(self._fd, data)
            data = data[written:]

    def phase(self, name: str) -> None:
        """Phases switch the parent's wall clock: `build` before user code, then `run`.
        `measure` also waits for the parent's go-ahead, so timings do not overlap."""
        self.send("phase", phase=name)
        if name == "measure" and self._gate_fd is not None:
            os.read(self._gate_fd, 1)  # empty on EOF: the parent is gone, go on and be killed


def open_request(argv: list[str]) -> tuple[dict[str, Any], ResultChannel]:
    """argv is [request path, result fd, gate fd], as `agents.sandbox.process.run_child`
    passes them (the gate fd is optional for older callers)."""
    request_path, result_fd = argv[0], int(argv[1])
    gate_fd = int(argv[2]) if len(argv) > 2 else None
    with open(request_path, encoding="utf-8") as file:
        request = json.load(file)
    os.unlink(request_path)
    channel = ResultChannel(result_fd, request.pop("nonce"), gate_fd)
    channel.phase("build")
    return request, channel


def finish() -> None:
    """Exit at once: a candidate's atexit hooks or lingering threads cannot change the answer."""
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
