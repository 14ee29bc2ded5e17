"""Why a search had nothing to try or a sample left no code, in the engine's own terms.

Why: the offline engine has no model, no replies and nothing to misread; telling its user
that "the planner proposed no usable plan (unreadable replies ...)" sent them looking for a
model that was never called (issue 34). Its planner runs out of passes for two reasons only:
each pass that fits was already tried (in this run, or on this task in the memory's
logbook), or none fits this kernel.
"""

from __future__ import annotations

from agents.search.context import SearchRun


def is_offline(run: SearchRun) -> bool:
    return getattr(run.roles.planner, "label", "") == "offline"


def no_plans(run: SearchRun, repeats: int) -> str:
    """A planning round that gave nothing to try, neither stopped nor failed."""
    if is_offline(run):
        return _offline_no_plans(run, repeats)
    if repeats:
        return (
            f"the planner only repeated plans already tried ({repeats} repeats this "
            "round): nothing new to try"
        )
    return "the planner proposed no usable plan (unreadable replies or forbidden skills)"


def _offline_no_plans(run: SearchRun, repeats: int) -> str:
    logbook = run.memory.logbook
    if logbook is not None and run.plans_failed_before:
        path = getattr(getattr(logbook, "store", None), "path", None)
        where = f" (memory: {path})" if path is not None else ""
        return (
            "every offline pass that fits this kernel was already tried on it"
            f"{where}; nothing new to try: run with --no-memory, or delete that file"
        )
    if repeats or run.state.iteration > 1:
        return "every offline pass that fits this kernel was already tried in this run"
    return "no offline pass fits this kernel (none of the skills the gate allows has one)"


def no_code(run: SearchRun) -> str:
    """A sample that left no code although nothing stopped the run."""
    if is_offline(run):
        return "the offline pass gave no rewrite"
    return f"the model call failed: {run.state.last_llm_error}"
