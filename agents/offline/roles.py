"""The offline backend's planner, executor and summarizer: the same loop, no LLM.

The planner ranks the passes of the skills the gate allowed, reordered by what memory says
those passes gave on similar tasks on this device; so the offline mode improves with use.
The executor runs one pass in the sandbox. There is no repairer: a pass is deterministic,
so a failed rewrite is a finding (logged), not something to retry.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import threading
from dataclasses import dataclass

from agents.evaluate import EvalOptions, cache_dir, default_threads
from agents.offline.registry import DEVICE_ONLY, PASSES
from agents.roles.base import Candidate, Plan, PlanningContext, SkillBrief, Summary
from agents.sandbox.process import ChildOutcome, Limits, run_child
from agents.task import SourceFile
from memory.experiences import ExperienceStore
from memory.normalize import source_hash
from memory.store import MemoryStoreError
from memory.tuning import Observation, TuningMemory, observation_from

log = logging.getLogger("kernel_agent.offline")
LABEL = "offline"
TERMINAL = ("torch-compile", "cpp-elementwise", "cuda-graphs")
"""Passes whose output hides the forward from fx (a compiled function, an extension call):
nothing is planned after them on the same lineage."""
MEMORY_WEIGHT = 2.0  # how strongly measured gains reorder the gate's ranking
TUNED = ("triton-gemm",)
"""Passes whose kernels autotune on their first call: their winning configs are remembered
(memory/tuning.py) and handed back to them, so a later run compiles one config per site."""


@dataclass(frozen=True)
class RankedPass:
    name: str
    skill: SkillBrief
    gate_rank: int
    memory_gain: float | None  # weighted mean speedup this pass gave on similar tasks
    memory_count: int


class OfflinePlanner:
    label = LABEL

    def __init__(self, experiences: ExperienceStore | None, device: str) -> None:
        self.experiences = experiences
        self.device = device

    async def plan(self, context: PlanningContext) -> Plan | None:
        ranked = self.rank(context)
        if context.seed >= len(ranked):
            return None
        choice = ranked[context.seed]
        memory = (
            f" Memory: {choice.memory_gain:.2f}x on {choice.memory_count} similar task(s)."
            if choice.memory_gain is not None
            else ""
        )
        return Plan(
            title=f"{choice.skill.title} (offline pass {choice.name})",
            method=choice.name,
            details=f"Gate: {choice.skill.why or 'allowed'}.{memory}",
            skill_id=choice.skill.id,
        )

    def rank(self, context: PlanningContext) -> list[RankedPass]:
        """Passes of allowed skills, not yet applied on this lineage, that did not fail on
        this task before; best first."""
        if any(method in TERMINAL for method in context.applied_methods):
            return []
        avoided = "\n".join(context.avoid_plans)
        seen: dict[str, RankedPass] = {}
        for rank, skill in enumerate(_candidate_skills(context)):
            name = skill.offline_pass
            if not name or name not in PASSES or name in seen:
                continue
            if DEVICE_ONLY.get(name, context.device) != context.device:
                continue
            if name in context.applied_methods or f"[{name}]" in avoided:
                continue
            gain, count = self._memory(context, name)
            seen[name] = RankedPass(name, skill, rank, gain, count)
        return sorted(seen.values(), key=_order)

    def _memory(self, context: PlanningContext, name: str) -> tuple[float | None, int]:
        """Weighted geometric mean of the gains this pass gave on similar tasks."""
        if self.experiences is None or context.signature is None:
            return None, 0
        total = weight = 0.0
        count = 0
        for exp, score in self.experiences.retrieve(context.signature, k=64):
            if f"[{name}]" not in exp.plan or score < self.experiences.policy.min_relevance:
                continue
            ratio = exp.gain if exp.kind == "positive" else 1 / exp.gain
            total += score * math.log(ratio)
            weight += score
            count += 1
        if not count:
            return None, 0
        return math.exp(total / weight), count


def _candidate_skills(context: PlanningContext) -> list[SkillBrief]:
    """The gate's allowed skills; without a profile (the gate saw only the source) every
    skill with an offline pass that the gate did not forbid follows them, in library order,
    since each rewrite is still verified and timed."""
    if context.gated:
        return list(context.allowed_skills)
    from memory.gate import facts_from, source_holds
    from memory.skills_library import load_skills

    listed = {s.id for s in context.allowed_skills} | {s.id for s in context.forbidden_skills}
    facts = facts_from(None, context.task_source, context.device)
    unfit = set()
    extra = []
    for skill in load_skills():
        if not skill.offline_pass or skill.id in listed:
            continue
        fits = source_holds(skill.trigger, facts)
        if not fits:
            unfit.add(skill.id)
        extra.append(
            SkillBrief(
                id=skill.id,
                title=skill.title,
                strategy=skill.strategy,
                pitfalls=tuple(skill.pitfalls),
                why="not gated: no profile"
                + ("" if fits else "; its conditions on the source do not hold"),
                offline_pass=skill.offline_pass,
            )
        )
    # Rewrites before compilers; and where two skills share a pass, the one whose code
    # features the source has names the plan (a layer norm is not a "convolution epilogue").
    extra.sort(key=lambda brief: (brief.offline_pass in TERMINAL, brief.id in unfit))
    return [*context.allowed_skills, *extra]


def _order(ranked: RankedPass) -> tuple[float, int]:
    """Measured gains first (a pass that paid on similar tasks jumps ahead, one that hurt
    falls behind the untried ones), then the gate's order."""
    bonus = 0.0 if ranked.memory_gain is None else math.log(ranked.memory_gain)
    return (-MEMORY_WEIGHT * bonus, ranked.gate_rank)


