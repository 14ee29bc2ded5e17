"""What a job leaves behind: its events in the log, a failure as one line for the user, a
profile as hot-line diagnostics, and a verified rewrite offered as Accept · Reject · Show
diff (or, when none was found, a line saying why). Verdicts are said in words ("compile
error", not `compile_error`) and counts with their plural, since these lines are read by the
user, not parsed."""

from __future__ import annotations

import math
from collections import Counter
from typing import TYPE_CHECKING

from lsprotocol import types

from agents.display import plural
from agents.search import events as ev
from agents.search.fates import fates_summary
from agents.search.result import SearchResult
from agents.search.typed_json import finite
from agents.speedup_words import speedup_text
from agents.targets.edits import Rewrite
from server.diagnostics import build_view
from server.job_protocol import JobResult
from server.jobs import JobUpdate
from server.progress_text import verdict_words
from server.rewrite_actions import accept, reject
from server.rewrite_diff import show_diff

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer, RunningJob


def describe_event(ls: KernelAgentServer, running: RunningJob, event: ev.SearchEvent) -> None:
    """A search's event (a candidate, a new best, a profile...) as one log line."""
    name = running.spec.target
    if isinstance(event, ev.CandidateEvaluated):
        speed = f" {speedup_text(event.speedup)}" if event.speedup else ""
        reason = f" ({event.reason})" if event.reason else ""
        verdict = verdict_words(event.verdict)
        ls.log_line(f"[{name}] candidate {event.plan}: {verdict}{speed}{reason}")
    elif isinstance(event, ev.NewBest):
        speed = speedup_text(event.speedup if math.isfinite(event.speedup) else 0.0)
        ls.log_line(f"[{name}] search's new best: {speed} ({event.plan})")
    elif isinstance(event, ev.Profiled):
        ls.log_line(f"[{name}] profile:\n{event.summary}")
    else:  # started, iteration, plan, finished, failed: their fields as they are
        detail = {k: v for k, v in finite(event.to_json()).items() if k not in _UNSAID}
        ls.log_line(f"[{name}] {event.kind}: {detail}")


_UNSAID = ("kind", "beam_speedups")


def job_failed(ls: KernelAgentServer, running: RunningJob, update: JobUpdate) -> None:
    verb = "optimizing" if running.spec.kind == "optimize" else "profiling"
    reason = update.error or update.message or "the worker failed"
    ls.tell(
        f"Kernel Agent: {verb} `{running.spec.target}` failed: {reason}",
        types.MessageType.Error,
    )


def job_finished(ls: KernelAgentServer, running: RunningJob, update: JobUpdate) -> None:
    """A finished (or cancelled) job: mark its hot lines, then offer its rewrite or say
    why there is none."""
    result = update.result
    if result is not None:
        show_profile(ls, running, result)
    if running.spec.kind == "profile":
        profile_finished(ls, running)
        return
    search = result.search if result is not None else None
    if search is None:
        no_rewrite(ls, running, None, update.state)
        return
    log_candidates(ls, running, search)
    if search.improved and isinstance(search.source, str) and search.source.strip():
        rewrite = rewrite_of(ls, running, search)
        ls.state.pending[(running.spec.uri, running.spec.target)] = rewrite
        offer(ls, rewrite, search.evaluations)
        return
    no_rewrite(ls, running, search, update.state)


def show_profile(ls: KernelAgentServer, running: RunningJob, result: JobResult) -> None:
    """The reference's profile as hot-line diagnostics in the job's document, if still open;
    only lines that existed in the job's snapshot."""
    spec = running.spec
    doc = ls.docs.get(spec.uri)
    if result.profile is None or doc is None:
        return
    view = build_view(
        result.profile, doc, target=spec.target, target_kind=spec.target_kind, source=spec.source
    )
    snapshot_lines = spec.source.count("\n") + 1
    view.findings = [f for f in view.findings if f.stat.line <= snapshot_lines]
    ls.state.views[(spec.uri, spec.target)] = view
    ls.publish(spec.uri)


