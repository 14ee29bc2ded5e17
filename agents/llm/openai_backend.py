"""Any OpenAI-compatible chat server: api.openai.com, vLLM, SGLang, Ollama, LiteLLM.

Local servers usually need no key, so with a `base_url` and no key a placeholder is sent;
only api.openai.com itself insists on one. Cached prompt tokens reported in
`prompt_tokens_details` are counted as cache reads, the rest of the prompt as input.
"""

from __future__ import annotations

from typing import Any

import openai

from agents.llm.base import ChatReply, Message, SystemPrompt, Usage
from agents.llm.config import sdk_base_url
from agents.llm.replies import count, unusable_reply
from agents.llm.sdk_chat import SdkChat, SdkErrors

PLACEHOLDER_KEY = "not-needed"


class OpenAIChat(SdkChat):
    """A `ChatModel` over chat.completions; at most `config.max_concurrency` requests at once."""

    backend = "openai"
    errors = SdkErrors(
        status=openai.APIStatusError,
        timeout=openai.APITimeoutError,
        connection=openai.APIConnectionError,
        base=openai.OpenAIError,
    )

    def _usable_key(self, api_key: str | None) -> str:
        """A local server needs no key: with a base_url a placeholder is sent."""
        if not api_key and self.config.base_url:
            return PLACEHOLDER_KEY
        return super()._usable_key(api_key)

    def _make_client(self, api_key: str) -> openai.AsyncOpenAI:
        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=sdk_base_url("openai", self.config.base_url),
            max_retries=0,
            timeout=self.config.timeout_s,
        )

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
        temperature = self._temperature(temperature)
        if temperature is not None:
            request["temperature"] = temperature
        return await self._reply(
            lambda: self._client.chat.completions.create(**request),
            reply_parts,
            usage_of,
            limit_name,
        )


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
