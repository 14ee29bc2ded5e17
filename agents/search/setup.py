"""The search's set-up and its profiles: the reference is profiled, gated (which skills the
planner may use) and entered in the logbook before the first plan; kept kernels are profiled
later so their planner sees where the time goes. Profiling failures are notes, never errors."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace

from agents.display import plural
from agents.evaluate import EvalError
from agents.profile.api import ProblemFailed, ProblemTooLarge, ProfileError, profile_file
from agents.profile.report import Profile
from agents.sandbox.cpus import allowed_cpus, free_cpus
from agents.search import events as ev
from agents.search.context import SearchRun
from agents.search.knowledge import hot_lines_json, render_profile, signature_for, skill_briefs
from agents.search.nodes import Node
from agents.task import CANDIDATE_CLASS, SourceFile, as_reference
from memory.gate import gate
from memory.normalize import source_hash

log = logging.getLogger("kernel_agent.search")


async def prepare(run: SearchRun, root: Node) -> None:
    """Choose the thread count, profile and gate the reference, and give it its logbook
    entry."""
    await choose_threads(run)
    root.profile = await profile(run, root.source, is_reference=True)
    metrics = root.profile.metrics() if root.profile is not None else None
    result = gate(metrics, run.reference.text, device=run.options.device)
    run.allowed, run.forbidden = skill_briefs(result)
    run.root_profiled = root.profile is not None
    run.signature = signature_for(root.profile, result, run.options.device)
    if root.profile is not None:
        run.device_name = root.profile.ceilings.name or run.options.device
        run.emit(ev.Profiled(render_profile(root.profile), hot_lines_json(root.profile)))
    if run.memory.logbook is not None:
        run.plans_failed_before = len(run.memory.logbook.failed_plans(run.task_id))
        known = run.memory.logbook.was_tried(run.task_id, source=root.source)
        if known is not None and known.parent_id is None:
            root.attempt_id = known.id
        else:
            root.attempt_id = run.memory.logbook.record(
                run.task_id, verdict="correct", source=root.source, plan="", speedup=1.0
            ).id


async def choose_threads(run: SearchRun) -> None:
    """Unless the user chose, time on one thread per CPU that other work leaves free, once
    for the whole run (agents/sandbox/cpus.py says why), and say so when that is fewer than
    the machine has. A GPU's timings barely use the CPU's pool: it keeps every core."""
    options = run.options
    if options.threads is not None or options.device != "cpu":
        return
    free = await asyncio.to_thread(free_cpus)
    total = len(allowed_cpus())
    run.options = replace(options, threads=free)
    if free < total:
        run.state.notes.append(
            f"timed on {plural(free, 'thread')}: {total - free} of {total} CPUs were busy "
            "with other work when the run began (--threads N to choose)"
        )


async def profile(run: SearchRun, source: str, *, is_reference: bool = False) -> Profile | None:
    """Profile a kernel in the sandbox (a ModelNew is profiled under the reference's
    inputs). Failure is a note, not an error: the planner can work without it."""
    if not run.config.profile or run.cancel.cancelled:
        return None
    key = source_hash(source)
    if key in run.profiles:
        return run.profiles[key]
    text = source if is_reference else _as_problem(run.reference.text, source)
    try:
        found = await asyncio.to_thread(
            profile_file,
            SourceFile(text, run.reference.path),
            device=run.options.device,
            size=run.options.size,
            threads=run.options.threads,
            repeat=run.config.profile_repeat,
            use_jail=run.options.jail,
            cache_dir=run.options.cache_dir,
            cancel=run.cancel.event,
        )
    except ProblemTooLarge as error:
        if is_reference:  # its one line says what it needs and what to do
            raise EvalError(str(error)) from None
        log.info("profiling failed: %s", error)
        found = None
    except ProblemFailed as error:
        if is_reference:  # nothing can be compared with a reference that fails on its own
            raise EvalError(f"the reference fails on its own: {error}") from None
        log.info("profiling failed: %s", error)
        found = None
    except ProfileError as error:
        log.info("profiling failed: %s", error)
        found = None
    run.profiles[key] = found
    return found


def _as_problem(reference: str, candidate: str) -> str:
    """A problem file whose reference is the candidate's ModelNew, with the reference's
    inputs. It names ModelNew as the reference instead of rebinding `Model`, so code that
    says `super(Model, self)` still finds the file's own class."""
    return as_reference(f"{reference}\n\n# --- candidate ---\n{candidate}", CANDIDATE_CLASS)
