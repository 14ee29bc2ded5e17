"""Code lenses above each target: what can be done now, a running job's progress with a
Cancel, or a waiting rewrite's Accept · Reject · Show diff."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agents.targets.edits import Rewrite
from agents.targets.model import Target

CMD_OPTIMIZE = "kernelAgent.optimize"
CMD_PROFILE = "kernelAgent.profile"
CMD_ACCEPT = "kernelAgent.accept"
CMD_REJECT = "kernelAgent.reject"
CMD_DIFF = "kernelAgent.showDiff"
CMD_CANCEL = "kernelAgent.cancel"
CMD_JOBS = "kernelAgent.jobs"
CMD_PENDING = "kernelAgent.pendingRewrite"
COMMANDS = (
    CMD_OPTIMIZE,
    CMD_PROFILE,
    CMD_ACCEPT,
    CMD_REJECT,
    CMD_DIFF,
    CMD_CANCEL,
    CMD_JOBS,
    CMD_PENDING,
)


@dataclass(frozen=True)
class JobView:
    """What a lens shows of a running job."""

    job_id: str
    kind: str
    percent: int
    message: str


@dataclass(frozen=True)
class Lens:
    line: int
    title: str
    command: str
    arguments: list[Any] = field(default_factory=list)


def target_args(uri: str, target: Target, **extra: Any) -> dict[str, Any]:
    return {"uri": uri, "target": target.name, **extra}


def lenses_for(
    uri: str,
    targets: list[Target],
    jobs: dict[str, JobView],
    pending: dict[str, Rewrite],
    llm_label: str | None,
    icons: bool = False,
) -> list[Lens]:
    """The lenses of one document. `jobs` and `pending` are keyed by target name."""
    out: list[Lens] = []
    spin = "$(sync~spin) " if icons else "⟳ "
    for target in targets:
        line = target.name_line
        args = target_args(uri, target)
        job = jobs.get(target.name)
        rewrite = pending.get(target.name)
        if job is not None:
            verb = "Optimizing" if job.kind == "optimize" else "Profiling"
            detail = f"{job.percent}% {job.message}".strip()
            out.append(
                Lens(
                    line,
                    f"{spin}{verb} {target.name}: {detail}",
                    CMD_JOBS,
                    [{**args, "show": True}],
                )
            )
            out.append(Lens(line, "Cancel", CMD_CANCEL, [{**args, "jobId": job.job_id}]))
            continue
        if rewrite is not None:
            out.append(Lens(line, f"Accept ({rewrite.summary})", CMD_ACCEPT, [args]))
            out.append(Lens(line, "Reject", CMD_REJECT, [args]))
            out.append(Lens(line, "Show diff", CMD_DIFF, [args]))
            continue
        if not target.ready:
            what = "get_inputs()" if "get_inputs" in (target.missing or "") else "a launcher"
            if "get_init_inputs" in (target.missing or "") and "get_inputs()" not in (
                target.missing or ""
            ):
                what = "get_init_inputs()"
            out.append(Lens(line, f"Optimize: add {what} first", CMD_OPTIMIZE, [args]))
            continue
        out.append(
            Lens(line, "Optimize", CMD_OPTIMIZE, [target_args(uri, target, backend="offline")])
        )
        if llm_label:
            out.append(
                Lens(
                    line,
                    f"Optimize with {llm_label}",
                    CMD_OPTIMIZE,
                    [target_args(uri, target, backend="llm")],
                )
            )
        out.append(Lens(line, "Profile", CMD_PROFILE, [args]))
    return out
