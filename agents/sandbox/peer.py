"""The parent's handle on one sandboxed worker: requests with deadlines, pausing, killing.

Why here: every request to a worker that runs user code can hang, crash, flood or lie. A
`Peer` bounds each of them: writes and reads have deadlines (extended by the time a pool kept
the worker stopped), replies are capped before they are read, stdout and stderr are drained
into short tails, and the worker's whole process tree can be stopped, continued and killed.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.sandbox.inspect import descendants
from agents.sandbox.wire import (
    CHUNK,
    Cancelled,
    Deadline,
    Frame,
    WaitPolicy,
    WireError,
    encode,
    read_frame,
    set_nonblocking,
    widen_pipe,
)

TAIL_BYTES = 16_384


class WorkerError(Exception):
    """A request to a worker did not get an answer it could use; `worker` is its label."""

    worker = ""


class WorkerFailed(WorkerError):
    """The worker answered a request with an error (its own words, in `message`)."""

    def __init__(self, message: str, kind: str, worker: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.worker = worker


class WorkerGone(WorkerError):
    """The worker died, closed its channel or broke the protocol; `why` says which, and
    `alive` whether it was still running (a protocol breach, not a crash)."""

    def __init__(self, why: str, worker: str = "", alive: bool = False) -> None:
        super().__init__(why)
        self.why = why
        self.worker = worker
        self.alive = alive


class WorkerTimeout(WorkerError):
    """The worker did not answer within the request's deadline."""

    def __init__(self, message: str, worker: str = "", seconds: float = 0.0) -> None:
        super().__init__(message)
        self.worker = worker
        self.seconds = seconds


@dataclass
class Tail:
    """The last bytes of a stream, kept by a drain thread."""

    data: bytearray = field(default_factory=bytearray)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, chunk: bytes) -> None:
        with self.lock:
            self.data += chunk
            del self.data[:-TAIL_BYTES]

    def text(self) -> str:
        with self.lock:
            return self.data.decode("utf-8", "replace")


