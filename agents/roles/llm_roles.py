"""The four roles realised by a chat model: render the prompt, call, parse, retry once.

Every call is recorded in the CostMeter under its role, retries and failed calls included,
so the cost summary accounts for every call; and every call first asks the meter for room in
the token and cost budget, which may cut its output limit or refuse it. Bad replies never
raise: the planner gives None, the executor and repairer a Candidate without source, the
summarizer a deterministic summary. `LLMError` from the model (an empty completion included)
does propagate: the search decides what a failed call means.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import ClassVar, TypeVar

from agents.llm.accounting import CostMeter
from agents.llm.base import ChatModel, ChatReply, LLMError, Message, SystemPrompt
from agents.roles import prompts
from agents.roles.base import Candidate, Plan, PlanningContext, SkillBrief, Summary
from agents.roles.extract import ExtractError, code_blocks, extract_json, extract_module

T = TypeVar("T")
_TRUNCATED = {"max_tokens", "length"}  # Anthropic's and OpenAI's stop reasons for a cut reply
_NULLS = {"", "null", "none", "n/a", "na", "-"}
TITLE_CHARS = 200
LESSON_CHARS = 800
NOTES_CHARS = 400


class ForbiddenPlanError(Exception):
    """The plan applies a skill the gate forbade; it is dropped, not retried."""


class _Default(enum.Enum):
    ROLE = "the role's own"


class _LLMRole:
    """A role's output limit and temperature default to its class's `MAX_TOKENS` and
    `TEMPERATURE`; a temperature of None sends none (the provider's default)."""

    role: ClassVar[str]
    MAX_TOKENS: ClassVar[int] = 4096
    TEMPERATURE: ClassVar[float | None] = None

    def __init__(
        self,
        model: ChatModel,
        meter: CostMeter,
        max_tokens: int | None = None,
        temperature: float | _Default | None = _Default.ROLE,
    ) -> None:
        self.model = model
        self.meter = meter
        self.max_tokens = self.MAX_TOKENS if max_tokens is None else max_tokens
        self.temperature = self.TEMPERATURE if temperature is _Default.ROLE else temperature
        self.label = model.label

    async def _chat(self, system: SystemPrompt, messages: list[Message]) -> ChatReply:
        """One call, within the budget: the meter may cut its output limit to what is left,
        or refuse it (BudgetExhaustedError). Failed calls are counted, then re-raised."""
        size = len(system.text().encode()) + sum(len(m.content.encode()) for m in messages)
        price = getattr(self.model, "price", None)  # backends that know their price
        grant = await self.meter.reserve(self.role, size, self.max_tokens, price)
        try:
            reply = await self.model.chat(
                system, messages, max_tokens=grant.max_tokens, temperature=self.temperature
            )
        except LLMError as error:
            self.meter.add_failure(self.role, error, grant)
            raise
        except BaseException:
            self.meter.release(grant)
            raise
        self.meter.add(self.role, reply, grant)
        return reply

    async def _ask(
        self, system: SystemPrompt, user: str, parse: Callable[[str], T]
    ) -> tuple[T, ChatReply]:
        """Call, parse; on ExtractError one retry with the previous reply and a correction.
        A second ExtractError propagates to the caller."""
        messages = [Message("user", user)]
        reply = await self._chat(system, messages)
        try:
            return parse(reply.text), reply
        except ExtractError as error:
            problem = str(error)
        if reply.stop_reason in _TRUNCATED:
            problem += " (the reply was cut off at the output token limit: be more compact)"
        messages += [
            Message("assistant", reply.text or "(empty reply)"),
            Message("user", prompts.correction(self.role, problem)),
        ]
        reply = await self._chat(system, messages)
        return parse(reply.text), reply


class LLMPlanner(_LLMRole):
    """Proposes one single-method plan per call (KernelSkill's one-method rule)."""

    role = "planner"
    MAX_TOKENS = 2048
    TEMPERATURE = 0.8

    async def plan(self, context: PlanningContext) -> Plan | None:
        system, user = prompts.planner_prompt(context)
        try:
            plan, _ = await self._ask(system, user, lambda text: parse_plan(text, context))
        except (ExtractError, ForbiddenPlanError):
            return None
        return plan


class _CodeRole(_LLMRole):
    """Shared by executor and repairer: the reply must hold a complete ModelNew module."""

    async def _code(self, system: SystemPrompt, user: str, plan: Plan) -> Candidate:
        """The reply's module; of several ModelNew blocks, the one that matches `plan`."""
        try:
            candidate, reply = await self._ask(
                system, user, lambda text: _module_or_raise(text, plan.text())
            )
        except ExtractError as error:
            return Candidate(None, error=str(error))
        prose = _prose(reply.text)
        candidate.notes = "; ".join(part for part in (prose, candidate.notes) if part)
        return candidate


class LLMExecutor(_CodeRole):
    """Realises a plan as a complete ModelNew module."""

    role = "executor"
    MAX_TOKENS = 8192
    TEMPERATURE = 0.3

    async def implement(self, context: PlanningContext, plan: Plan, sample: int) -> Candidate:
        system, user = prompts.executor_prompt(context, plan, sample)
        return await self._code(system, user, plan)


class LLMRepairer(_CodeRole):
    """Fixes a failed candidate from its verdict and trimmed error log."""

    role = "repairer"
    MAX_TOKENS = 8192
    TEMPERATURE = 0.2

    async def repair(
        self,
        context: PlanningContext,
        plan: Plan,
        source: str,
        verdict: str,
        log: str,
        attempt: int,
    ) -> Candidate:
        system, user = prompts.repairer_prompt(context, plan, source, verdict, log, attempt)
        return await self._code(system, user, plan)


class LLMSummarizer(_LLMRole):
    """Turns a slow/fast pair into a reusable lesson (AccelOpt's optimization memory)."""

    role = "summarizer"
    MAX_TOKENS = 1024
    TEMPERATURE = 0.2

    async def summarize(
        self, slow_source: str, fast_source: str, gain: float, plan: str, regression: bool
    ) -> Summary:
        system, user = prompts.summarizer_prompt(slow_source, fast_source, gain, plan, regression)
        reply = await self._chat(system, [Message("user", user)])
        fallback = fallback_summary(plan, gain, regression)
        try:
            data = extract_json(reply.text)
        except ExtractError:
            return fallback
        title = _one_line(data.get("title"), TITLE_CHARS) or fallback.title
        lesson = _one_line(data.get("lesson") or data.get("summary"), LESSON_CHARS)
        return Summary(title=title, lesson=lesson or fallback.lesson)


def fallback_summary(plan: str, gain: float, regression: bool) -> Summary:
    """What memory stores when the summarizer's reply is unusable: the plan's first line and a
    lesson built from the measured gain alone."""
    title = _one_line((plan.strip().splitlines() or [""])[0], TITLE_CHARS) or "Unnamed change"
    if regression:
        lesson = (
            f"Applying '{title}' made the kernel {gain:.2f}x slower; "
            "avoid it on kernels with a similar profile."
        )
    else:
        lesson = (
            f"Applying '{title}' made the kernel {gain:.2f}x faster; "
            "worth trying on kernels with a similar profile."
        )
    return Summary(title=title, lesson=lesson)


# -- parsing -----------------------------------------------------------------------------------


def parse_plan(text: str, context: PlanningContext) -> Plan:
    """The reply's plan. Raises ExtractError when there is no valid single-method plan (worth
    one retry) and ForbiddenPlanError when it applies a forbidden skill (dropped).

    The one-method heuristic: a plan is refused when `method` is a list of several entries, or
    when `method` and `skill_id` together name two or more distinct library skills (by id, or
    by title copied verbatim). Free text joined by "and" is not split: "fuse bias and ReLU
    into the epilogue" is one method.
    """
    data = extract_json(text)
    if len(data) == 1 and isinstance(next(iter(data.values())), dict):
        data = next(iter(data.values()))  # {"plan": {...}}
    data = {str(key).strip().lower(): value for key, value in data.items()}

    method = data.get("method")
    if isinstance(method, list):
        entries = [_one_line(m, TITLE_CHARS) for m in method]
        entries = [m for m in entries if m]
        if len(entries) > 1:
            raise ExtractError(
                f"the plan lists {len(entries)} methods; the one-method rule allows exactly one"
            )
        method = entries[0] if entries else ""
    skill_id = _one_line(data.get("skill_id"), TITLE_CHARS)
    skill_id = None if skill_id.lower() in _NULLS else skill_id
    method = _one_line(method, TITLE_CHARS) or (skill_id or "")
    if not method:
        raise ExtractError('the plan has no "method"')
    title = _one_line(data.get("title"), TITLE_CHARS) or method
    details = data.get("details") or ""
    if isinstance(details, list):
        details = "\n".join(str(line) for line in details)
    details = str(details).strip()

    forbidden = {s.id.lower() for s in context.forbidden_skills}
    allowed = {s.id.lower(): s.id for s in context.allowed_skills}
    named = _skills_named(method, [*context.allowed_skills, *context.forbidden_skills])
    if skill_id and (skill_id.lower() in allowed or skill_id.lower() in forbidden):
        named.add(skill_id.lower())
    if skill_id and skill_id.lower() in forbidden:
        raise ForbiddenPlanError(f"the plan applies the forbidden skill {skill_id}")
    if len(named) > 1:
        raise ExtractError(
            f"the plan names several methods ({', '.join(sorted(named))}); "
            "the one-method rule allows exactly one"
        )
    if named & forbidden:
        raise ForbiddenPlanError(f"the plan applies the forbidden skill {named.pop()}")
    if skill_id is not None:
        skill_id = allowed.get(skill_id.lower())  # an unknown id is not a library skill
    elif named:
        skill_id = allowed.get(next(iter(named)))
    return Plan(title=title, method=method, details=details, skill_id=skill_id)


def _skills_named(text: str, skills: list[SkillBrief]) -> set[str]:
    """Lowercased ids of the skills that `text` names by id (as a whole token) or by title."""
    lowered = text.lower()
    named = set()
    for skill in skills:
        token = rf"(?<![a-z0-9-]){re.escape(skill.id.lower())}(?![a-z0-9-])"
        title = skill.title.strip().lower()
        if re.search(token, lowered) or (title and title in lowered):
            named.add(skill.id.lower())
    return named


def _module_or_raise(text: str, plan: str = "") -> Candidate:
    candidate = extract_module(text, plan)
    if candidate.source is None:
        raise ExtractError(candidate.error or "the reply has no Python code block")
    return candidate


def _prose(reply: str) -> str:
    """The reply's words outside code, for the trajectory's notes."""
    text = reply
    for block in code_blocks(reply):
        text = text.replace(block.text, " ")
    text = re.sub(r"(`{3,}|~{3,})[\w+-]*", " ", text)
    return prompts.cap(" ".join(text.split()), NOTES_CHARS)


def _one_line(value: object, limit: int) -> str:
    if value is None:
        return ""
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."
