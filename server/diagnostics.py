"""Profile findings on hot lines, kept in step with the user's edits.

A profile names lines of the snapshot it ran on; by the time it arrives the user may have
typed. Each hot line is therefore re-found by its text near its old number, then moved with
every later edit (lines inserted above shift it) and dropped when its own line is edited.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lsprotocol import types

from agents.profile.report import LineStat, Profile
from agents.targets.hints import Hint
from server.documents import Document, LineEdit, byte_col_to_char, index_to_char

if TYPE_CHECKING:  # the skills library takes ~0.1 s to load: only once a profile arrives
    from memory.gate import GateResult
    from memory.skills_library import Skill

SOURCE = "kernel-agent"
MIN_SHARE = 0.05
MAX_FINDINGS = 8
SEARCH_RADIUS = 400
TARGET_LANGUAGES = {
    "module": ("torch", "cpu-cpp", "cuda", "triton"),
    "function": ("torch", "cpu-cpp", "cuda", "triton"),
    "triton": ("triton", "torch", "cuda"),
    "cuda": ("cuda", "torch", "triton"),
}


@dataclass
class Finding:
    """One hot line: where it is now, what it costs, and the skill that may help."""

    line: int  # 0-based, in the current document
    text: str  # the line's stripped text when the profile was taken
    stat: LineStat
    target: str
    message: str
    skill: Skill | None
    skills: list[Skill] = field(default_factory=list)  # every allowed skill for these ops


@dataclass
class ProfileView:
    """A profile applied to one document: its findings, and what hover needs to explain."""

    profile: Profile
    target: str
    target_kind: str
    source: str  # the snapshot the profile ran on
    gate: GateResult
    findings: list[Finding]


def bound_phrase(bound: str, pct: float) -> str:
    """ "memory-bound, 41% of peak bandwidth" and the like."""
    peak = {"memory": "peak bandwidth", "compute": "peak FLOP/s"}.get(bound, "peak")
    label = "overhead-bound (launch and dispatch)" if bound == "overhead" else f"{bound}-bound"
    return f"{label}, {pct:.0f}% of {peak}"


def line_categories(stat: LineStat) -> set[str]:
    from memory.gate import op_category

    return {c for c in (op_category(op.name) for op in stat.ops) if c}


def skills_for(stat: LineStat, result: GateResult, target_kind: str) -> list[Skill]:
    """Allowed skills touching this line's ops, best language for the target first."""
    categories = line_categories(stat)
    order = TARGET_LANGUAGES.get(target_kind, TARGET_LANGUAGES["module"])
    picked: list[tuple[int, int, Skill]] = []
    for rank, choice in enumerate(result.allowed):
        skill = choice.skill
        wanted = set(skill.trigger.op_categories or ()) | set(skill.trigger.all_op_categories or ())
        if wanted and not wanted & categories:
            continue
        language = min((order.index(t) for t in skill.targets if t in order), default=len(order))
        if language == len(order):
            continue
        picked.append((language if wanted else language + len(order), rank, skill))
    picked.sort(key=lambda item: (item[0], item[1]))
    return [skill for _, _, skill in picked]


def locate(doc_lines: list[str], stat: LineStat) -> int | None:
    """The current 0-based line holding `stat`'s text, nearest its profiled number."""
    want = stat.source.strip()
    guess = stat.line - 1
    if not want:
        return guess if 0 <= guess < len(doc_lines) else None
    for distance in range(SEARCH_RADIUS):
        for line in (guess - distance, guess + distance) if distance else (guess,):
            if 0 <= line < len(doc_lines) and doc_lines[line].strip() == want:
                return line
    return None


def build_view(
    profile: Profile,
    doc: Document,
    *,
    target: str,
    target_kind: str,
    source: str,
) -> ProfileView:
    """Findings for the hot lines of `profile` that can still be found in `doc`."""
    from memory.gate import gate

    result = gate(profile.metrics(), source, device=profile.device)
    findings: list[Finding] = []
    taken: set[int] = set()
    for stat in profile.lines:
        if len(findings) >= MAX_FINDINGS:
            break
        if stat.share < MIN_SHARE:
            continue
        line = locate(doc.lines, stat)
        if line is None or line in taken:
            continue
        taken.add(line)
        skills = skills_for(stat, result, target_kind)
        top_op = stat.ops[0].name if stat.ops else "no aten op"
        message = (
            f"{stat.share:.0%} of time · {top_op} · {bound_phrase(stat.bound, stat.pct_of_peak)}"
        )
        if skills:
            message += f" · try: {skills[0].title}"
        findings.append(
            Finding(
                line,
                stat.source.strip(),
                stat,
                target,
                message,
                skills[0] if skills else None,
                skills,
            )
        )
    return ProfileView(profile, target, target_kind, source, result, findings)


def shift(findings: list[Finding], edit: LineEdit) -> tuple[list[Finding], bool]:
    """Findings moved by one edit; those on edited lines are dropped. (kept, changed?)"""
    kept: list[Finding] = []
    changed = False
    for finding in findings:
        line = edit.map_line(finding.line)
        if line is None:
            changed = True
            continue
        if line != finding.line:
            finding.line = line
            changed = True
        kept.append(finding)
    return kept, changed


def finding_diagnostic(finding: Finding, doc: Document, encoding: str) -> types.Diagnostic:
    text = doc.line(finding.line).rstrip("\r")
    start = len(text) - len(text.lstrip())
    end = len(text.rstrip())
    return types.Diagnostic(
        range=types.Range(
            start=types.Position(finding.line, index_to_char(text, start, encoding)),
            end=types.Position(finding.line, index_to_char(text, end, encoding)),
        ),
        message=finding.message,
        severity=types.DiagnosticSeverity.Information,
        source=SOURCE,
        code=finding.skill.id if finding.skill else None,
    )


def hint_diagnostic(hint: Hint, doc: Document, encoding: str) -> types.Diagnostic:
    start_line, end_line = doc.line(hint.start[0]), doc.line(hint.end[0])
    return types.Diagnostic(
        range=types.Range(
            start=types.Position(
                hint.start[0], byte_col_to_char(start_line, hint.start[1], encoding)
            ),
            end=types.Position(hint.end[0], byte_col_to_char(end_line, hint.end[1], encoding)),
        ),
        message=hint.message,
        severity=types.DiagnosticSeverity.Hint,
        source=SOURCE,
        code=hint.code,
    )
