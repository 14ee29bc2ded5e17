"""What the triton-gemm rewrite's autotuning chose, read in the sandboxed child.

The child builds the rewritten module (compile.rewritten_model, as for torch.compile's timing),
calls it once on the example inputs, and reads each kernel's `best_config`, the winner's
benchmark time and the seconds the first call took. The parent keeps these until the verifier
has judged the candidate correct, and only then writes them to memory/tuning.py.
"""

from __future__ import annotations

from typing import Any

import torch

from agents.offline.passes.base import PassError, Program, TuningSite
from agents.offline.passes.compile import rewritten_model, timed_call
from memory.tuning import CONFIG_KEYS


def device_name(device: str) -> str:
    """The name memory/tuning.py files a choice under: the GPU's model, or "cpu"."""
    return torch.cuda.get_device_name() if device == "cuda" else "cpu"


def observe(program: Program, sites: tuple[TuningSite, ...], device: str) -> dict[str, Any]:
    """{"first_call_s": seconds of the first call (compiling and autotuning every kernel),
    "observations": one per site}, from one call of the rewritten `program.source`."""
    with rewritten_model(program, "<triton-gemm probe>") as (model, namespace):
        with torch.no_grad():
            first_call_s = timed_call(model, program.inputs, program.device)
        where = device_name(device)
        observations = [_observation(getattr(namespace, s.kernel), s, where) for s in sites]
    return {"first_call_s": round(first_call_s, 3), "observations": observations}


def _observation(tuner: Any, site: TuningSite, where: str) -> dict[str, Any]:
    """A kernel's choice, in the JSON memory.tuning.observation_from reads."""
    best = getattr(tuner, "best_config", None)
    if best is None:
        raise PassError(f"{site.kernel} has no best_config: it did not run")
    config = {k: int(v) for k, v in best.kwargs.items() if k in CONFIG_KEYS}
    config |= {"num_warps": int(best.num_warps), "num_stages": int(best.num_stages)}
    timings = getattr(tuner, "configs_timings", None) or {}
    measured = timings.get(best)  # do_bench's (median, p20, p80) in ms; absent: not tuned
    if isinstance(measured, list | tuple):
        measured = measured[0] if measured else None
    return {
        "op_signature": site.op_signature,
        "shape_class": site.shape_class,
        "device_name": where,
        "config": config,
        "time_ms": None if measured is None else round(float(measured), 5),
        "tuning_s": round(float(getattr(tuner, "bench_time", 0.0) or 0.0), 3),
        "from_memory": site.from_memory,
    }
