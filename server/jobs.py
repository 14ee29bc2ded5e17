"""Background jobs of the language server: each optimisation or profile runs in a worker
process of its own (server/worker.py), never in the server.

A worker that crashes, hangs or leaks takes only itself down. It gets a snapshot of the
document on stdin (secrets only in its environment), speaks JSON lines on a pipe of its own,
and is started in its own session so that cancelling can end it and everything it started.
The manager turns its messages into `JobUpdate`s: lifecycle (started, done, failed,
cancelled), every search event, and percent + message for the editor's progress.

Every message is typed (server/job_protocol.py): updates carry the search's own
`SearchEvent`s, and a job's result is a `JobResult` (the search's `SearchResult` for
"optimize", the reference's profile and hot lines for both kinds). A line on the pipe that
is not a message fails the job and ends the worker.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agents.request.settings import RequestError
from agents.search.events import SearchEvent
from agents.speedup_words import speedup_summary
from agents.targets.load import target_from_source
from agents.targets.synth import SynthesisError
from server.job_protocol import (
    JOB_KINDS,
    Cancel,
    ErrorMessage,
    EventMessage,
    JobResult,
    ProtocolError,
    ResultMessage,
    Setup,
    WorkerJob,
    decode_message,
    encode,
)
from server.job_settings import SettingsError, optimize_request, profile_request
from server.progress_text import ProgressTracker

log = logging.getLogger("kernel_agent.server.jobs")

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
LINES = 40  # of the worker's stderr, kept for the reason of a crash
KEEP_ENDED = 200
PROJECT_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class JobSpec:
    kind: str  # "optimize" | "profile"
    uri: str
    target: str  # class or function name
    target_kind: str  # "module" | "function" | "triton" | "cuda"
    source: str = field(repr=False)  # snapshot of the whole document
    path: str | None = None  # file path on disk: the label in tracebacks and profiles
    settings: dict = field(default_factory=dict)  # by the request's field paths (table.py)
    env: dict = field(default_factory=dict, repr=False, compare=False)  # secrets: worker env only


@dataclass(frozen=True)
class JobUpdate:
    """What a job's handler is told: a state change, a search event, progress or the result."""

    job_id: str
    state: str  # "started" | "event" | "progress" | "done" | "failed" | "cancelled"
    percent: int | None = None
    message: str = ""
    event: SearchEvent | None = None  # the search event for state "event"
    result: JobResult | None = None  # for "done" (and "cancelled" when the worker sent one)
    error: str | None = None  # one-line reason for "failed"


class JobRefused(Exception):
    """A start that would break a limit (one job per target, concurrent jobs); one line."""


@dataclass
class Job:
    id: str
    spec: JobSpec
    state: str  # "running" | "done" | "failed" | "cancelled"
    percent: int = 0
    message: str = ""
    result: JobResult | None = None
    error: str | None = None
    started_at: float = field(default_factory=time.time)
    pid: int | None = None  # the worker's process id (also its process group's)
    ended_at: float | None = None
    cancel_requested: bool = False

    @property
    def running(self) -> bool:
        return self.state == "running"


UpdateHandler = Callable[[JobUpdate], Awaitable[None] | None]


@dataclass
class _Said:
    """What a worker said before its pipe closed."""

    result: JobResult | None = None
    error: str | None = None
    garbage: str | None = None  # why its pipe was not read to the end


@dataclass
class _Run:
    """What the manager holds for one job while it runs."""

    job: Job
    on_update: UpdateHandler
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    process: asyncio.subprocess.Process | None = None
    tracker: ProgressTracker | None = None
    stderr: collections.deque = field(default_factory=lambda: collections.deque(maxlen=LINES))
    stderr_task: asyncio.Task | None = None
    tasks: list[asyncio.Task] = field(default_factory=list)


