"""The server's settings: from initializationOptions, then workspace/configuration (section
"kernelAgent"), re-read on didChangeConfiguration.

Editors spell settings differently (VS Code nests `kernelAgent.search.maxEvals`; Neovim and
Helix users write flat tables, often in snake_case), so both shapes are accepted. A bad value
keeps its default and is reported once, in one line. API keys are accepted only from
initializationOptions (`apiKeys`), never from settings files; they never appear in a repr, a
log line or a message.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agents.llm.base import ROLES
from agents.llm.config import BACKENDS, DEFAULT_KEY_ENV, DEFAULT_MODEL
from agents.request.defaults import DEVICES, EVAL_BACKENDS
from agents.request.table import SETTINGS
from agents.task import SIZES

SECTION = "kernelAgent"
REWRITE_MODES = ("replace", "alongside")
ROLE_FIELDS = ("backend", "model", "base_url")
CLIENT_SIDE = ("trace.", "client.")
"""Settings an editor's client keeps for itself (vscode-languageclient's `trace.server`)."""

_COUNTS = ("beam", "plans", "samples", "iterations", "patience", "max_evals", "threads")
_COUNTS_ZERO = ("repairs",)
_POSITIVE = ("max_cost", "max_time", "timing_budget")
_BOOLS = ("memory_enabled", "profile_on_save", "jail", "search_profile")
_ALIASES = {
    "llm": "backend",
    "llm.backend": "backend",
    "llm.model": "model",
    "llm.base_url": "base_url",
    "iters": "iterations",
    "memory": "memory_path",
    "memory.path": "memory_path",
    "memory.enabled": "memory_enabled",
    "search.profile": "search_profile",
}


@dataclass(frozen=True)
class RoleSettings:
    backend: str | None = None
    model: str | None = None
    base_url: str | None = None


@dataclass(frozen=True)
class Settings:
    """Everything the server reads from the editor. None means "the search's default"."""

    backend: str = "offline"
    model: str | None = None
    base_url: str | None = None
    roles: dict[str, RoleSettings] = field(default_factory=dict)
    device: str = "cpu"
    size: str = "default"
    beam: int | None = None
    plans: int | None = None
    samples: int | None = None
    iterations: int | None = None
    patience: int | None = None
    repairs: int | None = None
    max_evals: int | None = None
    max_cost: float | None = None
    max_time: float | None = None
    timing_budget: float | None = None
    threads: int | None = None
    memory_path: str | None = None
    memory_enabled: bool = True
    search_profile: bool = True
    profile_on_save: bool = False
    rewrite_mode: str = "replace"
    jail: bool = True
    eval_backend: str = "local"
    ray_address: str | None = None
    max_jobs: int = 2
    api_keys: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    # -- what the search will use ----------------------------------------------------------

    def role_backends(self, backend: str | None = None) -> dict[str, str]:
        """The backend of each role (an explicit `backend` overrides them all)."""
        if backend is not None:
            return dict.fromkeys(ROLES, backend)
        return {r: (self.roles.get(r, RoleSettings()).backend or self.backend) for r in ROLES}

    @property
    def uses_llm(self) -> bool:
        return any(b != "offline" for b in self.role_backends().values())

    @property
    def llm_model_label(self) -> str | None:
        """The model an "Optimize with ..." action names, or None when no LLM is configured."""
        if self.backend != "offline":
            return self.model or DEFAULT_MODEL[self.backend]
        for role in ROLES:
            rs = self.roles.get(role)
            if rs is not None and rs.backend not in (None, "offline"):
                return rs.model or DEFAULT_MODEL[rs.backend]
        return None

    def missing_key(self, backend: str | None = None) -> str | None:
        """One sentence saying how to give the key a backend needs, or None when all is set."""
        for role, name in self.role_backends(backend).items():
            if name == "offline":
                continue
            role_settings = self.roles.get(role, RoleSettings())
            base_url = role_settings.base_url or self.base_url
            if name == "openai" and base_url:
                continue
            env = DEFAULT_KEY_ENV[name]
            if self.api_keys.get(name) or os.environ.get(env, "").strip():
                continue
            where = " for api.openai.com" if name == "openai" else ""
            local = (
                " (or set kernelAgent.llm.baseUrl to a local server)" if name == "openai" else ""
            )
            return (
                f"The {name} backend needs an API key{where}: set {env} in the language "
                f"server's environment or pass it as initializationOptions.apiKeys.{name}"
                f"{local}, or set kernelAgent.llm.backend to offline."
            )
        return None

    def job_settings(self, backend: str | None = None) -> dict[str, Any]:
        """The job's settings by the request's field paths (agents/request/table.py), None
        left out. `backend` "offline" forces an offline search."""
        out: dict[str, Any] = {path: getattr(self, name) for name, path in REQUEST_PATHS.items()}
        if backend == "offline" or (backend is None and not self.uses_llm):
            out["llm.backend"] = "offline"
        else:
            out.update({"llm.backend": self.backend, "llm.model": self.model})
            out["llm.base_url"] = self.base_url
            for role, rs in self.roles.items():
                for name in ROLE_FIELDS:
                    out[f"llm.roles.{role}.{name}"] = getattr(rs, name)
        return {k: v for k, v in out.items() if v is not None}

    def job_env(self, backend: str | None = None) -> dict[str, str]:
        """The API keys the worker needs, as environment variables (never logged)."""
        env: dict[str, str] = {}
        for name in set(self.role_backends(backend).values()) - {"offline"}:
            key = self.api_keys.get(name) or os.environ.get(DEFAULT_KEY_ENV[name], "").strip()
            if key:
                env[DEFAULT_KEY_ENV[name]] = key
        return env

    def describe(self) -> str:
        """A one-line summary for the log (no keys: only which backends have one)."""
        keys = ", ".join(sorted(self.api_keys)) or "none"
        roles = {r: rs.backend or rs.model for r, rs in self.roles.items()}
        return (
            f"backend={self.backend} model={self.model or '-'} roles={roles or '-'} "
            f"device={self.device} size={self.size} evalBackend={self.eval_backend} "
            f"rewrite={self.rewrite_mode} "
            f"profileOnSave={self.profile_on_save} memory={self.memory_path or 'default'}"
            f"{'' if self.memory_enabled else ' (off)'} keys from client: {keys}"
        )


@dataclass
class Loaded:
    settings: Settings
    problems: list[str]

    @property
    def message(self) -> str | None:
        """The one line to show the user, or None when all settings were fine."""
        if not self.problems:
            return None
        return "Kernel Agent settings: " + "; ".join(self.problems) + " (defaults used for those)."


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).replace("-", "_").lower()


def _flatten(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"search": {"maxEvals": 6}} → {"search.max_evals": 6}; role tables stay whole."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{_snake(str(key))}"
        if isinstance(value, Mapping) and name not in ("roles", "llm.roles", "api_keys"):
            last = name.split(".")[-1]
            if (name == "llm" or name.startswith("llm.")) and last in ROLES:
                out[f"roles.{last}"] = value
                continue
            out.update(_flatten(value, name + "."))
        else:
            out[name] = value
    return out


def load(
    *sources: Mapping[str, Any] | None, base: Settings | None = None, trust_keys: bool = False
) -> Loaded:
    """Settings from `sources` (later ones win) over `base`. `trust_keys` allows `apiKeys`
    (initializationOptions only)."""
    settings = base or Settings()
    problems: list[str] = []
    values: dict[str, Any] = {}
    roles = dict(settings.roles)
    api_keys = dict(settings.api_keys)
    for source in sources:
        if source is None:
            continue
        if not isinstance(source, Mapping):
            problems.append("settings must be an object")
            continue
        if SECTION in source and isinstance(source[SECTION], Mapping):
            source = {**{k: v for k, v in source.items() if k != SECTION}, **source[SECTION]}
        for name, value in _flatten(source).items():
            if name in ("api_keys",):
                if not trust_keys:
                    problems.append("apiKeys are only accepted in initializationOptions")
                    continue
                api_keys.update(_keys(value, problems))
                continue
            if name in ("roles", "llm.roles"):
                if isinstance(value, Mapping):
                    for role, table in value.items():
                        _role(str(role), table, roles, problems)
                else:
                    problems.append("llm.roles must be a table of role → settings")
                continue
            if name.startswith("roles."):
                _role(name.split(".", 1)[1], value, roles, problems)
                continue
            if name == "no_memory":
                name, value = "memory_enabled", (not value if isinstance(value, bool) else value)
            name = _field_of(name)
            if name not in _FIELDS:
                if not name.startswith(CLIENT_SIDE):
                    problems.append(f"unknown setting {_display(name)}")
                continue
            problem = _problem(name, value)
            if problem:
                problems.append(f"{_display(name)} {problem} (got {value!r})")
                continue
            values[name] = _clean(name, value)
    return Loaded(replace(settings, roles=roles, api_keys=api_keys, **values), problems)


_FIELDS = {f for f in Settings.__dataclass_fields__ if f not in ("roles", "api_keys")}


def _field_of(name: str) -> str:
    """The Settings field a flattened snake_case key is read into ("search.max_evals" and
    "max_evals" both into max_evals, "memory.enabled" into memory_enabled)."""
    name = _ALIASES.get(name, name)
    if name.startswith("search."):
        name = name.split(".", 1)[1]
        name = _ALIASES.get(name, name)
    return name


REQUEST_PATHS: dict[str, str] = {
    _field_of(_snake(setting.editor)): setting.path
    for setting in SETTINGS
    if setting.editor and not setting.path.startswith("llm.")
}
"""Each Settings field a job's request takes, and its field path there: read off the one
table of names, so the editor's key and the request's field cannot drift apart."""


def _display(name: str) -> str:
    """Our name for a setting, as the editor spells it (camelCase under kernelAgent)."""
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _keys(value: Any, problems: list[str]) -> dict[str, str]:
    if not isinstance(value, Mapping):
        problems.append("apiKeys must be a table of backend → key")
        return {}
    keys: dict[str, str] = {}
    for backend, key in value.items():
        if backend not in BACKENDS or backend == "offline":
            problems.append(f"apiKeys.{backend} is not a backend: use anthropic or openai")
        elif not isinstance(key, str) or not key.strip():
            problems.append(f"apiKeys.{backend} must be a non-empty string")
        else:
            keys[backend] = key.strip()
    return keys


def _role(role: str, table: Any, roles: dict[str, RoleSettings], problems: list[str]) -> None:
    if role not in ROLES:
        problems.append(f"llm.roles.{role} is not a role: use one of {', '.join(ROLES)}")
        return
    if not isinstance(table, Mapping):
        problems.append(f"llm.roles.{role} must be a table of backend, model, baseUrl")
        return
    values: dict[str, Any] = {}
    for key, value in table.items():
        name = _snake(str(key))
        if name not in ROLE_FIELDS:
            problems.append(f"llm.roles.{role}.{key} is not a setting: use backend, model, baseUrl")
            continue
        problem = _problem(name, value)
        if problem:
            problems.append(f"llm.roles.{role}.{_display(name)} {problem} (got {value!r})")
            continue
        values[name] = value or None
    roles[role] = replace(roles.get(role, RoleSettings()), **values)


def _problem(name: str, value: Any) -> str | None:
    """What is wrong with one value, or None."""
    if name == "backend":
        return None if value in BACKENDS else f"must be one of {', '.join(BACKENDS)}"
    if name == "device":
        return None if value in DEVICES else f"must be one of {', '.join(DEVICES)}"
    if name == "size":
        return None if value in SIZES else f"must be one of {', '.join(SIZES)}"
    if name == "eval_backend":
        return None if value in EVAL_BACKENDS else f"must be one of {', '.join(EVAL_BACKENDS)}"
    if name == "rewrite_mode":
        return None if value in REWRITE_MODES else "must be replace or alongside"
    if name in ("model", "memory_path", "ray_address"):
        return None if value is None or isinstance(value, str) else "must be a string"
    if name == "base_url":
        if value is None or value == "":
            return None
        if not isinstance(value, str) or not value.startswith(("http://", "https://")):
            return "must start with http:// or https://"
        return None
    if name in _COUNTS or name == "max_jobs":
        if value is None:
            return None
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        return None if ok else "must be a whole number of at least 1"
    if name in _COUNTS_ZERO:
        if value is None:
            return None
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return None if ok else "must be a whole number of at least 0"
    if name in _POSITIVE:
        if value is None:
            return None
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok and math.isfinite(value) and value > 0 else "must be a positive number"
    if name in _BOOLS:
        return None if isinstance(value, bool) else "must be true or false"
    return None


def _clean(name: str, value: Any) -> Any:
    if name in ("model", "base_url", "memory_path", "ray_address") and value == "":
        return None
    if name == "memory_path" and value:
        return os.path.abspath(os.path.expanduser(value))
    if name in _POSITIVE and value is not None:
        return float(value)
    return value
