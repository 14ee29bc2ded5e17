"""Prompt templates (agents/prompts/<role>.md) and the rendering of what each role sees.

A template file is the role's static system text, then sections each opened by a line
`=== name ===`: `user` (the per-call message, with `{placeholders}`) and optionally
`correction` (the one retry message, with `{error}`). The system text starts with
`# kernel-agent role: <role>` so scripted test servers can route on it. The planner's gated
skills go into the static system part too: they are stable for a task, so the provider's
prompt cache can serve them; everything that changes per call goes into the user message.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Literal

from agents.llm.base import SystemPrompt
from agents.roles.base import Plan, PlanningContext, SkillBrief

ROLE_MARKER = "# kernel-agent role: {role}"
_SECTION = re.compile(r"^=== (\w+) ===[ \t]*$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")

# Caps, in characters, so that one huge input cannot crowd out the rest of a prompt.
CODE_CHARS = 40_000
TASK_CHARS = 20_000
PROFILE_CHARS = 4_000
PLAN_CHARS = 3_000
LOG_CHARS = 4_000
LESSONS = (16, 500)  # (items, chars each)
ATTEMPTS = (12, 240)
AVOID = (20, 300)
APPLIED_CHARS = 1_000
SKILL_STRATEGY_CHARS = 1_200
SKILL_NOTE_CHARS = 300  # each pitfall, each reason
NONE = "(none)"


@dataclass(frozen=True)
class PromptTemplate:
    role: str
    system: str
    user: str
    correction: str = ""

    def render_user(self, **values: str) -> str:
        return fill(self.user, **values)

    def render_correction(self, error: str) -> str:
        return fill(self.correction, error=error)


@functools.cache
def load_template(role: str) -> PromptTemplate:
    """The role's template, read once from package data; a malformed file fails loudly."""
    text = resources.files("agents").joinpath(f"prompts/{role}.md").read_text(encoding="utf-8")
    parts = _SECTION.split(text)
    sections = {"system": parts[0]}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        sections[name] = body
    marker = ROLE_MARKER.format(role=role)
    if not sections["system"].startswith(marker + "\n") or "user" not in sections:
        raise ValueError(f"prompts/{role}.md must start with '{marker}' and have a user section")
    return PromptTemplate(
        role=role,
        system=sections["system"].strip() + "\n",
        user=sections["user"].strip("\n") + "\n",
        correction=sections.get("correction", "").strip(),
    )


def fill(template: str, **values: str) -> str:
    """Replace `{name}` placeholders in one pass (values are not rescanned); other braces, as
    in JSON examples, stay. A placeholder without a value is a bug, so it raises KeyError."""

    def value(match: re.Match[str]) -> str:
        return values[match[1]]

    return _PLACEHOLDER.sub(value, template)


