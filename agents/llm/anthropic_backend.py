"""Claude through the Anthropic Messages API, with the static system prompt cached.

The static part of the system prompt (instructions, gated skills) is identical across a
role's calls, so it is sent as its own block marked `cache_control: ephemeral`; repeated
calls then read it from the prompt cache at a tenth of the input price. The SDK's own
retries are off: `retry.call_with_retries` retries, counts and explains instead.
"""

from __future__ import annotations

import inspect
from typing import Any

import anthropic

from agents.llm.base import ChatReply, Message, SystemPrompt, Usage
from agents.llm.config import sdk_base_url
from agents.llm.replies import count, unusable_reply
from agents.llm.sdk_chat import SdkChat, SdkErrors

# Newer SDKs (2.x) dropped `temperature` from messages.create, as the newest models refuse
# it; send it only where the installed SDK still takes it.
SDK_TAKES_TEMPERATURE = (
    "temperature" in inspect.signature(anthropic.resources.messages.AsyncMessages.create).parameters
)


class AnthropicChat(SdkChat):
    """A `ChatModel` for one Claude model; at most `config.max_concurrency` requests at once."""

    backend = "anthropic"
    errors = SdkErrors(
        status=anthropic.APIStatusError,
        timeout=anthropic.APITimeoutError,
        connection=anthropic.APIConnectionError,
        base=anthropic.AnthropicError,
    )

    def _make_client(self, api_key: str) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(
            api_key=api_key,
            base_url=sdk_base_url("anthropic", self.config.base_url),
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
        request: dict[str, Any] = {
            "model": self.config.model,
            "max_tokens": min(max_tokens, self.config.max_tokens or max_tokens),
            "messages": [{"role": m.role, "content": m.content} for m in messages],
        }
        blocks = system_blocks(system)
        if blocks:
            request["system"] = blocks
        temperature = self._temperature(temperature)
        if temperature is not None and SDK_TAKES_TEMPERATURE:
            request["temperature"] = temperature
        return await self._reply(
            lambda: self._client.messages.create(**request), reply_parts, usage_of, "max_tokens"
        )


def system_blocks(system: SystemPrompt) -> list[dict[str, Any]]:
    """The static part as a cached block, the dynamic part (if any) uncached after it."""
    blocks: list[dict[str, Any]] = []
    if system.static:
        blocks.append(
            {"type": "text", "text": system.static, "cache_control": {"type": "ephemeral"}}
        )
    if system.dynamic:
        blocks.append({"type": "text", "text": system.dynamic})
    return blocks


def reply_parts(response: Any) -> tuple[str, str]:
    """(text, stop reason) of a Messages API reply; ReplyError when it is not one."""
    content = getattr(response, "content", None)
    stop = getattr(response, "stop_reason", None)
    if not isinstance(content, list) or not isinstance(stop, str | None):
        raise unusable_reply(response, "a Messages API reply with content")
    texts = [getattr(b, "text", None) for b in content if getattr(b, "type", "") == "text"]
    if not all(isinstance(text, str | None) for text in texts):
        raise unusable_reply(response, "a Messages API reply with text blocks")
    return "".join(text or "" for text in texts), stop or ""


def usage_of(usage: Any) -> Usage:
    """Our Usage from Anthropic's (cache fields may be absent or None; garbled counts are 0)."""
    if usage is None:
        return Usage()
    return Usage(
        input_tokens=count(getattr(usage, "input_tokens", None)),
        output_tokens=count(getattr(usage, "output_tokens", None)),
        cache_read_tokens=count(getattr(usage, "cache_read_input_tokens", None)),
        cache_write_tokens=count(getattr(usage, "cache_creation_input_tokens", None)),
    )
