"""Percent and one-line message from a search's events, for the editor's progress bar.

The search stops at whichever comes first: its iterations, its evaluation budget, its time
budget or its patience. So the percent is the furthest of the three measurable fractions
(patience cannot be foreseen: a search that stops early jumps to 100 when it ends). It never
goes back, and stays below 100 until the job has its result.

One speedup per kernel, said one way: while the search runs, the message names its running
best as such ("searching: best 8.50x so far"), an early, noisier measurement that the
confirmation on fresh inputs may lower; once the job ends, the lens, the notification, the
hover and the progress's last message all say the result's confirmed figure through
`agents.speedup_words.speedup_summary` ("8.35x faster, verified"), and the editor's status
bar reads that phrase, never the running best. Verdicts are said in words (`verdict_words`),
and counts with their right plural.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from agents.display import plural
from agents.search import events as ev
from agents.speedup_words import speedup_text

VERDICT_WORDS = {
    "no_code": "nothing to rewrite",
    "compile_error": "compile error",
    "runtime_error": "runtime error",
    "timeout": "timed out",
}
"""How a verdict reads in a message; the rest ("correct", "incorrect", "rejected",
"duplicate") are words already. The same words as the CLI's progress lines."""


def verdict_words(verdict: str) -> str:
    """A search verdict for a person: "compile error", not `compile_error`."""
    return VERDICT_WORDS.get(verdict, verdict.replace("_", " "))


@dataclass
class ProgressTracker:
    iterations: int
    max_evals: int | None = None
    max_time_s: float | None = None
    samples: int = 1
    started: float = field(default_factory=time.monotonic)
    percent: int = 0
    message: str = "starting"
    iteration: int = 0
    best: float = 1.0
    candidates: int = 0
    evaluations: int = 0
    _planned: int = 0  # plans made in the current iteration
    _sampled: int = 0  # first attempts judged in the current iteration

    def observe(self, event: ev.SearchEvent) -> bool:
        """Take one search event; True when percent or message changed."""
        before = (self.percent, self.message)
        if isinstance(event, ev.Started):
            self.iterations = event.iterations or self.iterations
            self.samples = max(1, event.samples)
            self.message = "starting"
        elif isinstance(event, ev.Profiled):
            self.message = "planning"
        elif isinstance(event, ev.IterationStarted):
            self.iteration = event.iteration
            self.iterations = event.iterations or self.iterations
            self.best = max(self.best, _finite_or(event.best_speedup, 1.0))
            self.evaluations = max(self.evaluations, event.evaluations)
            self._planned = self._sampled = 0
        elif isinstance(event, ev.PlanMade):
            self._planned += 1
        elif isinstance(event, ev.CandidateEvaluated):
            self.evaluations = max(self.evaluations, event.evaluations)
            if event.verdict != "duplicate":
                self.candidates += 1
            if not event.repair:
                self._sampled += 1
        elif isinstance(event, ev.NewBest):
            self.best = max(self.best, _finite_or(event.speedup, self.best))
        elif isinstance(event, ev.Finished):
            self.best = _finite_or(event.speedup, self.best) or self.best
            self.evaluations = max(self.evaluations, event.evaluations)
            # the confirmed figure (or none): no "best", so it is not read as the running one
            found = f"{speedup_text(self.best)} faster" if event.improved else None
            self.message = f"finished · {found or 'no improvement'} · {self._candidates()}"
        if isinstance(
            event, ev.IterationStarted | ev.PlanMade | ev.CandidateEvaluated | ev.NewBest
        ):
            self.message = self.status()
        self.percent = max(self.percent, min(99, int(100 * self.fraction())))
        return (self.percent, self.message) != before

    def status(self) -> str:
        """The running search's line; its best is labelled as the search's own."""
        return (
            f"iteration {self.iteration}/{self.iterations} · searching: best "
            f"{speedup_text(self.best)} so far · {self._candidates()}"
        )

    def _candidates(self) -> str:
        return plural(self.candidates, "candidate")

    def fraction(self) -> float:
        """The furthest of: iterations done (with the current one's judged share), evaluation
        budget spent, time budget spent."""
        parts = [0.0]
        if self.iterations and self.iteration:
            expected = self._planned * self.samples
            within = min(1.0, self._sampled / expected) if expected else 0.0
            parts.append((self.iteration - 1 + within) / self.iterations)
        if self.max_evals:
            parts.append(self.evaluations / self.max_evals)
        if self.max_time_s:
            parts.append((time.monotonic() - self.started) / self.max_time_s)
        return min(1.0, max(parts))


def _finite_or(value: float, fallback: float) -> float:
    """A speedup that crossed the wire as null (NaN) moves nothing."""
    return value if math.isfinite(value) else fallback