class OfflineExecutor:
    """Runs one pass on the current kernel in a sandboxed child. With `tuning`, an autotuning
    pass gets the remembered configs, and what its kernels chose is remembered once the
    search reports the candidate verified (`verified`): unverified numbers never persist."""

    label = LABEL

    def __init__(
        self,
        reference: SourceFile,
        options: EvalOptions,
        cancel: threading.Event | None = None,
        tuning: TuningMemory | None = None,
    ) -> None:
        self.reference = reference
        self.options = options
        self.cancel = cancel
        self.tuning = tuning
        self.tuning_s = 0.0  # first-call seconds (compile + autotune) of tuned candidates
        self._pending: dict[str, list[Observation]] = {}  # source hash -> until verified

    async def implement(self, context: PlanningContext, plan: Plan, sample: int) -> Candidate:
        is_reference = context.candidate_source == context.task_source
        threads = self.options.threads or default_threads()
        request = {
            "reference": {"text": self.reference.text, "path": self.reference.path},
            "source": context.candidate_source,
            "class_name": "Model" if is_reference else "ModelNew",
            "pass": plan.method,
            "device": self.options.device,
            "size": self.options.size,
            "threads": threads,
            "seed": sample,
        }
        if self.tuning is not None and plan.method in TUNED:
            records = await asyncio.to_thread(self.tuning.recall, plan.method)
            request["tuning"] = [record.as_request() for record in records]
        cache = cache_dir(self.options)
        outcome = await asyncio.to_thread(
            run_child,
            request,
            device=self.options.device,
            threads=threads,
            build_cache=cache / "build" / "offline",
            compiler_cache=cache / "compiler",
            limits=self.options.limits,
            entry="agents.offline.child",
            use_jail=self.options.jail,
            cancel=self.cancel,
        )
        message = outcome.result
        if message is None:
            return Candidate(None, error=unanswered(plan.method, outcome, self.options.limits))
        summary = str(message.get("summary") or "")
        source = message.get("source")
        if not isinstance(source, str) or not source.strip():
            return Candidate(None, error=f"{plan.method}: {summary or 'nothing to rewrite'}")
        notes = [summary]
        if message.get("compile_s") is not None:
            notes.append(
                f"torch.compile took {message['compile_s']:.1f} s on the first call "
                "(paid once per process; not included in the timing)"
            )
        notes += self._tuned(plan.method, source, message.get("tuning"))
        return Candidate(source, notes="; ".join(n for n in notes if n))

    def _tuned(self, pass_name: str, source: str, reply: object) -> list[str]:
        """Notes on the child's tuning report; its observations wait for `verified`."""
        if not isinstance(reply, dict):
            return []
        if reply.get("error"):
            return [f"the winning tiles were not read: {str(reply['error'])[:200]}"]
        seconds = float(reply.get("first_call_s") or 0.0)
        self.tuning_s += seconds
        observations = []
        for raw in reply.get("observations") or []:
            try:
                observations.append(observation_from(pass_name, raw))
            except ValueError as error:
                return [f"the winning tiles were not remembered: {error}"]
        if self.tuning is not None and observations:
            self._pending[source_hash(source)] = observations
        remembered = sum(o.from_memory for o in observations)
        return [
            f"the first call took {seconds:.1f} s compiling and autotuning "
            f"{len(observations)} kernel(s), {remembered} with their tile from memory"
        ]

    def verified(self, source: str) -> None:
        """The search judged `source` correct: remember what its kernels chose."""
        observations = self._pending.pop(source_hash(source), [])
        if self.tuning is None:
            return
        try:
            for observation in observations:
                self.tuning.record(observation)
        except MemoryStoreError as error:  # losing a tile must never stop the search
            log.warning("memory: tuning choices not recorded: %s", error)


