"""The parent's handle on one sandboxed worker: requests with deadlines, pausing, killing.

Why here: every request to a worker that runs user code can hang, crash, flood or lie. A
`Peer` bounds each of them: writes and reads have deadlines (extended by the time a pool kept
the worker stopped), replies are capped before they are read, stdout and stderr are drained
into short tails, and the worker's whole process tree can be stopped, continued and killed.

Stopped means stopped: in its own cgroup the worker is frozen as one (agents/sandbox/cgroup.py),
processes forked at any time included; without one, every process of its jail (or, without
the jail, its session) is sent SIGSTOP, the list re-read until no new process appears. The
CPU its whole tree used is read at every stop and resume: a `strict` peer (the candidate's)
that used CPU while stopped, or started processes once timing began (the first stop), is
refused at its next request.
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

from agents.sandbox.inspect import descendants, is_stopped, live_tree, run_delays, tree_cpu_ns
from agents.sandbox.quota import ProcessTable
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
FROZEN_CPU_FLOOR_S = 0.002
"""CPU a stopped worker may show over all its stops before it is refused: accounting noise.
A frozen cgroup shows none; signal-stopped processes a few microseconds each."""
STOP_ROUNDS = 50
STOP_WAIT_S = 1.0


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
        strict: bool = False,
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
        self.strict = strict  # held to "stopped means stopped" (the candidate's worker)
        self._pids: list[int] = []
        self._timed_pids: set[int] | None = None  # its processes when timing began
        self._cpu_at_stop: float | None = None
        self._cpu_at_resume: float | None = None
        self.frozen_cpu_s = 0.0  # CPU its tree used while stopped, over all stops
        self.awake_cpu_s: float | None = None  # CPU its tree used between the last resume/stop
        self.awake_wait_s: float | None = None  # of that spell, its wait for a CPU
        self._wait_at_resume: float | dict[tuple[int, int], int] | None = None
        self._spell_ops: list[str] = []  # the present awake spell's request (two: several)
        self._spell_cpu: dict[str, float] = {}  # op -> CPU of the last spell it had alone
        self.violation = ""  # why a strict peer is refused at its next request
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
        if self.strict and self.violation:
            raise WorkerGone(f"{self.label} {self.violation}", self.label, alive=True)
        policy = WaitPolicy(timeout_s, self.cancelled, self.paused_s)
        self.requests += 1
        self._spell_ops = [*self._spell_ops, op][:2]
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
            cause = ""
            if name == "SIGKILL":
                # The sandbox's own watch (a quota, the task cap) names what it killed for;
                # a SIGKILL nobody here sent is most often the kernel's out-of-memory killer.
                killer = getattr(getattr(self, "launched", None), "killed_for", None)
                cause = f" (the sandbox killed it: {killer})" if killer else " (out of memory?)"
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

    @property
    def cgroup(self):
        """The worker's own cgroup (agents/sandbox/cgroup.py), or None."""
        return getattr(self.launched, "cgroup", None)

    def stop(self) -> None:
        """Stop every process of the worker: nothing of it runs until `resume`. In its own
        cgroup, one freeze does it; else signals (`_stop_by_signal`). Reads no more than
        the cgroup's files or the tree's own: a walk of all /proc between two timed runs
        would evict the caches both of them run from."""
        if self.stopped:
            return
        cgroup = self.cgroup
        if cgroup is not None:
            with contextlib.suppress(OSError):
                cgroup.freeze()
            self._pids = cgroup.pids()
        else:
            self._pids = self._stop_by_signal()
        self.stopped = True
        self._cpu_at_stop = self.cpu_seconds()
        self.awake_cpu_s = None
        if self._cpu_at_stop is not None and self._cpu_at_resume is not None:
            self.awake_cpu_s = max(self._cpu_at_stop - self._cpu_at_resume, 0.0)
            if len(self._spell_ops) == 1:
                self._spell_cpu[self._spell_ops[0]] = self.awake_cpu_s
        self.awake_wait_s = _waited_since(self._wait_at_resume, self._wait_mark())
        self._hold_to_timing(set(self._pids))

    def resume(self) -> None:
        if not self.stopped:
            return
        used = self.cpu_seconds()
        if used is not None and self._cpu_at_stop is not None:
            self.frozen_cpu_s += max(used - self._cpu_at_stop, 0.0)
            if self.strict and self.frozen_cpu_s > FROZEN_CPU_FLOOR_S and not self.violation:
                self.violation = (
                    f"used {self.frozen_cpu_s * 1e3:.1f} ms of CPU while it was stopped "
                    "(work done while the other side was timed)"
                )
        self._cpu_at_resume = used
        self._wait_at_resume = self._wait_mark()
        self._spell_ops = []
        cgroup = self.cgroup
        if cgroup is not None:
            with contextlib.suppress(OSError):
                cgroup.thaw()
        else:
            for pid in self._pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGCONT)
        self.stopped = False

    def forget_tree(self) -> None:
        """A new evaluation begins (a kept worker): its timing has not begun."""
        self._pids = []
        self._timed_pids = None

    def cpu_seconds(self) -> float | None:
        """CPU seconds the worker's whole tree used so far, exited processes included: its
        cgroup's count, or (without one) its processes' threads plus their reaped children.
        None where neither can be read."""
        cgroup = self.cgroup
        if cgroup is not None:
            return cgroup.cpu_seconds()
        pids = self._pids if self.stopped and self._pids else self._members()
        return tree_cpu_ns(pids) / 1e9 if pids else None

    def _wait_mark(self) -> float | dict[tuple[int, int], int] | None:
        """Where the tree's wait for a CPU stands: its cgroup's pressure total (seconds), or
        without one each thread's run delay; read only while it is stopped."""
        cgroup = self.cgroup
        if cgroup is not None:
            return cgroup.cpu_wait_seconds()
        return run_delays(self._pids) if self._pids else None

    def spell_cpu_s(self, op: str) -> float | None:
        """CPU seconds of the worker's whole tree in the last spell between a `resume` and a
        `stop` that held one request, `op`: what that request cost it, in every process."""
        return self._spell_cpu.get(op)

    def _hold_to_timing(self, pids: set[int]) -> None:
        """The first stop is when timing begins: a process that appears at a later stop
        was started while timed, where nothing of it may run beside the other side."""
        if self._timed_pids is None:
            self._timed_pids = pids
            return
        new = sorted(pids - self._timed_pids)
        if new and self.strict and not self.violation:
            names = ", ".join(f"{_comm(pid)}[{pid}]" for pid in new[:5])
            self.violation = f"started processes while it was timed: {names}"
        self._timed_pids |= pids

    def _members(self) -> list[int]:
        """The worker's processes without a cgroup: its jail's (orphans stay in the tree,
        reaped by the jail's init), or without the jail, its session's (the kill filter
        keeps it from leaving that session)."""
        tree = live_tree(self.process.pid)
        if self.launched is not None and getattr(self.launched, "plan", True) is None:
            table = ProcessTable.read()
            session = table.session.get(self.process.pid, self.process.pid)
            tree += [pid for pid, sid in table.session.items() if sid == session]
        return sorted(set(tree))

    def _stop_by_signal(self) -> list[int]:
        """SIGSTOP every process, wait until each is stopped (a process stopped cannot
        fork, and one it forked before is in the list when read again), and read again
        until no new process appears."""
        stopped: set[int] = set()
        for _ in range(STOP_ROUNDS):
            new = [pid for pid in self._members() if pid not in stopped]
            if not new:
                break
            for pid in new:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGSTOP)
                stopped.add(pid)
            deadline = time.monotonic() + STOP_WAIT_S
            while not all(is_stopped(pid) for pid in new) and time.monotonic() < deadline:
                time.sleep(0.0002)
        return sorted(stopped)

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


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm", "rb") as handle:
            name = handle.read().decode("utf-8", "replace").strip()
    except OSError:
        return "gone"
    return "".join(c if c.isprintable() else "?" for c in name)[:32] or "?"


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


def _waited_since(
    before: float | dict[tuple[int, int], int] | None,
    after: float | dict[tuple[int, int], int] | None,
) -> float | None:
    """Seconds of one awake spell during which the tree waited for a CPU: the cgroup's
    "full" pressure (no task of it ran while some could), or without one the longest wait of
    any one thread (the whole of it for a tree that works on one thread)."""
    if isinstance(before, float) and isinstance(after, float):
        return max(after - before, 0.0)
    if isinstance(before, dict) and isinstance(after, dict):
        waits = [ns - before.get(key, 0) for key, ns in after.items()]
        return max([0, *waits]) / 1e9
    return None
