"""What the planner is told about a kernel: its profile (compact), the gate's skills, the
lessons memory retrieved, and the logbook's attempts. Pure assembly; the search decides when."""

from __future__ import annotations

from agents.profile.report import Profile
from agents.roles.base import SkillBrief
from memory.experiences import TaskSignature
from memory.gate import HOT_SHARE, GateResult, op_category
from memory.logbook import Attempt

MAX_HOT_LINES = 6


def render_profile(profile: Profile | None) -> str:
    """A few lines: total time, the bound, % of peak, then the hot lines with their ops."""
    if profile is None:
        return "(no profile: profiling failed or was turned off)"
    roof = profile.roofline
    lines = [
        f"{profile.total_ms:.3f} ms per forward on {profile.ceilings.name} ({profile.device}, "
        f"{profile.threads} threads); whole forward is {roof.bound}-bound at "
        f"{roof.pct_of_peak:.0f}% of the roofline peak; {sum(op.calls for op in profile.ops)} "
        "aten op calls per forward",
        "hot lines (share of op time, line, source, top ops, bound, % of peak):",
    ]
    for stat in profile.lines[:MAX_HOT_LINES]:
        ops = ", ".join(f"{op.name} x{op.calls}" for op in stat.ops[:3])
        lines.append(
            f"  {stat.share:4.0%}  line {stat.line}: `{stat.source}`  [{ops}]  "
            f"{stat.bound}-bound, {stat.pct_of_peak:.0f}% of peak"
        )
    lines.extend(f"note: {note}" for note in profile.notes[:2])
    return "\n".join(lines)


def hot_lines_json(profile: Profile | None) -> list[dict]:
    if profile is None:
        return []
    return [
        {
            "line": s.line,
            "source": s.source,
            "share": round(s.share, 4),
            "bound": s.bound,
            "pct_of_peak": round(s.pct_of_peak, 1),
        }
        for s in profile.lines[:MAX_HOT_LINES]
    ]


def signature_for(profile: Profile | None, gate_result: GateResult, device: str) -> TaskSignature:
    """The task's signature for memory: hot op categories, hot ops' shapes, dtype, device."""
    if profile is None:
        categories = tuple(sorted(gate_result.facts.features.names))
        return TaskSignature(op_categories=categories, device_name=device)
    hot = [op for op in profile.ops if op.share >= HOT_SHARE]
    categories = {op_category(op.name) for op in hot} - {None}
    shapes = [tuple(shape) for op in hot[:3] for shape in op.input_shapes[:2]]
    dtypes = [op.dtype.replace("torch.", "") for op in hot if op.dtype]
    return TaskSignature(
        op_categories=tuple(c for c in categories if c),
        shapes=tuple(shapes),
        dtype=dtypes[0] if dtypes else "",
        target="torch",
        device_name=profile.ceilings.name or device,
    )


def skill_briefs(result: GateResult) -> tuple[list[SkillBrief], list[SkillBrief]]:
    """The gate's allowed skills (ranked) and forbidden ones, as the roles see them."""

    def brief(choice) -> SkillBrief:
        skill = choice.skill
        return SkillBrief(
            id=skill.id,
            title=skill.title,
            strategy=skill.strategy,
            pitfalls=tuple(skill.pitfalls),
            why="; ".join(choice.why),
            offline_pass=skill.offline_pass,
        )

    return [brief(c) for c in result.allowed], [brief(c) for c in result.forbidden]


def attempt_lines(attempts: list[Attempt], limit: int = 12) -> list[str]:
    """The logbook's most recent attempts, one line each, newest last."""
    out = []
    for attempt in attempts[-limit:]:
        plan = (attempt.plan.splitlines() or ["(no plan)"])[0][:120]
        speed = f" {attempt.speedup:.2f}x" if attempt.speedup is not None else ""
        error = f" ({attempt.error_digest[:100]})" if attempt.error_digest else ""
        out.append(f"{attempt.verdict}{speed}: {plan}{error}")
    return out
