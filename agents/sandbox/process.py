"""Run the verifier's child in a fresh interpreter, jailed and limited, and read what it says.

The parent survives anything the child does: a crash, a hang, an out-of-memory kill, an early
`os._exit`, or garbage on its pipes all become a `ChildOutcome` the caller turns into a verdict.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import selectors
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from agents.sandbox.jail import project_root, pythonpath_entries
from agents.sandbox.launch import (  # Limits and the helpers live there; kept importable here
    JailUnavailable,
    Launched,
    LaunchSpec,
    Limits,
    default_address_space,
    launch,
)

__all__ = [
    "ChildOutcome",
    "JailUnavailable",
    "Limits",
    "MeasureGate",
    "default_address_space",
    "project_root",
    "run_child",
]

TAIL_BYTES = 16_384
MAX_LINE_BYTES = 64 * 1024 * 1024


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
    # another child's timing); they do not count against its wall clock. `spare_started(pid)`:
    # a spare worker booting for a later candidate, stopped with this child's others.


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
    extra: Mapping[str, Any] | None = None,
) -> ChildOutcome:
    """Start `entry` in a jailed child with `request`, and collect its messages.

    Setting `cancel` kills the child's whole process group within a fraction of a second;
    the outcome then says `cancelled`. `gate`, when given, is told the child's pid and holds
    the child at its `measure` phase until the gate grants it; it is released when the child
    is gone. Without one the child is let through at once.

    `build_cache` (keyed by the candidate's source) is the child's only persistent cache:
    Inductor and Triton write there too, and `compiler_cache` is ignored, since a cache
    every jail could write let one candidate plant what another would load. `extra` sets
    more `LaunchSpec` fields (`cpus`, ...). Raises JailUnavailable when `use_jail` is set and
    the jail cannot start."""
    del compiler_cache
    workdir = Path(tempfile.mkdtemp(prefix="kernel-agent-"))
    try:
        return _run_in(
            workdir,
            request,
            device,
            threads,
            build_cache,
            limits,
            entry,
            use_jail,
            cancel,
            gate,
            extra,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


BOOTSTRAP_PREFIX = "import sys; sys.path[0:0] = [sys.argv[1], *"
"""How every sandboxed child's command line begins (tests find leaked children by it)."""


def child_bootstrap(statement: str) -> str:
    """The `-c` program of an isolated (`python -I`) child: the project root (argv[1]) and the
    parent's PYTHONPATH entries go first on its path, then `statement` runs."""
    return f"{BOOTSTRAP_PREFIX}{pythonpath_entries()!r}]; {statement}"


def _run_in(workdir, request, device, threads, cache, limits, entry, use_jail, cancel, gate, extra):
    nonce = secrets.token_hex(16)
    request_path = workdir / "request.json"
    request_path.write_text(json.dumps({**request, "nonce": nonce}), encoding="utf-8")
    bootstrap = child_bootstrap(f"from {entry} import main; main(sys.argv[2:])")
    package = entry.split(".")[0]
    read_fd, write_fd = os.pipe()
    gate_read, gate_write = os.pipe()
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
    spec = LaunchSpec(
        argv=argv,
        device=device,
        threads=threads,
        workdir=workdir,
        cache_dir=cache,
        env_extra=dict(gate.env) if gate is not None else {},
        pass_fds=(write_fd, gate_read),
        jail=use_jail,
        limits=limits,
        read_only=() if package == "agents" else (str(project_root() / package),),
    )
    if extra:
        spec = replace(spec, **extra)
    outcome = ChildOutcome()
    started = time.monotonic()
    try:
        launched: Launched = launch(spec)
    except BaseException:
        for fd in (read_fd, gate_write):
            os.close(fd)
        raise
    finally:
        os.close(write_fd)
        os.close(gate_read)
    process = launched.process
    outcome.isolation = launched.isolation + (
        f", {limits.build_timeout_s:g} s build / {limits.run_timeout_s:g} s run wall clock"
    )
    held = [False]
    try:
        if gate is not None:
            gate.started(process.pid)
        _collect(process, read_fd, nonce, limits, outcome, started, cancel, gate, gate_write, held)
    finally:
        os.close(read_fd)
        os.close(gate_write)
        launched.close()
        if held[0] and gate is not None:
            gate.release()
    if launched.killed_for:
        # The monitor's reason, where the verdict's reasons show the child's last words.
        note = f"\nkernel-agent: the sandbox killed the child: {launched.killed_for}\n"
        outcome.stderr_tail = (outcome.stderr_tail + note)[-TAIL_BYTES:]
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