class JobManager:
    """Starts, watches, cancels and ends worker processes; one job per target."""

    def __init__(
        self, max_concurrent: int = 2, python: str = sys.executable, grace_s: float = 5.0
    ) -> None:
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        self.max_concurrent = max_concurrent
        self.python = python
        self.grace_s = grace_s
        self._runs: dict[str, _Run] = {}
        self._closing = False

    # -- queries -----------------------------------------------------------------------------

    def get(self, job_id: str) -> Job | None:
        run = self._runs.get(job_id)
        return run.job if run else None

    def find(self, uri: str, target: str) -> Job | None:
        """The running job for a target, if any."""
        for run in self._runs.values():
            job = run.job
            if job.running and job.spec.uri == uri and job.spec.target == target:
                return job
        return None

    def running(self) -> list[Job]:
        return [run.job for run in self._runs.values() if run.job.running]

    # -- start -------------------------------------------------------------------------------

    async def start(self, spec: JobSpec, on_update: UpdateHandler) -> Job:
        """Start a worker for `spec`. Raises JobRefused for a limit; a bad setting or a file
        that cannot become a problem gives a job that has already failed, with its reason."""
        if self._closing:
            raise JobRefused("the language server is shutting down")
        if spec.kind not in JOB_KINDS:
            raise JobRefused(f"unknown job kind {spec.kind!r}: use {' or '.join(JOB_KINDS)}")
        busy = self.find(spec.uri, spec.target)
        if busy is not None:
            raise JobRefused(
                f"`{spec.target}` already has a {busy.spec.kind} job running "
                f"({busy.message or 'starting'}): wait for it or cancel it"
            )
        if len(self.running()) >= self.max_concurrent:
            raise JobRefused(
                f"{self.max_concurrent} jobs are already running, the most at once: "
                "wait for one to finish or cancel one"
            )
        # The job keeps no secrets: a Job may be shown, logged or serialised.
        message = "profiling" if spec.kind == "profile" else "starting"
        job = Job(uuid.uuid4().hex[:12], replace(spec, env={}), "running", message=message)
        run = _Run(job, on_update)
        self._runs[job.id] = run
        self._forget_old()
        try:
            payload = _payload(spec)
            env = _environment(spec.env)
        except (SettingsError, SynthesisError) as error:
            await self._end(run, "failed", error=_one_line(str(error)))
            return job
        log.info("job %s: %s %s in %s", job.id, spec.kind, spec.target, spec.uri)
        read_fd, write_fd = os.pipe()
        try:
            run.process = await asyncio.create_subprocess_exec(
                self.python,
                "-P",  # the user's folder must not shadow our packages (memory, server...)
                "-m",
                "server.worker",
                "--fd",
                str(write_fd),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(write_fd,),
                env=env,
                start_new_session=True,  # its own process group: cancel kills all of it
            )
        except OSError as error:
            os.close(read_fd)
            await self._end(run, "failed", error=f"cannot start the worker: {error}")
            return job
        finally:
            os.close(write_fd)
        job.pid = run.process.pid
        if run.ended.is_set():  # shut down while it was starting
            _kill_tree(job.pid)
            os.close(read_fd)
            await run.process.wait()
            return job
        reader = await _pipe_reader(read_fd)
        run.stderr_task = asyncio.create_task(self._read_stderr(run))
        await self._send(run, payload)
        await self._emit(run, JobUpdate(job.id, "started", percent=0, message=job.message))
        run.tasks.append(asyncio.create_task(self._supervise(run, reader)))
        return job

    # -- cancel, wait, shutdown ----------------------------------------------------------------

    async def cancel(self, job_id: str) -> bool:
        """Ask the worker to stop (it keeps the best verified kernel so far), kill its whole
        process tree after `grace_s`, and return once it has ended. False if not running."""
        run = self._runs.get(job_id)
        if run is None or not run.job.running or run.process is None:
            return False
        if not run.job.cancel_requested:
            run.job.cancel_requested = True
            log.info("job %s: cancelling", job_id)
            run.job.message = "cancelling: keeping the best verified kernel so far"
            await self._emit(
                run,
                JobUpdate(job_id, "progress", percent=run.job.percent, message=run.job.message),
            )
            await self._send(run, Cancel().to_json())
            with contextlib.suppress(ProcessLookupError):
                run.process.send_signal(signal.SIGTERM)
            run.tasks.append(asyncio.create_task(self._kill_after(run, self.grace_s)))
        await run.ended.wait()
        return True

    async def wait(self, job_id: str) -> Job:
        """The job, once it has ended."""
        run = self._runs[job_id]
        await run.ended.wait()
        return run.job

    async def shutdown(self) -> None:
        """End every worker: cancel, then kill what is still there after the grace period."""
        self._closing = True
        runs = [run for run in self._runs.values() if run.job.running]
        await asyncio.gather(*(self.cancel(run.job.id) for run in runs), return_exceptions=True)
        for run in runs:  # anything that never got a process
            if not run.ended.is_set():
                await self._end(run, "cancelled")

    # -- the worker's side ---------------------------------------------------------------------

    async def _supervise(self, run: _Run, reader: asyncio.StreamReader) -> None:
        """Read the worker's messages until its pipe closes, then settle the job. Whatever
        goes wrong here, the job ends and the worker does not outlive it."""
        job, process = run.job, run.process
        assert process is not None
        said = _Said()
        try:
            said = await self._read_messages(run, reader)
        except Exception as error:
            log.exception("job %s: reading the worker failed", job.id)
            said = _Said(garbage=f"({type(error).__name__}: {error})")
        finally:
            if said.garbage is not None:
                _kill_tree(process.pid)
            try:
                await asyncio.wait_for(process.wait(), timeout=self.grace_s + 5)
            except TimeoutError:  # closed the pipe but did not exit
                _kill_tree(process.pid)
                await process.wait()
            if run.stderr_task is not None:  # a grandchild holding stderr must not block us
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(run.stderr_task, timeout=1.0)
        if said.garbage is not None:
            error = f"the worker sent garbage on its pipe: {said.garbage}"
            await self._end(run, "failed", error=error)
        elif said.result is not None:
            state = "cancelled" if job.cancel_requested else "done"
            await self._end(run, state, result=said.result)
        elif job.cancel_requested:
            await self._end(run, "cancelled")
        elif said.error is not None:
            await self._end(run, "failed", error=said.error)
        else:
            await self._end(run, "failed", error=_death(process.returncode, run.stderr))

    async def _read_messages(self, run: _Run, reader: asyncio.StreamReader) -> _Said:
        """What the worker said: its result, its error, or the garbage that ended it."""
        said = _Said()
        while True:
            try:
                line = await reader.readline()
            except (asyncio.LimitOverrunError, ValueError):
                return _Said(garbage="a message over the size limit")
            if not line:
                return said
            try:
                message = decode_message(line)
            except ProtocolError as error:
                return _Said(garbage=_one_line(str(error)))
            if isinstance(message, Setup):
                run.tracker = ProgressTracker(
                    iterations=message.iterations,
                    max_evals=message.max_evals,
                    max_time_s=message.max_time,
                    samples=message.samples,
                )
            elif isinstance(message, EventMessage):
                await self._on_event(run, message.event)
            elif isinstance(message, ResultMessage):
                said.result = message.result
            elif isinstance(message, ErrorMessage):
                said.error = _one_line(message.error)

    async def _on_event(self, run: _Run, event: SearchEvent) -> None:
        job = run.job
        await self._emit(run, JobUpdate(job.id, "event", event=event))
        tracker = run.tracker
        changed = tracker is not None and tracker.observe(event)
        if not changed or tracker is None or job.cancel_requested:
            return
        job.percent, job.message = tracker.percent, tracker.message
        await self._emit(
            run, JobUpdate(job.id, "progress", percent=job.percent, message=job.message)
        )

    async def _read_stderr(self, run: _Run) -> None:
        assert run.process is not None and run.process.stderr is not None
        while line := await run.process.stderr.readline():
            text = line.decode("utf-8", "replace").rstrip()
            if text:
                run.stderr.append(text)

    async def _kill_after(self, run: _Run, grace_s: float) -> None:
        try:
            await asyncio.wait_for(run.ended.wait(), timeout=grace_s)
        except TimeoutError:
            if run.process is not None and run.process.returncode is None:
                log.info("job %s: still running after the grace period: killing", run.job.id)
                _kill_tree(run.process.pid)

    async def _send(self, run: _Run, message: dict[str, Any]) -> None:
        stdin = run.process.stdin if run.process else None
        if stdin is None or stdin.is_closing():
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            stdin.write(encode(message).encode() + b"\n")
            await stdin.drain()

    async def _end(
        self,
        run: _Run,
        state: str,
        *,
        result: JobResult | None = None,
        error: str | None = None,
    ) -> None:
        job = run.job
        if run.ended.is_set():
            return
        job.state, job.result, job.error, job.ended_at = state, result, error, time.time()
        if state == "done":
            job.percent = 100
        job.message = _final_message(state, result, error)
        if run.process is not None and run.process.stdin is not None:
            run.process.stdin.close()
        log.info("job %s: %s%s", job.id, state, f" ({error})" if error else "")
        await self._emit(
            run,
            JobUpdate(
                job.id, state, percent=job.percent, message=job.message, result=result, error=error
            ),
        )
        run.ended.set()

    async def _emit(self, run: _Run, update: JobUpdate) -> None:
        try:
            value = run.on_update(update)
            if inspect.isawaitable(value):
                await value
        except Exception:  # the editor's handler must not stop the job's bookkeeping
            log.exception("job %s: update handler failed on %s", run.job.id, update.state)

    def _forget_old(self) -> None:
        ended = [job_id for job_id, run in self._runs.items() if run.ended.is_set()]
        for job_id in ended[: max(0, len(ended) - KEEP_ENDED)]:
            del self._runs[job_id]


