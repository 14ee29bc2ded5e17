"""Typed events of one search. The CLI's progress bar and the language server's `$/progress`
consume the same stream, so what one shows the other can show too."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from agents.search.typed_json import JSONShapeError, read_fields


@dataclass(frozen=True)
class SearchEvent:
    kind: ClassVar[str] = "event"

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}

    @staticmethod
    def from_json(data: Any) -> SearchEvent:
        """The event `to_json` wrote, as its own class; JSONShapeError (a ValueError) names
        an unknown kind or the first field that does not fit."""
        if not isinstance(data, dict):
            raise JSONShapeError(f"a search event must be a JSON object, not {type(data).__name__}")
        kind = data.get("kind")
        cls = EVENT_KINDS.get(kind) if isinstance(kind, str) else None
        if cls is None:
            known = ", ".join(EVENT_KINDS)
            raise JSONShapeError(f"unknown search event kind {kind!r:.40}: expected one of {known}")
        return cls(**read_fields(cls, data, f"{kind} event"))


@dataclass(frozen=True)
class Started(SearchEvent):
    kind: ClassVar[str] = "started"
    task: str
    device: str
    planner: str
    executor: str
    beam: int
    plans: int
    samples: int
    iterations: int


@dataclass(frozen=True)
class Profiled(SearchEvent):
    """The reference's profile: its hot lines, so a user sees where time goes at once."""

    kind: ClassVar[str] = "profiled"
    summary: str
    hot_lines: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class IterationStarted(SearchEvent):
    kind: ClassVar[str] = "iteration"
    iteration: int  # 1-based
    iterations: int
    beam_speedups: list[float]
    best_speedup: float
    evaluations: int


@dataclass(frozen=True)
class PhaseStarted(SearchEvent):
    """What the search does now, in words ("profiling the reference", "planning",
    "evaluating 3 candidates", "timing the best on fresh inputs"), so progress is never a
    bare counter that stands still for minutes. An event with `detail` only refines the
    phase already shown (`phase` is then empty)."""

    kind: ClassVar[str] = "phase"
    phase: str
    detail: str = ""  # the running evaluation's own phase ("correctness 2/5"), within `phase`


@dataclass(frozen=True)
class PlanMade(SearchEvent):
    kind: ClassVar[str] = "plan"
    iteration: int
    parent: int  # attempt id of the beam entry it extends (0: the reference)
    title: str
    method: str


@dataclass(frozen=True)
class CandidateEvaluated(SearchEvent):
    kind: ClassVar[str] = "candidate"
    iteration: int
    plan: str
    sample: int
    repair: int  # 0 for the executor's own attempt, n for the n-th repair
    verdict: str
    speedup: float | None  # over the reference
    evaluations: int  # total so far
    reason: str = ""


@dataclass(frozen=True)
class NewBest(SearchEvent):
    kind: ClassVar[str] = "new_best"
    iteration: int
    speedup: float
    plan: str
    evaluations: int


@dataclass(frozen=True)
class Finished(SearchEvent):
    kind: ClassVar[str] = "finished"
    verdict: str
    speedup: float
    improved: bool
    evaluations: int
    stopped_because: str
    cost_usd: float
    tokens: int


@dataclass(frozen=True)
class Failed(SearchEvent):
    kind: ClassVar[str] = "failed"
    reason: str


EVENT_KINDS: dict[str, type[SearchEvent]] = {
    cls.kind: cls
    for cls in (
        Started,
        Profiled,
        IterationStarted,
        PhaseStarted,
        PlanMade,
        CandidateEvaluated,
        NewBest,
        Finished,
        Failed,
    )
}
"""Each event class by the `kind` its JSON carries."""
