"""Budget caps and cancellation: the search checks both before every call it makes.

Token and cost caps are also held by the CostMeter, which every model call asks for room
before it starts (see `CostMeter.reserve`): a check here alone would let every call that
started before the cap was reached pass it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from agents.llm.accounting import CostMeter


@dataclass(frozen=True)
class Budget:
    max_evals: int | None = 100
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    max_wall_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("max_evals", "max_tokens", "max_cost_usd", "max_wall_s"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, not {value}")


class CancelToken:
    """Set from any thread (the CLI's Ctrl-C, the server's cancel, a deadline). The same event
    is handed to every sandbox, so setting it also kills running evaluations. `reason` says
    why (None: a plain cancel), so a result cut by --max-time says so rather than
    "cancelled"; a child token (one bench problem's) is cancelled with its parent."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.reason: str | None = None
        self._children: list[CancelToken] = []
        self._lock = threading.Lock()

    def cancel(self, reason: str | None = None) -> None:
        with self._lock:
            if not self.event.is_set():
                self.reason = reason
            self.event.set()
            children = list(self._children)
        for child in children:
            child.cancel(reason)

    def child(self) -> CancelToken:
        """A token cancelled whenever this one is (at once if it already is), and which can
        also be cancelled on its own without touching this one."""
        token = CancelToken()
        with self._lock:
            self._children.append(token)
            cancelled = self.event.is_set()
        if cancelled:
            token.cancel(self.reason)
        return token

    @property
    def cancelled(self) -> bool:
        return self.event.is_set()

    def stop_reason(self) -> str:
        return self.reason or "cancelled"


class Deadline:
    """Cancels `token` with `reason` once `seconds` have passed, whatever is running then (a
    build, a correctness run, a timing): a wall-clock budget is a promise, not a check made
    only before new work starts. A context manager; leaving it early stops the timer."""

    def __init__(self, token: CancelToken, seconds: float | None, reason: str) -> None:
        self.token = token
        self.seconds = seconds
        self.reason = reason
        self._timer: threading.Timer | None = None

    def __enter__(self) -> Deadline:
        if self.seconds is not None:
            timer = threading.Timer(max(0.0, self.seconds), self.token.cancel, (self.reason,))
            timer.daemon = True
            timer.start()
            self._timer = timer
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()

    @property
    def expired(self) -> bool:
        return self.token.cancelled and self.token.reason == self.reason


class BudgetTracker:
    def __init__(self, budget: Budget, meter: CostMeter) -> None:
        self.budget = budget
        self.meter = meter
        meter.set_limits(budget.max_tokens, budget.max_cost_usd)
        self.started = time.monotonic()
        self.evaluations = 0

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def exhausted(self, calls: bool = True) -> str | None:
        """Why no more work may start, or None; each reason names the option that set the cap.
        With `calls=False` (work that makes no model call, like judging a candidate already
        written) the token and cost caps do not count. Model calls are also held to those
        caps one by one: the meter refuses a call that does not fit."""
        b = self.budget
        if b.max_evals is not None and self.evaluations >= b.max_evals:
            return f"evaluation budget spent ({self.evaluations} of {b.max_evals}, --max-evals)"
        if b.max_wall_s is not None and self.elapsed_s() >= b.max_wall_s:
            return f"time budget spent ({self.elapsed_s():.0f} s of {b.max_wall_s:g} s, --max-time)"
        if not calls:
            return None
        if self.meter.refused:
            return self.meter.refused
        tokens, cost = self.meter.total_tokens, self.meter.total_cost_usd
        if b.max_tokens is not None and tokens >= b.max_tokens:
            return f"token budget spent ({tokens:,} of {b.max_tokens:,} tokens, --max-tokens)"
        if b.max_cost_usd is not None and cost >= b.max_cost_usd:
            return f"cost budget spent (${cost:.4f} of ${b.max_cost_usd:g}, --max-cost)"
        return None

    def evaluations_left(self) -> int | None:
        """How many more candidates may be judged (None: no cap), so the search plans no more
        than it can evaluate."""
        if self.budget.max_evals is None:
            return None
        return max(0, self.budget.max_evals - self.evaluations)
