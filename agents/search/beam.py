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
import logging
from collections.abc import Callable

from agents.display import plural
from agents.evalpool import EvalService
from agents.evaluate import EvalOptions
from agents.llm.accounting import CostMeter
from agents.llm.base import MissingAPIKeyError
from agents.profile.report import Profile
from agents.roles.base import Plan
from agents.search import events as ev
from agents.search.budget import Budget, CancelToken
from agents.search.context import SearchRun
from agents.search.finish import finish
from agents.search.judging import draft, judge
from agents.search.nodes import Node, Roles, Sample, SearchConfig, SearchMemory, SearchState
from agents.search.planning import plan_all, planning_context
from agents.search.recall import recall_best
from agents.search.records import note_best
from agents.search.remember import remember
from agents.search.result import SearchResult
from agents.search.setup import prepare, profile
from agents.search.wording import no_plans
from agents.task import SourceFile
from agents.verify.verdict import EvalResult
from memory.logbook import plan_key
from memory.normalize import source_hash

__all__ = ["Roles", "Search", "SearchConfig", "SearchMemory", "run_search"]

log = logging.getLogger("kernel_agent.search")


class Search:
    """One optimisation of one task. Create, then `await run()`. The steps the beam drives
    (set-up, planning, judging, records, memory, recall, finish) share its `SearchRun`."""

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
        self.context = SearchRun(
            reference,
            roles,
            meter,
            options=options,
            config=config or SearchConfig(),
            budget=budget or Budget(),
            memory=memory or SearchMemory(),
            on_event=on_event,
            cancel=cancel or CancelToken(),
            task_name=task_name,
            pool=pool,
        )

    @property
    def pool(self) -> EvalService:
        """Where candidates are judged (the caller closes a pool it did not pass in)."""
        return self.context.pool

    @property
    def cancel(self) -> CancelToken:
        return self.context.cancel

    @property
    def reference_profile(self) -> Profile | None:
        """The reference's profile once `run` has taken it (the editor's diagnostics use it);
        None when profiling is off or failed."""
        return self.context.reference_profile

    # -- entry -------------------------------------------------------------------------------

    async def run(self) -> SearchResult:
        """Run to the end, a budget cap, `patience`, or cancellation; never raises for a
        candidate's or a model's failure (a missing API key does raise)."""
        run = self.context
        run.emit(
            ev.Started(
                task=run.task_name,
                device=run.options.device,
                planner=run.roles.planner.label,
                executor=run.roles.executor.label,
                beam=run.config.beam,
                plans=run.config.plans,
                samples=run.config.samples,
                iterations=run.config.iterations,
            )
        )
        state = run.state
        root = state.best
        state.beam = [root]
        state.seen[source_hash(root.source)] = ("the reference itself", 1.0)
        try:
            if run.config.profile:
                run.emit(ev.PhaseStarted("profiling the reference"))
            await prepare(run, root)
            await recall_best(run, state)  # memory's best, re-verified: never less
            await self._loop(state)
        except asyncio.CancelledError:
            run.stop_reason = run.cancel.stop_reason()
        except MissingAPIKeyError:
            raise
        if run.cancel.cancelled:
            run.stop_reason = run.cancel.stop_reason()
        try:
            return await finish(run, state)
        finally:
            release_warm_workers(run.pool)

    # -- the loop ----------------------------------------------------------------------------

    async def _loop(self, state: SearchState) -> None:
        run = self.context
        stale = 0
        for iteration in range(1, run.config.iterations + 1):
            if run.should_stop():
                return
            state.iteration = iteration
            run.emit(
                ev.IterationStarted(
                    iteration=iteration,
                    iterations=run.config.iterations,
                    beam_speedups=[round(n.speedup, 4) for n in state.beam],
                    best_speedup=round(state.best.speedup, 4),
                    evaluations=state.evaluations,
                )
            )
            best_before = state.best.speedup
            failures = state.llm_failures
            run.emit(ev.PhaseStarted("planning"))
            branches, repeats = await plan_all(run, state)
            if not branches:
                failed = state.llm_failures > failures
                run.stop_reason = run.stop_reason or self._no_plans(repeats, failed)
                return
            outcomes = await self._realise(state, branches)
            children = [child for child in outcomes if child is not None]
            await remember(run, state, branches, outcomes)
            pool = {id(n): n for n in state.beam + children}
            state.beam = sorted(pool.values(), key=lambda n: -n.speedup)[: run.config.beam]
            for node in state.beam:
                if node.profile is None and not node.is_root:
                    node.profile = await profile(run, node.source)
            if state.best.speedup > best_before:
                stale = 0
            else:
                stale += 1
                if stale >= run.config.patience:
                    run.stop_reason = f"no new best in {stale} iterations"
                    return
        run.stop_reason = run.stop_reason or f"ran all {run.config.iterations} iterations"

    def _no_plans(self, repeats: int, failed: bool) -> str:
        """Why a planning round gave nothing to try: the budget, the model, or repeats."""
        run = self.context
        if run.should_stop():
            return run.stop_reason
        if failed:
            return f"the model failed: {run.state.last_llm_error}"
        return no_plans(run, repeats)

    # -- one round of branches: K samples of each plan ----------------------------------------

    async def _realise(
        self, state: SearchState, branches: list[tuple[Plan, Node]]
    ) -> list[Node | None]:
        """All K samples of every plan: the executor calls run at once; the judging chains
        (evaluate, then repair) start in plan and sample order, `parallel_evals` at a time,
        so which of two identical samples is judged does not depend on reply timing. A
        chain starts once its own draft and those before it are in, not once all are: a
        slow draft (an offline compile of a minute on a busy machine) must not hold back
        the judging of a quick one ahead of it."""
        run = self.context
        contexts = [planning_context(run, parent, 0) for _, parent in branches]
        keys = [(b, k) for b in range(len(branches)) for k in range(run.config.samples)]
        drafts = [
            asyncio.ensure_future(draft(run, contexts[b], branches[b][0], k)) for b, k in keys
        ]
        samples: dict[tuple[int, int], Sample] = {}
        slots = asyncio.Semaphore(run.config.parallel_evals)
        run.emit(ev.PhaseStarted(f"evaluating {plural(len(keys), 'candidate')}"))

        async def chain(b: int, k: int, candidate) -> None:
            try:
                plan, parent = branches[b]
                samples[b, k] = await judge(run, state, contexts[b], plan, parent, k, candidate)
            finally:
                slots.release()

        running = []
        try:
            for (b, k), drafted in zip(keys, drafts, strict=True):
                candidate = await drafted
                await slots.acquire()
                running.append(asyncio.ensure_future(chain(b, k, candidate)))
        except BaseException:
            for task in [*drafts, *running]:  # a raise (a missing key) leaves none behind
                task.cancel()
            raise
        if running:
            await asyncio.gather(*running)
        return [
            self._child(
                state,
                plan,
                parent,
                [samples[b, k] for k in range(run.config.samples) if (b, k) in samples],
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
        result: EvalResult = best.result
        node = Node(
            source=best.source,
            speedup=best.speedup,
            methods=(*parent.methods, plan.method),
            plan_keys=(*parent.plan_keys, plan_key(plan.text())),
            plan=plan,
            attempt_id=best.attempt_id,
            iteration=state.iteration,
            result=result,
            ci=result.speedup_ci,
        )
        note_best(self.context, state, node, plan.title)
        self.context.branch_samples[id(node)] = samples  # the slower ones teach negative lessons
        return node


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
            return await finish(search.context, search.context.state)
        finally:
            release_warm_workers(search.pool)


def release_warm_workers(pool) -> None:
    """A finished search leaves no sandbox behind: the reference workers its pool kept warm
    between candidates are closed (the pool itself stays usable)."""
    release = getattr(pool, "release_warm_workers", None)
    if release is not None:
        release()
