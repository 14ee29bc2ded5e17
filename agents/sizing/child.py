"""Entry point of the sandboxed sizing child: load the problem, fit it, answer the sizes.

`--size fit` is resolved here once, so both of an evaluation's workers later draw the same
shapes. Any failure is one line; a trace that cannot run answers the shipped sizes and why.
"""

from __future__ import annotations

import sys
from typing import Any

from agents.sandbox.channel import finish, open_request


def main(argv: list[str]) -> None:
    request, channel = open_request(argv)
    from agents.task import SourceFile, TaskLoadError

    source = SourceFile(**request["reference"])
    try:
        channel.phase("run")
        channel.send("result", **_fit(source, request["device"]))
    except TaskLoadError as error:
        channel.send("result", error=" ".join(str(error).split()))
    except BaseException as error:  # user code may raise anything, SystemExit included
        from agents.task import describe_exception

        channel.send("result", error=describe_exception(error, source, "fitting sizes"))
    finish()


def _fit(source, device: str) -> dict[str, Any]:
    from agents.sizing.fit import budget_bytes, fit
    from agents.sizing.machine import capacity
    from agents.sizing.trace import EstimateFailed
    from agents.task import load_problem

    problem = load_problem(source)
    room = capacity(device)
    if room is None:
        return {"sizes": {}, "note": "the machine's free memory could not be read"}
    try:
        found = fit(problem, source, device, room)
    except EstimateFailed as error:
        return {"sizes": {}, "budget_bytes": budget_bytes(room), "note": str(error)}
    return {
        "sizes": {name: list(pair) for name, pair in found.sizes.items()},
        "budget_bytes": found.budget_bytes,
        "footprint": found.footprint.to_json(),
    }


if __name__ == "__main__":
    main(sys.argv[1:])
