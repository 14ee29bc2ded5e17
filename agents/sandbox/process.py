"""Run the verifier's child in a fresh interpreter, jailed and limited, and read what it says.

The parent survives anything the child does: a crash, a hang, an out-of-memory kill, an early
`os._exit`, or garbage on its pipes all become a `ChildOutcome` the caller turns into a verdict.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agents.sandbox.env import scrubbed_environment
from agents.sandbox.jail import find_jail, jail_command

TAIL_BYTES = 16_384
MAX_LINE_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Limits:
    """Wall-clock limits per phase and OS limits for the child."""

    build_timeout_s: float = 600.0
    run_timeout_s: float = 300.0
    address_space_bytes: int | None = None  # None: a share of this machine's memory
    file_size_bytes: int = 2 * 1024**3


class MeasureGate(Protocol):
    """Who may time now. The child announces `measure` and waits until the parent writes a
    byte on its gate pipe; `acquire` decides when, so timings on one device never overlap."""

    @property
    def env(self) -> dict[str, str]:
        """Extra environment for the child (e.g. CUDA_VISIBLE_DEVICES pinning its GPU)."""
        ...

    def started(self, pid: int) -> None: ...

    def acquire(self, cancel: threading.Event | None) -> bool:
        """Block until this child may time; False when `cancel` was set meanwhile."""
        ...

    def release(self) -> None: ...

    # Optional: `paused_s()`, the seconds the pool has kept this child stopped so far (for
    # another child's timing); they do not count against its wall clock.


@dataclass
class ChildOutcome:
    """What came back from one child, before it is judged."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None
    timed_out_phase: str | None = None
    phase: str = "start"
    stdout_tail: str = ""
    stderr_tail: str = ""
    garbage_lines: int = 0
    isolation: str = ""
    elapsed_s: float = 0.0
    cancelled: bool = False
    # Wall seconds per phase ("start", "build", "run", "measure"), plus "lane_wait" (waiting
    # for the device's measure lane) and "paused" (stopped for another child's timing, and
    # already inside the phase it interrupted): where an evaluation's time went.
    phase_s: dict[str, float] = field(default_factory=dict)

    @property
    def result(self) -> dict[str, Any] | None:
        for message in reversed(self.messages):
            if message.get("kind") == "result":
                return message
        return None

    @property
    def signal_name(self) -> str | None:
        if self.returncode is not None and self.returncode < 0:
            try:
                return signal.Signals(-self.returncode).name
            except ValueError:
                return f"signal {-self.returncode}"
        return None


def default_address_space() -> int:
    """Three quarters of physical memory: a runaway candidate fails alone, not the machine."""
    pages = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return max(int(pages * 0.75), 4 * 1024**3)


PR_SET_PDEATHSIG = 1


