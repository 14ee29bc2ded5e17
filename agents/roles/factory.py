"""Builds the four roles from the command line, the config file and the environment.

Each role can use its own backend and model; roles with identical settings share one
client, so they share its concurrency limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from threading import Event

from agents.evaluate import EvalOptions
from agents.llm.accounting import CostMeter
from agents.llm.base import ROLES, ChatModel
from agents.llm.config import BACKENDS, LLMConfig, load_settings
from agents.llm.factory import make_chat_model
from agents.offline.roles import OfflineExecutor, OfflinePlanner, OfflineSummarizer
from agents.roles.llm_roles import LLMExecutor, LLMPlanner, LLMRepairer, LLMSummarizer
from agents.search.beam import Roles
from agents.task import SourceFile
from memory.experiences import ExperienceStore
from memory.tuning import TuningMemory

__all__ = ["BACKENDS", "RoleSetupError", "build_roles"]


class RoleSetupError(Exception):
    """Bad LLM settings (file, model, backend); one line for the user."""


@dataclass
class OfflineSetup:
    """What the offline roles need: they run passes in the sandbox and read memory."""

    reference: SourceFile
    options: EvalOptions
    experiences: ExperienceStore | None = None
    cancel: Event | None = None


def build_roles(
    llm: str | None,
    meter: CostMeter,
    *,
    model: str | None = None,
    base_url: str | None = None,
    config_path: Path | None = None,
    device: str = "cpu",
    api_key: str | None = None,
    offline: OfflineSetup | None = None,
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
    backends = {role: models.for_role(role).backend for role in ROLES}
    if (backends["planner"] == "offline") != (backends["executor"] == "offline"):
        raise RoleSetupError(
            "the offline planner plans rewrite passes that only the offline executor runs: "
            "set both planner and executor to offline, or neither"
        )
    clients: dict[tuple, ChatModel] = {}
    built: dict[str, object] = {}
    if backends["planner"] == "offline":
        if offline is None:
            raise RoleSetupError("the offline backend needs the task and the verifier options")
        built["planner"] = OfflinePlanner(offline.experiences, device)
        tuning = TuningMemory(offline.experiences.store) if offline.experiences else None
        built["executor"] = OfflineExecutor(
            offline.reference, offline.options, offline.cancel, tuning
        )
        built["repairer"] = None  # a pass is deterministic: a failed rewrite is not retried
    if backends["summarizer"] == "offline":
        built["summarizer"] = OfflineSummarizer(device)
    for role in ROLES:
        if role in built:
            continue
        config = models.for_role(role)
        if config.backend == "offline":
            built[role] = None
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
        planner=built["planner"],  # type: ignore[arg-type]
        executor=built["executor"],  # type: ignore[arg-type]
        repairer=built["repairer"],  # type: ignore[arg-type]
        summarizer=built["summarizer"],  # type: ignore[arg-type]
    )
    return roles, list(clients.values())
