"""A benchmark's wall-clock budgets: `--max-time` for the whole run, `--problem-time` for
each problem, and Ctrl-C, all one cancel token per problem.

Why tokens and not checks between problems: one problem's evaluation can outlast the whole
budget (GPU sizes on a CPU), so a budget that is only checked before the next problem starts
is no budget. Each problem gets a child of the run's token with its own deadline: when either
fires, whatever runs (a build, a correctness run, a timing, the search) is cancelled and its
workers killed, the problem's row says what was cut, and the run goes on (a problem's
deadline) or stops (the run's deadline, Ctrl-C) with its report written.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from agents.search.budget import CancelToken, Deadline


def run_reason(seconds: float) -> str:
    return f"time budget spent ({seconds:g} s, --max-time)"


def problem_reason(seconds: float) -> str:
    return f"problem time spent ({seconds:g} s, --problem-time)"


def check_budget(name: str, seconds: float | None) -> None:
    if seconds is not None and not seconds > 0:
        raise ValueError(f"{name} must be a positive number of seconds, not {seconds:g}")


@dataclass
class BenchClock:
    """The run's token and budgets; `problem()` hands out each problem's token. What was cut
    or never run is recorded for the closing line (`summary`)."""

    run: CancelToken = field(default_factory=CancelToken)
    max_time: float | None = None
    problem_time: float | None = None
    started: float = field(default_factory=time.monotonic)
    cut: list[str] = field(default_factory=list)  # "name (phase): reason"
    not_run: list[str] = field(default_factory=list)

    @contextmanager
    def running(self) -> Iterator[BenchClock]:
        """The run's deadline, held while the block runs."""
        reason = run_reason(self.max_time) if self.max_time else ""
        with Deadline(self.run, self._left(), reason):
            yield self

    def _left(self) -> float | None:
        if self.max_time is None:
            return None
        return self.max_time - (time.monotonic() - self.started)

    @contextmanager
    def problem(self) -> Iterator[CancelToken]:
        """One problem's token: cancelled by its own deadline, the run's, or Ctrl-C."""
        token = self.run.child()
        reason = problem_reason(self.problem_time) if self.problem_time else ""
        with Deadline(token, self.problem_time, reason):
            yield token

    @property
    def stopped(self) -> bool:
        """The whole run is over (its deadline, or a signal): no further problem starts."""
        return self.run.cancelled

    def note_cut(self, name: str, phase: str, token: CancelToken) -> str:
        """Record that `name` was cut during `phase`; the row's one-line reason."""
        line = f"cut during {phase}: {token.stop_reason()}"
        self.cut.append(f"{name} ({phase}): {token.stop_reason()}")
        return line

    def summary(self) -> str | None:
        """One line naming what the budgets or a signal cut, or None when nothing was."""
        parts = []
        if self.cut:
            parts.append(f"cut: {'; '.join(self.cut)}")
        if self.not_run:
            shown = ", ".join(self.not_run[:8])
            more = f" and {len(self.not_run) - 8} more" if len(self.not_run) > 8 else ""
            why = self.run.stop_reason() if self.run.cancelled else "stopped"
            parts.append(f"not run ({why}): {shown}{more}")
        return " · ".join(parts) or None