def profile_finished(ls: KernelAgentServer, running: RunningJob) -> None:
    """How many hot lines a profile job marked: told when the user asked, logged on save."""
    spec = running.spec
    view = ls.state.views.get((spec.uri, spec.target))
    hot = len(view.findings) if view else 0
    summary = f"Kernel Agent: profiled `{spec.target}`: {hot} hot line(s) marked"
    if view and view.findings:
        top = view.findings[0]
        summary += f"; hottest: line {top.line + 1} ({top.stat.share:.0%})"
    if running.explicit:
        ls.tell(summary)
    else:
        ls.log_line(summary)


def log_candidates(ls: KernelAgentServer, running: RunningJob, search: SearchResult) -> None:
    """The search's notes and every candidate's fate, one log line each."""
    for note in search.notes:
        ls.log_line(f"[{running.spec.target}] note: {note}")
    for fate in search.candidates:
        reason = f": {fate.reason}" if fate.reason else ""
        ls.log_line(f"[{running.spec.target}] fate of {fate.method}: {fate.fate.words}{reason}")


def rewrite_of(ls: KernelAgentServer, running: RunningJob, search: SearchResult) -> Rewrite:
    """The verified kernel as a rewrite of the job's snapshot, waiting for Accept."""
    spec, ci = running.spec, search.speedup_ci
    return Rewrite(
        job_id=running.job_id,
        uri=spec.uri,
        target=spec.target,
        target_kind=spec.target_kind,
        snapshot=spec.source,
        source=search.source or "",
        speedup=search.speedup if math.isfinite(search.speedup) else 1.0,
        device=search.device or ls.state.settings.device,
        confirmed=search.confirmed,
        methods=tuple(search.methods),
        speedup_ci=(ci[0], ci[1]) if ci is not None and len(ci) == 2 else None,
        candidates=fates_summary(search.candidates),
    )


def no_rewrite(
    ls: KernelAgentServer, running: RunningJob, search: SearchResult | None, state: str
) -> None:
    """Say why there is no rewrite: cancelled before one was found, or the search's stop
    reason with its candidates' verdicts when none was correct."""
    target = running.spec.target
    if state == "cancelled":
        ls.tell(
            f"Kernel Agent: optimizing `{target}` was cancelled; no verified faster kernel so far."
        )
        return
    stopped = (search.stopped_because if search else "") or state
    verdicts = Counter(p.verdict for p in search.trajectory) if search else Counter()
    if verdicts and not verdicts["correct"]:
        stopped += "; candidates: " + ", ".join(
            f"{n} {verdict_words(v)}" for v, n in verdicts.most_common()
        )
        if verdicts["timeout"]:
            stopped += " (an evaluation timed out: try kernelAgent.size default or a faster device)"
    evaluations = search.evaluations if search else 0
    ls.tell(
        f"Kernel Agent: no verified improvement for `{target}` "
        f"({plural(evaluations, 'candidate')} evaluated; stopped: {stopped})."
    )


def offer(ls: KernelAgentServer, rewrite: Rewrite, evaluations: int) -> None:
    """Ask Accept / Reject / Show diff where the client has message actions; the lenses
    offer the same, so a decision taken there first wins."""
    methods = f" ({', '.join(rewrite.methods)})" if rewrite.methods else ""
    message = (
        f"Kernel Agent: `{rewrite.target}` rewrite ready: {rewrite.summary} on "
        f"{rewrite.device}{methods}, "
        f"after {plural(evaluations, 'evaluation')}."
    )
    if not ls.state.client.message_actions:
        ls.tell(message + " Use the code lens: Accept · Reject · Show diff.")
        return

    async def ask() -> None:
        ls.log_line(message)
        try:
            answer = await ls.window_show_message_request_async(
                types.ShowMessageRequestParams(
                    type=types.MessageType.Info,
                    message=message,
                    actions=[
                        types.MessageActionItem(title=t) for t in ("Accept", "Reject", "Show diff")
                    ],
                )
            )
        except Exception as error:
            ls.log_line(f"showMessageRequest unanswered: {error}")
            return
        title = getattr(answer, "title", None)
        args = {"uri": rewrite.uri, "target": rewrite.target}
        if ls.state.pending.get((rewrite.uri, rewrite.target)) is not rewrite:
            return  # decided meanwhile through a lens or a command
        if title == "Accept":
            await accept(ls, args)
        elif title == "Reject":
            await reject(ls, args)
        elif title == "Show diff":
            await show_diff(ls, args)

    ls.spawn(ask())
