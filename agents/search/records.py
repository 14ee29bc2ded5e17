"""What the search writes down about each sample: the trajectory and events the user sees,
and the logbook entry that keeps a failed attempt from being repeated."""

from __future__ import annotations

from agents.roles.base import Plan
from agents.search import events as ev
from agents.search.context import SearchRun
from agents.search.fates import CandidateFate, Fate, fate_of_verdict
from agents.search.nodes import Node, SearchState
from agents.search.result import TrajectoryPoint
from agents.search.wording import no_code
from agents.verify.verdict import EvalResult
from memory.normalize import source_hash


def record_outcome(
    run: SearchRun,
    state: SearchState,
    plan: Plan,
    sample: int,
    repair: int,
    verdict: str,
    speedup: float | None,
    reason: str,
    counted: bool = True,
    *,
    result: EvalResult | None = None,
    source: str | None = None,
) -> None:
    """One judged (or skipped) sample: its fate, a trajectory point when it counted, and an
    event. `result` and `source` are the verifier's report and the code it judged."""
    state.fates.judged(
        CandidateFate(
            plan=plan.title,
            method=plan.method,
            fate=fate_of_verdict(verdict),
            verdict=verdict,
            reason="" if verdict == "correct" else reason,
            iteration=state.iteration,
            sample=sample,
            repair=repair,
            evaluation=state.evaluations if counted else None,
        ),
        result,
        source,
        best_before=state.best_seen,
    )
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
                elapsed_s=round(run.tracker.elapsed_s(), 2),
                reason=reason if verdict != "correct" else "",
            )
        )
    run.emit(
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


def log_attempt(
    run: SearchRun,
    plan: Plan,
    source: str | None,
    parent_id: int | None,
    verdict: str,
    speedup: float | None,
    error: str,
    sample: int,
) -> int | None:
    """The attempt in the short-term logbook (KernelSkill's), so a failed plan is not
    tried again; its id, or None without a logbook."""
    if run.memory.logbook is None:
        return None
    text = plan.text()  # a repair's history is its parent chain, not its plan text
    attempt = run.memory.logbook.record(
        run.task_id,
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


def record_unjudged(
    run: SearchRun, state: SearchState, plan: Plan, sample: int, repair: int
) -> None:
    """A sample that was never judged: the budget or a cancel stopped it, or the executor's
    model call failed and left no code."""
    # A deadline or Ctrl-C that cancelled its evaluation may not be the run's reason yet.
    stop = run.stop_reason or (run.cancel.stop_reason() if run.cancel.cancelled else "")
    state.fates.judged(
        CandidateFate(
            plan=plan.title,
            method=plan.method,
            fate=Fate.CUT_BY_BUDGET if stop else Fate.NOT_APPLIED,
            verdict="not_judged" if stop else "no_code",
            reason=stop or no_code(run),
            iteration=state.iteration,
            sample=sample,
            repair=repair,
        ),
        None,
        None,
        best_before=state.best_seen,
    )


def note_best(run: SearchRun, state: SearchState, node: Node, title: str) -> None:
    """`node` becomes the run's best when it beats it, and the user is told: one place for
    every way a kernel enters the beam (a plan's sample, memory's recalled best)."""
    if node.speedup <= state.best.speedup:
        return
    state.best = node
    run.emit(
        ev.NewBest(
            iteration=state.iteration,
            speedup=round(node.speedup, 4),
            plan=title,
            evaluations=state.evaluations,
        )
    )
