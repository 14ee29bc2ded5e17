"""LLM roles against a scripted in-process model: prompts, parsing, retries, accounting."""

from __future__ import annotations

import json
import re

import pytest

from agents.llm.accounting import CostMeter
from agents.llm.base import ChatReply, LLMError, Message, SystemPrompt, Usage
from agents.roles import prompts
from agents.roles.base import Plan, PlanningContext, SkillBrief
from agents.roles.extract import ExtractError
from agents.roles.llm_roles import (
    LLMExecutor,
    LLMPlanner,
    LLMRepairer,
    LLMSummarizer,
    fallback_summary,
    parse_plan,
)

TASK = """\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.relu(x * self.weight) + 1.0


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return [16]
"""

MODULE = """\
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        return torch.relu(x * self.weight).add_(1.0)
"""

FUSE = SkillBrief(
    id="torch-fused-activations",
    title="Use fused activation kernels",
    strategy="Replace chains of pointwise ops with one fused op.",
    pitfalls=("Keep the reference dtype.",),
    why="pointwise ops are hot and memory-bound",
)
COMPILE = SkillBrief(
    id="torch-compile-fusion",
    title="Let torch.compile fuse the pointwise chain",
    strategy="Wrap forward in torch.compile.",
    why="pointwise chain found",
)
GRAPHS = SkillBrief(
    id="torch-cuda-graphs", title="Capture with CUDA graphs", why="launches are few"
)
PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


class ScriptedModel:
    """A ChatModel that answers from a queue and records what it was asked."""

    def __init__(self, *replies: str | ChatReply | Exception) -> None:
        self.replies = list(replies)
        self.calls: list[tuple[SystemPrompt, list[Message], int, float | None]] = []

    @property
    def label(self) -> str:
        return "scripted:test"

    async def chat(
        self,
        system: SystemPrompt,
        messages: list[Message],
        *,
        max_tokens: int = 4096,
        temperature: float | None = None,
    ) -> ChatReply:
        self.calls.append((system, list(messages), max_tokens, temperature))
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if isinstance(reply, ChatReply):
            return reply
        return ChatReply(text=reply, usage=Usage(100, 20), cost_usd=0.01, model="scripted")

    async def aclose(self) -> None:
        return None


def context(**changes) -> PlanningContext:
    values = dict(
        task_source=TASK,
        candidate_source=TASK,
        candidate_speedup=1.0,
        device="cuda",
        profile_summary="total 1.2 ms; memory-bound; 31% of peak\nline 11: relu 70%",
        allowed_skills=[FUSE, COMPILE],
        forbidden_skills=[GRAPHS],
        lessons=["[positive: 1.50x faster] Fuse pointwise chains when memory-bound."],
        recent_attempts=["incorrect: Use half precision"],
        avoid_plans=["Use half precision [precision]"],
        applied_methods=[],
        seed=0,
    )
    values.update(changes)
    return PlanningContext(**values)


def plan_json(**fields) -> str:
    data = {
        "title": "Fuse the ReLU and the add",
        "method": "torch-fused-activations",
        "skill_id": "torch-fused-activations",
        "details": "Use one fused op.",
    }
    data.update(fields)
    return f"Reasoning.\n```json\n{json.dumps(data)}\n```"


PLAN = Plan(title="Fuse the ReLU and the add", method="torch-fused-activations")


# -- templates and prompt rendering ------------------------------------------------------------


@pytest.mark.parametrize("role", ["planner", "executor", "repairer", "summarizer"])
def test_every_template_starts_with_its_role_marker(role):
    template = prompts.load_template(role)
    assert template.system.splitlines()[0] == f"# kernel-agent role: {role}"
    assert "=== " not in template.system
    assert template.user


def rendered_prompts() -> dict[str, tuple[SystemPrompt, str]]:
    ctx = context(candidate_source=MODULE, candidate_speedup=1.3)
    return {
        "planner": prompts.planner_prompt(ctx),
        "executor": prompts.executor_prompt(ctx, PLAN, 1),
        "repairer": prompts.repairer_prompt(ctx, PLAN, MODULE, "incorrect", "max error 3e-2", 2),
        "summarizer": prompts.summarizer_prompt(TASK, MODULE, 1.3, PLAN.text(), False),
    }


@pytest.mark.parametrize("role", ["planner", "executor", "repairer", "summarizer"])
def test_rendered_prompts_route_on_the_marker_and_fill_every_placeholder(role):
    system, user = rendered_prompts()[role]
    assert system.static.startswith(f"# kernel-agent role: {role}\n")
    assert system.dynamic == ""
    assert not PLACEHOLDER.search(user), PLACEHOLDER.findall(user)


