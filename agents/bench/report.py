"""A benchmark's results: one row per problem, fast_p under both correctness rules, and
geometric means. Plain JSON, so results can be shared and compared."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

FAST_P_THRESHOLDS = (0.0, 1.0, 1.5, 2.0)
RULES = ("strict", "float64")
"""strict: KernelBench's allclose rule. float64: ours (strict, or within the float64 band)."""


@dataclass
class BenchRow:
    problem: str
    path: str
    baseline: str
    verdict: str
    strict_allclose: bool | None
    float64_rule: bool | None
    eager_ms: float | None
    baseline_ms: float | None
    speedup: float | None
    speedup_ci: list[float] | None
    reasons: list[str]
    elapsed_s: float
    timing_stable: bool = True
    """False when the load set the ratio (agents/verify/stability.py): the row shows
    "unstable", counts in fast_0 (correct) but in no speedup threshold or geomean."""
    unstable_reason: str = ""

    def correct_under(self, rule: str) -> bool:
        if rule == "strict":
            return self.verdict == "correct" and bool(self.strict_allclose)
        return self.verdict == "correct"


@dataclass
class BenchReport:
    date: str
    machine: str
    device: str
    size: str
    command: str
    rows: list[BenchRow] = field(default_factory=list)
    total_s: float = 0.0

    def baseline_label(self) -> str:
        baselines = sorted({row.baseline for row in self.rows})
        return ", ".join(baselines) or "baseline"

    def fast_p(self, p: float, rule: str) -> float:
        """Share of ALL problems that are correct under `rule` and faster than eager by > p."""
        if not self.rows:
            return 0.0
        hits = [
            row
            for row in self.rows
            if row.correct_under(rule)
            and row.speedup is not None
            and row.speedup > p
            and (row.timing_stable or p == 0.0)
        ]
        return len(hits) / len(self.rows)

    def geomean_speedup(self, rule: str = "float64") -> float | None:
        """Geometric mean over the problems that are correct under `rule` and timed stably."""
        values = [
            r.speedup for r in self.rows if r.correct_under(rule) and r.speedup and r.timing_stable
        ]
        if not values:
            return None
        return math.exp(sum(math.log(v) for v in values) / len(values))

    def summary(self) -> dict[str, Any]:
        return {
            "problems": len(self.rows),
            "fast_p": {
                rule: {f"{p:g}": self.fast_p(p, rule) for p in FAST_P_THRESHOLDS} for rule in RULES
            },
            "geomean_speedup": {rule: self.geomean_speedup(rule) for rule in RULES},
        }

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["summary"] = self.summary()
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchReport:
        fields = {k: v for k, v in data.items() if k not in ("rows", "summary")}
        return cls(**fields, rows=[BenchRow(**row) for row in data.get("rows", [])])


def merge_reports(parts: list[BenchReport]) -> BenchReport:
    """One report from the parts of a run split with --start/--limit (a device call has a limit).

    The parts must come from the same machine, device and size; a problem may appear only once.
    """
    if not parts:
        raise ValueError("no reports to merge")
    first = parts[0]
    for part in parts[1:]:
        if (part.machine, part.device, part.size) != (first.machine, first.device, first.size):
            raise ValueError(
                f"cannot merge a report from {part.machine} ({part.device}, size {part.size}) "
                f"with one from {first.machine} ({first.device}, size {first.size})"
            )
    rows = [row for part in parts for row in part.rows]
    seen: set[str] = set()
    for row in rows:
        if row.problem in seen:
            raise ValueError(f"problem {row.problem} appears in more than one report")
        seen.add(row.problem)
    commands = list(dict.fromkeys(part.command for part in parts))
    return BenchReport(
        date=first.date,
        machine=first.machine,
        device=first.device,
        size=first.size,
        command=" && ".join(commands),
        rows=rows,
        total_s=sum(part.total_s for part in parts),
    )
