"""Entry point of the sandboxed profiler: load the problem, profile its forward, answer.

The request carries the ceilings the parent measured (the jail cannot write their cache).
Any failure is answered with one line naming the user's file and line where possible.
"""

from __future__ import annotations

import sys
from typing import Any

from agents.sandbox.channel import finish, open_request


class _Stage:
    """What the child is doing, for the one-line error if user code fails there."""

    name = "starting"


def main(argv: list[str]) -> None:
    request, channel = open_request(argv)
    from agents.task import SourceFile

    source = SourceFile(**request["reference"])
    stage = _Stage()
    try:
        profile = _profile(request, source, channel, stage)
        channel.send("result", profile=profile.to_json())
    except BaseException as error:  # user code may raise anything, SystemExit included
        from agents.sizing.check import TooLarge

        too_large = isinstance(error, TooLarge)  # refused before any real tensor
        channel.send("result", error=_describe(error, source, stage.name), too_large=too_large)
    finish()


def _profile(request: dict[str, Any], source, channel, stage: _Stage):
    import torch

    from agents.profile.profiler import profile_model
    from agents.profile.report import Ceilings
    from agents.sizing.check import refuse_if_too_big
    from agents.sizing.footprint import PROFILE_FACTOR
    from agents.task import apply_size, build_model, call_factory, load_problem

    device = request["device"]
    threads = int(request["threads"])
    torch.set_num_threads(threads)
    stage.name = "loading the problem"
    problem = load_problem(source)
    apply_size(problem, request.get("size", "default"), source)
    stage.name = "estimating its memory on the meta device"
    once = (PROFILE_FACTOR, PROFILE_FACTOR)  # only the reference, in this one process
    refuse_if_too_big(problem, source, device, request.get("size", "default"), once)
    torch.manual_seed(0)
    init_inputs = call_factory(problem.get_init_inputs, source, "get_init_inputs")
    model = build_model(problem.model_class, init_inputs, source)
    stage.name = "moving Model to the device"
    if hasattr(model, "to"):
        model = model.to(device)
    channel.phase("run")

    def make_inputs() -> list[Any]:
        stage.name = "calling get_inputs()"
        values = call_factory(problem.get_inputs, source, "get_inputs")
        stage.name = "profiling Model.forward"
        return [_to_device(value, device) for value in values]

    return profile_model(
        model,
        make_inputs,
        source_path=source.label,
        device=device,
        ceilings=Ceilings.from_json(request["ceilings"]),
        repeat=int(request.get("repeat", 5)),
        size=request.get("size", "default"),
        threads=threads,
        source_text=source.text,
    )


def _to_device(value: Any, device: str) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list | tuple):
        return type(value)(_to_device(item, device) for item in value)
    return value


def _describe(error: BaseException, source, stage: str) -> str:
    from agents.task import TaskLoadError, describe_exception

    if isinstance(error, TaskLoadError):
        return " ".join(str(error).split())
    return describe_exception(error, source, stage)


if __name__ == "__main__":
    main(sys.argv[1:])
