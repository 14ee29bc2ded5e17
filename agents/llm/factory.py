"""One place that turns an `LLMConfig` into a working `ChatModel`, key lookup included.

The key comes from the config (handed over in memory, e.g. from the editor's secret store)
or else from the environment variable the config names; it is passed to the SDK client and
nowhere else.
"""

from __future__ import annotations

import os
import random

from agents.llm.base import ChatModel
from agents.llm.config import LLMConfig, missing_key_error
from agents.llm.pricing import PriceTable
from agents.llm.retry import RetryPolicy, Sleep


def resolve_api_key(config: LLMConfig) -> str | None:
    """config.api_key, else $config.api_key_env; None when neither is set (or is blank)."""
    key = config.api_key or (os.environ.get(config.api_key_env) if config.api_key_env else None)
    key = key.strip() if key else None
    return key or None


def make_chat_model(
    config: LLMConfig,
    prices: PriceTable | None = None,
    *,
    sleep: Sleep | None = None,
    rng: random.Random | None = None,
    policy: RetryPolicy | None = None,
) -> ChatModel:
    """The backend `config` names. Raises MissingAPIKeyError (one sentence saying how to
    set the key) when it needs a key and has none; `prices` None → the shipped table."""
    if config.backend == "offline":
        raise ValueError("offline is not an LLM backend")
    key = resolve_api_key(config)
    if config.backend == "anthropic":
        if key is None:
            raise missing_key_error("anthropic", config.api_key_env)
        from agents.llm.anthropic_backend import AnthropicChat  # the SDK: only when used

        return AnthropicChat(config, key, prices, sleep=sleep, rng=rng, policy=policy)
    if config.backend == "openai":
        if key is None and not config.base_url:
            raise missing_key_error("openai", config.api_key_env)
        from agents.llm.openai_backend import OpenAIChat  # the SDK: only when used

        return OpenAIChat(config, key, prices, sleep=sleep, rng=rng, policy=policy)
    raise ValueError(f"unknown LLM backend {config.backend!r}: use anthropic or openai")
