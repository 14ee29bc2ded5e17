"""Per-role token and dollar accounting for one search, and the budget check before a call.

The meter adds up every call by role, failed calls included (with their tokens when the
provider reported any). When the search sets token or cost limits, every call first asks the
meter for room (`reserve`): the call's prompt size, estimated from its bytes, plus its output
limit must fit in what is left after the calls already made and those still in flight; the
output limit is cut to what is left. So a search stops at its cap instead of passing it by
every call that was running at once.
"""

from __future__ import annotations

import asyncio
import math
import threading
from dataclasses import dataclass, field
from typing import Any

from agents.llm.base import BudgetExhaustedError, ChatReply, LLMError, Usage
from agents.llm.pricing import Price

_WAIT_S = 0.02  # how often a call waiting for room looks again
_MESSAGE_OVERHEAD = 64  # tokens a chat template may add around a prompt
_RATIO_MARGIN = 1.25  # head room over the most tokens per prompt byte seen so far


@dataclass
class RoleCost:
    calls: int = 0
    failed: int = 0  # calls that ended in an error (counted in `calls` too)
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    retries: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "failed_calls": self.failed,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "cache_read_tokens": self.usage.cache_read_tokens,
            "cache_write_tokens": self.usage.cache_write_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "retries": self.retries,
        }


@dataclass(frozen=True)
class Grant:
    """Room held for one call until it ends: its output limit and what it may spend."""

    max_tokens: int
    prompt_bytes: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    held: bool = False  # False when no limit was set: nothing to give back