def test_planner_static_part_holds_the_skills_and_stays_the_same_across_calls():
    first, user = prompts.planner_prompt(context(seed=0))
    other, _ = prompts.planner_prompt(
        context(seed=7, lessons=["another lesson"], candidate_source=MODULE)
    )
    assert first.static == other.static  # cacheable
    static = first.static
    assert static.index("# kernel-agent role: planner") < static.index("## Allowed skills")
    for text in (FUSE.id, FUSE.title, FUSE.strategy, FUSE.pitfalls[0], FUSE.why, COMPILE.id):
        assert text in static
    forbidden = static[static.index("## Forbidden skills") :]
    assert GRAPHS.id in forbidden and GRAPHS.why in forbidden
    assert FUSE.strategy not in user  # not sent twice


def test_planner_user_message_carries_profile_lessons_attempts_and_avoid_list():
    ctx = context(candidate_source=MODULE, candidate_speedup=1.25, applied_methods=["a", "b"])
    _, user = prompts.planner_prompt(ctx)
    for text in (ctx.profile_summary, ctx.lessons[0], ctx.recent_attempts[0], ctx.avoid_plans[0]):
        assert text in user
    assert "1.25x" in user
    assert "a -> b" in user
    assert "class Model(nn.Module)" in user and "class ModelNew(nn.Module)" in user


def test_task_source_is_omitted_when_the_candidate_is_the_reference():
    _, user = prompts.planner_prompt(context())
    assert user.count("def get_init_inputs") == 1
    assert "identical to the kernel above" in user


def test_prompt_rendering_caps_long_sections_with_a_visible_marker():
    huge = MODULE + "\n".join(f"# filler line {i}" for i in range(20_000))
    ctx = context(
        candidate_source=huge,
        profile_summary="p" * 50_000,
        lessons=[f"lesson {i} " + "x" * 2_000 for i in range(40)],
        avoid_plans=[f"plan {i}" for i in range(100)],
    )
    _, user = prompts.planner_prompt(ctx)
    assert len(user) < prompts.CODE_CHARS + prompts.TASK_CHARS + 30_000
    assert re.search(r"\[\.\.\. \d+ chars cut\]", user)
    assert "[... 24 more cut]" in user  # 40 lessons, 16 kept
    assert "[... 80 more cut]" in user  # 100 plans to avoid, the last 20 kept
    assert "plan 99" in user and "plan 0\n" not in user
    assert "class ModelNew" in user  # the head of the code survives


def test_cap_marks_how_much_was_cut():
    text = "\n".join(f"line {i}" for i in range(1_000))
    capped = prompts.cap(text, 200, "middle")
    cut = int(re.search(r"\[\.\.\. (\d+) chars cut\]", capped)[1])
    kept = capped.replace(f"[... {cut} chars cut]", "").replace("\n\n", "\n")
    assert cut + len(kept) == pytest.approx(len(text), abs=4)
    assert capped.startswith("line 0") and capped.endswith("line 999")
    assert prompts.cap("short", 10) == "short"


def test_trim_log_keeps_the_first_traceback_lines_and_the_tail():
    log = (
        "building...\n" * 300
        + "Traceback (most recent call last):\n  File x.py, line 3\n"
        + "noise\n" * 2_000
        + "RuntimeError: shape mismatch\n"
    )
    trimmed = prompts.trim_log(log, 4_000)
    assert len(trimmed) < 4_200
    assert "Traceback (most recent call last):\n  File x.py, line 3" in trimmed
    assert trimmed.endswith("RuntimeError: shape mismatch")
    assert trimmed.startswith("[... ") and "chars cut]" in trimmed


def test_code_fence_outgrows_backticks_inside_the_code():
    fenced = prompts.code_fence('doc = """```python\\nx\\n```"""')
    assert fenced.startswith("````python\n") and fenced.endswith("\n````")


# -- planner -----------------------------------------------------------------------------------


async def test_planner_parses_the_plan_and_records_the_call():
    model, meter = ScriptedModel(plan_json()), CostMeter()
    planner = LLMPlanner(model, meter, max_tokens=1000, temperature=0.5)
    plan = await planner.plan(context())
    assert plan == Plan(
        title="Fuse the ReLU and the add",
        method="torch-fused-activations",
        details="Use one fused op.",
        skill_id="torch-fused-activations",
    )
    system, messages, max_tokens, temperature = model.calls[0]
    assert system.static.startswith("# kernel-agent role: planner")
    assert [m.role for m in messages] == ["user"]
    assert (max_tokens, temperature) == (1000, 0.5)
    assert meter.by_role["planner"].calls == 1
    assert meter.total_cost_usd == pytest.approx(0.01)
    assert planner.label == "scripted:test"


