"""The verdict a candidate gets, and the report that carries it across every layer."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class Verdict(StrEnum):
    """One answer per candidate; only CORRECT may ever be offered to a user."""

    CORRECT = "correct"
    INCORRECT = "incorrect"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    REJECTED = "rejected"


@dataclass
class ReviewFindings:
    """What the sandboxed review found: verdict, both correctness rules, and timing."""

    verdict: Verdict
    reasons: list[str] = field(default_factory=list)
    trials: int = 0
    strict_allclose: bool | None = None
    float64_rule: bool | None = None
    float64_error_ratio: float | None = None
    candidate_error: float | None = None
    reference_error: float | None = None
    state_dict_compatible: bool | None = None
    reload_check: str | None = None
    reference_ms: float | None = None
    candidate_ms: float | None = None
    speedup: float | None = None
    speedup_ci: list[float] | None = None
    reference_iqr_ms: float | None = None
    candidate_iqr_ms: float | None = None
    timing_runs: int = 0
    timing_method: str | None = None
    timing_notes: list[str] = field(default_factory=list)
    suspicious: bool = False
    timing_stable: bool = True
    """False when the speedup could not be trusted as a number (a busy machine, halves that
    disagree, an interval that does not clear 1): shown as "unstable", never offered."""
    timing_unstable_reason: str = ""


@dataclass
class EvalResult(ReviewFindings):
    """Everything the verifier knows about one candidate, in a JSON-ready shape: the review's
    findings plus what only the parent knows (device, seed, isolation, static findings)."""

    device: str = "cpu"
    seed: int | None = None
    isolation: str = ""
    static_findings: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0
    phase_s: dict[str, float] = field(default_factory=dict)  # where elapsed_s went (sandbox)
    parent_peak_rss_bytes: int = 0
    """The judging process's own peak resident memory (VmHWM) when the verdict was reached:
    outputs are compared part by part, so it stays flat whatever their size."""

    @property
    def correct(self) -> bool:
        return self.verdict is Verdict.CORRECT

    @property
    def trusted_speedup(self) -> float | None:
        """The speedup where it may be offered or ranked: correct and measured stably."""
        if not self.correct or not self.timing_stable or not self.speedup:
            return None
        return self.speedup if math.isfinite(self.speedup) else None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["verdict"] = self.verdict.value
        data["correct"] = self.correct
        for key, value in data.items():
            if isinstance(value, float) and not math.isfinite(value):
                data[key] = None
        if data["speedup_ci"] and not all(math.isfinite(v) for v in data["speedup_ci"]):
            data["speedup_ci"] = None
        return data