class CostMeter:
    """Adds up every reply by role. Thread-safe; read it at any time for budget checks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_role: dict[str, RoleCost] = {}
        self.max_tokens: int | None = None
        self.max_cost_usd: float | None = None
        self.refused = ""  # why the budget turned a call away; "" while there is room
        self._held_tokens = 0
        self._held_cost = 0.0
        self._in_flight = 0
        self._tokens_per_byte: float | None = None  # the most seen, for prompt estimates

    def set_limits(self, max_tokens: int | None, max_cost_usd: float | None) -> None:
        """Caps that `reserve` enforces before each call (None: no cap)."""
        with self._lock:
            self.max_tokens, self.max_cost_usd = max_tokens, max_cost_usd

    # -- recording ----------------------------------------------------------------------------

    def add(self, role: str, reply: ChatReply, grant: Grant | None = None) -> None:
        self._record(role, reply.usage, reply.cost_usd, reply.attempts, False, grant)

    def add_failure(self, role: str, error: LLMError, grant: Grant | None = None) -> None:
        """A call that failed: counted, with the tokens and cost the provider reported."""
        self._record(role, error.usage, error.cost_usd, error.attempts, True, grant)

    def release(self, grant: Grant) -> None:
        """Give back the room of a call that ended without a reply or an LLMError."""
        with self._lock:
            self._let_go(grant)

    def _record(
        self,
        role: str,
        usage: Usage,
        cost: float,
        attempts: int,
        failed: bool,
        grant: Grant | None,
    ) -> None:
        with self._lock:
            entry = self.by_role.setdefault(role, RoleCost())
            entry.calls += 1
            entry.failed += int(failed)
            entry.usage = entry.usage + usage
            entry.cost_usd += cost
            entry.retries += max(0, attempts - 1)
            if grant is not None:
                self._let_go(grant)
                prompt = usage.total_tokens - usage.output_tokens
                if grant.held and grant.prompt_bytes > 0 and prompt > 0:
                    ratio = prompt / grant.prompt_bytes
                    self._tokens_per_byte = max(self._tokens_per_byte or 0.0, ratio)

    def _let_go(self, grant: Grant) -> None:
        if grant.held:
            self._held_tokens -= grant.tokens
            self._held_cost -= grant.cost_usd
            self._in_flight -= 1

    # -- the budget check ----------------------------------------------------------------------

    async def reserve(
        self, role: str, prompt_bytes: int, max_output: int, price: Price | None = None
    ) -> Grant:
        """Room for one call of `role`, its output limit cut to what the budget has left;
        waits while calls in flight hold the room it needs. Raises BudgetExhaustedError
        (and sets `refused`) when even with nothing in flight too little is left."""
        while True:
            with self._lock:
                if self.max_tokens is None and self.max_cost_usd is None:
                    return Grant(max_output, prompt_bytes)
                if self.refused:
                    raise BudgetExhaustedError(self.refused)
                grant, reason = self._fit(role, prompt_bytes, max_output, price)
                if grant is not None:
                    self._held_tokens += grant.tokens
                    self._held_cost += grant.cost_usd
                    self._in_flight += 1
                    return grant
                if self._in_flight == 0:
                    self.refused = reason
                    raise BudgetExhaustedError(reason)
            await asyncio.sleep(_WAIT_S)

    def estimate_prompt_tokens(self, prompt_bytes: int) -> int:
        """At most one token per byte (byte-level tokenizers), or the most tokens per byte
        seen so far with a margin, plus the chat template's own tokens."""
        ratio = 1.0
        if self._tokens_per_byte is not None:
            ratio = min(1.0, self._tokens_per_byte * _RATIO_MARGIN)
        return math.ceil(prompt_bytes * ratio) + _MESSAGE_OVERHEAD

    def _fit(
        self, role: str, prompt_bytes: int, max_output: int, price: Price | None
    ) -> tuple[Grant | None, str]:
        """(a grant, "") when the call fits now, else (None, why it does not). Under lock."""
        prompt = self.estimate_prompt_tokens(prompt_bytes)
        least = _least_output(max_output)
        used_tokens = sum(e.usage.total_tokens for e in self.by_role.values())
        used_cost = sum(e.cost_usd for e in self.by_role.values())
        output, reason = max_output, ""
        if self.max_tokens is not None:
            output = min(output, self.max_tokens - used_tokens - self._held_tokens - prompt)
            if output < least:
                reason = (
                    f"token budget spent: {used_tokens:,} of {self.max_tokens:,} tokens used, "
                    f"too few left for another {role} call (--max-tokens)"
                )
        in_usd = out_usd = 0.0
        if self.max_cost_usd is not None and price is not None and price.output > 0:
            in_usd = max(price.input, price.cache_write) / 1e6
            out_usd = price.output / 1e6
            left_usd = self.max_cost_usd - used_cost - self._held_cost - prompt * in_usd
            output = min(output, math.floor(left_usd / out_usd))
            if output < least and not reason:
                reason = (
                    f"cost budget spent: ${used_cost:.4f} of ${self.max_cost_usd:g} used, too "
                    f"little left for another {role} call (--max-cost)"
                )
        if reason:
            return None, reason
        cost = prompt * in_usd + output * out_usd
        return Grant(output, prompt_bytes, prompt + output, cost, held=True), ""

    # -- reading ------------------------------------------------------------------------------

    @property
    def calls(self) -> int:
        with self._lock:
            return sum(entry.calls for entry in self.by_role.values())

    @property
    def total_tokens(self) -> int:
        with self._lock:
            return sum(entry.usage.total_tokens for entry in self.by_role.values())

    @property
    def total_cost_usd(self) -> float:
        with self._lock:
            return sum(entry.cost_usd for entry in self.by_role.values())

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            roles = {role: entry.to_json() for role, entry in sorted(self.by_role.items())}
            total = Usage()
            for entry in self.by_role.values():
                total = total + entry.usage
            cache_read = total.cache_read_tokens
            cached_share = cache_read / max(1, total.input_tokens + cache_read)
            return {
                "roles": roles,
                "calls": sum(e.calls for e in self.by_role.values()),
                "failed_calls": sum(e.failed for e in self.by_role.values()),
                "tokens": total.total_tokens,
                "input_tokens": total.input_tokens,
                "output_tokens": total.output_tokens,
                "cache_read_tokens": cache_read,
                "cache_write_tokens": total.cache_write_tokens,
                "cache_hit_share": round(cached_share, 4),
                "cost_usd": round(sum(e.cost_usd for e in self.by_role.values()), 6),
            }


def _least_output(max_output: int) -> int:
    """The smallest output limit worth a call: a quarter of the role's (a reply cut much
    shorter is rarely usable), at least 64 tokens, never more than the role's own."""
    return min(max_output, max(64, max_output // 4))
