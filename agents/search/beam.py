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
from dataclasses import replace

from agents.evalpool import EvalService, LocalPool, PoolSettings
from agents.evaluate import EvalCancelled, EvalOptions
from agents.llm.accounting import CostMeter
from agents.llm.base import BudgetExhaustedError, LLMError, MissingAPIKeyError
from agents.profile.api import ProfileError, profile_file
from agents.profile.report import Profile
from agents.roles.base import Candidate, Plan, PlanningContext, SkillBrief
from agents.search import events as ev
from agents.search.budget import Budget, BudgetTracker, CancelToken
from agents.search.finish import finish, ranked_speedup
from agents.search.knowledge import (
    PlanHistory,
    attempt_lines,
    hot_lines_json,
    render_profile,
    signature_for,
    skill_briefs,
)
from agents.search.nodes import Node, Roles, Sample, SearchConfig, SearchMemory, SearchState
from agents.search.recall import recall_best
from agents.search.records import log_attempt, note_best, record_outcome, record_unjudged
from agents.search.remember import remember
from agents.search.result import SearchResult
from agents.task import SourceFile
from agents.verify.verdict import EvalResult, Verdict
from memory.experiences import TaskSignature
from memory.gate import gate
from memory.logbook import plan_key, task_id_for
from memory.normalize import source_hash

__all__ = ["Roles", "Search", "SearchConfig", "SearchMemory", "run_search"]

log = logging.getLogger("kernel_agent.search")

