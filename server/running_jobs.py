"""Jobs as the editor sees them: start a search or a profile in a worker, show its progress
(work-done progress, cancellable from the progress bar), keep the lenses current, and push
the job list to clients that declared `kernelAgent/jobsChanged` whenever a job starts,
advances or ends, so that no client has to poll `kernelAgent.jobs`. What a job leaves when
it ends is `job_outcomes`' part.

The notification's params: `{"jobs": [...]}`, each job as `kernelAgent.jobs` returns it
(`job_json`); the list holds the running jobs only, so an ended job leaves it."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from agents.targets.model import Target
from server import lenses as L
from server.documents import Document
from server.job_outcomes import describe_event, job_failed, job_finished
from server.jobs import Job, JobRefused, JobSpec, JobUpdate
from server.language_server import RunningJob
from server.locations import fs_path, insertion_edit

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer

JOBS_CHANGED = "kernelAgent/jobsChanged"


def resolve_target(ls: KernelAgentServer, args: dict[str, Any]) -> tuple[Document, Target]:
    """The open document and the target a command names (InvalidParams otherwise)."""
    doc = ls.docs.get(args["uri"])
    if doc is None:
        raise JsonRpcInvalidParams(message=f"{args['uri']} is not open in the editor")
    target = next((t for t in ls.parsed(doc).targets if t.name == args["target"]), None)
    if target is None:
        raise JsonRpcInvalidParams(
            message=f"no optimisation target named {args['target']!r} in {args['uri']}"
        )
    return doc, target


async def start_job(
    ls: KernelAgentServer,
    kind: str,
    doc: Document,
    target: Target,
    *,
    backend: str,
    explicit: bool = True,
) -> dict[str, Any]:
    """Start `kind` ("optimize" or "profile") on `target` in a worker; the answer says
    whether it started, and why not."""
    settings = ls.state.settings
    if not target.ready:
        explain_missing(ls, doc, target, kind)
        return {"started": False, "reason": target.missing, "snippet": target.snippet}
    chosen = "offline" if backend == "offline" or kind == "profile" else None
    if chosen is None:
        missing = settings.missing_key()
        if missing:
            ls.tell(f"Kernel Agent: {missing}", types.MessageType.Error)
            return {"started": False, "reason": missing}
    spec = JobSpec(
        kind=kind,
        uri=doc.uri,
        target=target.name,
        target_kind=target.kind,
        source=doc.text,
        path=fs_path(doc.uri),
        settings=settings.job_settings(chosen),
        env=settings.job_env(chosen),
    )
    holder: dict[str, RunningJob] = {}

    async def on_update(update: JobUpdate) -> None:
        running = ls.state.running.get(update.job_id) or holder.get("run")
        if running is None:
            running = RunningJob(
                update.job_id,
                spec,
                L.JobView(update.job_id, kind, 0, "starting"),
                explicit=explicit,
            )
            holder["run"] = running
            ls.state.running[update.job_id] = running
        await job_update(ls, running, update)

    try:
        job = await ls.jobs.start(spec, on_update)
    except JobRefused as error:
        if explicit:
            ls.tell(f"Kernel Agent: {error}", types.MessageType.Warning)
        else:
            ls.log_line(f"profile on save skipped for `{target.name}`: {error}")
        return {"started": False, "reason": str(error)}
    running = holder.get("run")
    if running is None and job.running:
        running = RunningJob(
            job.id, spec, L.JobView(job.id, kind, job.percent, job.message), explicit=explicit
        )
        holder["run"] = ls.state.running[job.id] = running
    ls.refresh_lenses()
    if running is not None and job.running and ls.state.client.progress:
        await begin_progress(ls, running, target)
    return {
        "started": job.state != "failed",
        "jobId": job.id,
        "pid": job.pid,
        "state": job.state,
    }


def explain_missing(ls: KernelAgentServer, doc: Document, target: Target, kind: str) -> None:
    """What to add before `target` can run: offered as an insertion where the client
    can ask, else shown with the snippet."""
    message = f"Kernel Agent: `{target.name}` cannot be {kind}d yet. {target.missing}"
    if not target.snippet:
        ls.tell(message, types.MessageType.Warning)
        return
    if not ls.state.client.message_actions:
        ls.tell(message + " Add:\n" + target.snippet, types.MessageType.Warning)
        return
    insert = "Insert template"

    async def ask() -> None:
        ls.log_line(message + " Template:\n" + target.snippet)
        try:
            answer = await ls.window_show_message_request_async(
                types.ShowMessageRequestParams(
                    type=types.MessageType.Warning,
                    message=message,
                    actions=[types.MessageActionItem(title=insert)],
                )
            )
        except Exception as error:
            ls.log_line(f"showMessageRequest unanswered: {error}")
            return
        current = ls.docs.get(doc.uri)
        if getattr(answer, "title", None) == insert and current is not None:
            edit = insertion_edit(current, target.snippet or "", ls.encoding)
            await ls.workspace_apply_edit_async(
                types.ApplyWorkspaceEditParams(edit=edit, label="Kernel Agent: template")
            )

    ls.spawn(ask())


async def begin_progress(ls: KernelAgentServer, running: RunningJob, target: Target) -> None:
    """Show the job as work-done progress; cancelling the progress cancels the job."""
    token = f"kernel-agent/{running.job_id}"
    try:
        await ls.work_done_progress.create_async(token)
    except Exception as error:
        ls.log_line(f"progress not created: {error}", types.MessageType.Warning)
        return
    verb = "Optimizing" if running.spec.kind == "optimize" else "Profiling"
    ls.work_done_progress.begin(
        token,
        types.WorkDoneProgressBegin(
            title=f"{verb} `{target.name}`",
            cancellable=True,
            message=running.view.message,
            percentage=running.view.percent,
        ),
    )
    if running.ended:  # it ended while the client created the progress
        ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=running.view.message))
        ls.work_done_progress.tokens.pop(token, None)
        return
    running.token = token
    running.begun = True
    future = ls.work_done_progress.tokens.get(token)
    if future is not None:
        job_id = running.job_id

        def cancelled(fut) -> None:
            if fut.cancelled():
                ls.log_line(f"job {job_id}: cancelled from the progress bar")
                ls.spawn(ls.jobs.cancel(job_id))

        future.add_done_callback(cancelled)


async def job_update(ls: KernelAgentServer, running: RunningJob, update: JobUpdate) -> None:
    """One message from the worker: move the progress and the lenses, or end the job."""
    state = update.state
    if state == "event":
        if update.event is not None:
            describe_event(ls, running, update.event)
        return
    if state in ("started", "progress"):
        running.view = L.JobView(
            running.job_id,
            running.spec.kind,
            update.percent or running.view.percent,
            update.message or running.view.message,
        )
        if running.begun and running.token:
            ls.work_done_progress.report(
                running.token,
                types.WorkDoneProgressReport(
                    message=running.view.message,
                    percentage=running.view.percent,
                    cancellable=True,
                ),
            )
        publish_jobs(ls)
        ls.refresh_lenses()
        return
    running.ended = True
    ls.state.running.pop(running.job_id, None)
    running.view = L.JobView(running.job_id, running.spec.kind, 100, update.message or state)
    if running.begun and running.token:
        ls.work_done_progress.end(
            running.token, types.WorkDoneProgressEnd(message=update.message or state)
        )
        ls.work_done_progress.tokens.pop(running.token, None)
    publish_jobs(ls)
    try:
        if state == "failed":
            job_failed(ls, running, update)
        else:
            job_finished(ls, running, update)
    finally:
        ls.refresh_lenses()


def job_json(job: Job) -> dict[str, Any]:
    """A job as the kernelAgent.jobs command reports it."""
    return {
        "jobId": job.id,
        "kind": job.spec.kind,
        "uri": job.spec.uri,
        "target": job.spec.target,
        "state": job.state,
        "percent": job.percent,
        "message": job.message,
        "pid": job.pid,
        "error": job.error,
    }


def publish_jobs(ls: KernelAgentServer) -> None:
    """Push the running jobs to a client that declared `jobsChanged` (others poll
    `kernelAgent.jobs` if they want the list)."""
    if not ls.state.client.jobs_changed:
        return
    jobs = [job_json(job) for job in ls.jobs.running()]
    with contextlib.suppress(Exception):  # a closed connection: nobody to tell
        ls.protocol.notify(JOBS_CHANGED, {"jobs": jobs})
