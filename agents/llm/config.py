"""Which model each role uses, and how to reach it, from one default plus per-role overrides.

The TOML file looks like this (every key optional):

    [llm]
    backend = "anthropic"          # anthropic | openai | offline
    model = "claude-sonnet-4-5"
    max_concurrency = 4

    [llm.summarizer]               # a role: planner, executor, repairer, summarizer
    model = "claude-haiku-4-5"

    [llm.executor]
    backend = "openai"
    base_url = "http://localhost:8000/v1"
    model = "openai/gpt-oss-120b"

    [prices."my-model"]            # USD per million tokens
    input = 1.0
    output = 2.0

Keys never go in the file: `api_key_env` names the environment variable that holds one.
A `base_url` may end in `/v1` or not, for either backend (see `sdk_base_url`).
Bad values raise ValueError with one line that names the key and says what to do.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from agents.llm.base import ROLES, MissingAPIKeyError
from agents.llm.pricing import Price, default_prices, parse_prices

BACKENDS = ("anthropic", "openai", "offline")
DEFAULT_KEY_ENV = {"anthropic": "ANTHROPIC_API_KEY", "openai": "OPENAI_API_KEY", "offline": ""}
DEFAULT_MODEL = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-oss-120b", "offline": "offline"}
# Fields that belong to one backend: a role that switches backend does not inherit them.
_BACKEND_FIELDS = ("model", "base_url", "api_key", "api_key_env")
_FILE_FORBIDDEN = ("api_key",)


@dataclass(frozen=True)
class LLMConfig:
    """How to reach one model. `api_key` is for keys handed over in memory (the editor's
    secret store); it never appears in repr, logs or error messages."""

    backend: str = "anthropic"
    model: str = ""  # "" → the backend's default model
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str = ""  # "" → ANTHROPIC_API_KEY / OPENAI_API_KEY by backend
    max_concurrency: int = 4
    timeout_s: float = 120.0
    max_attempts: int = 5
    max_tokens: int | None = None  # when set, replaces the role's per-call value
    temperature: float | None = None  # when set, replaces the role's per-call value

    def __post_init__(self) -> None:
        _validate(self._values(), "LLMConfig")
        if not self.model:
            object.__setattr__(self, "model", DEFAULT_MODEL[self.backend])
        if not self.api_key_env:
            object.__setattr__(self, "api_key_env", DEFAULT_KEY_ENV[self.backend])

    def _values(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def label(self) -> str:
        return f"{self.backend}:{self.model}"

    def overridden(self, changes: Mapping[str, Any]) -> LLMConfig:
        """This config with `changes`; switching backend drops the old backend's model,
        URL and key settings unless `changes` gives them too."""
        values = self._values()
        if changes.get("backend", self.backend) != self.backend:
            for name in _BACKEND_FIELDS:
                values[name] = None if name in ("base_url", "api_key") else ""
        values.update(changes)
        return LLMConfig(**values)


_FIELD_NAMES = tuple(f.name for f in dataclasses.fields(LLMConfig))


def _validate(values: Mapping[str, Any], where: str) -> None:
    """Raise ValueError naming `where.key` for the first bad value (never echoing a key)."""
    for name in values:
        if name not in _FIELD_NAMES:
            raise ValueError(
                f"{where}.{name} is not a setting: use one of {', '.join(_FIELD_NAMES)}"
            )
    for name, value in values.items():
        problem = _problem(name, value)
        if problem:
            shown = "" if name == "api_key" else f" (got {value!r})"
            raise ValueError(f"{where}.{name} {problem}{shown}")


def _problem(name: str, value: Any) -> str | None:
    """What is wrong with one setting's value, or None."""
    if name == "backend":
        return None if value in BACKENDS else f"must be one of {', '.join(BACKENDS)}"
    if name in ("model", "api_key_env"):
        return None if isinstance(value, str) else "must be a string"
    if name in ("base_url", "api_key"):
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            return "must be a non-empty string"
        if name == "base_url" and not value.startswith(("http://", "https://")):
            return "must start with http:// or https://, e.g. http://localhost:8000/v1"
        return None
    if name in ("max_concurrency", "max_attempts"):
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        return None if ok else "must be a whole number of at least 1"
    if name == "max_tokens":
        if value is None:
            return None
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
        return None if ok else "must be a whole number of at least 1"
    if name == "timeout_s":
        return None if _number(value) and value > 0 else "must be a number of seconds above 0"
    if name == "temperature":
        if value is None:
            return None
        return None if _number(value) and 0 <= value <= 2 else "must be a number from 0 to 2"
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class RoleModels:
    """The resolved config of every role in `ROLES`."""

    default: LLMConfig
    roles: Mapping[str, LLMConfig]

    @classmethod
    def build(
        cls, default: LLMConfig, overrides: Mapping[str, Mapping[str, Any]] | None = None
    ) -> RoleModels:
        """`default` for every role, with `overrides[role]` (field → value) applied."""
        overrides = overrides or {}
        for role, changes in overrides.items():
            if role not in ROLES:
                raise ValueError(f"llm.{role} is not a role: use one of {', '.join(ROLES)}")
            _validate(changes, f"llm.{role}")
        roles = {role: default.overridden(overrides.get(role, {})) for role in ROLES}
        return cls(default=default, roles=roles)

    def for_role(self, role: str) -> LLMConfig:
        if role not in self.roles:
            raise KeyError(f"unknown role {role!r}: roles are {', '.join(ROLES)}")
        return self.roles[role]

    def with_changes(self, **changes: Any) -> RoleModels:
        """Every role (and the default) with `changes`, e.g. from `--model` on the command line."""
        _validate(changes, "llm")
        return RoleModels(
            default=self.default.overridden(changes),
            roles={role: config.overridden(changes) for role, config in self.roles.items()},
        )