REPAIRABLE = (Verdict.COMPILE_ERROR, Verdict.RUNTIME_ERROR, Verdict.INCORRECT)
ERROR_LOG_CHARS = 4000


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
        self._branch_samples: dict[int, list[Sample]] = {}
        self.history = PlanHistory()
        self._state = SearchState(best=Node(source=reference.text, speedup=1.0), beam=[])

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
            await recall_best(self, state)  # memory's best, re-verified: never less
            await self._loop(state)
        except asyncio.CancelledError:
            self._stop_reason = "cancelled"
        except MissingAPIKeyError:
            raise
        if self.cancel.cancelled:
            self._stop_reason = "cancelled"
        try:
            return await finish(self, state)
        finally:
            release_warm_workers(self.pool)

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

    async def _loop(self, state: SearchState) -> None:
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
            failures = state.llm_failures
            branches, repeats = await self._plan_all(state)
            if not branches:
                failed = state.llm_failures > failures
                self._stop_reason = self._stop_reason or self._no_plans(repeats, failed)
                return
            outcomes = await self._realise(state, branches)
            children = [child for child in outcomes if child is not None]
            await remember(self, state, branches, outcomes)
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

    def _no_plans(self, repeats: int, failed: bool) -> str:
        """Why a planning round gave nothing to try: the budget, the model, or repeats."""
        if self._should_stop():
            return self._stop_reason
        if failed:
            return f"the model failed: {self._state.last_llm_error}"
        if repeats:
            return (
                f"the planner only repeated plans already tried ({repeats} repeats this "
                "round): nothing new to try"
            )
        return "the planner proposed no usable plan (unreadable replies or forbidden skills)"

    def _should_stop(self, calls: bool = True) -> bool:
        """Cancelled or over a cap; `calls=False` for work that makes no model call (judging
        a candidate already written), which only the evaluation and time caps stop."""
        if self.cancel.cancelled:
            self._stop_reason = "cancelled"
            return True
        reason = self.tracker.exhausted(calls=calls)
        if reason:
            self._stop_reason = reason
            return True
        return False

    # -- planning ----------------------------------------------------------------------------

    def _context(self, state: SearchState, parent: Node, seed: int) -> PlanningContext:
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

    async def _plan_all(self, state: SearchState) -> tuple[list[tuple[Plan, Node]], int]:
        """N plans per beam entry, no more than the evaluations left can judge, minus
        repeats (see `PlanHistory`); also returns how many replies were repeats."""
        # (slot, kernel); the slot number spreads the N plans of one kernel
        slots = [(n, b) for n in range(self.config.plans) for b in range(len(state.beam))]
        left = self.tracker.evaluations_left()
        if left is not None:
            slots = slots[: max(1, left)]  # slot-major, so every kernel keeps its first plans
        slots.sort(key=lambda slot: (slot[1], slot[0]))
        jobs = [(state.beam[b], self._context(state, state.beam[b], n)) for n, b in slots]
        replies = await asyncio.gather(
            *(self._call_planner(ctx) for _, ctx in jobs), return_exceptions=False
        )
        branches: list[tuple[Plan, Node]] = []
        repeats = 0
        for (parent, ctx), plan in zip(jobs, replies, strict=True):
            if plan is None:
                continue
            key = plan_key(plan.text())
            failed = [plan_key(p) for p in ctx.avoid_plans]
            if self.history.repeats(key, parent.source, parent.plan_keys, failed):
                repeats += 1
                continue
            self.history.add(key, parent.source)
            branches.append((plan, parent))
            self.emit(
                ev.PlanMade(
                    iteration=state.iteration,
                    parent=parent.attempt_id or 0,
                    title=plan.title,
                    method=plan.method,
                )
            )
        return branches, repeats

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
        """Count a failed call; each distinct failure is logged once (one line, not one per
        call). A call the budget refused is not a failure: `_should_stop` reports it."""
        if isinstance(error, BudgetExhaustedError):
            return
        state = self._state
        state.llm_failures += 1
        if str(error) != state.last_llm_error:
            log.warning("model call failed: %s", error)
        state.last_llm_error = str(error)

    # -- one branch: K samples, each repaired up to R times -----------------------------------

    async def _realise(self, state: SearchState, branches: list[tuple[Plan, Node]]) -> list:
        """All K samples of every plan: the executor calls run at once; the judging chains
        (evaluate, then repair) start in plan and sample order, `parallel_evals` at a time,
        so which of two identical samples is judged does not depend on reply timing."""
        contexts = [self._context(state, parent, 0) for _, parent in branches]
        keys = [(b, k) for b in range(len(branches)) for k in range(self.config.samples)]
        drafts = await asyncio.gather(
            *(self._draft(contexts[b], branches[b][0], k) for b, k in keys)
        )
        samples: dict[tuple[int, int], Sample] = {}
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

    def _child(self, state: SearchState, plan: Plan, parent: Node, samples: list) -> Node | None:
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
            plan_keys=(*parent.plan_keys, plan_key(plan.text())),
            plan=plan,
            attempt_id=best.attempt_id,
            iteration=state.iteration,
            result=best.result,
            ci=best.result.speedup_ci,
        )
        note_best(self, state, node, plan.title)
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
        state: SearchState,
        context: PlanningContext,
        plan: Plan,
        parent: Node,
        k: int,
        candidate: Candidate | None,
    ) -> Sample:
        sample = Sample(plan=plan, parent=parent, source=None, result=None, speedup=None)
        if candidate is None or self._should_stop(calls=False):
            record_unjudged(self, state, plan, k, 0)
            return sample
        source, error = candidate.source, candidate.error
        attempt_parent = parent.attempt_id
        failed: tuple[str, EvalResult] | None = None  # the last judged failure, to repair
        for repair in range(self.config.repairs + 1):
            note = ""
            if source is None:
                note = error or "the reply had no code"
                record_outcome(self, state, plan, k, repair, "no_code", None, note, counted=False)
                log_attempt(self, plan, None, attempt_parent, "no_code", None, note, k)
            elif known := self._known_outcome(state, source):
                note = f"the fix was {known}"
                record_outcome(
                    self, state, plan, k, repair, "duplicate", None, known, counted=False
                )
            else:
                result = await self._evaluate(state, source)
                if result is None:  # cancelled or out of budget
                    record_unjudged(self, state, plan, k, repair)
                    return sample
                speedup = ranked_speedup(result)  # an unstable timing ranks as 1.0 at most
                reason = "; ".join(result.reasons)[:300]
                attempt_id = log_attempt(
                    self, plan, source, attempt_parent, result.verdict.value, speedup, reason, k
                )
                record_outcome(
                    self, state, plan, k, repair, result.verdict.value, speedup, reason,
                    result=result, source=source,
                )  # fmt: skip
                sample.source, sample.result, sample.attempt_id = source, result, attempt_id
                if result.correct and speedup is not None:
                    sample.speedup = speedup
                    if hasattr(self.roles.executor, "verified"):  # it may now learn from it
                        self.roles.executor.verified(source)
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
        """The init seed (Model's weights, init arguments) depends on the search's seed and
        the code, not on which concurrent sample finished first, so a seeded run builds every
        candidate's model alike; trial inputs are fresh every verdict (agents/verify/judge.py)."""
        digest = hashlib.sha256(f"{self.config.seed}:{key}".encode()).digest()
        return int.from_bytes(digest[:4], "big") % (2**31 - 10_000)

    def _known_outcome(self, state: SearchState, source: str) -> str:
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

    async def _evaluate(self, state: SearchState, source: str) -> EvalResult | None:
        """Judge one candidate in the sandbox (identical code is judged once per search)."""
        key = source_hash(source)
        # The caller holds one of the parallel_evals slots.
        if self._should_stop(calls=False):
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


def _as_problem(reference: str, candidate: str) -> str:
    """A problem file whose reference is the candidate's ModelNew, with the reference's
    inputs. It names ModelNew as the reference instead of rebinding `Model`, so code that
    says `super(Model, self)` still finds the file's own class."""
    from agents.task import CANDIDATE_CLASS, as_reference

    return as_reference(f"{reference}\n\n# --- candidate ---\n{candidate}", CANDIDATE_CLASS)


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
        try:
            return await finish(search, search._state)
        finally:
            release_warm_workers(search.pool)


def release_warm_workers(pool) -> None:
    """A finished search leaves no sandbox behind: the reference workers its pool kept warm
    between candidates are closed (the pool itself stays usable)."""
    release = getattr(pool, "release_warm_workers", None)
    if release is not None:
        release()
