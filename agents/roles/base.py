"""What the search asks of each role, independent of how the role is realised.

An LLM realises them through prompts (`agents/roles/llm_roles.py`); the offline backend
realises planner and executor with rewrite passes. The search only sees these protocols.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Plan:
    """One plan = exactly one optimisation method (KernelSkill's one-method rule)."""

    title: str  # one line, e.g. "Fuse the bias add and ReLU into the GEMM epilogue"
    method: str  # the single method, named (a skill id where one applies, else short text)
    details: str = ""  # what to change and where
    skill_id: str | None = None  # the library skill it applies, when one does

    def text(self) -> str:
        """The plan as one string: what the logbook stores and compares for repeats."""
        head = f"{self.title} [{self.method}]"
        return head + (f"\n{self.details}" if self.details else "")


@dataclass(frozen=True)
class SkillBrief:
    id: str
    title: str
    strategy: str = ""
    pitfalls: tuple[str, ...] = ()
    why: str = ""  # the gate's reason (allowed) or its refusal (forbidden)
    offline_pass: str | None = None


@dataclass
class PlanningContext:
    """Everything the planner sees for one kept candidate."""

    task_source: str  # the reference problem (Model, get_inputs, get_init_inputs)
    candidate_source: str  # the kernel to improve: the reference itself, or a ModelNew
    candidate_speedup: float  # over the reference (1.0 for the reference)
    device: str
    profile_summary: str = ""  # hot lines, bound, % of peak (compact text)
    allowed_skills: list[SkillBrief] = field(default_factory=list)
    forbidden_skills: list[SkillBrief] = field(default_factory=list)
    lessons: list[str] = field(default_factory=list)  # Experience.summary() lines
    recent_attempts: list[str] = field(default_factory=list)  # logbook lines for this task
    avoid_plans: list[str] = field(default_factory=list)  # plans already tried or failed
    applied_methods: list[str] = field(default_factory=list)  # methods on this lineage
    seed: int = 0  # the plan's slot among the N for this kernel: diversity and determinism
    signature: Any = None  # memory.experiences.TaskSignature of the task, for memory lookups
    gated: bool = True  # False when there was no profile, so the gate saw only the source


@dataclass
class Candidate:
    """An executor's or repairer's output: complete ModelNew source, or why there is none."""

    source: str | None
    error: str = ""  # e.g. "the reply had no Python code block"
    notes: str = ""  # what the implementation did, for the trajectory


@dataclass(frozen=True)
class Summary:
    title: str
    lesson: str


class Planner(Protocol):
    label: str

    async def plan(self, context: PlanningContext) -> Plan | None:
        """One single-method plan, or None when it has nothing (left) to propose."""
        ...


class Executor(Protocol):
    """May also define `verified(source)`, which the search calls when a candidate it made
    is judged correct (the offline executor then remembers its kernels' tuning choices)."""

    label: str

    async def implement(self, context: PlanningContext, plan: Plan, sample: int) -> Candidate:
        """Realise `plan` on `context.candidate_source` as a complete ModelNew source."""
        ...


class Repairer(Protocol):
    label: str

    async def repair(
        self,
        context: PlanningContext,
        plan: Plan,
        source: str,
        verdict: str,
        log: str,
        attempt: int,
    ) -> Candidate:
        """Fix `source`, which got `verdict` with the (trimmed) error `log`."""
        ...


class Summarizer(Protocol):
    label: str

    async def summarize(
        self, slow_source: str, fast_source: str, gain: float, plan: str, regression: bool
    ) -> Summary:
        """A title and a general lesson for slow -> fast; `slow_source` is always the slower
        kernel (AccelOpt), `regression` says the plan produced the slower one."""
        ...
