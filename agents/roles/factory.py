"""Builds the four roles from a request's LLM settings and the environment (the keys).

Each role can use its own backend and model; roles with identical settings share one
client, so they share its concurrency limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from threading import Event

from agents.evaluate import EvalOptions
from agents.llm.accounting import CostMeter
from agents.llm.base import ROLES, ChatModel
from agents.llm.config import BACKENDS
from agents.llm.factory import make_chat_model
from agents.offline.roles import OfflineExecutor, OfflinePlanner, OfflineSummarizer
from agents.request.settings import LLMSettings, RequestError
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
    llm: LLMSettings,
    meter: CostMeter,
    *,
    device: str = "cpu",
    offline: OfflineSetup | None = None,
) -> tuple[Roles, list[ChatModel]]:
    """The roles, and the chat models to close afterwards, from the request's LLM settings
    (a config file, the command line's flags and the editor's settings all arrive there)."""
    try:
        settings = llm.models()
    except RequestError as error:
        raise RoleSetupError(str(error)) from None
    models = settings.models
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
