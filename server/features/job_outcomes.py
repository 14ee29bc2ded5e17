"""What a job leaves behind: its events in the log, a failure as one line for the user, a
profile as hot-line diagnostics, and a verified rewrite offered as Accept · Reject · Show
diff (or, when none was found, a line saying why). Verdicts are said in words ("compile
error", not `compile_error`) and counts with their plural, since these lines are read by the
user, not parsed."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from lsprotocol import types

from agents.display import plural
from agents.profile.report import Profile
from agents.search.fates import fates_from_json, fates_summary
from server.diagnostics import build_view
from server.edits import Rewrite
from server.features.rewrites import accept, reject, show_diff
from server.jobs import JobUpdate
from server.progress_text import speedup_text, verdict_words

if TYPE_CHECKING:
    from server.app import KernelAgentServer
    from server.features.job_control import RunningJob


def describe_event(ls: KernelAgentServer, running: RunningJob, event: dict[str, Any]) -> None:
    """A search's event (a candidate, a new best, a profile...) as one log line."""
    kind = event.get("kind")
    name = running.spec.target
    if kind == "candidate":
        speed = f" {speedup_text(event['speedup'])}" if event.get("speedup") else ""
        reason = f" ({event['reason']})" if event.get("reason") else ""
        plan = event.get("plan", "")
        verdict = verdict_words(str(event.get("verdict") or ""))
        ls.log_line(f"[{name}] candidate {plan}: {verdict}{speed}{reason}")
    elif kind == "new_best":
        speed = speedup_text(float(event.get("speedup") or 0))
        ls.log_line(f"[{name}] search's new best: {speed} ({event.get('plan', '')})")
    elif kind in ("started", "iteration", "finished", "failed", "plan"):
        detail = {k: v for k, v in event.items() if k not in ("kind", "beam_speedups")}
        ls.log_line(f"[{name}] {kind}: {detail}")
    elif kind == "profiled":
        ls.log_line(f"[{name}] profile:\n{event.get('summary', '')}")


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
    spec, result = running.spec, update.result or {}
    doc = ls.docs.get(spec.uri)
    profile_data = result.get("profile")
    if isinstance(profile_data, dict) and doc is not None:
        try:
            profile = Profile.from_json(profile_data)
        except (KeyError, TypeError, ValueError) as error:
            ls.log_line(
                f"unreadable profile from job {running.job_id}: {error}",
                types.MessageType.Warning,
            )
        else:
            view = build_view(
                profile,
                doc,
                target=spec.target,
                target_kind=spec.target_kind,
                source=spec.source,
            )
            snapshot_lines = spec.source.count("\n") + 1
            view.findings = [f for f in view.findings if f.stat.line <= snapshot_lines]
            ls.state.views[(spec.uri, spec.target)] = view
            ls.publish(spec.uri)
    if spec.kind == "profile":
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
        return
    for note in result.get("notes") or []:
        ls.log_line(f"[{spec.target}] note: {note}")
    fates = fates_from_json(result.get("candidates"))
    for fate in fates:
        reason = f": {fate.reason}" if fate.reason else ""
        ls.log_line(f"[{spec.target}] fate of {fate.method}: {fate.fate.words}{reason}")
    source = result.get("source")
    cancelled = update.state == "cancelled"
    if result.get("improved") and isinstance(source, str) and source.strip():
        ci = result.get("speedup_ci")
        rewrite = Rewrite(
            job_id=running.job_id,
            uri=spec.uri,
            target=spec.target,
            target_kind=spec.target_kind,
            snapshot=spec.source,
            source=source,
            speedup=float(result.get("speedup") or 1.0),
            device=str(result.get("device") or ls.state.settings.device),
            confirmed=bool(result.get("confirmed", not cancelled)),
            methods=tuple(str(m) for m in result.get("methods") or ()),
            speedup_ci=(float(ci[0]), float(ci[1]))
            if isinstance(ci, list) and len(ci) == 2
            else None,
            candidates=fates_summary(fates),
        )
        ls.state.pending[(spec.uri, spec.target)] = rewrite
        offer(ls, rewrite, result)
        return
    stopped = result.get("stopped_because") or update.state
    verdicts = Counter(
        str(p.get("verdict")) for p in result.get("trajectory") or [] if isinstance(p, dict)
    )
    if verdicts and not verdicts.get("correct"):
        stopped += "; candidates: " + ", ".join(
            f"{n} {verdict_words(v)}" for v, n in verdicts.most_common()
        )
        if verdicts.get("timeout"):
            stopped += " (an evaluation timed out: try kernelAgent.size default or a faster device)"
    if cancelled:
        ls.tell(
            f"Kernel Agent: optimizing `{spec.target}` was cancelled; "
            "no verified faster kernel so far."
        )
    else:
        ls.tell(
            f"Kernel Agent: no verified improvement for `{spec.target}` "
            f"({plural(int(result.get('evaluations') or 0), 'candidate')} evaluated; "
            f"stopped: {stopped})."
        )


def offer(ls: KernelAgentServer, rewrite: Rewrite, result: dict[str, Any]) -> None:
    """Ask Accept / Reject / Show diff where the client has message actions; the lenses
    offer the same, so a decision taken there first wins."""
    methods = f" ({', '.join(rewrite.methods)})" if rewrite.methods else ""
    message = (
        f"Kernel Agent: `{rewrite.target}` rewrite ready: {rewrite.summary} on "
        f"{rewrite.device}{methods}, "
        f"after {plural(int(result.get('evaluations') or 0), 'evaluation')}."
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
