"""An evaluation's phases: the seconds each took (`EvalResult.phase_s`) and, as they happen,
events a caller can show ("correctness 2/5").

Why one clock for both: the breakdown a verdict reports and the progress a user watches must
name the same phases, and switching a phase is the one moment both need. The callback runs on
the evaluation's own thread: it must be cheap, and whatever it raises is swallowed here, so a
broken progress view can never change or lose a verdict.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

PHASES = ("start", "build", "run", "anchor", "compare", "lane_wait", "measure")
"""The keys of `phase_s`, in the order a verdict goes through them: start (workers and the
reference's load), build (the candidate's import and build), run (correctness trials: the
calls), anchor (the reference's float64 forward), compare (fetching outputs and comparing
them), lane_wait (waiting for the device's timing lane), measure (timing); and "paused",
the seconds a pool kept the workers stopped for another candidate's timing."""

_WORDS = {
    "start": "starting workers",
    "build": "building the candidate",
    "run": "correctness",
    "anchor": "float64 anchor",
    "compare": "comparing outputs",
    "lane_wait": "waiting for the device",
    "measure": "timing",
}


@dataclass(frozen=True)
class Phase:
    """One phase entered: `name` is a `PHASES` key; `step` of `steps` counts trials (the
    reload check's trials have `reload` set); 0 of 0 where nothing is counted."""

    name: str
    step: int = 0
    steps: int = 0
    reload: bool = False

    @property
    def text(self) -> str:
        """The phase in words: "correctness 2/5", "reload check 1/2", or within a trial
        "correctness 2/5: float64 anchor"."""
        words = _WORDS.get(self.name, self.name)
        if not self.steps:
            return words
        trial = f"{'reload check' if self.reload else _WORDS['run']} {self.step}/{self.steps}"
        return trial if self.name == "run" else f"{trial}: {words}"


PhaseCallback = Callable[[Phase], None]
"""Called with each phase as it begins; never raises into the verifier (see module doc)."""


class PhaseClock:
    """Wall seconds per phase, a callback told of each change, and the seconds a pool kept
    the workers stopped (`paused_s`), which count against no deadline."""

    def __init__(self, paused_s: Callable[[], float], on_phase: PhaseCallback | None = None):
        self.paused_s = paused_s
        self._paused_at_start = paused_s()
        self._on_phase = on_phase
        self._lock = threading.Lock()
        self.phase = Phase("start")
        self.began = time.monotonic()
        self.seconds: dict[str, float] = {}
        self._tell(self.phase)

    def switch(self, name: str, step: int = 0, steps: int = 0, reload: bool = False) -> None:
        """Enter phase `name`; the callback hears of it only when what it shows changed."""
        entered = Phase(name, step, steps, reload)
        with self._lock:
            now = time.monotonic()
            key = self.phase.name
            self.seconds[key] = self.seconds.get(key, 0.0) + now - self.began
            changed = entered != self.phase
            self.phase, self.began = entered, now
        if changed:
            self._tell(entered)

    def stop(self) -> dict[str, float]:
        old = self.phase
        self.switch(old.name, old.step, old.steps, old.reload)
        paused = self.paused_s() - self._paused_at_start
        if paused > 0:
            self.seconds["paused"] = paused
        return {name: round(value, 3) for name, value in self.seconds.items()}

    def _tell(self, phase: Phase) -> None:
        if self._on_phase is None:
            return
        with contextlib.suppress(Exception):  # a broken view must not change a verdict
            self._on_phase(phase)
