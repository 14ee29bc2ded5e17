"""Budget caps and cancellation: the search checks both before every call it makes."""

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
    """Set from any thread (the CLI's Ctrl-C, the server's cancel). The same event is handed
    to every sandbox, so setting it also kills running evaluations."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def cancel(self) -> None:
        self.event.set()

    @property
    def cancelled(self) -> bool:
        return self.event.is_set()


class BudgetTracker:
    def __init__(self, budget: Budget, meter: CostMeter) -> None:
        self.budget = budget
        self.meter = meter
        self.started = time.monotonic()
        self.evaluations = 0

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started

    def exhausted(self) -> str | None:
        """Why no more work may start, or None. A check, not a reservation: calls already
        in flight finish, so a cap can be passed by at most the calls running at once."""
        b = self.budget
        if b.max_evals is not None and self.evaluations >= b.max_evals:
            return f"evaluation budget spent ({self.evaluations} of {b.max_evals})"
        if b.max_tokens is not None and self.meter.total_tokens >= b.max_tokens:
            return f"token budget spent ({self.meter.total_tokens} of {b.max_tokens})"
        if b.max_cost_usd is not None and self.meter.total_cost_usd >= b.max_cost_usd:
            return f"cost budget spent (${self.meter.total_cost_usd:.4f} of ${b.max_cost_usd:g})"
        if b.max_wall_s is not None and self.elapsed_s() >= b.max_wall_s:
            return f"time budget spent ({self.elapsed_s():.0f} s of {b.max_wall_s:g} s)"
        return None
