"""The search's answer: the best kernels re-measured on fresh inputs, and the result.

A kernel is offered only when `evaluate` called it correct in this run and a confirming
evaluation on fresh inputs finds it faster than the reference beyond the noise."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from agents.evaluate import EvalCancelled
from agents.search import events as ev
from agents.search.nodes import Node, SearchState
from agents.search.result import SearchResult
from agents.task import SourceFile
from agents.verify.verdict import EvalResult
from memory.normalize import source_hash

if TYPE_CHECKING:
    from agents.search.beam import Search


async def finish(search: Search, state: SearchState) -> SearchResult:
    confirmed_node: Node | None = None
    confirmation: EvalResult | None = None
    notes = list(state.notes)
    if state.llm_failures and not search._stop_reason.startswith("the model failed"):
        calls = "call" if state.llm_failures == 1 else "calls"
        notes.append(f"{state.llm_failures} model {calls} failed: {state.last_llm_error}")
    found = sorted(all_nodes(state), key=lambda n: -n.speedup)
    found = [n for n in found if not n.is_root and n.speedup > 1.0]
    if found and not search.cancel.cancelled:
        for node in found[: search.config.confirm]:
            result = await confirm(search, state, node)
            if result is None:
                break
            state.fates.confirmed(node.source, result)
            if faster(result):
                confirmed_node, confirmation = node, result
                break
            notes.append(
                f"{node.plan.title if node.plan else 'candidate'}: measured "
                f"{node.speedup:.2f}x in the search but "
                + (
                    f"a speedup too unstable to tell on fresh inputs "
                    f"({result.timing_unstable_reason})"
                    if result.correct and result.speedup and not result.timing_stable
                    else f"{result.speedup:.2f}x on fresh inputs"
                    if result.correct and result.speedup
                    else f"{result.verdict.value} on fresh inputs"
                )
                + "; not offered"
            )
    elif found and search.cancel.cancelled:
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
        task=search.task_name,
        device=search.options.device,
        improved=improved,
        verdict="correct" if improved else "no_improvement",
        speedup=round(speedup, 4),
        speedup_ci=ci,
        confirmed=confirmation is not None,
        source=confirmed_node.source if confirmed_node else None,
        methods=list(confirmed_node.methods) if confirmed_node else [],
        evaluations=state.evaluations,
        iterations=state.iteration,
        stopped_because=search._stop_reason or "done",
        elapsed_s=round(search.tracker.elapsed_s(), 2),
        cost=search.meter.to_json(),
        planner=search.roles.planner.label,
        executor=search.roles.executor.label,
        trajectory=state.trajectory,
        eval_report=confirmation.to_json() if confirmation else None,
        candidates=state.fates.final(
            confirmed_node.source if confirmed_node else None,
            round(speedup, 4),
            confirmed=confirmation is not None,
        ),
        notes=notes,
        memory={
            "task_id": search.task_id,
            "experiences_written": len(state.memory_written),
            "logbook_attempts": (
                len(search.memory.logbook.attempts(search.task_id)) if search.memory.logbook else 0
            ),
        },
    )
    search.emit(
        ev.Finished(
            verdict=result.verdict,
            speedup=result.speedup,
            improved=improved,
            evaluations=state.evaluations,
            stopped_because=result.stopped_because,
            cost_usd=search.meter.total_cost_usd,
            tokens=search.meter.total_tokens,
        )
    )
    return result


async def confirm(search: Search, state: SearchState, node: Node) -> EvalResult | None:
    options = replace(
        search.options,
        seed=search._seed_for(source_hash(node.source) + "#confirm"),
        timing_budget_s=max(search.options.timing_budget_s, search.config.confirm_budget_s),
    )
    state.evaluations += 1
    try:
        return await search.pool.submit(
            search.reference,
            SourceFile(node.source, "<best candidate>"),
            options,
            search.cancel.event,
        )
    except EvalCancelled:
        return None


def faster(result: EvalResult) -> bool:
    """Correct, and faster than the reference beyond the timing noise (an unstable timing,
    agents/verify/stability.py, is never faster)."""
    if not result.correct or not result.speedup or result.speedup <= 1.0:
        return False
    if not result.timing_stable:
        return False
    if result.speedup_ci:
        return result.speedup_ci[0] > 1.0
    return result.speedup >= 1.02


def all_nodes(state: SearchState) -> list[Node]:
    return list({id(n): n for n in [state.best, *state.beam]}.values())


def ranked_speedup(result: EvalResult) -> float | None:
    """The speedup a correct result is ranked by in the search: an unstable timing counts as
    no faster than the reference (at most 1.0), so it is never ranked or offered as a speedup."""
    if not result.correct or result.speedup is None:
        return None
    return result.speedup if result.timing_stable else min(result.speedup, 1.0)