# -- helpers -----------------------------------------------------------------------------------


def _payload(spec: JobSpec) -> dict[str, Any]:
    """What the worker reads on stdin: the job's typed request, without its secrets.
    SettingsError or SynthesisError in one line when the settings or the file cannot
    make one."""
    label = spec.path or spec.uri
    try:
        target = target_from_source(spec.source, label, spec.target, spec.target_kind)
    except RequestError as error:
        raise SettingsError(str(error)) from None
    build = optimize_request if spec.kind == "optimize" else profile_request
    request = build(target, spec.settings)
    return WorkerJob(request, spec.target, spec.target_kind, target.synthesized).to_json()


def _environment(secrets: dict) -> dict[str, str]:
    """The server's environment plus the job's secrets; the project importable from any
    working directory."""
    if not isinstance(secrets, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in secrets.items()
    ):
        raise SettingsError("env must map variable names to strings")
    env = {**os.environ, **secrets}
    previous = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(PROJECT_ROOT) + (os.pathsep + previous if previous else "")
    return env


async def _pipe_reader(fd: int) -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES)
    await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    return reader


def _death(returncode: int | None, stderr: collections.deque) -> str:
    if returncode is not None and returncode < 0:
        number = -returncode
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = "unknown"
        how = f"killed by signal {number} ({name})"
    elif returncode == 0:
        how = "it ended without a result"
    else:
        how = f"exit status {returncode}"
    last = stderr[-1][:300] if stderr else ""
    return f"worker died: {how}" + (f"; last line on stderr: {last}" if last else "")


def _final_message(state: str, result: JobResult | None, error: str | None) -> str:
    """The job's last line (the progress's end, `kernelAgent.jobs`): for a faster kernel,
    the result's own speedup in the words the lens and the notification use, which is also
    what the editor's status bar reads."""
    if state == "failed":
        return error or "failed"
    if result is None:
        return "cancelled" if state == "cancelled" else state
    search = result.search
    if search is None:
        return f"profiled: {len(result.hot_lines)} hot lines"
    if search.improved:
        text = speedup_summary(search.speedup, search.confirmed)
    else:
        text = "no improvement"
    return f"cancelled · {text}" if state == "cancelled" else text


def _one_line(text: str) -> str:
    return " ".join(text.split())[:500]


def _kill_tree(pid: int) -> None:
    """SIGKILL the worker's process group and every process it started, including sandbox
    children in sessions of their own (found through /proc before anything dies)."""
    descendants = _descendants(pid)
    groups = {pid}
    for child in descendants:
        with contextlib.suppress(OSError):
            if os.getpgid(child) == child:
                groups.add(child)
    for group in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    for child in [pid, *descendants]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # after "(comm)", which may hold spaces
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found