async def test_planner_retries_once_with_a_correction():
    model = ScriptedModel("I would fuse things.", plan_json())
    meter = CostMeter()
    plan = await LLMPlanner(model, meter).plan(context())
    assert plan is not None and plan.skill_id == "torch-fused-activations"
    _, messages, _, _ = model.calls[1]
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    assert messages[1].content == "I would fuse things."
    assert messages[2].content.startswith("Your reply had no valid plan JSON: ")
    assert meter.by_role["planner"].calls == 2


async def test_planner_gives_up_after_the_retry():
    model = ScriptedModel("no plan", "still no plan")
    assert await LLMPlanner(model, CostMeter()).plan(context()) is None
    assert len(model.calls) == 2


@pytest.mark.parametrize(
    "fields",
    [
        {"skill_id": "torch-cuda-graphs", "method": "graphs"},
        {"skill_id": None, "method": "torch-cuda-graphs"},
        {"skill_id": None, "method": "Capture with CUDA graphs"},
    ],
)
async def test_a_plan_applying_a_forbidden_skill_is_dropped_without_retry(fields):
    model = ScriptedModel(plan_json(**fields), plan_json())
    assert await LLMPlanner(model, CostMeter()).plan(context()) is None
    assert len(model.calls) == 1


@pytest.mark.parametrize(
    "fields",
    [
        {"method": ["torch-fused-activations", "torch-compile-fusion"]},
        {"method": "torch-fused-activations and torch-compile-fusion", "skill_id": None},
        {"method": "torch-compile-fusion", "skill_id": "torch-fused-activations"},
    ],
)
def test_a_plan_with_several_methods_is_refused(fields):
    with pytest.raises(ExtractError, match="one-method rule"):
        parse_plan(plan_json(**fields), context())


async def test_a_multi_method_plan_is_retried_then_kept_when_fixed():
    model = ScriptedModel(plan_json(method=["a", "b"]), plan_json())
    plan = await LLMPlanner(model, CostMeter()).plan(context())
    assert plan is not None and plan.method == "torch-fused-activations"
    assert "one-method rule" in model.calls[1][1][2].content


def test_plan_parsing_is_lenient_where_it_is_safe():
    ctx = context()
    free = parse_plan(
        plan_json(method="Fuse bias and ReLU into the epilogue", skill_id="null"), ctx
    )
    assert free.skill_id is None and free.method == "Fuse bias and ReLU into the epilogue"
    by_method = parse_plan(plan_json(skill_id=None, method="torch-compile-fusion"), ctx)
    assert by_method.skill_id == "torch-compile-fusion"
    unknown = parse_plan(plan_json(skill_id="made-up-skill", method="tile it"), ctx)
    assert unknown.skill_id is None
    wrapped = parse_plan('{"plan": {"Title": "T", "method": "m", "details": ["a", "b"]}}', ctx)
    assert (wrapped.title, wrapped.details) == ("T", "a\nb")
    untitled = parse_plan('{"method": "tile the loop"}', ctx)
    assert untitled.title == "tile the loop"


# -- executor and repairer ---------------------------------------------------------------------


async def test_executor_extracts_the_module():
    model, meter = (
        ScriptedModel(f"Fused.\n```python\n{MODULE}```\nDone: one op fewer."),
        CostMeter(),
    )
    candidate = await LLMExecutor(model, meter).implement(context(), PLAN, 0)
    assert candidate.source == MODULE
    assert "one op fewer" in candidate.notes
    system, messages, _, _ = model.calls[0]
    assert system.static.startswith("# kernel-agent role: executor")
    assert FUSE.strategy in messages[0].content  # the applied skill's notes
    assert "independent sample" not in messages[0].content
    assert meter.by_role["executor"].calls == 1


async def test_executor_later_samples_are_nudged_to_vary():
    model = ScriptedModel(f"```python\n{MODULE}```")
    await LLMExecutor(model, CostMeter()).implement(context(), PLAN, 1)
    assert "independent sample 2" in model.calls[0][1][0].content


