"""AccelOpt's optimization memory, written by the search every iteration: slow/fast kernel
pairs of that iteration, each summarised into a lesson by the summarizer."""

from __future__ import annotations

import asyncio

from agents.llm.base import LLMError, MissingAPIKeyError
from agents.roles.base import Plan
from agents.search.context import SearchRun
from agents.search.nodes import Node, SearchState
from memory.experiences import Experience, from_attempt


async def remember(run: SearchRun, state: SearchState, branches, outcomes) -> None:
    """AccelOpt's per-iteration update: slow/fast pairs of this iteration, summarised."""
    store = run.memory.experiences
    if store is None:
        return
    pairs: list[tuple[Node, str, float, Plan]] = []  # parent, candidate, ratio, plan
    for (plan, parent), child in zip(branches, outcomes, strict=True):
        if child is None:
            continue
        for sample in run.branch_samples.pop(id(child), []):
            if sample.speedup is None or sample.source is None or parent.speedup <= 0:
                continue
            pairs.append((parent, sample.source, sample.speedup / parent.speedup, plan))
    candidates: list[tuple[Node, str, float, Plan]] = []
    for pair in pairs:
        if store.classify(pair[2]) is not None:
            candidates.append(pair)
    candidates.sort(key=lambda p: -max(p[2], 1 / p[2]))
    candidates = candidates[: store.policy.max_new_per_iteration * 2]
    summaries = await asyncio.gather(*(summarize(run, *pair) for pair in candidates))
    experiences: list[Experience] = []
    for (parent, source, ratio, plan), summary in zip(candidates, summaries, strict=True):
        exp = from_attempt(
            store.policy,
            run.signature,
            parent.source,
            source,
            ratio,
            plan=plan.text(),
            title=summary[0],
            lesson=summary[1],
            model=run.roles.planner.label,
        )
        if exp is not None:
            experiences.append(exp)
    if experiences:
        state.memory_written.extend(store.add_iteration(experiences))


async def summarize(
    run: SearchRun, parent: Node, source: str, ratio: float, plan: Plan
) -> tuple[str, str]:
    regression = ratio < 1
    slow, fast = (source, parent.source) if regression else (parent.source, source)
    gain = 1 / ratio if regression else ratio
    if run.roles.summarizer is None or run.should_stop():
        return plan.title, ""
    try:
        summary = await run.roles.summarizer.summarize(slow, fast, gain, plan.text(), regression)
    except MissingAPIKeyError:
        raise
    except LLMError as error:
        run.llm_failed(error)
        return plan.title, ""
    return summary.title, summary.lesson
