"""An offline pass's child under the sandbox's wall clocks (agents/offline/child.py): the
torch-compile pass's compile is a build, so a short run limit no longer kills it (issue 34:
"the torch-compile pass crashed: no answer" under load, where Inductor's compile of the
demo's example took 31 s at a load of 10, past the pass's 60 s run limit once busier); and a
child cut by a limit says which one, never "crashed: no answer"."""

from __future__ import annotations

import asyncio

from agents.evaluate import EvalOptions
from agents.offline.roles import OfflineExecutor
from agents.roles.base import Candidate, Plan, PlanningContext
from agents.sandbox.process import Limits
from agents.task import SourceFile
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "gemm_divide_sum_scale.py"


def run_pass(name: str, limits: Limits) -> Candidate:
    reference = SourceFile.from_path(EXAMPLE)
    executor = OfflineExecutor(reference, EvalOptions(threads=1, limits=limits))
    context = PlanningContext(
        task_source=reference.text,
        candidate_source=reference.text,
        candidate_speedup=1.0,
        device="cpu",
    )
    return asyncio.run(executor.implement(context, Plan(title=name, method=name), 0))


def test_the_torch_compile_pass_compiles_on_the_build_clock_not_the_run_clock():
    candidate = run_pass("torch-compile", Limits(run_timeout_s=3, build_timeout_s=300))
    assert candidate.error == ""
    assert candidate.source is not None and "torch.compile" in candidate.source
    assert "torch.compile took" in candidate.notes


def test_a_pass_cut_by_its_wall_clock_names_the_limit():
    candidate = run_pass("torch-compile", Limits(build_timeout_s=0.5))
    assert candidate.source is None
    assert candidate.error == "the torch-compile pass ran past its 0.5 s build limit"