@dataclass(frozen=True)
class ModelSettings:
    """What the config file says about LLMs: the models per role and the price table."""

    models: RoleModels
    prices: dict[str, Price]


def parse_settings(
    data: Mapping[str, Any], *, default: LLMConfig | None = None, source: str = "config"
) -> ModelSettings:
    """Settings from parsed TOML; sections other than [llm] and [prices] are left alone."""
    llm = data.get("llm", {})
    if not isinstance(llm, Mapping):
        raise ValueError(f"{source}: llm must be a table ([llm])")
    try:
        return settings_from_tables(llm, data.get("prices", {}), default=default)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None


def settings_from_tables(
    llm: Mapping[str, Any], prices: Mapping[str, Any], *, default: LLMConfig | None = None
) -> ModelSettings:
    """Settings from an [llm] table (defaults, then one table per role) and a [prices]
    table, however they arrived (a file, the editor's settings); ValueError names the key."""
    base_values = {k: v for k, v in llm.items() if not isinstance(v, Mapping)}
    overrides = {k: v for k, v in llm.items() if isinstance(v, Mapping)}
    _refuse_keys_in_file(base_values, overrides)
    _validate(base_values, "llm")
    start = default or LLMConfig()
    models = RoleModels.build(start.overridden(base_values), overrides)
    table = default_prices()
    table.update(parse_prices(prices, "prices"))
    return ModelSettings(models=models, prices=table)


def _refuse_keys_in_file(
    base_values: Mapping[str, Any], overrides: Mapping[str, Mapping[str, Any]]
) -> None:
    """Keys in a file end up in backups and repositories: name the variable instead."""
    sections = [("llm", base_values), *((f"llm.{r}", v) for r, v in overrides.items())]
    for where, values in sections:
        for name in _FILE_FORBIDDEN:
            if name in values:
                raise ValueError(
                    f"{where}.{name} must not be in a file: set api_key_env to the name of "
                    "the environment variable that holds the key"
                )


def load_settings(
    path: str | Path | None = None, *, default: LLMConfig | None = None
) -> ModelSettings:
    """Settings from a TOML file; no file → the defaults and the shipped price table."""
    if path is None:
        models = RoleModels.build(default or LLMConfig())
        return ModelSettings(models=models, prices=default_prices())
    path = Path(path)
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"{path}: not valid TOML: {error}") from None
    except OSError as error:
        raise ValueError(f"{path}: cannot read the config file: {error.strerror}") from None
    return parse_settings(data, default=default, source=str(path))


def sdk_base_url(backend: str, base_url: str | None) -> str | None:
    """The base URL in the form the backend's SDK expects, whether the user wrote `/v1` or
    not: the anthropic SDK appends `/v1/messages` (so a trailing `/v1` goes), the openai SDK
    appends `/chat/completions` to a base that ends in `/v1` (so a bare host gets `/v1`; a
    path such as `/api/openai` is kept as given). A pasted full endpoint is cut back too."""
    if not base_url:
        return base_url
    parts = urlsplit(base_url.strip())
    path = parts.path.rstrip("/")
    if backend == "anthropic":
        for suffix in ("/messages", "/v1"):
            path = path.removesuffix(suffix)
    elif backend == "openai":
        path = path.removesuffix("/chat/completions").removesuffix("/completions")
        if not path:
            path = "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, parts.fragment))


def shown_url(base_url: str | None) -> str:
    """The base URL for messages: without user:password@ or a query (either may hold a key)."""
    if not base_url:
        return ""
    parts = urlsplit(base_url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def missing_key_error(backend: str, env_name: str) -> MissingAPIKeyError:
    """The one-sentence error for a backend with no key, saying how to set one."""
    where = " for api.openai.com" if backend == "openai" else ""
    local = ", set base_url to use a local server" if backend == "openai" else ""
    return MissingAPIKeyError(
        f"The {backend} backend needs an API key{where}: set {env_name} in the environment "
        f"(or pass it from the editor's secret store){local}, or use --llm offline."
    )
