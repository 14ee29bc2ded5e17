"""A start-up deadline that only a real hang can miss.

Why: a worker's start-up (the interpreter, torch's import, on a GPU CUDA's) takes about a
second here at rest, 4 s with a cold page cache, and many times that on a machine busy with
other work. No fixed deadline fits both: a short one failed honest workers under load (issue
34: "did not answer 'hello' in 4 s"), a long one waits minutes on a hung one. So the deadline
moves: it is `stall_s` after the last moment the worker's process tree was seen using CPU,
and never later than `cap_s` after the start (a worker that spins without ever answering).
Time a pool kept the worker stopped extends it too, as it does every other request's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

STALL_S = 30.0
"""No CPU used by the worker's whole tree for this long: it is hung, not slow. (An honest
start-up is never idle that long: it reads and links torch's libraries, all CPU work.)"""
CAP_S = 600.0
"""The longest any start-up may take, progress or not: hundreds of times the measured worst."""
SAMPLE_S = 0.5
"""How often the tree's CPU is read (a few /proc files, or the cgroup's one)."""
MIN_PROGRESS_S = 0.005
"""CPU growth below this between two samples is accounting noise, not progress."""


class ProgressDeadline:
    """A `paused_s` clock for a WaitPolicy (agents/sandbox/wire.py) of timeout `stall_s`:
    it reports, as extra time, how far the last sign of progress lies after the start."""

    def __init__(
        self,
        cpu_seconds: Callable[[], float | None],
        paused_s: Callable[[], float] = lambda: 0.0,
        *,
        stall_s: float = STALL_S,
        cap_s: float = CAP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cpu_seconds, self.paused_s = cpu_seconds, paused_s
        self.stall_s, self.cap_s, self.clock = stall_s, max(cap_s, stall_s), clock
        self.started = clock()
        self.last_progress = self.started
        self._last_sample = self.started
        self._last_cpu = cpu_seconds()

    def __call__(self) -> float:
        now = self.clock()
        if now - self._last_sample >= SAMPLE_S:
            self._last_sample = now
            cpu = self.cpu_seconds()
            if cpu is None or self._last_cpu is None:
                self.last_progress = now  # unreadable: only the cap can end it
            elif cpu - self._last_cpu >= MIN_PROGRESS_S:
                self.last_progress = now
            if cpu is not None:
                self._last_cpu = cpu
        extension = min(self.last_progress - self.started, self.cap_s - self.stall_s)
        return self.paused_s() + extension

    def why(self) -> str:
        """Which bound ended the wait, in words for the error line."""
        waited = self.clock() - self.started
        if waited - self.paused_s() >= self.cap_s - SAMPLE_S:
            return f"was still starting after {self.cap_s:g} s"
        return f"used no CPU for {self.stall_s:g} s while starting (hung after {waited:.0f} s)"
