"""The search's answer: the best kernels re-measured on fresh inputs, and the result.

A kernel is offered only when `evaluate` called it correct in this run and a confirming
evaluation on fresh inputs finds it faster than the reference beyond the noise."""

from __future__ import annotations

from dataclasses import replace

from agents.evaluate import EvalCancelled
from agents.search import events as ev
from agents.search.context import SearchRun
from agents.search.nodes import Node, SearchState
from agents.search.result import SearchResult
from agents.task import SourceFile
from agents.verify.verdict import EvalResult
from memory.normalize import source_hash


async def finish(run: SearchRun, state: SearchState) -> SearchResult:
    """The run's result: its best kernels re-measured on fresh inputs (the first found
    faster is offered), and the Finished event."""
    notes = list(state.notes)
    if state.llm_failures and not run.stop_reason.startswith("the model failed"):
        calls = "call" if state.llm_failures == 1 else "calls"
        notes.append(f"{state.llm_failures} model {calls} failed: {state.last_llm_error}")
    found = sorted(all_nodes(state), key=lambda n: -n.speedup)
    found = [n for n in found if not n.is_root and n.speedup > 1.0]
    offered: Offer = (None, None)
    if found and not run.cancel.cancelled:
        run.emit(ev.PhaseStarted("timing the best on fresh inputs"))
        offered = await _confirm_best(run, state, found, notes)
    elif found and run.cancel.cancelled:
        offered = (found[0], None)  # verified correct in this run; not re-measured
        notes.append(f"{run.cancel.stop_reason()}: the best kernel so far was not re-measured")
    result = _result(run, state, offered, notes)
    run.emit(
        ev.Finished(
            verdict=result.verdict,
            speedup=result.speedup,
            improved=result.improved,
            evaluations=state.evaluations,
            stopped_because=result.stopped_because,
            cost_usd=run.meter.total_cost_usd,
            tokens=run.meter.total_tokens,
        )
    )
    return result


Offer = tuple[Node | None, EvalResult | None]
"""The kernel offered (None: no improvement) and the confirmation that measured it (None:
not re-measured)."""


async def _confirm_best(
    run: SearchRun, state: SearchState, found: list[Node], notes: list[str]
) -> Offer:
    """Re-measure the fastest kernels, best first, until one is faster on fresh inputs; each
    that is not gets a note saying why it is not offered."""
    for node in found[: run.config.confirm]:
        result = await confirm(run, state, node)
        if result is None:  # cut while re-measuring: offer it as the cancel path does
            notes.append(f"{run.cancel.stop_reason()}: the best kernel so far was not re-measured")
            return node, None
        state.fates.confirmed(node.source, result)
        if faster(result):
            return node, result
        notes.append(
            f"{node.plan.title if node.plan else 'candidate'}: measured "
            f"{node.speedup:.2f}x in the search but {_fresh_measure(result)}; not offered"
        )
    return None, None


def _fresh_measure(result: EvalResult) -> str:
    """What the confirming evaluation found, in the words of a note."""
    if result.correct and result.speedup and not result.timing_stable:
        return f"a speedup too unstable to tell on fresh inputs ({result.timing_unstable_reason})"
    if result.correct and result.speedup:
        return f"{result.speedup:.2f}x on fresh inputs"
    return f"{result.verdict.value} on fresh inputs"


def _result(run: SearchRun, state: SearchState, offered: Offer, notes: list[str]) -> SearchResult:
    node, confirmation = offered
    speedup, ci = 1.0, None
    if node is not None and confirmation is not None:
        speedup, ci = confirmation.speedup or node.speedup, confirmation.speedup_ci
    elif node is not None:
        speedup, ci = node.speedup, node.ci
    logbook = run.memory.logbook
    return SearchResult(
        task=run.task_name,
        device=run.options.device,
        improved=node is not None,
        verdict="correct" if node is not None else "no_improvement",
        speedup=round(speedup, 4),
        speedup_ci=ci,
        confirmed=confirmation is not None,
        source=node.source if node else None,
        methods=list(node.methods) if node else [],
        evaluations=state.evaluations,
        iterations=state.iteration,
        stopped_because=run.stop_reason or "done",
        elapsed_s=round(run.tracker.elapsed_s(), 2),
        cost=run.meter.to_json(),
        planner=run.roles.planner.label,
        executor=run.roles.executor.label,
        trajectory=state.trajectory,
        eval_report=confirmation.to_json() if confirmation else None,
        candidates=state.fates.final(
            node.source if node else None, round(speedup, 4), confirmed=confirmation is not None
        ),
        notes=notes,
        memory={
            "task_id": run.task_id,
            "experiences_written": len(state.memory_written),
            "logbook_attempts": len(logbook.attempts(run.task_id)) if logbook else 0,
        },
    )


async def confirm(run: SearchRun, state: SearchState, node: Node) -> EvalResult | None:
    options = replace(
        run.options,
        seed=run.seed_for(source_hash(node.source) + "#confirm"),
        timing_budget_s=max(run.options.timing_budget_s, run.config.confirm_budget_s),
    )
    state.evaluations += 1
    try:
        return await run.pool.submit(
            run.reference,
            SourceFile(node.source, "<best candidate>"),
            options,
            run.cancel.event,
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
