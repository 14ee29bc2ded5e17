"""Entry point of the sandboxed reviewer: read the request, review, report the verdict."""

from __future__ import annotations

import sys
from dataclasses import asdict

from agents.sandbox.channel import finish, open_request


def main(argv: list[str]) -> None:
    raw, channel = open_request(argv)
    from agents.task import SourceFile
    from agents.verify.reviewer import Reviewer, ReviewReport, ReviewRequest
    from agents.verify.verdict import Verdict

    request = ReviewRequest(
        reference=SourceFile(**raw.pop("reference")),
        candidate=SourceFile(**raw.pop("candidate")),
        **raw,
    )
    try:
        report = Reviewer(request, phase=channel.phase).run()
    except BaseException as error:  # the harness itself must still answer
        report = ReviewReport(
            verdict=Verdict.RUNTIME_ERROR,
            reasons=[f"harness error: {type(error).__name__}: {error}"],
        )
    payload = asdict(report)
    payload["verdict"] = report.verdict.value
    channel.send("result", report=payload)
    finish()


if __name__ == "__main__":
    main(sys.argv[1:])
