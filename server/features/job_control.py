"""The job commands: optimize or profile a target, cancel a job, list the running jobs.
Starting and following a job is `server.running_jobs`' part."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams

from server import lenses as L
from server.guards import guarded, object_argument
from server.running_jobs import job_json, resolve_target, start_job

if TYPE_CHECKING:
    from server.language_server import KernelAgentServer


def register(ls: KernelAgentServer) -> None:
    @ls.command(L.CMD_OPTIMIZE)
    @guarded(ls, "optimize")
    async def optimize_command(*args: Any) -> dict[str, Any]:
        value = object_argument(args, "uri", "target")
        backend = value.get("backend", "offline")
        if backend not in ("offline", "llm"):
            raise JsonRpcInvalidParams(message="argument 'backend' must be 'offline' or 'llm'")
        doc, target = resolve_target(ls, value)
        return await start_job(ls, "optimize", doc, target, backend=backend)

    @ls.command(L.CMD_PROFILE)
    @guarded(ls, "profile")
    async def profile_command(*args: Any) -> dict[str, Any]:
        doc, target = resolve_target(ls, object_argument(args, "uri", "target"))
        return await start_job(ls, "profile", doc, target, backend="offline")

    @ls.command(L.CMD_CANCEL)
    @guarded(ls, "cancel")
    async def cancel_command(*args: Any) -> dict[str, Any]:
        if len(args) != 1 or not isinstance(args[0], dict):
            raise JsonRpcInvalidParams(
                message="expected one object argument with jobId, or uri and target"
            )
        value = args[0]
        job = ls.jobs.get(value["jobId"]) if isinstance(value.get("jobId"), str) else None
        if (
            job is None
            and isinstance(value.get("uri"), str)
            and isinstance(value.get("target"), str)
        ):
            job = ls.jobs.find(value["uri"], value["target"])
        if job is None or not job.running:
            ls.tell("Kernel Agent: no running job to cancel there.", types.MessageType.Info)
            return {"cancelled": False}
        ls.spawn(ls.jobs.cancel(job.id))  # returns once the worker has ended: do not wait here
        return {"cancelled": True, "jobId": job.id}

    @ls.command(L.CMD_JOBS)
    @guarded(ls, "jobs")
    async def jobs_command(*args: Any) -> list[dict[str, Any]]:
        jobs = ls.jobs.running()
        value = args[0] if args and isinstance(args[0], dict) else {}
        if isinstance(value.get("target"), str):
            jobs = [j for j in jobs if j.spec.target == value["target"]]
        if isinstance(value.get("uri"), str):
            jobs = [j for j in jobs if j.spec.uri == value["uri"]]
        if value.get("show"):
            for job in jobs:
                status = f"{job.percent}% {job.message}"
                ls.tell(f"Kernel Agent: {job.spec.kind} `{job.spec.target}`: {status}")
        return [job_json(job) for job in jobs]