def _load_prctl():
    """libc's prctl, looked up once in the parent: a forked child must not dlopen."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _load_prctl()


def _limit_child(address_space: int | None, file_size: int, parent: int | None = None) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    if address_space is not None:
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    # The child has its own session, so nothing would end it if the process that started it
    # were killed (a Ray worker cancelled by force, a pool's parent killed): on Linux the
    # kernel sends it SIGKILL when the thread that started it dies (run_child's thread, which
    # outlives the child anyway). It holds across execve, except into a set-user-ID binary.
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if parent is not None and os.getppid() != parent:
            os._exit(1)  # the parent died before prctl took effect


def project_root() -> Path:
    return Path(__file__).resolve().parents[2]


def run_child(
    request: dict[str, Any],
    *,
    device: str,
    threads: int,
    build_cache: Path,
    limits: Limits,
    compiler_cache: Path | None = None,
    entry: str = "agents.verify.child",
    use_jail: bool = True,
    cancel: threading.Event | None = None,
    gate: MeasureGate | None = None,
) -> ChildOutcome:
    """Start `entry` in a jailed child with `request`, and collect its messages.

    Setting `cancel` kills the child's whole process group within a fraction of a second;
    the outcome then says `cancelled`. `gate`, when given, is told the child's pid and holds
    the child at its `measure` phase until the gate grants it; it is released when the child
    is gone. Without one the child is let through at once."""
    caches = [build_cache] + ([compiler_cache] if compiler_cache else [])
    for cache in caches:
        cache.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="kernel-agent-"))
    try:
        return _run_in(
            workdir, request, device, threads, caches, limits, entry, use_jail, cancel, gate
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run_in(
    workdir, request, device, threads, caches, limits, entry, use_jail, cancel=None, gate=None
):
    nonce = secrets.token_hex(16)
    request_path = workdir / "request.json"
    request_path.write_text(json.dumps({**request, "nonce": nonce}), encoding="utf-8")
    read_fd, write_fd = os.pipe()
    gate_read, gate_write = os.pipe()
    bootstrap = (
        f"import sys; sys.path.insert(0, sys.argv[1]); from {entry} import main; main(sys.argv[2:])"
    )
    argv = [
        sys.executable,
        "-I",
        "-c",
        bootstrap,
        str(project_root()),
        str(request_path),
        str(write_fd),
        str(gate_read),
    ]
    jail = find_jail() if use_jail else None
    outcome = ChildOutcome()
    if jail is not None:
        argv = jail_command(jail, argv, writable=[workdir, *caches], device=device)
        outcome.isolation = jail.describe()
    else:
        outcome.isolation = "limits only (no bubblewrap jail available): scrubbed environment"
    # CUDA reserves far more virtual memory than it uses, so an address-space cap breaks it.
    address_space = None
    if device != "cuda":
        address_space = limits.address_space_bytes or default_address_space()
        outcome.isolation += f", {address_space / 1024**3:.0f} GiB address space"
    outcome.isolation += (
        f", {limits.build_timeout_s:g} s build / {limits.run_timeout_s:g} s run wall clock"
    )
    env = scrubbed_environment(
        workdir, caches[0], threads, compiler_cache=caches[1] if len(caches) > 1 else None
    )
    if gate is not None:
        env.update(gate.env)
    started = time.monotonic()
    parent = os.getpid()
    process = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(write_fd, gate_read),
        env=env,
        cwd=workdir,
        start_new_session=True,
        preexec_fn=lambda: _limit_child(address_space, limits.file_size_bytes, parent),
    )
    os.close(write_fd)
    os.close(gate_read)
    held = [False]
    try:
        if gate is not None:
            gate.started(process.pid)
        _collect(process, read_fd, nonce, limits, outcome, started, cancel, gate, gate_write, held)
    finally:
        os.close(read_fd)
        os.close(gate_write)
        _kill_group(process)
        if held[0] and gate is not None:
            gate.release()
    outcome.returncode = process.returncode
    outcome.elapsed_s = time.monotonic() - started
    return outcome


def _collect(
    process, read_fd, nonce, limits, outcome, started, cancel, gate=None, gate_fd=-1, held=None
) -> None:
    clock = _PhaseClock(outcome, started, getattr(gate, "paused_s", None) or (lambda: 0.0))
    try:
        _read(process, read_fd, nonce, limits, outcome, started, cancel, gate, gate_fd, held, clock)
    finally:
        clock.stop()


def _read(process, read_fd, nonce, limits, outcome, started, cancel, gate, gate_fd, held, clock):
    """Read the child's channels until they close, a phase times out or the caller cancels."""
    selector = selectors.DefaultSelector()
    selector.register(read_fd, selectors.EVENT_READ, "result")
    selector.register(process.stdout, selectors.EVENT_READ, "stdout")
    selector.register(process.stderr, selectors.EVENT_READ, "stderr")
    buffers = {"result": b"", "stdout": b"", "stderr": b""}
    open_streams = 3
    phase_started = started
    # Time a pool kept this child stopped for another's timing is not its own time.
    paused_s = clock.paused_s
    paused_at_phase = paused_s()
    prefix = nonce.encode() + b" "
    exited_at = 0.0
    while open_streams:
        if cancel is not None and cancel.is_set():
            outcome.cancelled = True
            return
        limit = (
            limits.build_timeout_s
            if outcome.phase in ("start", "build")
            else (limits.run_timeout_s)
        )
        remaining = phase_started + limit + paused_s() - paused_at_phase - time.monotonic()
        if remaining <= 0:
            outcome.timed_out_phase = "build" if outcome.phase in ("start", "build") else "run"
            return
        for key, _ in selector.select(timeout=min(remaining, 0.2)):
            name = key.data
            chunk = os.read(key.fd, 65536)
            if not chunk:
                selector.unregister(key.fileobj)
                open_streams -= 1
                continue
            if name != "result":
                buffers[name] = (buffers[name] + chunk)[-TAIL_BYTES:]
                setattr(outcome, f"{name}_tail", buffers[name].decode("utf-8", "replace"))
                continue
            buffers["result"] += chunk
            *lines, buffers["result"] = buffers["result"].split(b"\n")
            if len(buffers["result"]) > MAX_LINE_BYTES:
                buffers["result"] = b""
                outcome.garbage_lines += 1
            for line in lines:
                message = _parse(line, prefix)
                if message is None:
                    outcome.garbage_lines += 1
                    continue
                outcome.messages.append(message)
                if message.get("kind") == "phase" and message.get("phase") != outcome.phase:
                    clock.switch(str(message.get("phase")))
                    if outcome.phase == "measure" and not clock.wait_for_lane(
                        lambda: _open_gate(gate, gate_fd, cancel, held)
                    ):
                        outcome.cancelled = True
                        return
                    phase_started = time.monotonic()  # waiting for the lane is not run time
                    paused_at_phase = paused_s()
        if process.poll() is not None:
            # Streams a leftover grandchild holds open must not keep us waiting.
            exited_at = exited_at or time.monotonic()
            if time.monotonic() - exited_at > 1.0:
                break


