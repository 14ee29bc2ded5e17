"""Entry point of the sandboxed rewrite: load the kernel, run one pass, answer with source.

Passes instantiate and trace user code, so they run here, never in the parent. The answer is
the new module's source (or why there is none); the parent hands it to `evaluate` like any
candidate.
"""

from __future__ import annotations

import sys
import time
import traceback
from typing import Any

from agents.sandbox.channel import finish, open_request


def main(argv: list[str]) -> None:
    request, channel = open_request(argv)
    try:
        answer = _rewrite(request, channel)
        channel.send("result", **answer)
    except BaseException as error:  # user code may raise anything, SystemExit included
        channel.send("result", source=None, summary=_describe(error))
    finish()


def _rewrite(request: dict[str, Any], channel) -> dict[str, Any]:
    import torch

    from agents.offline.fx.tracing import apply_general_first
    from agents.offline.passes.base import PassError, Program
    from agents.offline.registry import get_pass
    from agents.task import (
        SourceFile,
        apply_size,
        build_model,
        call_factory,
        load_module,
        load_problem,
    )

    device = request["device"]
    torch.set_num_threads(int(request["threads"]))
    reference = SourceFile(**request["reference"])
    problem = load_problem(reference)
    apply_size(problem, request.get("size", "default"), reference)
    torch.manual_seed(int(request.get("seed", 0)))
    init_inputs = call_factory(problem.get_init_inputs, reference, "get_init_inputs")
    source = request["source"]
    class_name = request["class_name"]
    if class_name == "Model":
        model_class = problem.model_class
    else:
        module = load_module(SourceFile(source, "<current kernel>"), "kernel_agent_current")
        model_class = getattr(module, class_name)
    model = build_model(model_class, init_inputs, reference)
    if hasattr(model, "to"):
        model = model.to(device)
    inputs = [
        _to_device(v, device) for v in call_factory(problem.get_inputs, reference, "get_inputs")
    ]
    channel.phase("run")
    tuning: dict[str, dict[str, int]] = {}
    if request.get("tuning"):
        from agents.offline.passes.triton_gemm_tuning import device_name
        from memory.tuning import for_device

        tuning = for_device(request["tuning"], device_name(device))
    program = Program(
        source=source,
        class_name=class_name,
        module=model,
        inputs=inputs,
        init_inputs=init_inputs,
        device=device,
        tuning=tuning,
    )
    rewrite_pass = get_pass(request["pass"])
    started = time.perf_counter()
    try:
        rewrite = apply_general_first(rewrite_pass, program)
    except PassError as error:
        return {"source": None, "summary": str(error)}
    answer: dict[str, Any] = {
        "source": rewrite.source,
        "summary": rewrite.summary,
        "changes": rewrite.changes,
        "method": rewrite.method,
        "pass_s": round(time.perf_counter() - started, 3),
    }
    if rewrite.source is not None and request["pass"] in ("torch-compile", "compile-epilogue"):
        from agents.offline.passes.compile import measure_compile_s

        # Inductor's compile is a build (tens of seconds on a busy CPU, past the 60 s run
        # limit under load): the build's wall clock, as the verifier gives the same compile.
        channel.phase("build")
        new_program = Program(rewrite.source, "ModelNew", None, inputs, init_inputs, device)
        answer["compile_s"] = round(measure_compile_s(new_program), 2)
    if rewrite.source is not None and rewrite.tuning_sites and device == "cuda":
        # Compiling and autotuning every kernel is a build: its own wall clock (build's),
        # not what is left of the pass's run phase.
        channel.phase("build")
        answer["tuning"] = _tuning(rewrite, inputs, init_inputs, device)
    return answer


def _tuning(rewrite, inputs: list[Any], init_inputs: list[Any], device: str) -> dict[str, Any]:
    """What the rewrite's autotuned kernels chose on their first call (the parent remembers
    it once the candidate is verified); a failure here costs the memory, not the rewrite."""
    from agents.offline.passes.base import Program
    from agents.offline.passes.triton_gemm_tuning import observe

    new_program = Program(rewrite.source, "ModelNew", None, inputs, init_inputs, device)
    try:
        return observe(new_program, rewrite.tuning_sites, device)
    except Exception as error:  # the verifier will judge the candidate; this is only memory
        return {"error": _describe(error)}


def _to_device(value: Any, device: str) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list | tuple):
        return type(value)(_to_device(v, device) for v in value)
    return value


def _describe(error: BaseException) -> str:
    frames = traceback.extract_tb(error.__traceback__)
    where = f" (line {frames[-1].lineno})" if frames else ""
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}{where}"


if __name__ == "__main__":
    main(sys.argv[1:])
