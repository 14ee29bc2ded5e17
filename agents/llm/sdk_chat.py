"""What both SDK backends share: the concurrency limit, prices, retries and the reply.

Why one class: Anthropic's and OpenAI's clients differ only in the request they send and
the reply's shape. Retrying, counting tokens and dollars, refusing an empty reply and naming
the model that answered must be the same whichever provider is behind a role.
"""

from __future__ import annotations

import asyncio
import random
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from agents.llm.base import ChatReply, EmptyReplyError, Usage
from agents.llm.config import LLMConfig, missing_key_error, shown_url
from agents.llm.pricing import Price, PriceTable, cost_usd, default_prices, find_price
from agents.llm.replies import empty_reply_message
from agents.llm.retry import Failure, RetryPolicy, Sleep, call_with_retries, sdk_failure


@dataclass(frozen=True)
class SdkErrors:
    """An SDK's exception classes, which `retry.sdk_failure` tells apart."""

    status: type[Exception]
    timeout: type[Exception]
    connection: type[Exception]
    base: type[Exception]


class SdkChat(ABC):
    """A `ChatModel`'s common part; a backend names its `backend` and SDK `errors`, makes
    its client and builds the request. At most `config.max_concurrency` requests at once."""

    backend: ClassVar[str]
    errors: ClassVar[SdkErrors]

    def __init__(
        self,
        config: LLMConfig,
        api_key: str | None,
        prices: PriceTable | None = None,
        *,
        sleep: Sleep | None = None,
        rng: random.Random | None = None,
        policy: RetryPolicy | None = None,
    ) -> None:
        if config.backend != self.backend:
            name = type(self).__name__
            raise ValueError(f"{name} needs backend {self.backend!r}, not {config.backend!r}")
        self.config = config
        self._client = self._make_client(self._usable_key(api_key))
        self._prices = default_prices() if prices is None else prices
        self._policy = policy or RetryPolicy(max_attempts=config.max_attempts)
        self._sleep = sleep
        self._rng = rng
        self._limit = asyncio.Semaphore(config.max_concurrency)

    def _usable_key(self, api_key: str | None) -> str:
        """The key to send; MissingAPIKeyError (saying how to set one) where none will do."""
        if not api_key:
            raise missing_key_error(self.backend, self.config.api_key_env)
        return api_key

    @abstractmethod
    def _make_client(self, api_key: str) -> Any:
        """The SDK's async client, its own retries off (`call_with_retries` retries)."""

    @property
    def label(self) -> str:
        return self.config.label

    @property
    def priced(self) -> bool:
        """False when the price table has no entry for this model (its cost shows as $0)."""
        return find_price(self.config.model, self._prices) is not None

    @property
    def price(self) -> Price | None:
        """This model's price, for checking a cost budget before a call."""
        return find_price(self.config.model, self._prices)

    def _temperature(self, asked: float | None) -> float | None:
        """The config's temperature wins over the role's."""
        return self.config.temperature if self.config.temperature is not None else asked

    async def _reply(
        self,
        send: Callable[[], Awaitable[Any]],
        parts: Callable[[Any], tuple[str, str]],
        usage_of: Callable[[Any], Usage],
        limit_name: str,
    ) -> ChatReply:
        """Send under the concurrency limit with retries; the reply with its usage and cost,
        or EmptyReplyError naming the token limit (`limit_name`) when no text came back."""

        async def attempt() -> tuple[Any, str, str]:
            async with self._limit:
                response = await send()
            return response, *parts(response)

        (response, text, stop), attempts = await call_with_retries(
            attempt,
            self._classify,
            label=self.label,
            policy=self._policy,
            key_env=self.config.api_key_env,
            where=shown_url(self.config.base_url),
            sleep=self._sleep,
            rng=self._rng,
        )
        usage = usage_of(getattr(response, "usage", None))
        cost = cost_usd(self.config.model, usage, self._prices) or 0.0
        if not text.strip():
            message = empty_reply_message(self.label, stop, usage.output_tokens, limit_name)
            raise EmptyReplyError(message, usage=usage, cost_usd=cost, attempts=attempts)
        model = getattr(response, "model", None)
        return ChatReply(
            text=text,
            usage=usage,
            cost_usd=cost,
            model=model if isinstance(model, str) and model else self.config.model,
            stop_reason=stop,
            attempts=attempts,
        )

    def _classify(self, error: BaseException) -> Failure | None:
        return sdk_failure(
            error,
            status_error=self.errors.status,
            timeout_error=self.errors.timeout,
            connection_error=self.errors.connection,
            sdk_error=self.errors.base,
            timeout_s=self.config.timeout_s,
        )

    async def aclose(self) -> None:
        await self._client.close()
