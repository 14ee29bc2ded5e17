"""The executor and repairer through the real SDK on loopback: which of several ModelNew
blocks they take (the one that defines the class and matches the plan), and that their
prompts carry the profile's facts (hot lines, bound, measured ceilings), end to end through
`kernel-agent optimize` with the profiler on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from agents.llm.accounting import CostMeter
from agents.llm.config import LLMConfig
from agents.llm.factory import make_chat_model
from agents.roles.base import Plan, PlanningContext
from agents.roles.extract import extract_module
from agents.roles.llm_roles import LLMExecutor, LLMRepairer
from tests.conftest import CANDIDATES, ROOT
from tests.llm_server import ScriptedLLMServer, ScriptedReply, ScriptedRequest

PROBLEM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
PLANTED = (ROOT / "examples" / "gemm_divide_sum_scale_new.py").read_text()
ORIGINAL = (CANDIDATES / "gemm_sum_same.py").read_text()
PLAN = Plan(
    title="Sum the weight rows before the GEMM",
    method="reduce-before-gemm",
    details="sum(x @ W.T, dim=1) equals x @ W.sum(0): do a matrix-vector product.",
)
# The implementation first, then the unchanged kernel "for comparison": the last block is
# not the answer here.
TWO_VERSIONS = (
    f"The rewrite:\n\n```python\n{PLANTED}```\n\n"
    f"For comparison, the kernel before the change:\n\n```python\n{ORIGINAL}```\n"
)


def test_of_two_modelnew_blocks_the_one_matching_the_plan_wins():
    assert extract_module(TWO_VERSIONS).source == ORIGINAL  # no plan: the later one
    chosen = extract_module(TWO_VERSIONS, PLAN.text())
    assert chosen.source is not None and "self.weight.sum(dim=0)" in chosen.source
    assert "matches the plan" in chosen.notes


def test_a_block_that_defines_the_class_wins_over_one_that_only_aliases_it():
    alias = ORIGINAL.replace("class ModelNew", "class Fast") + "\n\nModelNew = Fast\n"
    reply = f"```python\n{PLANTED}```\nOr shorter:\n```python\n{alias}```"
    chosen = extract_module(reply)
    assert chosen.source is not None and "class ModelNew" in chosen.source
    assert "ModelNew = Fast" not in chosen.source


def context() -> PlanningContext:
    return PlanningContext(
        PROBLEM.read_text(),
        PROBLEM.read_text(),
        1.0,
        "cpu",
        profile_summary="hot line 20: `torch.sum(x)`; memory-bound; measured ceilings: 40 GB/s",
    )


async def test_executor_and_repairer_take_the_block_that_matches_the_plan_via_the_sdk():
    reply = ScriptedReply(TWO_VERSIONS, input_tokens=2000, output_tokens=600)
    with ScriptedLLMServer(lambda _request: reply) as server:
        config = LLMConfig(backend="openai", base_url=server.openai_url, api_key="sk-x")
        model = make_chat_model(config)
        meter = CostMeter()
        try:
            written = await LLMExecutor(model, meter).implement(context(), PLAN, 0)
            fixed = await LLMRepairer(model, meter).repair(
                context(), PLAN, ORIGINAL, "incorrect", "max abs error 3.2", 1
            )
        finally:
            await model.aclose()
    for candidate in (written, fixed):
        assert candidate.source is not None and "self.weight.sum(dim=0)" in candidate.source
    # both prompts carried the profile's facts, not only the device's name
    for request in server.requests:
        user = request.messages[-1][1]
        assert "measured ceilings: 40 GB/s" in user and "memory-bound" in user


def role_of(request: ScriptedRequest) -> str:
    match = re.search(r"# kernel-agent role: (\w+)", request.system)
    assert match
    return match[1]


def test_the_search_gives_the_executor_the_profile_it_measured(tmp_path):
    plan = {"title": PLAN.title, "method": PLAN.method, "details": PLAN.details}
    answers = {
        "planner": f"```json\n{json.dumps(plan)}\n```",
        "executor": f"```python\n{PLANTED}```",
        "repairer": f"```python\n{PLANTED}```",
        "summarizer": '```json\n{"title": "t", "lesson": "l"}\n```',
    }
    with ScriptedLLMServer(lambda r: ScriptedReply(answers[role_of(r)])) as server:
        done = subprocess.run(
            [
                *(sys.executable, "-m", "agents", "optimize", str(PROBLEM), "--llm", "anthropic"),
                *("--base-url", server.anthropic_url, "--beam", "1", "--plans", "1"),
                *("--samples", "1", "--iters", "1", "--no-memory", "--no-jail", "--threads", "1"),
                *("--timing-budget", "1.0", "--output", str(tmp_path / "out.py"), "--json"),
            ],
            capture_output=True,
            text=True,
            timeout=400,
            cwd=ROOT,
            env={**os.environ, "ANTHROPIC_API_KEY": "sk-test"},
        )
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    (executor,) = [r for r in requests if role_of(r) == "executor"]
    user = executor.messages[-1][1]
    section = user.split("## Profile of the kernel to change", 1)[1].split("## Plan", 1)[0]
    assert "measured ceilings: memory" in section and "GB/s" in section
    assert re.search(r"(memory|compute|overhead)-bound", section)
    assert "torch.matmul" in section or "torch.sum" in section  # a hot line of the problem
