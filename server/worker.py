"""One job in its own process: `python -m server.worker --fd N`.

The language server starts one per optimisation or profile, so a crash, a hang or a leak in
the search (or in torch) cannot take the server with it. It runs the job's typed request
through the same function as the CLI (`agents.request.run`). Protocol (server/job_protocol.py):

- stdin: first line, the job (`WorkerJob`: an `OptimizeRequest` or a `ProfileRequest`; no
  secrets, those arrive in the environment). Later lines are commands (`Cancel`). End of
  stdin (the server went away) also cancels.
- fd N (a pipe of its own, so stray prints cannot corrupt it): `Setup` (the resolved
  budget), then an `EventMessage` per search event, then a `ResultMessage` (the job's
  `JobResult`) or an `ErrorMessage` (one line).
- SIGTERM cancels like the command: the search stops, its sandboxes are killed, and the best
  verified kernel so far is still reported as the result.
- stdout is sent to stderr; the server keeps stderr's tail as the reason for a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
import traceback
from typing import Any

from agents.profile.report import Profile
from agents.request.requests import OptimizeRequest, ProfileRequest
from agents.search.result import SearchResult
from server.job_protocol import (
    ErrorMessage,
    EventMessage,
    JobResult,
    ProtocolError,
    ResultMessage,
    Setup,
    WorkerJob,
    WorkerMessage,
    decode_command,
    decode_job,
    encode,
    message_json,
)

CANCEL_EXIT_S = 20.0
"""After a cancel, the worker ends itself this long later even if the search has not."""
USAGE = "usage: python -m server.worker --fd N (N: the pipe to write messages to)"


class Channel:
    """Messages on the dedicated fd, one line each; one writer at a time."""

    def __init__(self, fd: int) -> None:
        self._file = os.fdopen(fd, "w", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def send(self, message: WorkerMessage) -> None:
        line = encode(message_json(message))
        with self._lock:
            try:
                self._file.write(line + "\n")
                self._file.flush()
            except (BrokenPipeError, ValueError):  # the server is gone: nobody to tell
                pass


class JobFailure(Exception):
    """A reason for the user, one line."""


def message_fd(argv: list[str]) -> int | None:
    """N from `--fd N` (or `--fd=N`), the only argument; None for anything else."""
    if len(argv) == 1 and argv[0].startswith("--fd="):
        argv = ["--fd", argv[0].split("=", 1)[1]]
    if len(argv) != 2 or argv[0] != "--fd" or not argv[1].isdigit():
        return None
    return int(argv[1])


def main(argv: list[str] | None = None) -> int:
    fd = message_fd(sys.argv[1:] if argv is None else argv)
    if fd is None:
        print(USAGE, file=sys.stderr)
        return 2
    os.set_inheritable(fd, False)  # sandbox children must not hold the pipe open
    channel = Channel(fd)
    sys.stdout = sys.stderr  # prints from libraries must not reach anything we parse
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        job = decode_job(sys.stdin.readline())
    except ProtocolError as error:
        channel.send(ErrorMessage(_one_line(f"the worker received no job on stdin: {error}")))
        return 2
    cancel = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: _cancel(cancel))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the editor's terminal is not ours
    threading.Thread(target=_read_commands, args=(cancel,), daemon=True).start()
    try:
        result = run_job(job, channel, cancel)
    except JobFailure as error:
        channel.send(ErrorMessage(_one_line(str(error))))
        return 1
    except Exception as error:
        traceback.print_exc()
        channel.send(ErrorMessage(_one_line(f"{type(error).__name__}: {error}")))
        return 1
    channel.send(ResultMessage(result))
    return 0


def _cancel(cancel: threading.Event) -> None:
    if cancel.is_set():
        return
    cancel.set()
    timer = threading.Timer(CANCEL_EXIT_S, lambda: os._exit(3))  # a search that will not stop
    timer.daemon = True
    timer.start()


def _read_commands(cancel: threading.Event) -> None:
    for line in sys.stdin:
        with contextlib.suppress(ProtocolError):
            decode_command(line)  # the one command there is
            _cancel(cancel)
    _cancel(cancel)  # stdin closed: the server is gone


def run_job(job: WorkerJob, channel: Channel, cancel: threading.Event) -> JobResult:
    if isinstance(job.request, OptimizeRequest):
        return asyncio.run(_optimize_job(job, job.request, channel, cancel))
    return _profile_job(job, job.request, cancel)


def _profile_job(job: WorkerJob, request: ProfileRequest, cancel: threading.Event) -> JobResult:
    """The reference's profile where a search would evaluate it, and its hot lines."""
    from agents.profile.api import ProfileError, profile_file
    from agents.search.knowledge import hot_lines_json

    try:
        profile = profile_file(
            request.problem,
            device=request.device,
            size=request.size,
            threads=request.threads,
            repeat=request.repeat,
            use_jail=request.jail,
            refresh_ceilings=request.refresh_ceilings,
            cancel=cancel,
        )
    except ProfileError as error:
        raise JobFailure(str(error)) from None
    return _result(job, profile, None, hot_lines_json(profile))


async def _optimize_job(
    job: WorkerJob, request: OptimizeRequest, channel: Channel, cancel: threading.Event
) -> JobResult:
    """The search the CLI would run for this request (agents.request.run), its events
    forwarded as they come, and its result with the reference's profile."""
    from agents.evaluate import EvalError
    from agents.llm.base import LLMError, MissingAPIKeyError
    from agents.request.run import open_search
    from agents.request.settings import RequestError
    from agents.roles.factory import RoleSetupError
    from agents.search.knowledge import hot_lines_json
    from agents.task import TaskLoadError, outline_problem
    from memory.store import MemoryStoreError

    try:
        outline_problem(request.target.problem)
    except TaskLoadError as error:
        raise JobFailure(str(error)) from None
    resolved = request.resolved()
    channel.send(
        Setup(
            iterations=resolved.search.iterations or 1,
            samples=resolved.search.samples or 1,
            max_evals=resolved.budget.max_evals,
            max_time=resolved.budget.max_time,
        )
    )
    try:
        with open_search(request, lambda event: channel.send(EventMessage(event)), cancel) as run:
            search = await run.run_async()
            profile = run.profile
    except (RequestError, RoleSetupError, MissingAPIKeyError, EvalError) as error:
        raise JobFailure(str(error)) from None  # the request cannot run as given
    except (LLMError, MemoryStoreError) as error:
        raise JobFailure(str(error)) from None  # a model or the memory file failed for good
    return _result(job, profile, search, hot_lines_json(profile))


def _result(
    job: WorkerJob,
    profile: Profile | None,
    search: SearchResult | None,
    hot_lines: list[dict[str, Any]],
) -> JobResult:
    return JobResult(
        kind=job.kind,
        target=job.target,
        target_kind=job.target_kind,
        synthesized=job.synthesized,
        profile=profile,
        hot_lines=tuple(hot_lines),
        search=search,
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


if __name__ == "__main__":
    sys.exit(main())
