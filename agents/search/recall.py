"""Memory's best verified kernel for this task, handed back to a new run of it.

A later run of the same problem must never return less than memory holds, and memory must
never hide a rewrite: the planner skips plans the logbook has already tried, so what those
plans produced comes back here instead. The logbook's fastest verified rewrite is judged
again through the normal evaluation path, on inputs it was not verified on, and joins the
beam as a candidate of this run; `finish` then re-measures it like any other. When it no
longer passes, the run says so in one line (a note of the result and a progress event).
"""

from __future__ import annotations

import re
from dataclasses import replace

from agents.evaluate import EvalCancelled
from agents.roles.base import Plan
from agents.search.context import SearchRun
from agents.search.finish import ranked_speedup
from agents.search.nodes import Node, SearchState
from agents.search.records import log_attempt, note_best, record_outcome
from agents.task import SourceFile
from memory.logbook import Attempt, Logbook, plan_key
from memory.normalize import source_hash

RECALLED = "Recalled from memory: "
"""Put before the recalled plan's title, so the trajectory and the progress (which cuts long
titles at their end) name it."""
_PLAN_HEAD = re.compile(r"^(?P<title>.*) \[(?P<method>[^\[\]\n]+)\]$")


def lineage(logbook: Logbook, attempt: Attempt) -> list[Attempt]:
    """The verified kernels from the reference down to `attempt`, reference excluded, in the
    order their plans were applied (a repair's failed tries in between are left out)."""
    chain: list[Attempt] = []
    current: Attempt | None = attempt
    while current is not None and current.parent_id is not None:
        if current.correct and current.plan:
            chain.append(current)
        current = logbook.get(current.parent_id)
    return chain[::-1]


def plan_of(attempt: Attempt) -> Plan:
    """The plan an attempt was made with, back from the text the logbook kept."""
    head, _, details = attempt.plan.partition("\n")
    found = _PLAN_HEAD.match(head.strip())
    if found is None:
        return Plan(title=head.strip() or "a rewrite", method=head.strip(), details=details)
    skill = attempt.skills[0] if attempt.skills else None
    return Plan(found["title"], found["method"], details, skill_id=skill)


def fastest_rewrite(logbook: Logbook, task_id: str) -> Attempt | None:
    """Memory's fastest verified rewrite of the task (never the reference itself). One
    measured no faster comes back too: the planner will not plan it again (the logbook
    holds its plan as failed), and one timing on a busy machine must not hide a real
    speedup for good (issue 34: a second `make demo` had nothing left to try)."""
    fastest = logbook.resume_point(task_id, beam_width=8)
    return next((attempt for attempt in fastest if attempt.parent_id is not None), None)


async def recall_best(run: SearchRun, state: SearchState) -> None:
    """Re-verify memory's fastest verified rewrite of this task on fresh inputs; a kernel
    that passes joins the beam (and may be the run's best), one that fails is said so."""
    logbook = run.memory.logbook
    if logbook is None or run.should_stop(calls=False):
        return
    best = fastest_rewrite(logbook, run.task_id)
    if best is None:
        return
    source = logbook.source(best.id)
    chain = lineage(logbook, best)
    if not source or not chain:
        return
    key = source_hash(source)
    if key in state.seen:
        return
    state.seen[key] = ("being judged", None)
    plans = [plan_of(attempt) for attempt in chain]
    last = plans[-1]
    plan = replace(last, title=RECALLED + last.title)
    run.tracker.evaluations += 1
    state.evaluations += 1
    tried = len(logbook.attempts(run.task_id))  # fresh inputs on every later run too
    options = replace(
        run.options,
        seed=run.seed_for(f"{key}#recalled-{tried}"),
        # timed as long as a confirmation: one noisy short timing must not drop memory's best
        timing_budget_s=max(run.options.timing_budget_s, run.config.confirm_budget_s),
    )
    try:
        result = await run.pool.submit(
            run.reference, SourceFile(source, "<recalled from memory>"), options,
            run.cancel.event,
        )  # fmt: skip
    except EvalCancelled:
        return
    state.seen[key] = (result.verdict.value, result.speedup)
    speedup = ranked_speedup(result)  # an unstable timing ranks as 1.0 at most
    reason = "; ".join(result.reasons)[:300]
    attempt_id = log_attempt(
        run, last, source, best.parent_id, result.verdict.value, speedup, reason, 0
    )
    record_outcome(
        run, state, plan, 0, 0, result.verdict.value, speedup, reason,
        result=result, source=source,
    )  # fmt: skip
    if speedup is None or speedup <= 1.0:
        held = f"memory's best rewrite of this problem ({best.speedup:.2f}x, {last.title})"
        if speedup is None:
            said = f"failed re-verification on fresh inputs: {result.verdict.value}" + (
                f": {reason[:200]}" if reason else ""
            )
        elif not result.timing_stable and result.timing_unstable_reason:
            said = (
                "re-verified correct, but its timing on fresh inputs was unstable: "
                f"{result.timing_unstable_reason[:200]}"
            )
        else:
            said = f"re-verified correct but at {speedup:.2f}x on fresh inputs"
        state.notes.append(f"{held} {said}")
        return
    node = Node(
        source=source,
        speedup=speedup,
        methods=tuple(p.method for p in plans),
        plan_keys=tuple(plan_key(p.text()) for p in plans),
        plan=plan,
        attempt_id=attempt_id,
        iteration=state.iteration,
        result=result,
        ci=result.speedup_ci,
    )
    state.beam = sorted([*state.beam, node], key=lambda n: -n.speedup)[: run.config.beam]
    note_best(run, state, node, plan.title)