def unanswered(pass_name: str, outcome: ChildOutcome, limits: Limits) -> str:
    """Why a pass's child gave no answer, in one line: its phase's wall clock ran out, it
    was cancelled, or it died (its last words, or how it exited)."""
    if outcome.timed_out_phase is not None:
        phase = outcome.timed_out_phase
        limit = limits.build_timeout_s if phase == "build" else limits.run_timeout_s
        return f"the {pass_name} pass ran past its {limit:g} s {phase} limit"
    if outcome.cancelled:
        return f"the {pass_name} pass was cancelled"
    last = outcome.stderr_tail.strip().splitlines()
    if last:
        return f"the {pass_name} pass crashed: {last[-1][:200]}"
    return f"the {pass_name} pass crashed without a word (exit status {outcome.returncode})"


class OfflineSummarizer:
    """A lesson from the measurement alone: which pass, on what kind of task, gave what."""

    label = LABEL

    def __init__(self, device: str) -> None:
        self.device = device

    async def summarize(
        self, slow_source: str, fast_source: str, gain: float, plan: str, regression: bool
    ) -> Summary:
        head = (plan.splitlines() or ["a rewrite"])[0]
        if regression:
            return Summary(
                title=f"{head}: slower",
                lesson=f"On this kind of kernel on {self.device}, {head} made it {gain:.2f}x "
                "slower; do not apply it here.",
            )
        lesson = f"On this kind of kernel on {self.device}, {head} gave {gain:.2f}x."
        rules = _saturation_rules(fast_source)
        if rules:
            lesson += f" The identities that made it: {rules}."
        tiles = _MEMORY_TILE.findall(fast_source)
        if tiles:
            named = "; ".join(f"tile from memory ({site}: {tile})" for site, tile in tiles[:4])
            lesson += f" Autotuning skipped: {named}."
        return Summary(title=f"{head}: {gain:.2f}x", lesson=lesson)


_MEMORY_TILE = re.compile(r"^# tile from memory \(([^)\n]{1,200})\): ([^\n]{1,80})$", re.M)
_SATURATION_DOC = re.compile(r'"""equality saturation: ([^"\n]{1,300})"""')


def _saturation_rules(source: str) -> str:
    """The rules an equality-saturation rewrite names in its docstring, with their laws."""
    found = _SATURATION_DOC.search(source)
    if not found:
        return ""
    from agents.offline.egraph.rules import by_name

    laws = by_name()
    named = [name.strip() for name in found.group(1).split(";") if name.strip()]
    return "; ".join(f"{n} ({laws[n].law})" if n in laws else n for n in named)