def cap(text: str, limit: int, keep: Literal["head", "tail", "middle"] = "head") -> str:
    """`text` cut to about `limit` characters at line breaks, with a visible
    `[... N chars cut]` marker where the text was cut."""
    if len(text) <= limit:
        return text
    if keep == "head":
        head, tail = _head(text, limit), ""
    elif keep == "tail":
        head, tail = "", _tail(text, limit)
    else:
        head, tail = _head(text, limit // 2), _tail(text, limit - limit // 2)
    marker = f"[... {len(text) - len(head) - len(tail)} chars cut]"
    return "\n".join(part for part in (head.rstrip("\n"), marker, tail.lstrip("\n")) if part)


def _head(text: str, n: int) -> str:
    if len(text) <= n:
        return text
    cut = text.rfind("\n", 0, n + 1)
    return text[: cut + 1] if cut > n // 2 else text[:n]


def _tail(text: str, n: int) -> str:
    if len(text) <= n:
        return text
    start = len(text) - n
    cut = text.find("\n", start)
    return text[cut + 1 :] if 0 <= cut < start + n // 2 else text[start:]


def cap_items(
    items: Sequence[str], max_items: int, each: int, keep: Literal["first", "last"] = "first"
) -> list[str]:
    """At most `max_items` items of one line each, each capped; a marker says how many went."""
    kept = list(items[:max_items] if keep == "first" else items[-max_items:])
    lines = [cap(" ".join(item.split()), each) for item in kept]
    dropped = len(items) - len(kept)
    if dropped:
        marker = f"[... {dropped} more cut]"
        lines = [*lines, marker] if keep == "first" else [marker, *lines]
    return lines


def trim_log(log: str, limit: int = LOG_CHARS) -> str:
    """An error log within about `limit`: the first lines of the first traceback or error line
    (often the root cause) and the tail (the final exception), each cut marked."""
    log = log.strip()
    if len(log) <= limit:
        return log
    anchor = log.find("Traceback (most recent call last)")
    if anchor < 0:
        match = re.search(r"(?im)^.*\berror\b", log)
        anchor = match.start() if match else 0
    tail = _tail(log, limit * 3 // 4)
    tail_start = len(log) - len(tail)
    if anchor >= tail_start:
        return cap(log, limit, "tail")
    head = _head(log[anchor:tail_start], limit - len(tail))
    parts = [f"[... {anchor} chars cut]"] if anchor else []
    parts.append(head.rstrip("\n"))
    gap = tail_start - anchor - len(head)
    if gap > 0:
        parts.append(f"[... {gap} chars cut]")
    parts.append(tail)
    return "\n".join(parts)


def code_fence(code: str, lang: str = "python") -> str:
    """`code` in a fence longer than any backtick run inside it, so it cannot end early."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{code.rstrip()}\n{fence}"


def bullet_list(lines: Iterable[str]) -> str:
    text = "\n".join(f"- {line}" for line in lines)
    return text or NONE


# -- the planner -------------------------------------------------------------------------------


def render_skills(allowed: Sequence[SkillBrief], forbidden: Sequence[SkillBrief]) -> str:
    """The gate's verdicts as the planner reads them: allowed skills in full, forbidden ones
    with the reason, in the gate's order (ranked)."""
    out = ["## Allowed skills (choose among these when one fits)"]
    if not allowed:
        out.append(
            "(none matched this kernel's profile: propose your own method, never a forbidden one)"
        )
    for skill in allowed:
        out.append(f"\n### {skill.id}: {skill.title}")
        if skill.why:
            out.append(f"Why it fits here: {cap(skill.why, SKILL_NOTE_CHARS)}")
        if skill.strategy:
            out.append(f"Strategy: {cap(skill.strategy.strip(), SKILL_STRATEGY_CHARS)}")
        if skill.pitfalls:
            out.append("Pitfalls:")
            out += [f"- {cap(p.strip(), SKILL_NOTE_CHARS)}" for p in skill.pitfalls]
    out.append("\n## Forbidden skills (never propose these, under any name)")
    if not forbidden:
        out.append(NONE)
    for skill in forbidden:
        why = f": {cap(skill.why, SKILL_NOTE_CHARS)}" if skill.why else ""
        out.append(f"- {skill.id} ({skill.title}){why}")
    return "\n".join(out) + "\n"


_SLOT_HINTS = (
    "Propose the method you rank most promising.",
    "Propose the method you rank most promising.",
    "Several planners work on this kernel in parallel and the first choice is covered: propose "
    "the method you rank second, if a second one is promising.",
    "Several planners work on this kernel in parallel and the first choices are covered: "
    "propose the method you rank third, if a third one is promising.",
)


def speedup_text(context: PlanningContext) -> str:
    if _same_code(context.task_source, context.candidate_source):
        return "the unmodified reference (1.00x)"
    return f"{context.candidate_speedup:.2f}x the reference's speed"


def task_text(context: PlanningContext) -> str:
    """The reference problem, or a note when the candidate is still the reference itself."""
    if _same_code(context.task_source, context.candidate_source):
        return "(identical to the kernel above: nothing has been changed yet)"
    return code_fence(cap(context.task_source, TASK_CHARS, "middle"))


def _same_code(a: str, b: str) -> bool:
    return a.strip() == b.strip()


def planner_prompt(context: PlanningContext) -> tuple[SystemPrompt, str]:
    """(system, user): instructions and gated skills in the cached static part."""
    template = load_template("planner")
    skills = render_skills(context.allowed_skills, context.forbidden_skills)
    static = template.system + "\n" + skills
    applied = " -> ".join(context.applied_methods)
    user = template.render_user(
        device=context.device,
        speedup=speedup_text(context),
        candidate=code_fence(cap(context.candidate_source, CODE_CHARS, "middle")),
        task=task_text(context),
        profile=profile_text(context),
        lessons=bullet_list(cap_items(context.lessons, *LESSONS)),
        attempts=bullet_list(cap_items(context.recent_attempts, *ATTEMPTS, keep="last")),
        avoid=bullet_list(cap_items(context.avoid_plans, *AVOID, keep="last")),
        applied=cap(applied, APPLIED_CHARS, "tail") or NONE,
        slot=f"(Plan slot {context.seed + 1}.) " + _SLOT_HINTS[context.seed % len(_SLOT_HINTS)],
    )
    return SystemPrompt(static), user


# -- executor and repairer ---------------------------------------------------------------------


def profile_text(context: PlanningContext) -> str:
    """The profile's facts every role that writes or changes code should see, capped."""
    return cap(context.profile_summary.strip(), PROFILE_CHARS) or NONE


def plan_text(plan: Plan) -> str:
    lines = [f"Title: {plan.title}", f"Method: {plan.method}"]
    if plan.skill_id:
        lines.append(f"Skill: {plan.skill_id}")
    if plan.details:
        lines.append(f"Details: {plan.details.strip()}")
    return cap("\n".join(lines), PLAN_CHARS)


def skill_notes(context: PlanningContext, plan: Plan) -> str:
    """The applied skill's strategy and pitfalls, which the executor would otherwise not see."""
    wanted = plan.skill_id or plan.method.strip()
    skill = next((s for s in context.allowed_skills if s.id == wanted), None)
    if skill is None:
        return "(none: the method is the planner's own, not a library skill)"
    lines = [f"{skill.id}: {skill.title}"]
    if skill.strategy:
        lines.append(f"Strategy: {cap(skill.strategy.strip(), SKILL_STRATEGY_CHARS)}")
    lines += [f"Pitfall: {cap(p.strip(), SKILL_NOTE_CHARS)}" for p in skill.pitfalls]
    return "\n".join(lines)


def executor_prompt(context: PlanningContext, plan: Plan, sample: int) -> tuple[SystemPrompt, str]:
    """`sample` is 0-based; later samples are nudged to vary open implementation choices."""
    template = load_template("executor")
    hint = ""
    if sample > 0:
        hint = (
            f"\nThis is independent sample {sample + 1} of the same plan: where the plan leaves a "
            "choice open (block sizes, launch configuration, loop order), try a different "
            "reasonable option than the most obvious one.\n"
        )
    user = template.render_user(
        device=context.device,
        profile=profile_text(context),
        plan=plan_text(plan),
        skill=skill_notes(context, plan),
        speedup=speedup_text(context),
        candidate=code_fence(cap(context.candidate_source, CODE_CHARS, "middle")),
        task=task_text(context),
        sample=hint,
    )
    return SystemPrompt(template.system), user


def repairer_prompt(
    context: PlanningContext, plan: Plan, source: str, verdict: str, log: str, attempt: int
) -> tuple[SystemPrompt, str]:
    """`attempt` is 1-based; the log is trimmed here, whatever the caller already did."""
    template = load_template("repairer")
    note = ""
    if attempt > 1:
        note = (
            f"Earlier repairs ({attempt - 1}) did not fix it: look for the root cause instead of "
            "patching the symptom.\n"
        )
    same = _same_code(context.task_source, source)
    user = template.render_user(
        attempt=str(attempt),
        device=context.device,
        attempt_note=note,
        plan=plan_text(plan),
        profile=profile_text(context),
        verdict=verdict,
        log=code_fence(trim_log(log) or "(empty log)", "text"),
        source=code_fence(cap(source, CODE_CHARS, "middle")),
        task="(identical to the code above)"
        if same
        else code_fence(cap(context.task_source, TASK_CHARS, "middle")),
    )
    return SystemPrompt(template.system), user


# -- summarizer --------------------------------------------------------------------------------


def summarizer_prompt(
    slow_source: str, fast_source: str, gain: float, plan: str, regression: bool
) -> tuple[SystemPrompt, str]:
    template = load_template("summarizer")
    if regression:
        direction = (
            "A regression: the plan below was applied to the FAST kernel and produced the SLOW "
            "one. Write what NOT to do, under which condition, and why it hurt."
        )
    else:
        direction = (
            "An improvement: the plan below was applied to the SLOW kernel and produced the FAST "
            "one. Write which method paid and under which condition."
        )
    user = template.render_user(
        direction=direction,
        gain=f"{gain:.2f}x",
        plan=cap(plan.strip(), PLAN_CHARS) or NONE,
        slow=code_fence(cap(slow_source, CODE_CHARS // 2, "middle")),
        fast=code_fence(cap(fast_source, CODE_CHARS // 2, "middle")),
    )
    return SystemPrompt(template.system), user


def correction(role: str, error: str) -> str:
    """The one retry message for `role`, naming what was wrong with the previous reply."""
    return load_template(role).render_correction(error.rstrip("."))
