"""The budgeted beam search: AccelOpt's planner/executor/summarizer loop, with KernelSkill's
repairer, gate and logbook.

Each iteration the planner writes N single-method plans for each of the B kept kernels, the
executor realises each plan K times, failed samples go to the repairer (up to R times), and
every sample is judged by `evaluate` in the sandbox. Per plan the fastest correct sample
survives (else the branch falls back to its parent), and the B fastest kernels overall form
the next beam. The summarizer turns slow/fast pairs into memory every iteration.

The search never returns a kernel that `evaluate` did not call correct in this run, nor one
that is not faster than the reference when re-measured on fresh inputs at the end:
"no improvement" is an honest answer.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from agents.evalpool import EvalService, LocalPool, PoolSettings
from agents.evaluate import EvalCancelled, EvalOptions
from agents.llm.accounting import CostMeter
from agents.llm.base import LLMError, MissingAPIKeyError
from agents.profile.api import ProfileError, profile_file
from agents.profile.report import Profile
from agents.roles.base import (
    Candidate,
    Executor,
    Plan,
    Planner,
    PlanningContext,
    Repairer,
    SkillBrief,
    Summarizer,
)
from agents.search import events as ev
from agents.search.budget import Budget, BudgetTracker, CancelToken
from agents.search.knowledge import (
    attempt_lines,
    hot_lines_json,
    render_profile,
    signature_for,
    skill_briefs,
)
from agents.search.result import SearchResult, TrajectoryPoint
from agents.task import SourceFile
from agents.verify.verdict import EvalResult, Verdict
from memory.experiences import Experience, ExperienceStore, TaskSignature, from_attempt
from memory.gate import gate
from memory.logbook import Logbook, plan_key, plan_similarity, task_id_for
from memory.normalize import source_hash

log = logging.getLogger("kernel_agent.search")

REPAIRABLE = (Verdict.COMPILE_ERROR, Verdict.RUNTIME_ERROR, Verdict.INCORRECT)
ERROR_LOG_CHARS = 4000


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
class _Sample:
    plan: Plan
    parent: Node
    source: str | None
    result: EvalResult | None
    speedup: float | None
    attempt_id: int | None = None


@dataclass
class _State:
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


class Search:
    """One optimisation of one task. Create, then `await run()`."""

    def __init__(
        self,
        reference: SourceFile,
        roles: Roles,
        meter: CostMeter,
        *,
        options: EvalOptions,
        config: SearchConfig | None = None,
        budget: Budget | None = None,
        memory: SearchMemory | None = None,
        on_event: Callable[[ev.SearchEvent], None] | None = None,
        cancel: CancelToken | None = None,
        task_name: str = "",
        pool: EvalService | None = None,
    ) -> None:
        self.reference = reference
        self.roles = roles
        self.meter = meter
        # Agents require drop-in replacements: Model's state_dict must load as it is.
        self.options = replace(options, require_state_dict=True)
        self.config = config or SearchConfig()
        # Builds overlap up to parallel_evals; timings on one device never do.
        self.pool = pool or LocalPool(PoolSettings(build_slots=self.config.parallel_evals))
        self.tracker = BudgetTracker(budget or Budget(), meter)
        self.memory = memory or SearchMemory()
        self.on_event = on_event or (lambda event: None)
        self.cancel = cancel or CancelToken()
        self.task_name = task_name or reference.label
        self._profiles: dict[str, Profile | None] = {}
        self.device_name = options.device
        self.task_id = task_id_for(reference.text, options.device)
        self.signature = TaskSignature(device_name=options.device)
        self.allowed: list[SkillBrief] = []
        self.root_profiled = False
        self.forbidden: list[SkillBrief] = []
        self._stop_reason = ""
        self._branch_samples: dict[int, list[_Sample]] = {}
        self._state = _State(best=Node(source=reference.text, speedup=1.0), beam=[])

    # -- entry -------------------------------------------------------------------------------

    async def run(self) -> SearchResult:
        """Run to the end, a budget cap, `patience`, or cancellation; never raises for a
        candidate's or a model's failure (a missing API key does raise)."""
        self.emit(
            ev.Started(
                task=self.task_name,
                device=self.options.device,
                planner=self.roles.planner.label,
                executor=self.roles.executor.label,
                beam=self.config.beam,
                plans=self.config.plans,
                samples=self.config.samples,
                iterations=self.config.iterations,
            )
        )
        root = self._state.best
        state = self._state
        state.beam = [root]
        state.seen[source_hash(root.source)] = ("the reference itself", 1.0)
        try:
            await self._prepare(root)
            await self._loop(state)
        except asyncio.CancelledError:
            self._stop_reason = "cancelled"
        except MissingAPIKeyError:
            raise
        if self.cancel.cancelled:
            self._stop_reason = "cancelled"
        return await self._finish(state)

    def emit(self, event: ev.SearchEvent) -> None:
        try:
            self.on_event(event)
        except Exception:  # a broken progress display must not end the search
            log.exception("event handler failed on %s", event.kind)

    @property
    def reference_profile(self) -> Profile | None:
        """The reference's profile once `run` has taken it (the editor's diagnostics use it);
        None when profiling is off or failed."""
        return self._profiles.get(source_hash(self.reference.text))

    # -- set-up ------------------------------------------------------------------------------

    async def _prepare(self, root: Node) -> None:
        root.profile = await self._profile(root.source, is_reference=True)
        result = gate(root.profile, self.reference.text, device=self.options.device)
        self.allowed, self.forbidden = skill_briefs(result)
        self.root_profiled = root.profile is not None
        self.signature = signature_for(root.profile, result, self.options.device)
        if root.profile is not None:
            self.device_name = root.profile.ceilings.name or self.options.device
            self.emit(ev.Profiled(render_profile(root.profile), hot_lines_json(root.profile)))
        if self.memory.logbook is not None:
            known = self.memory.logbook.was_tried(self.task_id, source=root.source)
            if known is not None and known.parent_id is None:
                root.attempt_id = known.id
            else:
                root.attempt_id = self.memory.logbook.record(
                    self.task_id, verdict="correct", source=root.source, plan="", speedup=1.0
                ).id

    async def _profile(self, source: str, *, is_reference: bool = False) -> Profile | None:
        """Profile a kernel in the sandbox (a ModelNew is profiled under the reference's
        inputs). Failure is a note, not an error: the planner can work without it."""
        if not self.config.profile or self.cancel.cancelled:
            return None
        key = source_hash(source)
        if key in self._profiles:
            return self._profiles[key]
        text = source if is_reference else _as_problem(self.reference.text, source)
        try:
            profile = await asyncio.to_thread(
                profile_file,
                SourceFile(text, self.reference.path),
                device=self.options.device,
                size=self.options.size,
                threads=self.options.threads,
                repeat=self.config.profile_repeat,
                use_jail=self.options.jail,
                cache_dir=self.options.cache_dir,
                cancel=self.cancel.event,
            )
        except ProfileError as error:
            log.info("profiling failed: %s", error)
            profile = None
        self._profiles[key] = profile
        return profile

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self, state: _State) -> None:
        stale = 0
        for iteration in range(1, self.config.iterations + 1):
            if self._should_stop():
                return
            state.iteration = iteration
            self.emit(
                ev.IterationStarted(
                    iteration=iteration,
                    iterations=self.config.iterations,
                    beam_speedups=[round(n.speedup, 4) for n in state.beam],
                    best_speedup=round(state.best.speedup, 4),
                    evaluations=state.evaluations,
                )
            )
            best_before = state.best.speedup
            branches = await self._plan_all(state)
            if not branches:
                if state.llm_failures and not self._stop_reason:
                    self._stop_reason = f"the model failed: {state.last_llm_error}"
                elif not self._stop_reason:
                    self._stop_reason = "the planner had no new plans"
                return
            outcomes = await self._realise(state, branches)
            children = [child for child in outcomes if child is not None]
            await self._remember(state, branches, outcomes)
            pool = {id(n): n for n in state.beam + children}
            state.beam = sorted(pool.values(), key=lambda n: -n.speedup)[: self.config.beam]
            for node in state.beam:
                if node.profile is None and not node.is_root:
                    node.profile = await self._profile(node.source)
            if state.best.speedup > best_before:
                stale = 0
            else:
                stale += 1
                if stale >= self.config.patience:
                    self._stop_reason = f"no new best in {stale} iterations"
                    return
        self._stop_reason = self._stop_reason or f"ran all {self.config.iterations} iterations"

    def _should_stop(self) -> bool:
        if self.cancel.cancelled:
            self._stop_reason = "cancelled"
            return True
        reason = self.tracker.exhausted()
        if reason:
            self._stop_reason = reason
            return True
        return False

    # -- planning ----------------------------------------------------------------------------

    def _context(self, state: _State, parent: Node, seed: int) -> PlanningContext:
        lessons: list[str] = []
        if self.memory.experiences is not None:
            chosen = self.memory.experiences.select_for_prompt(
                self.signature, query_text=parent.source
            )
            lessons = [exp.summary() for exp in chosen]
        recent: list[str] = []
        avoid: list[str] = []
        if self.memory.logbook is not None:
            recent = attempt_lines(self.memory.logbook.attempts(self.task_id))
            avoid = self.memory.logbook.failed_plans(self.task_id)[-20:]
        return PlanningContext(
            task_source=self.reference.text,
            candidate_source=parent.source,
            candidate_speedup=parent.speedup,
            device=self.options.device,
            profile_summary=render_profile(parent.profile),
            allowed_skills=self.allowed,
            forbidden_skills=self.forbidden,
            lessons=lessons,
            recent_attempts=recent,
            avoid_plans=avoid,
            applied_methods=list(parent.methods),
            seed=seed,
            signature=self.signature,
            gated=self.root_profiled,
        )

    async def _plan_all(self, state: _State) -> list[tuple[Plan, Node]]:
        """N plans per beam entry, minus repeats and plans the logbook says failed."""
        jobs = []
        for parent in state.beam:
            for n in range(self.config.plans):  # the slot number spreads the N plans
                jobs.append((parent, self._context(state, parent, n)))
        replies = await asyncio.gather(
            *(self._call_planner(ctx) for _, ctx in jobs), return_exceptions=False
        )
        branches: list[tuple[Plan, Node]] = []
        keys: dict[int, list[str]] = {}
        for (parent, ctx), plan in zip(jobs, replies, strict=True):
            if plan is None:
                continue
            key = plan_key(plan.text())
            taken = keys.setdefault(id(parent), [])
            if any(k == key or plan_similarity(k, key) >= 0.85 for k in taken):
                continue
            failed = [plan_key(p) for p in ctx.avoid_plans]
            if any(k == key or plan_similarity(k, key) >= 0.85 for k in failed):
                continue
            taken.append(key)
            branches.append((plan, parent))
            self.emit(
                ev.PlanMade(
                    iteration=state.iteration,
                    parent=parent.attempt_id or 0,
                    title=plan.title,
                    method=plan.method,
                )
            )
        return branches

    async def _call_planner(self, context: PlanningContext) -> Plan | None:
        if self._should_stop():
            return None
        try:
            return await self.roles.planner.plan(context)
        except MissingAPIKeyError:
            raise
        except LLMError as error:
            self._llm_failed(error)
            return None

    def _llm_failed(self, error: Exception) -> None:
        log.warning("model call failed: %s", error)
        self._state.llm_failures += 1
        self._state.last_llm_error = str(error)

    # -- one branch: K samples, each repaired up to R times -----------------------------------

    async def _realise(self, state: _State, branches: list[tuple[Plan, Node]]) -> list:
        """All K samples of every plan: the executor calls run at once; the judging chains
        (evaluate, then repair) start in plan and sample order, `parallel_evals` at a time,
        so which of two identical samples is judged does not depend on reply timing."""
        contexts = [self._context(state, parent, 0) for _, parent in branches]
        keys = [(b, k) for b in range(len(branches)) for k in range(self.config.samples)]
        drafts = await asyncio.gather(
            *(self._draft(contexts[b], branches[b][0], k) for b, k in keys)
        )
        samples: dict[tuple[int, int], _Sample] = {}
        slots = asyncio.Semaphore(self.config.parallel_evals)

        async def chain(b: int, k: int, draft) -> None:
            try:
                plan, parent = branches[b]
                samples[b, k] = await self._judge(state, contexts[b], plan, parent, k, draft)
            finally:
                slots.release()

        running = []
        for (b, k), draft in zip(keys, drafts, strict=True):
            await slots.acquire()
            running.append(asyncio.ensure_future(chain(b, k, draft)))
        if running:
            await asyncio.gather(*running)
        return [
            self._child(
                state,
                plan,
                parent,
                [samples[b, k] for k in range(self.config.samples) if (b, k) in samples],
            )
            for b, (plan, parent) in enumerate(branches)
        ]

    def _child(self, state: _State, plan: Plan, parent: Node, samples: list) -> Node | None:
        """The branch's fastest correct sample; None: the branch falls back to its parent."""
        correct = [s for s in samples if s.speedup is not None]
        if not correct:
            return None
        best = max(correct, key=lambda s: s.speedup or 0.0)
        assert best.source is not None and best.result is not None and best.speedup is not None
        node = Node(
            source=best.source,
            speedup=best.speedup,
            methods=(*parent.methods, plan.method),
            plan=plan,
            attempt_id=best.attempt_id,
            iteration=state.iteration,
            result=best.result,
            ci=best.result.speedup_ci,
        )
        if node.speedup > state.best.speedup:
            state.best = node
            self.emit(
                ev.NewBest(
                    iteration=state.iteration,
                    speedup=round(node.speedup, 4),
                    plan=plan.title,
                    evaluations=state.evaluations,
                )
            )
        self._branch_samples[id(node)] = samples  # the slower ones teach negative lessons
        return node

    async def _draft(self, context: PlanningContext, plan: Plan, k: int) -> Candidate | None:
        if self._should_stop():
            return None
        try:
            return await self.roles.executor.implement(context, plan, k)
        except MissingAPIKeyError:
            raise
        except LLMError as error:
            self._llm_failed(error)
            return None

    async def _judge(
        self,
        state: _State,
        context: PlanningContext,
        plan: Plan,
        parent: Node,
        k: int,
        candidate: Candidate | None,
    ) -> _Sample:
        sample = _Sample(plan=plan, parent=parent, source=None, result=None, speedup=None)
        if candidate is None or self._should_stop():
            return sample
        source, error = candidate.source, candidate.error
        attempt_parent = parent.attempt_id
        failed: tuple[str, EvalResult] | None = None  # the last judged failure, to repair
        for repair in range(self.config.repairs + 1):
            note = ""
            if source is None:
                note = error or "the reply had no code"
                self._record(state, plan, k, repair, "no_code", None, note, counted=False)
                self._log(plan, None, attempt_parent, "no_code", None, note, k)
            elif known := self._known_outcome(state, source):
                note = f"the fix was {known}"
                self._record(state, plan, k, repair, "duplicate", None, known, counted=False)
            else:
                result = await self._evaluate(state, source)
                if result is None:  # cancelled or out of budget
                    return sample
                speedup = result.speedup if result.correct else None
                reason = "; ".join(result.reasons)[:300]
                attempt_id = self._log(
                    plan, source, attempt_parent, result.verdict.value, speedup, reason, k
                )
                self._record(state, plan, k, repair, result.verdict.value, speedup, reason)
                sample.source, sample.result, sample.attempt_id = source, result, attempt_id
                if result.correct and speedup is not None:
                    sample.speedup = speedup
                    return sample
                if result.verdict not in REPAIRABLE:
                    return sample
                failed, attempt_parent = (source, result), attempt_id
            if (
                failed is None
                or self.roles.repairer is None
                or repair >= self.config.repairs
                or self._should_stop()
            ):
                return sample
            failed_source, failed_result = failed
            log_text = _error_log(failed_result)
            if note:
                log_text += f"\n\nYour previous fix was not judged: {note}."
            try:
                fixed = await self.roles.repairer.repair(
                    context, plan, failed_source, failed_result.verdict.value, log_text, repair + 1
                )
            except MissingAPIKeyError:
                raise
            except LLMError as llm_error:
                self._llm_failed(llm_error)
                return sample
            source, error = fixed.source, fixed.error
        return sample

    def _seed_for(self, key: str) -> int:
        """Inputs depend on the search's seed and the code, not on which concurrent sample
        finished first, so a seeded run judges every candidate on the same inputs."""
        digest = hashlib.sha256(f"{self.config.seed}:{key}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % (2**31 - 10_000)

    def _known_outcome(self, state: _State, source: str) -> str:
        """Why this code needs no evaluation (judged already in this search, or failed in an
        earlier one according to the logbook), else ""."""
        key = source_hash(source)
        if key in state.seen:
            verdict, _ = state.seen[key]
            return f"identical to a kernel already judged in this search ({verdict})"
        if self.memory.logbook is not None:
            earlier = self.memory.logbook.was_tried(self.task_id, source=source)
            if earlier is not None and not earlier.correct:
                return f"the logbook has this code failing before ({earlier.verdict})"
        state.seen[key] = ("being judged", None)  # claimed now: concurrent twins are skipped
        return ""

    async def _evaluate(self, state: _State, source: str) -> EvalResult | None:
        """Judge one candidate in the sandbox (identical code is judged once per search)."""
        key = source_hash(source)
        # The caller holds one of the parallel_evals slots.
        if self._should_stop():
            return None
        self.tracker.evaluations += 1
        state.evaluations += 1
        options = replace(self.options, seed=self._seed_for(key))
        try:
            result = await self.pool.submit(
                self.reference,
                SourceFile(source, f"<candidate {state.evaluations}>"),
                options,
                self.cancel.event,
            )
        except EvalCancelled:
            return None
        state.seen[key] = (result.verdict.value, result.speedup)
        return result

    def _record(
        self,
        state: _State,
        plan: Plan,
        sample: int,
        repair: int,
        verdict: str,
        speedup: float | None,
        reason: str,
        counted: bool = True,
    ) -> None:
        if speedup is not None:
            state.best_seen = max(state.best_seen, speedup)
        best = state.best_seen
        if counted:
            state.trajectory.append(
                TrajectoryPoint(
                    evaluation=state.evaluations,
                    iteration=state.iteration,
                    plan=plan.title,
                    method=plan.method,
                    sample=sample,
                    repair=repair,
                    verdict=verdict,
                    speedup=None if speedup is None else round(speedup, 4),
                    best_speedup=round(best, 4),
                    elapsed_s=round(self.tracker.elapsed_s(), 2),
                    reason=reason if verdict != "correct" else "",
                )
            )
        self.emit(
            ev.CandidateEvaluated(
                iteration=state.iteration,
                plan=plan.title,
                sample=sample,
                repair=repair,
                verdict=verdict,
                speedup=None if speedup is None else round(speedup, 4),
                evaluations=state.evaluations,
                reason=reason if verdict != "correct" else "",
            )
        )

    def _log(
        self,
        plan: Plan,
        source: str | None,
        parent_id: int | None,
        verdict: str,
        speedup: float | None,
        error: str,
        sample: int,
    ) -> int | None:
        if self.memory.logbook is None:
            return None
        text = plan.text()  # a repair's history is its parent chain, not its plan text
        attempt = self.memory.logbook.record(
            self.task_id,
            verdict=verdict,
            source=source,
            source_hash=None if source is not None else source_hash(f"{plan.text()}#{sample}"),
            plan=text,
            parent_id=parent_id,
            skills=(plan.skill_id,) if plan.skill_id else (),
            speedup=speedup,
            error=error,
        )
        return attempt.id

    # -- memory ------------------------------------------------------------------------------

    async def _remember(self, state: _State, branches, outcomes) -> None:
        """AccelOpt's per-iteration update: slow/fast pairs of this iteration, summarised."""
        store = self.memory.experiences
        if store is None:
            return
        pairs: list[tuple[Node, str, float, Plan]] = []  # parent, candidate, ratio, plan
        for (plan, parent), child in zip(branches, outcomes, strict=True):
            if child is None:
                continue
            for sample in self._branch_samples.pop(id(child), []):
                if sample.speedup is None or sample.source is None or parent.speedup <= 0:
                    continue
                pairs.append((parent, sample.source, sample.speedup / parent.speedup, plan))
        candidates: list[tuple[Node, str, float, Plan]] = []
        for pair in pairs:
            if store.classify(pair[2]) is not None:
                candidates.append(pair)
        candidates.sort(key=lambda p: -max(p[2], 1 / p[2]))
        candidates = candidates[: store.policy.max_new_per_iteration * 2]
        summaries = await asyncio.gather(*(self._summarize(*pair) for pair in candidates))
        experiences: list[Experience] = []
        for (parent, source, ratio, plan), summary in zip(candidates, summaries, strict=True):
            exp = from_attempt(
                store.policy,
                self.signature,
                parent.source,
                source,
                ratio,
                plan=plan.text(),
                title=summary[0],
                lesson=summary[1],
                model=self.roles.planner.label,
            )
            if exp is not None:
                experiences.append(exp)
        if experiences:
            state.memory_written.extend(store.add_iteration(experiences))

    async def _summarize(
        self, parent: Node, source: str, ratio: float, plan: Plan
    ) -> tuple[str, str]:
        regression = ratio < 1
        slow, fast = (source, parent.source) if regression else (parent.source, source)
        gain = 1 / ratio if regression else ratio
        if self.roles.summarizer is None or self._should_stop():
            return plan.title, ""
        try:
            summary = await self.roles.summarizer.summarize(
                slow, fast, gain, plan.text(), regression
            )
        except MissingAPIKeyError:
            raise
        except LLMError as error:
            self._llm_failed(error)
            return plan.title, ""
        return summary.title, summary.lesson

    # -- the answer --------------------------------------------------------------------------

    async def _finish(self, state: _State) -> SearchResult:
        confirmed_node: Node | None = None
        confirmation: EvalResult | None = None
        notes = list(state.notes)
        found = sorted(_all_nodes(state), key=lambda n: -n.speedup)
        found = [n for n in found if not n.is_root and n.speedup > 1.0]
        if found and not self.cancel.cancelled:
            for node in found[: self.config.confirm]:
                result = await self._confirm(state, node)
                if result is None:
                    break
                if _faster(result):
                    confirmed_node, confirmation = node, result
                    break
                notes.append(
                    f"{node.plan.title if node.plan else 'candidate'}: measured "
                    f"{node.speedup:.2f}x in the search but "
                    + (
                        f"{result.speedup:.2f}x on fresh inputs"
                        if result.correct and result.speedup
                        else f"{result.verdict.value} on fresh inputs"
                    )
                    + "; not offered"
                )
        elif found and self.cancel.cancelled:
            confirmed_node = found[0]  # verified correct in this run; not re-measured
            notes.append("cancelled: the best kernel so far was not re-measured")
        improved = confirmed_node is not None
        speedup = 1.0
        ci = None
        if confirmed_node is not None:
            if confirmation is not None:
                speedup = confirmation.speedup or confirmed_node.speedup
                ci = confirmation.speedup_ci
            else:
                speedup, ci = confirmed_node.speedup, confirmed_node.ci
        result = SearchResult(
            task=self.task_name,
            device=self.options.device,
            improved=improved,
            verdict="correct" if improved else "no_improvement",
            speedup=round(speedup, 4),
            speedup_ci=ci,
            confirmed=confirmation is not None,
            source=confirmed_node.source if confirmed_node else None,
            methods=list(confirmed_node.methods) if confirmed_node else [],
            evaluations=state.evaluations,
            iterations=state.iteration,
            stopped_because=self._stop_reason or "done",
            elapsed_s=round(self.tracker.elapsed_s(), 2),
            cost=self.meter.to_json(),
            planner=self.roles.planner.label,
            executor=self.roles.executor.label,
            trajectory=state.trajectory,
            eval_report=confirmation.to_json() if confirmation else None,
            notes=notes,
            memory={
                "task_id": self.task_id,
                "experiences_written": len(state.memory_written),
                "logbook_attempts": (
                    len(self.memory.logbook.attempts(self.task_id)) if self.memory.logbook else 0
                ),
            },
        )
        self.emit(
            ev.Finished(
                verdict=result.verdict,
                speedup=result.speedup,
                improved=improved,
                evaluations=state.evaluations,
                stopped_because=result.stopped_because,
                cost_usd=self.meter.total_cost_usd,
                tokens=self.meter.total_tokens,
            )
        )
        return result

    async def _confirm(self, state: _State, node: Node) -> EvalResult | None:
        options = replace(
            self.options,
            seed=self._seed_for(source_hash(node.source) + "#confirm"),
            timing_budget_s=max(self.options.timing_budget_s, self.config.confirm_budget_s),
        )
        state.evaluations += 1
        try:
            return await self.pool.submit(
                self.reference,
                SourceFile(node.source, "<best candidate>"),
                options,
                self.cancel.event,
            )
        except EvalCancelled:
            return None


def _faster(result: EvalResult) -> bool:
    """Correct, and faster than the reference beyond the timing noise."""
    if not result.correct or not result.speedup or result.speedup <= 1.0:
        return False
    if result.speedup_ci:
        return result.speedup_ci[0] > 1.0
    return result.speedup >= 1.02


def _all_nodes(state: _State) -> list[Node]:
    return list({id(n): n for n in [state.best, *state.beam]}.values())


def _as_problem(reference: str, candidate: str) -> str:
    """A problem file whose Model is the candidate's ModelNew, with the reference's inputs."""
    return f"{reference}\n\n# --- candidate ---\n{candidate}\n\nModel = ModelNew\n"


def _error_log(result: EvalResult) -> str:
    text = "\n".join(result.reasons)
    if len(text) <= ERROR_LOG_CHARS:
        return text
    head = text[: ERROR_LOG_CHARS // 4]
    tail = text[-(ERROR_LOG_CHARS * 3 // 4) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} chars cut]\n{tail}"


async def run_search(search: Search) -> SearchResult:
    """Run `search`, stopping it within a fraction of a second once its token is cancelled."""
    task = asyncio.ensure_future(search.run())
    while not task.done():
        await asyncio.wait({task}, timeout=0.1)
        if search.cancel.cancelled and not task.done():
            # Evaluations see the event and end themselves; the model calls are cancelled.
            await asyncio.sleep(0.5)
            if not task.done():
                task.cancel()
                break
    try:
        return await task
    except asyncio.CancelledError:
        return await search._finish(search._state)
