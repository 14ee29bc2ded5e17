"""The three requests the agents answer: optimise a target, evaluate a candidate, profile a
problem. Each is a frozen value that the CLI, the language server's worker and the
benchmarks all build and hand to one function (agents/request/run.py's `optimize`,
agents/evaluate.py's `evaluate`, agents/profile/api.py's `profile_file`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from agents.request.defaults import EVAL_TIMING_BUDGET_S, MIN_TRIALS, PROFILE_REPEAT
from agents.request.settings import (
    BudgetSettings,
    EvaluationSettings,
    LLMSettings,
    MemorySettings,
    RequestError,
    SearchSettings,
)
from agents.request.target import Target
from agents.request.wire import from_json, to_json
from agents.task import SourceFile


@dataclass(frozen=True)
class OptimizeRequest:
    """Everything one optimisation needs. No API key: those come from the environment."""

    target: Target
    search: SearchSettings = field(default_factory=SearchSettings)
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    evaluation: EvaluationSettings = field(default_factory=EvaluationSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    memory: MemorySettings = field(default_factory=MemorySettings)
    seed: int = 0  # seeds sampling and the search's own draws

    def resolved(self) -> OptimizeRequest:
        """The request with the search shape the backend implies (offline or LLM)."""
        return replace(self, search=self.search.resolved(self.llm.offline))

    def to_json(self) -> dict[str, Any]:
        return to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> OptimizeRequest:
        """The request `to_json` wrote; RequestError naming the first bad field."""
        return from_json(cls, data)


@dataclass(frozen=True)
class EvaluateRequest:
    """One candidate judged against its reference (`kernel-agent eval`)."""

    reference: SourceFile
    candidate: SourceFile
    device: str = "cpu"
    size: str = "default"
    trials: int = MIN_TRIALS
    seed: int | None = None  # seeds the init only; trial inputs never derive from it
    threads: int | None = None
    timing: bool = True
    timing_budget: float = EVAL_TIMING_BUDGET_S
    cuda_graph: bool = False
    require_state_dict: bool = False
    jail: bool = True
    build_timeout: float = 600.0  # seconds to import and build before the verdict is timeout
    run_timeout: float = 300.0  # seconds of correctness trials before the verdict is timeout

    def __post_init__(self) -> None:
        if self.trials < MIN_TRIALS:
            raise RequestError(f"--trials must be at least {MIN_TRIALS} (KernelBench's minimum)")
        if self.build_timeout <= 0 or self.run_timeout <= 0:
            raise RequestError("timeouts must be positive")
        if self.timing_budget <= 0:
            raise RequestError("--timing-budget must be positive")


@dataclass(frozen=True)
class ProfileRequest:
    """One problem's forward profiled line by line (`kernel-agent profile`)."""

    problem: SourceFile
    device: str = "cpu"
    size: str = "default"
    threads: int | None = None
    repeat: int = PROFILE_REPEAT
    jail: bool = True
    refresh_ceilings: bool = False
