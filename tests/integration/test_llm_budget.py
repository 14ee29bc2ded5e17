"""Budgets hold before each model call: the meter's room check (in process, and through the
real SDK, where the call's max_tokens is cut to what is left), and `kernel-agent optimize`
against a scripted model on loopback that repeats its plan or never stops proposing, with the
token counts a real server would report for the prompts it was sent."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from agents.llm.accounting import CostMeter, Grant
from agents.llm.base import BudgetExhaustedError, ChatReply, Usage
from agents.llm.config import LLMConfig
from agents.llm.factory import make_chat_model
from agents.llm.pricing import Price
from agents.roles import prompts
from agents.roles.base import PlanningContext
from agents.roles.llm_roles import LLMPlanner
from agents.search.budget import Budget, BudgetTracker
from tests.conftest import CANDIDATES, ROOT
from tests.llm_server import ScriptedLLMServer, ScriptedReply, ScriptedRequest

PROBLEM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
FAST = ("--no-profile", "--no-jail", "--no-memory", "--threads", "1", "--timing-budget", "0.3")
OPTIMIZE = (sys.executable, "-m", "agents", "optimize", str(PROBLEM))
PLANNER_OUTPUT = 2048  # LLMPlanner's max_tokens: the most one planning call may add
SAME = (CANDIDATES / "gemm_sum_same.py").read_text()


def reply(text: str, request: ScriptedRequest) -> ScriptedReply:
    """Tokens as a server counts them: about 3 bytes per prompt token, and no more output
    than the request's max_tokens allows."""
    prompt = len(request.system.encode()) + sum(len(t.encode()) for _, t in request.messages)
    output = min(max(1, len(text) // 3), int(request.body.get("max_tokens") or 10**9))
    return ScriptedReply(text, input_tokens=prompt // 3, output_tokens=output)


class Model:
    """A scripted model: the planner's plan comes from `plan(n)` for its n-th call; the
    executor always writes the same correct (not faster) kernel."""

    def __init__(self, plan: Callable[[int], dict]) -> None:
        self.plan = plan
        self.calls: Counter[str] = Counter()
        self.lock = threading.Lock()

    def __call__(self, request: ScriptedRequest) -> ScriptedReply:
        role = re.search(r"# kernel-agent role: (\w+)", request.system)[1]  # type: ignore[index]
        with self.lock:
            n = self.calls[role]
            self.calls[role] += 1
        if role == "planner":
            return reply(f"```json\n{json.dumps(self.plan(n))}\n```", request)
        if role in ("executor", "repairer"):
            return reply(f"```python\n{SAME}```", request)
        return reply('```json\n{"title": "t", "lesson": "l"}\n```', request)


def same_plan(_n: int) -> dict:
    return {"title": "Rename the intermediates", "method": "cleanup", "details": "Keep ops."}


def new_plan(n: int) -> dict:
    words = ("tile", "vectorize", "unroll", "fuse", "reorder", "prefetch", "pack", "split")
    return {
        "title": f"Plan {n}: {words[n % len(words)]} loop nest {n * 7919}",
        "method": f"method-{n}-{words[(n * 3) % len(words)]}",
        "details": f"Variant {n}.",
    }


def optimize(model: Model, *args: str) -> dict:
    with ScriptedLLMServer(model) as server, tempfile.TemporaryDirectory() as out:
        output = ("--output", str(Path(out) / "fast.py"))  # never next to the problem
        url = ("--base-url", server.openai_url)
        done = subprocess.run(
            [*OPTIMIZE, "--llm", "openai", *url, "--json", *output, *FAST, *args],
            capture_output=True,
            text=True,
            timeout=400,
            cwd=ROOT,
            env={**os.environ, "OPENAI_API_KEY": "sk-test"},
        )
        requests = list(server.requests)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    report["requests"] = requests
    return report


# --- the CLI ----------------------------------------------------------------------------------


def test_a_model_that_repeats_its_plan_stops_within_the_caps():
    """The reported case: --max-evals 4 --max-tokens 60000 with the search's LLM defaults."""
    model = Model(same_plan)
    report = optimize(model, "--max-evals", "4", "--max-tokens", "60000")
    assert report["iterations"] <= 2  # round 1 made the plan, round 2 saw only repeats
    assert model.calls["planner"] <= 2 * 4  # no round plans more than 4 evaluations can judge
    assert "repeated" in report["stopped_because"] or "budget" in report["stopped_because"]
    assert report["tokens"] <= 60_000 + PLANNER_OUTPUT
    assert report["cost"]["roles"]["planner"]["calls"] == model.calls["planner"]


def test_repeats_end_planning_one_round_after_they_start():
    model = Model(same_plan)
    report = optimize(model, "--plans", "3", "--beam", "2", "--samples", "1")
    assert report["iterations"] == 2
    assert report["stopped_because"].startswith("the planner only repeated plans already tried")
    # round 1: 3 calls for the reference; round 2: 3 for each of the two kept kernels
    assert model.calls["planner"] == 3 + 6
    assert len(report["trajectory"]) == 1  # the plan's kernel, judged once


def test_the_token_cap_holds_across_parallel_calls():
    """A planner that never runs out of new plans and 12 x 2 calls at once: the meter
    lets a call start only when its prompt and output fit in what is left."""
    model = Model(new_plan)
    # Room for a round of planner calls and some executor calls: a planner prompt lists every
    # skill the gate allows (about 2.7k tokens here since the e-graph is always offered).
    cap = 40_000
    report = optimize(model, "--max-tokens", str(cap), "--iters", "3")
    assert "token budget spent" in report["stopped_because"]
    assert "--max-tokens" in report["stopped_because"]
    assert report["tokens"] <= cap + PLANNER_OUTPUT
    assert report["tokens"] > cap // 2  # the budget was used, not refused from the start
    # the candidates written before the cap was reached are still judged: that costs no tokens
    assert report["evaluations"] >= 1


def test_the_cost_cap_refuses_a_call_that_cannot_fit_before_making_it():
    model = Model(same_plan)
    report = optimize(model, "--max-cost", "0.000001")  # gpt-oss-120b: $0.15 per M input
    assert report["requests"] == []
    assert report["stopped_because"].startswith("cost budget spent")
    assert "--max-cost" in report["stopped_because"]


def test_a_cost_cap_on_a_model_without_a_price_is_a_one_line_usage_error():
    url = "http://127.0.0.1:9/v1"  # nothing listens: the check comes before any call
    done = subprocess.run(
        [
            *OPTIMIZE,
            "--llm",
            "openai",
            "--base-url",
            url,
            "--model",
            "my-finetune",
            "--max-cost",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "--max-cost cannot be held: no price known for my-finetune" in done.stderr
    assert '[prices."my-finetune"]' in done.stderr


# --- the meter, in process --------------------------------------------------------------------


async def test_the_output_limit_is_cut_to_what_is_left():
    meter = CostMeter()
    meter.set_limits(10_000, None)
    meter.add("executor", ChatReply("x", usage=Usage(8_000, 500)))
    grant = await meter.reserve("planner", 300, 2048)
    assert grant.max_tokens == 10_000 - 8_500 - meter.estimate_prompt_tokens(300)
    assert grant.max_tokens < 2048


async def test_a_call_that_cannot_fit_is_refused_and_the_search_is_told_why():
    meter = CostMeter()
    tracker = BudgetTracker(Budget(max_tokens=10_000), meter)
    meter.add("executor", ChatReply("x", usage=Usage(9_500, 300)))
    assert tracker.exhausted() is None
    with pytest.raises(BudgetExhaustedError, match="token budget spent: 9,800 of 10,000"):
        await meter.reserve("planner", 300, 2048)
    assert "too few left for another planner call" in (tracker.exhausted() or "")


async def test_a_call_waits_while_calls_in_flight_hold_the_room_it_needs():
    meter = CostMeter()
    meter.set_limits(6_000, None)
    first = await meter.reserve("planner", 2_000, 2048)
    second = asyncio.ensure_future(meter.reserve("planner", 2_000, 2048))
    await asyncio.sleep(0.1)
    assert not second.done()  # 2 x (2,064 + 2,048) does not fit in 6,000
    meter.add("planner", ChatReply("x", usage=Usage(600, 100)), first)
    grant = await asyncio.wait_for(second, 2)
    assert grant.max_tokens == 2048
    # the first call taught the meter the prompt's real size: later estimates shrink
    assert meter.estimate_prompt_tokens(2_000) < 2_064


async def test_the_cost_cap_cuts_output_by_the_models_price():
    meter = CostMeter()
    meter.set_limits(None, 0.05)
    price = Price(input=1.0, output=10.0, cache_read=0.1, cache_write=1.25)
    grant = await meter.reserve("executor", 1_000, 8192, price)
    prompt = meter.estimate_prompt_tokens(1_000)  # priced at the dearer cache-write rate
    assert grant.max_tokens == int((0.05 - prompt * 1.25e-6) / 10e-6) < 8192
    assert grant.cost_usd <= 0.05


async def test_failed_calls_are_counted_with_their_tokens():
    meter = CostMeter()
    grant = Grant(100)
    meter.add("planner", ChatReply("ok", usage=Usage(10, 5)), grant)
    meter.add_failure("planner", BudgetExhaustedError("x", usage=Usage(7, 0), attempts=2))
    data = meter.to_json()
    assert data["calls"] == 2 and data["failed_calls"] == 1
    assert data["roles"]["planner"]["retries"] == 1 and data["tokens"] == 22


async def test_the_request_carries_the_cut_output_limit_through_the_sdk():
    context = PlanningContext("code", "code", 1.0, "cpu")
    system, user = prompts.planner_prompt(context)
    meter = CostMeter()
    prompt = meter.estimate_prompt_tokens(len(system.text().encode()) + len(user.encode()))
    meter.set_limits(3_000 + prompt + 1_000, None)  # room for 1,000 output tokens
    meter.add("executor", ChatReply("x", usage=Usage(3_000, 0)))
    plan = '```json\n{"title": "Fuse", "method": "fusion"}\n```'
    with ScriptedLLMServer(lambda request: reply(plan, request)) as server:
        config = LLMConfig(backend="anthropic", base_url=server.anthropic_url, api_key="sk-x")
        model = make_chat_model(config)
        try:
            assert (await LLMPlanner(model, meter).plan(context)) is not None
        finally:
            await model.aclose()
    (request,) = server.requests
    assert request.body["max_tokens"] == 1_000
    assert meter.total_tokens <= 3_000 + prompt + 1_000
