"""What the planner is told about a kernel: its profile (compact), the gate's skills, the
lessons memory retrieved, and the logbook's attempts; and which of its plans are repeats.
Pure assembly; the search decides when."""

from __future__ import annotations

from collections.abc import Iterable

from agents.profile.report import Profile
from agents.roles.base import SkillBrief
from memory.experiences import TaskSignature
from memory.gate import HOT_SHARE, GateResult, op_category
from memory.logbook import Attempt, plan_similarity
from memory.normalize import source_hash

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
        ceilings_line(profile),
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


def ceilings_line(profile: Profile) -> str:
    """The machine's measured ceilings and what a perfect rewrite would need, so a role can
    size its kernel against real numbers rather than a device name."""
    c, roof = profile.ceilings, profile.roofline
    peaks = [f"memory {c.memory_gbps:.0f} GB/s", f"fp32 matmul {c.matmul_gflops:.0f} GFLOP/s"]
    if c.tf32_gflops:
        peaks.append(f"tf32 matmul {c.tf32_gflops:.0f} GFLOP/s")
    if c.bf16_gflops:
        peaks.append(f"bf16 matmul {c.bf16_gflops:.0f} GFLOP/s")
    return (
        f"measured ceilings: {', '.join(peaks)}; the forward needs at least "
        f"{roof.bound_ms:.3f} ms ({roof.memory_ms:.3f} ms moving {roof.bytes / 1e6:.1f} MB once, "
        f"{roof.compute_ms:.3f} ms for {roof.flops / 1e9:.2f} GFLOP)"
    )


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


class PlanHistory:
    """The plans this search has made, per kernel, so the planner's repeats are caught.

    A plan repeats when it matches (by `plan_key`, or 85% similar) a plan already made for the
    same kernel in this search, one applied along the kernel's lineage (the same method
    twice), or one the logbook records as failed. Applying a plan that worked elsewhere to
    another kernel of the beam is not a repeat: combining methods is the search's point.
    """

    SIMILAR = 0.85

    def __init__(self) -> None:
        self._made: dict[str, list[str]] = {}

    def repeats(self, key: str, kernel: str, lineage: Iterable[str], failed: Iterable[str]) -> bool:
        made = self._made.get(source_hash(kernel), [])
        return any(
            k == key or plan_similarity(k, key) >= self.SIMILAR for k in (*made, *lineage, *failed)
        )

    def add(self, key: str, kernel: str) -> None:
        self._made.setdefault(source_hash(kernel), []).append(key)
