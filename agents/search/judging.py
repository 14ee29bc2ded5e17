"""One sample of one plan: the executor's draft, judged by `evaluate` in the sandbox and
repaired up to R times; identical code is judged once per search, and code the logbook
has seen failing is not judged again."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace

from agents.evalpool.service import EvalEvent
from agents.evaluate import EvalCancelled
from agents.llm.base import LLMError, MissingAPIKeyError
from agents.roles.base import Candidate, Plan, PlanningContext
from agents.search import events as ev
from agents.search.context import SearchRun
from agents.search.finish import ranked_speedup
from agents.search.nodes import Node, Sample, SearchState
from agents.search.records import log_attempt, record_outcome, record_unjudged
from agents.task import SourceFile
from agents.verify.verdict import EvalResult, Verdict
from memory.normalize import source_hash

REPAIRABLE = (Verdict.COMPILE_ERROR, Verdict.RUNTIME_ERROR, Verdict.INCORRECT)
ERROR_LOG_CHARS = 4000


async def draft(run: SearchRun, context: PlanningContext, plan: Plan, k: int) -> Candidate | None:
    """The executor's k-th realisation of `plan`; None when stopped or the call failed."""
    if run.should_stop():
        return None
    try:
        return await run.roles.executor.implement(context, plan, k)
    except MissingAPIKeyError:
        raise
    except LLMError as error:
        run.llm_failed(error)
        return None


async def judge(
    run: SearchRun,
    state: SearchState,
    context: PlanningContext,
    plan: Plan,
    parent: Node,
    k: int,
    candidate: Candidate | None,
) -> Sample:
    """Judge the draft, then each repair of a failed verdict, until one is correct, is not
    repairable, or the repairs or the budget run out."""
    sample = Sample(plan=plan, parent=parent, source=None, result=None, speedup=None)
    if candidate is None or run.should_stop(calls=False):
        record_unjudged(run, state, plan, k, 0)
        return sample
    source, error = candidate.source, candidate.error
    attempt_parent = parent.attempt_id
    failed: tuple[str, EvalResult] | None = None  # the last judged failure, to repair
    for repair in range(run.config.repairs + 1):
        note = ""
        if source is None:
            note = error or "the reply had no code"
            record_outcome(run, state, plan, k, repair, "no_code", None, note, counted=False)
            log_attempt(run, plan, None, attempt_parent, "no_code", None, note, k)
        elif known := _known_outcome(run, state, source):
            note = f"the fix was {known}"
            record_outcome(run, state, plan, k, repair, "duplicate", None, known, counted=False)
        else:
            result = await _evaluate(run, state, source)
            if result is None:  # cancelled or out of budget
                record_unjudged(run, state, plan, k, repair)
                return sample
            attempt_id = _record_judged(run, state, plan, k, repair, source, attempt_parent, result)
            sample.source, sample.result, sample.attempt_id = source, result, attempt_id
            if result.correct and (speedup := ranked_speedup(result)) is not None:
                sample.speedup = speedup
                if hasattr(run.roles.executor, "verified"):  # it may now learn from it
                    run.roles.executor.verified(source)
                return sample
            if result.verdict not in REPAIRABLE:
                return sample
            failed, attempt_parent = (source, result), attempt_id
        if failed is None or run.roles.repairer is None or repair >= run.config.repairs:
            return sample
        fixed = await _repair(run, context, plan, failed, note, repair + 1)
        if fixed is None:
            return sample
        source, error = fixed.source, fixed.error
    return sample


def _record_judged(
    run: SearchRun,
    state: SearchState,
    plan: Plan,
    k: int,
    repair: int,
    source: str,
    attempt_parent: int | None,
    result: EvalResult,
) -> int | None:
    """The verdict in the logbook, the fates and the trajectory; the logbook's attempt id."""
    speedup = ranked_speedup(result)  # an unstable timing ranks as 1.0 at most
    reason = "; ".join(result.reasons)[:300]
    attempt_id = log_attempt(
        run, plan, source, attempt_parent, result.verdict.value, speedup, reason, k
    )
    record_outcome(
        run, state, plan, k, repair, result.verdict.value, speedup, reason,
        result=result, source=source,
    )  # fmt: skip
    return attempt_id


async def _repair(
    run: SearchRun,
    context: PlanningContext,
    plan: Plan,
    failed: tuple[str, EvalResult],
    note: str,
    attempt: int,
) -> Candidate | None:
    """The repairer's fix of the last judged failure; None when stopped or the call failed."""
    if run.should_stop():
        return None
    failed_source, failed_result = failed
    log_text = _error_log(failed_result)
    if note:
        log_text += f"\n\nYour previous fix was not judged: {note}."
    assert run.roles.repairer is not None
    try:
        return await run.roles.repairer.repair(
            context, plan, failed_source, failed_result.verdict.value, log_text, attempt
        )
    except MissingAPIKeyError:
        raise
    except LLMError as llm_error:
        run.llm_failed(llm_error)
        return None


def _known_outcome(run: SearchRun, state: SearchState, source: str) -> str:
    """Why this code needs no evaluation (judged already in this search, or failed in an
    earlier one according to the logbook), else ""."""
    key = source_hash(source)
    if key in state.seen:
        verdict, _ = state.seen[key]
        return f"identical to a kernel already judged in this search ({verdict})"
    if run.memory.logbook is not None:
        earlier = run.memory.logbook.was_tried(run.task_id, source=source)
        if earlier is not None and not earlier.correct:
            return f"the logbook has this code failing before ({earlier.verdict})"
    state.seen[key] = ("being judged", None)  # claimed now: concurrent twins are skipped
    return ""


async def _evaluate(run: SearchRun, state: SearchState, source: str) -> EvalResult | None:
    """Judge one candidate in the sandbox (identical code is judged once per search)."""
    key = source_hash(source)
    # The caller holds one of the parallel_evals slots.
    if run.should_stop(calls=False):
        return None
    run.tracker.evaluations += 1
    state.evaluations += 1
    options = replace(run.options, seed=run.seed_for(key))
    try:
        result = await run.pool.submit(
            run.reference,
            SourceFile(source, f"<candidate {state.evaluations}>"),
            options,
            run.cancel.event,
            on_event=phase_teller(run),
        )
    except EvalCancelled:
        return None
    state.seen[key] = (result.verdict.value, result.speedup)
    return result


def phase_teller(run: SearchRun) -> Callable[[EvalEvent], None]:
    """The pool's phase events (on an evaluation's thread) as PhaseStarted details, emitted
    on the search's own loop: event sinks (a server's pipe) are written from one thread."""
    loop = asyncio.get_running_loop()

    def tell(event: EvalEvent) -> None:
        if event.kind == "phase" and event.detail:
            with contextlib.suppress(RuntimeError):  # the search has ended: nobody to tell
                loop.call_soon_threadsafe(run.emit, ev.PhaseStarted("", event.detail))

    return tell


def _error_log(result: EvalResult) -> str:
    text = "\n".join(result.reasons)
    if len(text) <= ERROR_LOG_CHARS:
        return text
    head = text[: ERROR_LOG_CHARS // 4]
    tail = text[-(ERROR_LOG_CHARS * 3 // 4) :]
    return f"{head}\n[... {len(text) - len(head) - len(tail)} chars cut]\n{tail}"
