"""Any OpenAI-compatible chat server: api.openai.com, vLLM, SGLang, Ollama, LiteLLM.

Local servers usually need no key, so with a `base_url` and no key a placeholder is sent;
only api.openai.com itself insists on one. Cached prompt tokens reported in
`prompt_tokens_details` are counted as cache reads, the rest of the prompt as input.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import openai

from agents.llm.base import ChatReply, EmptyReplyError, Message, SystemPrompt, Usage
from agents.llm.config import LLMConfig, missing_key_error, sdk_base_url, shown_url
from agents.llm.pricing import Price, PriceTable, cost_usd, default_prices, find_price
from agents.llm.replies import count, empty_reply_message, unusable_reply
from agents.llm.retry import Failure, RetryPolicy, Sleep, call_with_retries, sdk_failure

PLACEHOLDER_KEY = "not-needed"


class OpenAIChat:
    """A `ChatModel` over chat.completions; at most `config.max_concurrency` requests at once."""

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
        if config.backend != "openai":
            raise ValueError(f"OpenAIChat needs backend 'openai', not {config.backend!r}")
        if not api_key:
            if not config.base_url:
                raise missing_key_error("openai", config.api_key_env)
            api_key = PLACEHOLDER_KEY
        self.config = config
        self._prices = default_prices() if prices is None else prices
        self._policy = policy or RetryPolicy(max_attempts=config.max_attempts)
        self._sleep = sleep
        self._rng = rng
        self._limit = asyncio.Semaphore(config.max_concurrency)
        self._client = openai.AsyncOpenAI(
            api_key=api_key,
            base_url=sdk_base_url("openai", config.base_url),
            max_retries=0,
            timeout=config.timeout_s,
        )

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

    async def chat(
        self,
        system: SystemPrompt,
        messages: list[Message],
        *,
        max_tokens: int = 4096,
        temperature: float | None = None,
    ) -> ChatReply:
        chat: list[dict[str, Any]] = []
        if system.text():
            chat.append({"role": "system", "content": system.text()})
        chat.extend({"role": m.role, "content": m.content} for m in messages)
        # api.openai.com's newer models refuse max_tokens; compatible servers all know it.
        limit_name = "max_tokens" if self.config.base_url else "max_completion_tokens"
        request: dict[str, Any] = {
            "model": self.config.model,
            "messages": chat,
            limit_name: min(max_tokens, self.config.max_tokens or max_tokens),
        }
        temperature = (
            self.config.temperature if self.config.temperature is not None else temperature
        )
        if temperature is not None:
            request["temperature"] = temperature

        async def attempt() -> tuple[Any, str, str]:
            async with self._limit:
                response = await self._client.chat.completions.create(**request)
            return response, *reply_parts(response)

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
            status_error=openai.APIStatusError,
            timeout_error=openai.APITimeoutError,
            connection_error=openai.APIConnectionError,
            sdk_error=openai.OpenAIError,
            timeout_s=self.config.timeout_s,
        )

    async def aclose(self) -> None:
        await self._client.close()


def reply_parts(response: Any) -> tuple[str, str]:
    """(text, finish reason) of a chat completion; ReplyError when it is not one."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list) or not choices:
        raise unusable_reply(response, "a chat completion with choices")
    message = getattr(choices[0], "message", None)
    text = getattr(message, "content", None)
    stop = getattr(choices[0], "finish_reason", None)
    shaped = hasattr(message, "content") and isinstance(text, str | None)
    if not shaped or not isinstance(stop, str | None):
        raise unusable_reply(response, "a chat completion with a message")
    return text or "", stop or ""


def usage_of(usage: Any) -> Usage:
    """Our Usage from chat.completions usage: cached prompt tokens are cache reads (and
    cache writes, where a server reports them); the rest of the prompt is input. Counts a
    server leaves out or garbles are 0."""
    if usage is None:
        return Usage()
    details = getattr(usage, "prompt_tokens_details", None)
    cached = count(getattr(details, "cached_tokens", None))
    written = count(getattr(details, "cache_write_tokens", None))
    prompt = count(getattr(usage, "prompt_tokens", None))
    return Usage(
        input_tokens=max(0, prompt - cached - written),
        output_tokens=count(getattr(usage, "completion_tokens", None)),
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )
