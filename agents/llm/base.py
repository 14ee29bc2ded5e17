"""The one interface every LLM backend implements, and the types that cross it.

Roles (planner, executor, repairer, summarizer) only see `ChatModel`; which provider is
behind it (Anthropic, an OpenAI-compatible server) is configuration. A backend never logs
or returns its API key, and every reply carries its own token usage and dollar cost, so the
search can account for every call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

ROLES = ("planner", "executor", "repairer", "summarizer")


class LLMError(Exception):
    """A call that failed for good (after retries); the message is one line for the user.

    It carries what the failed call cost, so the cost summary counts failed calls too:
    `usage` and `cost_usd` when the provider reported them, `attempts` always."""

    def __init__(
        self,
        message: str,
        *,
        usage: Usage | None = None,
        cost_usd: float = 0.0,
        attempts: int = 1,
    ) -> None:
        super().__init__(message)
        self.usage = usage or Usage()
        self.cost_usd = cost_usd
        self.attempts = attempts


class MissingAPIKeyError(LLMError):
    """The chosen backend needs a key and none was given; the message says how to set it."""


class EmptyReplyError(LLMError):
    """The provider answered, but with no text: a failed call, not an unparseable plan."""


class BudgetExhaustedError(LLMError):
    """The token or cost budget has too little left for this call; it was not made."""


@dataclass(frozen=True)
class Message:
    role: Literal["user", "assistant"]
    content: str


@dataclass(frozen=True)
class SystemPrompt:
    """`static` is identical across calls of one role (instructions, gated skills), so the
    Anthropic backend marks it for prompt caching; `dynamic` changes per call."""

    static: str
    dynamic: str = ""

    def text(self) -> str:
        return self.static + ("\n\n" + self.dynamic if self.dynamic else "")


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0  # input tokens served from the provider's prompt cache
    cache_write_tokens: int = 0  # input tokens written to it

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )


@dataclass
class ChatReply:
    text: str
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    model: str = ""
    stop_reason: str = ""
    attempts: int = 1  # HTTP attempts it took, retries included


@runtime_checkable
class ChatModel(Protocol):
    """Messages in; text, token usage and cost out. Implementations are async-safe and
    limit their own concurrency."""

    @property
    def label(self) -> str:
        """`backend:model`, for logs, trajectories and memory (never a key)."""
        ...

    async def chat(
        self,
        system: SystemPrompt,
        messages: list[Message],
        *,
        max_tokens: int = 4096,
        temperature: float | None = None,
    ) -> ChatReply: ...

    async def aclose(self) -> None: ...