class _PhaseClock:
    """Charges wall time to the child's phases as it announces them (ChildOutcome.phase_s)."""

    def __init__(self, outcome: ChildOutcome, started: float, paused_s) -> None:
        self.outcome = outcome
        self.began = started
        self.paused_s = paused_s
        self.paused_at_start = paused_s()

    def _charge(self, name: str) -> None:
        now = time.monotonic()
        self.outcome.phase_s[name] = self.outcome.phase_s.get(name, 0.0) + now - self.began
        self.began = now

    def switch(self, phase: str) -> None:
        self._charge(self.outcome.phase)
        self.outcome.phase = phase

    def wait_for_lane(self, open_gate) -> bool:
        """The wait for the device's measure lane is its own entry, not measure time."""
        opened = open_gate()
        self._charge("lane_wait")
        return opened

    def stop(self) -> None:
        self._charge(self.outcome.phase)
        paused = self.paused_s() - self.paused_at_start
        if paused > 0:
            self.outcome.phase_s["paused"] = paused


def _open_gate(gate, gate_fd, cancel, held) -> bool:
    """Let the child time once the gate allows it; False if cancelled while waiting."""
    if gate is not None and not held[0]:
        if not gate.acquire(cancel):
            return False
        held[0] = True
    with contextlib.suppress(OSError):  # a child already gone finds out on its own
        os.write(gate_fd, b"g")
    return True


def _parse(line: bytes, prefix: bytes) -> dict[str, Any] | None:
    if not line.startswith(prefix):
        return None
    try:
        message = json.loads(line[len(prefix) :])
    except (ValueError, UnicodeDecodeError):
        return None
    return message if isinstance(message, dict) else None


def _kill_group(process: subprocess.Popen) -> None:
    """Kill the child and everything it started; reap it so no zombie is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()
