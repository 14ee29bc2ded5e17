"""Starting the two workers of an evaluation: the reference's and the candidate's.

Each is a fresh interpreter in its own jail (agents/sandbox/launch.py), with two pipes: the
parent's requests in, its replies out. The reference's worker never sees candidate code (a
pool may keep it warm for the next candidate: agents/verify/keeper.py); the candidate's
worker gets a cache directory of its own, keyed by its source, which no other candidate's
jail can write.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agents.sandbox.launch import Launched, LaunchSpec, launch
from agents.sandbox.peer import Peer, WorkerError, WorkerTimeout
from agents.sandbox.process import Limits, child_bootstrap, project_root
from agents.sandbox.startup import STALL_S, ProgressDeadline

SERVE = "from agents.verify.serve import main; main(sys.argv[2:])"


class WorkerStartFailed(Exception):
    """A worker could not start (no user code had run yet): the sandbox, not the candidate."""


@dataclass(frozen=True)
class WorkerSettings:
    device: str
    threads: int
    limits: Limits
    jail: bool = True
    env_extra: Mapping[str, str] = field(default_factory=dict)
    cancelled: Callable[[], bool] = lambda: False
    paused_s: Callable[[], float] = lambda: 0.0


def start_worker(role: str, settings: WorkerSettings, cache_dir: Path | None) -> Peer:
    """Start one worker; `hello` must follow before any other request."""
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    workdir = Path(tempfile.mkdtemp(prefix=f"kernel-agent-{role}-"))
    argv = [
        sys.executable,
        "-I",
        "-c",
        child_bootstrap(SERVE),
        str(project_root()),
        str(request_read),
        str(reply_write),
        role,
    ]
    spec = LaunchSpec(
        argv=argv,
        device=settings.device,
        threads=settings.threads,
        workdir=workdir,
        cache_dir=cache_dir,
        env_extra=dict(settings.env_extra),
        pass_fds=(request_read, reply_write),
        jail=settings.jail,
        limits=settings.limits,
        cpus=_all_cpus(),  # both workers alike; they take turns when timed, never at once
    )
    try:
        launched: Launched = launch(spec)
    except BaseException:
        for fd in (request_read, request_write, reply_read, reply_write):
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    finally:
        with contextlib.suppress(OSError):
            os.close(request_read)
        with contextlib.suppress(OSError):
            os.close(reply_write)

    def close() -> None:
        launched.close()
        shutil.rmtree(workdir, ignore_errors=True)

    peer = Peer(
        launched.process,
        request_write,
        reply_read,
        label=f"the {role}'s worker",
        cancelled=settings.cancelled,
        paused_s=settings.paused_s,
        close=close,
        strict=role == "candidate",  # refused for CPU used while stopped (peer.py)
    )
    peer.isolation = launched.isolation
    peer.launched = launched
    return peer


def _all_cpus() -> tuple[int, ...] | None:
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:
        return None


def say_hello(peer: Peer, settings: WorkerSettings, stall_s: float = STALL_S) -> None:
    """The first request: the worker imports torch and answers with its own pid. No user
    code has run yet, so the build timeout does not bound it: only a real hang fails it
    (agents/sandbox/startup.py), however busy the machine."""
    watch = ProgressDeadline(peer.cpu_seconds, settings.paused_s, stall_s=stall_s)
    peer.paused_s = watch
    try:
        frame = peer.request(
            "hello",
            watch.stall_s,
            device=settings.device,
            threads=settings.threads,
        )
    except WorkerTimeout:
        raise WorkerStartFailed(
            f"the sandbox failed to start ({peer.label} {watch.why()})"
        ) from None
    except WorkerError as error:
        last = [line for line in peer.stderr.text().splitlines() if line.strip()]
        detail = last[-1][:300] if last else str(error)
        raise WorkerStartFailed(f"the sandbox failed to start ({detail})") from None
    finally:
        peer.paused_s = settings.paused_s
    peer.own_pid = int(frame.header.get("pid") or 0) or None