class Peer:
    """A started worker and the two pipe ends the parent holds."""

    def __init__(
        self,
        process: subprocess.Popen,
        request_fd: int,
        reply_fd: int,
        *,
        label: str,
        cancelled: Callable[[], bool] = lambda: False,
        paused_s: Callable[[], float] = lambda: 0.0,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.process = process
        self.label = label
        self.request_fd = request_fd
        self.reply_fd = reply_fd
        self.cancelled = cancelled
        self.paused_s = paused_s
        self._close = close
        self.stdout, self.stderr = Tail(), Tail()
        self.requests = 0
        self.clean = True  # every request so far got its answer: the channel is in step
        self.stopped = False
        self._pids: list[int] = []
        self.own_pid: int | None = None  # the pid the worker sees for itself (its hello)
        self.isolation = ""
        self.launched: Any = None
        set_nonblocking(reply_fd)
        set_nonblocking(request_fd)
        widen_pipe(request_fd)
        widen_pipe(reply_fd)
        for stream, tail in ((process.stdout, self.stdout), (process.stderr, self.stderr)):
            if stream is not None:
                threading.Thread(target=_drain, args=(stream, tail), daemon=True).start()

    # -- requests ---------------------------------------------------------------------------

    def request(
        self,
        op: str,
        timeout_s: float,
        *,
        payload: bytes | bytearray | memoryview = b"",
        payload_cap: int = 0,
        quiet_checked: bool = False,
        **fields: Any,
    ) -> Frame:
        """Send one request and read its one reply. Raises WorkerFailed (the worker's own
        error), WorkerTimeout, WorkerGone, or wire.Cancelled."""
        policy = WaitPolicy(timeout_s, self.cancelled, self.paused_s)
        self.requests += 1
        nonce = secrets.token_hex(8)
        self.clean, clean = False, self.clean  # until the answer is in
        try:
            if not quiet_checked and _readable(self.reply_fd):
                raise WireError("it wrote to its channel out of turn")
            self._write(encode({"op": op, "n": nonce, **fields}, payload), policy)
            frame = read_frame(self.reply_fd, policy, payload_cap)
            if frame.header.get("n") != nonce:
                raise WireError("it answered a request it was not asked")
        except Deadline:
            message = f"{self.label} did not answer {op!r} in {timeout_s:g} s"
            raise WorkerTimeout(message, self.label, timeout_s) from None
        except WireError as error:
            raise self._gone(str(error)) from None
        except OSError as error:  # EPIPE: it died before reading
            raise self._gone(f"{type(error).__name__}: {error}") from None
        if frame.header.get("ok") is not True:
            error = str(frame.header.get("error") or "failed without saying why")
            raise WorkerFailed(error, str(frame.header.get("kind") or "runtime"), self.label)
        self.clean = clean
        return frame

    def timed(self, op: str, timeout_s: float, **fields: Any) -> tuple[float, Frame]:
        """A request and the parent's monotonic seconds from the request's first byte to the
        reply's last: the only clock the candidate cannot touch."""
        if _readable(self.reply_fd):
            raise self._gone("it wrote to its channel out of turn")
        started = time.perf_counter()
        frame = self.request(op, timeout_s, quiet_checked=True, **fields)
        return time.perf_counter() - started, frame

    def _write(self, pieces: list[Any], policy: WaitPolicy) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self.request_fd, selectors.EVENT_WRITE)
            for piece in pieces:
                view = memoryview(piece).cast("B")
                while view:
                    try:
                        view = view[os.write(self.request_fd, view[:CHUNK]) :]
                        continue
                    except BlockingIOError:
                        pass
                    if policy.cancelled():
                        raise Cancelled()
                    remaining = policy.remaining()
                    if remaining <= 0:
                        raise Deadline()
                    selector.select(timeout=min(remaining, 0.1))

    def _gone(self, what: str) -> WorkerGone:
        code = self._wait_exit(0.5)
        if code is None:
            return WorkerGone(f"{self.label} broke the protocol ({what})", self.label, True)
        return WorkerGone(self._exit_reason(code), self.label, False)

    def _exit_reason(self, code: int) -> str:
        if code < 0 or code > 128:
            number = -code if code < 0 else code - 128  # bubblewrap reports 128 + signal
            try:
                name = signal.Signals(number).name
            except ValueError:
                name = f"signal {number}"
            cause = " (out of memory?)" if name == "SIGKILL" else ""
            return f"{self.label} was killed by {name}{cause}"
        return f"{self.label} exited with status {code}"

    def _wait_exit(self, seconds: float) -> int | None:
        try:
            return self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    # -- the process tree -------------------------------------------------------------------

    def tree(self) -> list[int]:
        """The worker's processes (bubblewrap's included), read from /proc."""
        return descendants(self.process.pid)

    def stop(self) -> None:
        """SIGSTOP every process of the worker: nothing of it runs until `resume`. The tree
        is read from /proc once (`forget_tree` reads it again): a walk of /proc between two
        timed runs would evict the caches both of them run from."""
        if self.stopped:
            return
        if not self._pids:
            self._pids = self.tree()
        for pid in self._pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        if not self.stopped:
            return
        for pid in self._pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGCONT)
        self.stopped = False

    def forget_tree(self) -> None:
        self._pids = []

    @contextlib.contextmanager
    def awake(self):
        """Run a request with the worker continued, and stop it again after."""
        self.resume()
        try:
            yield
        finally:
            self.stop()

    def alive(self) -> bool:
        return self.process.poll() is None

    def close(self) -> None:
        """Kill the whole tree, reap it, close our pipe ends. Safe to call twice."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        for pid in self.tree():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self._close is not None:
            self._close()
        if self._wait_exit(10) is None:
            self.process.kill()
            self.process.wait()
        for fd in (self.request_fd, self.reply_fd):
            with contextlib.suppress(OSError):
                os.close(fd)
        self.request_fd = self.reply_fd = -1


def _readable(fd: int) -> bool:
    """Bytes already waiting on a channel before we asked anything."""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        return bool(selector.select(timeout=0))


def _drain(stream, tail: Tail) -> None:
    """Read a child's stream to its end, keeping the last bytes: a flood costs nothing."""
    with contextlib.suppress(OSError, ValueError):
        while chunk := stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536):
            tail.add(chunk)
