"""Entry point of the sandboxed child: read the request, review, report over the result pipe.

The result pipe is a file descriptor the parent opened; stdout and stderr are only kept as
logs. Every message carries a nonce that the child reads from its request file and deletes
before any user code is imported, so printing cannot forge a verdict.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict
from typing import Any


class ResultChannel:
    """Nonce-tagged JSON lines on a pipe the parent reads."""

    def __init__(self, fd: int, nonce: str):
        self._fd = fd
        self._nonce = nonce
        os.set_inheritable(fd, False)

    def send(self, kind: str, **payload: Any) -> None:
        line = json.dumps({"kind": kind, **payload}, default=str)
        data = f"{self._nonce} {line}\n".encode()
        while data:
            written = os.write(self._fd, data)
            data = data[written:]


def main(argv: list[str]) -> int:
    request_path, result_fd = argv[0], int(argv[1])
    with open(request_path, encoding="utf-8") as file:
        raw = json.load(file)
    os.unlink(request_path)
    channel = ResultChannel(result_fd, raw.pop("nonce"))
    os.environ.pop("KERNEL_AGENT_REQUEST", None)
    channel.send("phase", phase="build")
    from agents.task import SourceFile
    from agents.verify.reviewer import Reviewer, ReviewRequest
    from agents.verify.verdict import Verdict

    request = ReviewRequest(
        reference=SourceFile(**raw.pop("reference")),
        candidate=SourceFile(**raw.pop("candidate")),
        **raw,
    )
    try:
        report = Reviewer(request, phase=lambda name: channel.send("phase", phase=name)).run()
    except BaseException as error:  # the harness itself must still answer
        from agents.verify.reviewer import ReviewReport

        report = ReviewReport(
            verdict=Verdict.RUNTIME_ERROR,
            reasons=[f"harness error: {type(error).__name__}: {error}"],
        )
    payload = asdict(report)
    payload["verdict"] = report.verdict.value
    channel.send("result", report=payload)
    sys.stdout.flush()
    sys.stderr.flush()
    # Exit at once: a candidate's atexit hooks or lingering threads must not change the answer.
    os._exit(0)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