async def test_executor_retries_once_when_the_reply_has_no_code():
    cut = ChatReply(text="Let me think about the tiling", stop_reason="max_tokens")
    model, meter = ScriptedModel(cut, f"```python\n{MODULE}```"), CostMeter()
    candidate = await LLMExecutor(model, meter).implement(context(), PLAN, 0)
    assert candidate.source == MODULE
    correction = model.calls[1][1][2].content
    assert correction.startswith("Your reply had no usable module: the reply has no Python code")
    assert "cut off at the output token limit" in correction
    assert meter.by_role["executor"].calls == 2


async def test_executor_returns_the_error_after_the_retry():
    model = ScriptedModel("no code", "```python\nimport torch\n```")
    candidate = await LLMExecutor(model, CostMeter()).implement(context(), PLAN, 0)
    assert candidate.source is None
    assert candidate.error.startswith("the reply has no ModelNew class")


async def test_repairer_sees_verdict_attempt_and_trimmed_log():
    log = "Traceback (most recent call last):\n" + "frame\n" * 5_000 + "IndexError: out of range"
    model, meter = ScriptedModel(f"Off by one.\n```python\n{MODULE}```"), CostMeter()
    repairer = LLMRepairer(model, meter)
    candidate = await repairer.repair(context(), PLAN, MODULE, "runtime_error", log, 2)
    assert candidate.source == MODULE
    system, messages, _, _ = model.calls[0]
    user = messages[0].content
    assert system.static.startswith("# kernel-agent role: repairer")
    assert "Repair attempt 2." in user and "Verdict: runtime_error" in user
    assert "IndexError: out of range" in user and "chars cut]" in user
    assert len(user) < len(MODULE) + len(TASK) + prompts.LOG_CHARS + 3_000
    assert meter.by_role == {"repairer": meter.by_role["repairer"]}


# -- summarizer --------------------------------------------------------------------------------


async def test_summarizer_parses_title_and_lesson():
    data = '{"title": "Fuse pointwise chains", "lesson": "Fusing pays when memory-bound."}'
    reply = f"```json\n{data}\n```"
    model, meter = ScriptedModel(reply), CostMeter()
    summary = await LLMSummarizer(model, meter).summarize(TASK, MODULE, 1.4, PLAN.text(), False)
    assert (summary.title, summary.lesson) == (
        "Fuse pointwise chains",
        "Fusing pays when memory-bound.",
    )
    system, messages, _, _ = model.calls[0]
    assert system.static.startswith("# kernel-agent role: summarizer")
    user = messages[0].content
    assert "An improvement" in user and "1.40x" in user
    assert user.index("## Slow kernel") < user.index("class Model(") < user.index("## Fast kernel")
    assert meter.by_role["summarizer"].calls == 1


async def test_summarizer_tells_a_regression_apart():
    model = ScriptedModel('{"title": "t", "lesson": "Do not split fused kernels."}')
    await LLMSummarizer(model, CostMeter()).summarize(MODULE, TASK, 1.3, PLAN.text(), True)
    assert "A regression" in model.calls[0][1][0].content
    assert "what NOT to do" in model.calls[0][1][0].content


@pytest.mark.parametrize("reply", ["I think it got faster.", '{"title": "only a title"}', ""])
async def test_summarizer_falls_back_instead_of_raising(reply):
    model = ScriptedModel(reply)
    summary = await LLMSummarizer(model, CostMeter()).summarize(
        TASK, MODULE, 2.0, "Fuse it\nx", False
    )
    assert summary.lesson == fallback_summary("Fuse it\nx", 2.0, False).lesson
    assert summary.title in ("Fuse it", "only a title")
    assert "2.00x faster" in summary.lesson
    assert "slower" in fallback_summary("Split it", 1.5, True).lesson


async def test_model_errors_propagate():
    model = ScriptedModel(LLMError("rate limited for good"))
    with pytest.raises(LLMError):
        await LLMPlanner(model, CostMeter()).plan(context())


async def test_meter_adds_up_every_role():
    meter = CostMeter()
    model = ScriptedModel(
        plan_json(),
        f"```python\n{MODULE}```",
        f"```python\n{MODULE}```",
        '{"title":"t","lesson":"l"}',
    )
    await LLMPlanner(model, meter).plan(context())
    await LLMExecutor(model, meter).implement(context(), PLAN, 0)
    await LLMRepairer(model, meter).repair(context(), PLAN, MODULE, "incorrect", "err", 1)
    await LLMSummarizer(model, meter).summarize(TASK, MODULE, 1.2, "p", False)
    report = meter.to_json()
    assert set(report["roles"]) == {"planner", "executor", "repairer", "summarizer"}
    assert report["cost_usd"] == pytest.approx(0.04)
    assert report["input_tokens"] == 400 and report["output_tokens"] == 80
