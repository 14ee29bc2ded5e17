"""Builds the four roles from the command line, the config file and the environment.

Each role can use its own backend and model; roles with identical settings share one
client, so they share its concurrency limit.
"""

from __future__ import annotations

from pathlib import Path

from agents.llm.accounting import CostMeter
from agents.llm.base import ChatModel
from agents.llm.config import BACKENDS, LLMConfig, load_settings
from agents.llm.factory import make_chat_model
from agents.roles.llm_roles import LLMExecutor, LLMPlanner, LLMRepairer, LLMSummarizer
from agents.search.beam import Roles

__all__ = ["BACKENDS", "RoleSetupError", "build_roles"]


class RoleSetupError(Exception):
    """Bad LLM settings (file, model, backend); one line for the user."""


def build_roles(
    llm: str | None,
    meter: CostMeter,
    *,
    model: str | None = None,
    base_url: str | None = None,
    config_path: Path | None = None,
    device: str = "cpu",
    api_key: str | None = None,
) -> tuple[Roles, list[ChatModel]]:
    """The roles, and the chat models to close afterwards. `llm` None: the config file's
    backend, else offline. `api_key` comes from the editor's secret store, if any."""
    try:
        settings = load_settings(config_path, default=LLMConfig(backend=llm or "offline"))
        models = settings.models
        changes: dict[str, object] = {}
        if llm is not None:
            changes["backend"] = llm
        if model:
            changes["model"] = model
        if base_url:
            changes["base_url"] = base_url
        if api_key:
            changes["api_key"] = api_key
        if changes:
            models = models.with_changes(**changes)
    except ValueError as error:
        raise RoleSetupError(str(error)) from None
    clients: dict[tuple, ChatModel] = {}
    built = {}
    for role in ("planner", "executor", "repairer", "summarizer"):
        config = models.for_role(role)
        if config.backend == "offline":
            built[role] = _offline_role(role, meter, device)
            continue
        key = (config.backend, config.model, config.base_url, config.api_key_env)
        if key not in clients:
            try:
                clients[key] = make_chat_model(config, settings.prices)
            except ValueError as error:
                raise RoleSetupError(str(error)) from None
        client = clients[key]
        kwargs = {}
        if config.max_tokens:
            kwargs["max_tokens"] = config.max_tokens
        if config.temperature is not None:
            kwargs["temperature"] = config.temperature
        role_class = {
            "planner": LLMPlanner,
            "executor": LLMExecutor,
            "repairer": LLMRepairer,
            "summarizer": LLMSummarizer,
        }[role]
        built[role] = role_class(client, meter, **kwargs)
    roles = Roles(
        planner=built["planner"],
        executor=built["executor"],
        repairer=built["repairer"],
        summarizer=built["summarizer"],
    )
    return roles, list(clients.values())


def _offline_role(role: str, meter: CostMeter, device: str):
    raise RoleSetupError(
        "the offline backend is not available yet: choose --llm anthropic or --llm openai"
    )
