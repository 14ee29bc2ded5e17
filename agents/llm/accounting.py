"""Per-role token and dollar accounting for one search: what the cost summary reports."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from agents.llm.base import ChatReply, Usage


@dataclass
class RoleCost:
    calls: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    retries: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "cache_read_tokens": self.usage.cache_read_tokens,
            "cache_write_tokens": self.usage.cache_write_tokens,
            "cost_usd": round(self.cost_usd, 6),
            "retries": self.retries,
        }


class CostMeter:
    """Adds up every reply by role. Thread-safe; read it at any time for budget checks."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_role: dict[str, RoleCost] = {}

    def add(self, role: str, reply: ChatReply) -> None:
        with self._lock:
            entry = self.by_role.setdefault(role, RoleCost())
            entry.calls += 1
            entry.usage = entry.usage + reply.usage
            entry.cost_usd += reply.cost_usd
            entry.retries += max(0, reply.attempts - 1)

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
                "tokens": total.total_tokens,
                "input_tokens": total.input_tokens,
                "output_tokens": total.output_tokens,
                "cache_read_tokens": cache_read,
                "cache_write_tokens": total.cache_write_tokens,
                "cache_hit_share": round(cached_share, 4),
                "cost_usd": round(sum(e.cost_usd for e in self.by_role.values()), 6),
            }
