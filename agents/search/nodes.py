"""The search's data: its settings, roles and memory, and the tree of verified kernels."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.profile.report import Profile
from agents.roles.base import Executor, Plan, Planner, Repairer, Summarizer
from agents.search.fates import FateLog
from agents.search.result import TrajectoryPoint
from agents.verify.verdict import EvalResult
from memory.experiences import ExperienceStore
from memory.logbook import Logbook


@dataclass(frozen=True)
class SearchConfig:
    """AccelOpt's defaults (B=6, N=12, K=2, T=16) plus KernelSkill's repair budget R."""

    beam: int = 6
    plans: int = 12
    samples: int = 2
    iterations: int = 16
    patience: int = 4  # stop after this many iterations without a new best
    repairs: int = 2
    parallel_evals: int = 1  # candidates built/checked at once; timings stay exclusive
    profile: bool = True
    profile_repeat: int = 3
    confirm: int = 3  # best candidates re-measured on fresh inputs at the end
    confirm_budget_s: float = 3.0  # timing budget of each confirming evaluation
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("beam", "plans", "samples", "iterations", "patience", "parallel_evals"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if self.repairs < 0 or self.confirm < 1:
            raise ValueError("repairs must be >= 0 and confirm >= 1")


@dataclass
class Roles:
    """The agents the search drives; the repairer and summarizer are optional."""

    planner: Planner
    executor: Executor
    repairer: Repairer | None = None
    summarizer: Summarizer | None = None


@dataclass
class SearchMemory:
    """The long-term experiences and the short-term logbook; either may be absent."""

    experiences: ExperienceStore | None = None
    logbook: Logbook | None = None


@dataclass
class Node:
    """A verified kernel in the search tree (the root is the reference itself)."""

    source: str
    speedup: float  # over the reference, as measured when it was evaluated
    methods: tuple[str, ...] = ()
    plan_keys: tuple[str, ...] = ()  # `plan_key` of each plan applied on the way here
    plan: Plan | None = None
    attempt_id: int | None = None
    iteration: int = 0
    profile: Profile | None = None
    result: EvalResult | None = None
    ci: list[float] | None = None

    @property
    def is_root(self) -> bool:
        return self.plan is None


@dataclass
class Sample:
    """One executor sample of a plan, judged or not."""

    plan: Plan
    parent: Node
    source: str | None
    result: EvalResult | None
    speedup: float | None
    attempt_id: int | None = None


@dataclass
class SearchState:
    """What one run of the search has found and spent so far."""

    best: Node
    beam: list[Node]
    evaluations: int = 0
    iteration: int = 0
    trajectory: list[TrajectoryPoint] = field(default_factory=list)
    seen: dict[str, tuple[str, float | None]] = field(default_factory=dict)  # hash → result
    notes: list[str] = field(default_factory=list)
    memory_written: list[int] = field(default_factory=list)
    llm_failures: int = 0
    last_llm_error: str = ""
    best_seen: float = 1.0  # fastest correct sample so far (the trajectory's running best)
    fates: FateLog = field(default_factory=FateLog)  # every candidate, for the result
