"""One planning round: what the planner is told about each kept kernel, N plans for each
(no more than the evaluations left can judge), and the repeats dropped."""

from __future__ import annotations

import asyncio

from agents.llm.base import LLMError, MissingAPIKeyError
from agents.roles.base import Plan, PlanningContext
from agents.search import events as ev
from agents.search.context import SearchRun
from agents.search.knowledge import attempt_lines, render_profile
from agents.search.nodes import Node, SearchState
from memory.logbook import plan_key


def planning_context(run: SearchRun, parent: Node, seed: int) -> PlanningContext:
    """Everything the planner (and the executor) is told about `parent`."""
    lessons: list[str] = []
    if run.memory.experiences is not None:
        chosen = run.memory.experiences.select_for_prompt(run.signature, query_text=parent.source)
        lessons = [exp.summary() for exp in chosen]
    recent: list[str] = []
    avoid: list[str] = []
    if run.memory.logbook is not None:
        recent = attempt_lines(run.memory.logbook.attempts(run.task_id))
        avoid = run.memory.logbook.failed_plans(run.task_id)[-20:]
    return PlanningContext(
        task_source=run.reference.text,
        candidate_source=parent.source,
        candidate_speedup=parent.speedup,
        device=run.options.device,
        profile_summary=render_profile(parent.profile),
        allowed_skills=run.allowed,
        forbidden_skills=run.forbidden,
        lessons=lessons,
        recent_attempts=recent,
        avoid_plans=avoid,
        applied_methods=list(parent.methods),
        seed=seed,
        signature=run.signature,
        gated=run.root_profiled,
    )


async def plan_all(run: SearchRun, state: SearchState) -> tuple[list[tuple[Plan, Node]], int]:
    """N plans per beam entry, no more than the evaluations left can judge, minus
    repeats (see `PlanHistory`); also returns how many replies were repeats."""
    # (slot, kernel); the slot number spreads the N plans of one kernel
    slots = [(n, b) for n in range(run.config.plans) for b in range(len(state.beam))]
    left = run.tracker.evaluations_left()
    if left is not None:
        slots = slots[: max(1, left)]  # slot-major, so every kernel keeps its first plans
    slots.sort(key=lambda slot: (slot[1], slot[0]))
    jobs = [(state.beam[b], planning_context(run, state.beam[b], n)) for n, b in slots]
    replies = await asyncio.gather(
        *(_call_planner(run, ctx) for _, ctx in jobs), return_exceptions=False
    )
    branches: list[tuple[Plan, Node]] = []
    repeats = 0
    for (parent, ctx), plan in zip(jobs, replies, strict=True):
        if plan is None:
            continue
        key = plan_key(plan.text())
        failed = [plan_key(p) for p in ctx.avoid_plans]
        if run.history.repeats(key, parent.source, parent.plan_keys, failed):
            repeats += 1
            continue
        run.history.add(key, parent.source)
        branches.append((plan, parent))
        run.emit(
            ev.PlanMade(
                iteration=state.iteration,
                parent=parent.attempt_id or 0,
                title=plan.title,
                method=plan.method,
            )
        )
    return branches, repeats


async def _call_planner(run: SearchRun, context: PlanningContext) -> Plan | None:
    if run.should_stop():
        return None
    try:
        return await run.roles.planner.plan(context)
    except MissingAPIKeyError:
        raise
    except LLMError as error:
        run.llm_failed(error)
        return None
