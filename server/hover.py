"""Hover on a hot line: its ops as a Markdown table, the skills that may help, and what the
optimisation memory learned on similar kernels."""

from __future__ import annotations

from typing import TYPE_CHECKING

from server.diagnostics import Finding, ProfileView, bound_phrase

if TYPE_CHECKING:  # the memory brings numpy: imported when a hover first needs it
    from memory.experiences import Experience, ExperienceStore

MAX_OPS = 8
MAX_SKILLS = 3
MAX_LESSONS = 3


def _intensity(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}"


def hot_line_markdown(finding: Finding, view: ProfileView, lessons: list[Experience]) -> str:
    from agents.profile.render import _si  # brings rich: not at the server's start-up

    stat = finding.stat
    profile = view.profile
    parts = [
        f"**kernel-agent** · `{view.target}` · line {finding.line + 1}: "
        f"**{stat.share:.0%}** of the forward's op time "
        f"({stat.time_ms:.3f} ms of {profile.op_ms:.3f} ms on "
        f"{profile.ceilings.name or profile.device})",
        "",
        f"{bound_phrase(stat.bound, stat.pct_of_peak)}; {_si(stat.flops, 'FLOP')}, "
        f"{_si(stat.bytes, 'B')}, intensity {_intensity(stat.intensity)} FLOP/B",
        "",
        "| op | calls | time (ms) | share | FLOPs | bytes | FLOP/B | bound | % of peak |",
        "|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for op in stat.ops[:MAX_OPS]:
        parts.append(
            f"| `{op.name}` | {op.calls} | {op.time_ms:.3f} | {op.share:.1%} | "
            f"{_si(op.flops, 'FLOP')} | {_si(op.bytes, 'B')} | {_intensity(op.intensity)} | "
            f"{op.bound} | {op.pct_of_peak:.0f}% |"
        )
    if len(stat.ops) > MAX_OPS:
        parts.append(f"| … {len(stat.ops) - MAX_OPS} more | | | | | | | | |")
    if finding.skills:
        parts += ["", "**Suggested skills**", ""]
        for skill in finding.skills[:MAX_SKILLS]:
            parts.append(f"- `{skill.id}`: {skill.title} ({skill.expected_gain})")
    parts += ["", "**What memory learned about similar kernels**", ""]
    if lessons:
        for exp in lessons:
            feedback = {"accepted": " · accepted by you", "rejected": " · rejected by you"}
            parts.append(f"- {exp.summary()}{feedback.get(exp.feedback, '')}")
    else:
        parts.append("- nothing yet: lessons are written as searches find faster kernels")
    if profile.notes:
        parts += ["", f"_{profile.notes[0]}_"]
    return "\n".join(parts)


def lessons_for(
    store: ExperienceStore | None, finding: Finding, view: ProfileView
) -> list[Experience]:
    """The experiences most similar to this kernel and line (blocking: call off the loop)."""
    if store is None:
        return []
    from agents.search.knowledge import signature_for  # brings the memory and numpy

    signature = signature_for(view.profile, view.gate, view.profile.device)
    query = " ".join([finding.stat.source, *(op.name for op in finding.stat.ops[:3])])
    return [exp for exp, _score in store.retrieve(signature, query_text=query, k=MAX_LESSONS)]
