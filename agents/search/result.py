"""What a search hands back: the best verified kernel (or an honest "no improvement"), its
trajectory, and what it cost. Also the trajectory plot."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.search.fates import CandidateFate, fates_from_json
from agents.search.typed_json import JSONShapeError, read_fields


@dataclass
class TrajectoryPoint:
    evaluation: int  # 1-based index over the whole search
    iteration: int
    plan: str
    method: str
    sample: int
    repair: int
    verdict: str
    speedup: float | None  # over the reference
    best_speedup: float  # best verified so far, after this evaluation
    elapsed_s: float
    reason: str = ""

    @classmethod
    def from_json(cls, data: Any) -> TrajectoryPoint:
        return cls(**read_fields(cls, data, "trajectory point"))


@dataclass
class SearchResult:
    task: str
    device: str
    improved: bool
    verdict: str  # "correct" for an improved kernel; "no_improvement" otherwise
    speedup: float  # confirmed speedup of `source` over the reference (1.0 without one)
    speedup_ci: list[float] | None
    confirmed: bool  # re-measured on fresh inputs after the search (False after a cancel)
    source: str | None  # the ModelNew source; None when there is no improvement
    methods: list[str]  # the plans applied, in order, from the reference to `source`
    evaluations: int
    iterations: int
    stopped_because: str
    elapsed_s: float
    cost: dict[str, Any]
    planner: str
    executor: str
    trajectory: list[TrajectoryPoint] = field(default_factory=list)
    eval_report: dict[str, Any] | None = None  # the confirming evaluation's full report
    notes: list[str] = field(default_factory=list)
    memory: dict[str, Any] = field(default_factory=dict)  # what was written where
    candidates: tuple[CandidateFate, ...] = ()  # every candidate and why it was (not) chosen

    def evaluations_to_best(self, within: float = 0.98) -> int | None:
        """Evaluations until the search first came within `within` of its final best."""
        best = max((p.best_speedup for p in self.trajectory), default=1.0)
        if best <= 1.0:
            return None
        for point in self.trajectory:
            if point.best_speedup >= best * within:
                return point.evaluation
        return None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["candidates"] = [fate.to_json() for fate in self.candidates]
        data["output"] = None
        data["tokens"] = self.cost.get("tokens", 0)
        data["cost_usd"] = self.cost.get("cost_usd", 0.0)
        data["evaluations_to_best"] = self.evaluations_to_best()
        return data

    @classmethod
    def from_json(cls, data: Any) -> SearchResult:
        """The result `to_json` wrote (its derived keys, such as `tokens`, are recomputed),
        so a saved result reads back equal to the one that was saved. A NaN that travelled
        as null reads back as NaN; a wrong value raises JSONShapeError naming its field.
        Candidates that cannot be read are left out, as `fates_from_json` does for reports
        written before fates were kept."""
        if not isinstance(data, dict):
            raise JSONShapeError(f"a search result must be an object, not {type(data).__name__}")
        values = read_fields(cls, data, "result", skip=("candidates",))
        return cls(**values, candidates=fates_from_json(data.get("candidates")))

    def write_trajectory(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1) + "\n", encoding="utf-8")


def plot_trajectory(result: SearchResult, path: Path) -> None:
    """Best verified speedup against evaluations, with every correct candidate as a dot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    xs = [0] + [p.evaluation for p in result.trajectory]
    best = [1.0] + [p.best_speedup for p in result.trajectory]
    ax.step(xs, best, where="post", label="best verified")
    correct = [(p.evaluation, p.speedup) for p in result.trajectory if p.verdict == "correct"]
    if correct:
        ax.scatter(*zip(*correct, strict=True), s=12, alpha=0.5, label="correct candidates")
    failed = [p.evaluation for p in result.trajectory if p.verdict != "correct"]
    if failed:
        ax.scatter(failed, [0.0] * len(failed), s=12, marker="x", label="not correct")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xlabel("evaluations")
    ax.set_ylabel("speedup over the reference")
    ax.set_title(f"{result.task} ({result.device}): {result.planner}")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
