"""The groups of settings a request is made of, grouped as the editor groups them.

Each field has one name everywhere: `search.iterations` is `--iterations` on the command
line, `kernelAgent.search.iterations` in the editor and `iterations` under `[search]` in a
config file (agents/request/table.py lists them all). None means "the default", resolved
in agents/request/defaults.py, never in a caller.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from agents.llm.base import ROLES
from agents.llm.config import BACKENDS as LLM_BACKENDS
from agents.llm.config import LLMConfig, ModelSettings, settings_from_tables
from agents.request.defaults import DEVICES, MAX_EVALS, SEARCH_TIMING_BUDGET_S, search_shape
from agents.task import TaskLoadError, check_size


class RequestError(ValueError):
    """A request that cannot run as given (a bad value, a contradiction): one line that
    names the setting, for a usage error (exit status 2) or a failed editor job."""


@dataclass(frozen=True)
class SearchSettings:
    """The search's shape; None takes the LLM or the offline default (`resolved`)."""

    beam: int | None = None
    plans: int | None = None
    samples: int | None = None
    iterations: int | None = None
    patience: int | None = None
    repairs: int | None = None
    profile: bool = True  # profile the reference first; its hot lines guide the plans

    def resolved(self, offline: bool) -> SearchSettings:
        """Every None replaced by the default of an offline or an LLM search."""
        defaults = search_shape(offline)
        return replace(
            self, **{name: defaults[name] for name in defaults if getattr(self, name) is None}
        )


@dataclass(frozen=True)
class BudgetSettings:
    """When the search stops, whichever comes first."""

    max_evals: int | None = MAX_EVALS
    max_cost: float | None = None  # USD of model calls
    max_tokens: int | None = None
    max_time: float | None = None  # seconds of wall time


@dataclass(frozen=True)
class EvaluationSettings:
    """Where and how each candidate is verified and timed."""

    device: str = "cpu"
    size: str = "default"
    jail: bool = True
    eval_backend: str = "local"
    ray_address: str | None = None
    threads: int | None = None  # None: every core
    timing_budget: float = SEARCH_TIMING_BUDGET_S
    parallel_evals: int = 1  # candidates built and checked at once; timings stay one per device

    def __post_init__(self) -> None:
        if self.device not in DEVICES:
            raise RequestError(f"unknown device {self.device!r}: use one of {', '.join(DEVICES)}")
        try:
            check_size(self.size)  # one of SIZES, or a fit the parent resolved
        except TaskLoadError as error:
            raise RequestError(str(error)) from None


@dataclass(frozen=True)
class MemorySettings:
    """The optimisation memory: lessons and tuned tiles from earlier searches."""

    path: Path | None = None  # None: one file per user
    enabled: bool = True


@dataclass(frozen=True)
class RoleSettings:
    """How one role reaches its model; None inherits the `llm` default (then the backend's).
    The fields beyond backend, model and base_url come from a config file's [llm] tables."""

    backend: str | None = None
    model: str | None = None
    base_url: str | None = None
    api_key_env: str | None = None  # the environment variable that holds the key
    max_concurrency: int | None = None
    timeout_s: float | None = None
    max_attempts: int | None = None
    max_tokens: int | None = None  # per call, replacing the role's own
    temperature: float | None = None

    def values(self) -> dict[str, Any]:
        """The fields that are set, by name (what agents.llm.config's LLMConfig takes)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(RoleSettings)
            if getattr(self, f.name) is not None
        }


_BACKEND_BOUND = ("model", "base_url", "api_key_env")
"""Fields that belong to one backend: switching a role's backend drops them."""


@dataclass(frozen=True)
class LLMSettings(RoleSettings):
    """The settings of every role (this object's own fields), each role's overrides
    (`roles`), and model prices beyond the shipped table (`prices`, a config file's
    [prices]: model → {input, output, ...} USD per million tokens). No API key is ever
    here: keys come from the environment."""

    roles: Mapping[str, RoleSettings] = field(default_factory=dict)
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for role in self.roles:
            if role not in ROLES:
                raise RequestError(f"llm.{role} is not a role: use one of {', '.join(ROLES)}")
        for name in (self.backend, *(r.backend for r in self.roles.values())):
            if name is not None and name not in LLM_BACKENDS:
                raise RequestError(
                    f"unknown backend {name!r}: use one of {', '.join(LLM_BACKENDS)}"
                )
        self.models()  # every value checked now, not when the search starts

    def models(self) -> ModelSettings:
        """Each role's resolved model config and the price table; RequestError in one line."""
        table: dict[str, Any] = self.values()
        table.update({role: own.values() for role, own in self.roles.items()})
        try:
            return settings_from_tables(table, self.prices, default=LLMConfig(backend="offline"))
        except ValueError as error:
            raise RequestError(str(error)) from None

    def backend_of(self, role: str) -> str:
        """The backend `role` ends up with (offline when nothing says otherwise)."""
        own = self.roles.get(role, RoleSettings()).backend
        return own or self.backend or "offline"

    @property
    def offline(self) -> bool:
        """Whether the search plans offline (its shape then takes the offline defaults)."""
        return self.backend_of("planner") == "offline"

    def for_every_role(self, **changes: Any) -> LLMSettings:
        """These settings with `changes` (backend, model, base_url) applied to every role,
        as the command line's --backend, --model and --base-url are applied over a config
        file: a role switched from another backend drops that backend's model and URL (a
        file that names no backend has chosen none, so its model goes with the flag's)."""
        changes = {k: v for k, v in changes.items() if v is not None}
        if not changes:
            return self
        roles = {}
        for role, own in self.roles.items():
            dropped = dict.fromkeys(changes, None)
            new = changes.get("backend")
            if new is not None and (own.backend or self.backend) not in (None, new):
                dropped.update(dict.fromkeys(_BACKEND_BOUND, None))
            roles[role] = replace(own, **dropped)
        top = dict(changes)
        new = changes.get("backend")
        if new is not None and self.backend not in (None, new):
            top = {**dict.fromkeys(_BACKEND_BOUND, None), **top}
        return replace(self, roles=roles, **top)
