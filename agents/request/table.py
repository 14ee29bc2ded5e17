"""Every setting of an `OptimizeRequest`, with its one name in each place it can be given.

| field path (`OptimizeRequest`) | CLI flag | editor setting (`kernelAgent.`) | config key (TOML) |

The names agree modulo case (snake, kebab, camel) and the group: the editor keeps its
budgets, threads and timing budget under `search.`, as its Settings UI groups them; a
config file spells the field path as a TOML table (`[search] iterations = 8`, per role
`[llm.planner] model = "..."`). A unit test holds this table against the parser, the
extension's package.json and the dataclasses, so none can drift from the others.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from agents.llm.base import ROLES
from agents.llm.config import parse_settings
from agents.request.settings import RequestError, RoleSettings
from agents.request.wire import convert

EDITOR_SECTION = "kernelAgent"


@dataclass(frozen=True)
class Setting:
    """One setting: its field path and its names on the command line, in the editor's
    settings (without `kernelAgent.`) and in a config file. None: not settable there."""

    path: str
    flag: str | None
    editor: str | None
    config: str

    @property
    def editor_key(self) -> str | None:
        return f"{EDITOR_SECTION}.{self.editor}" if self.editor else None


_ROLE_FILE_ONLY = ("api_key_env", "max_concurrency", "timeout_s", "max_attempts", "max_tokens")
_ROLE_FILE_ONLY += ("temperature",)


def _rows() -> Iterable[Setting]:
    def row(path: str, flag: str | None, editor: str | None) -> Setting:
        return Setting(path, flag, editor, path)

    yield row("search.beam", "--beam", "search.beam")
    yield row("search.plans", "--plans", "search.plans")
    yield row("search.samples", "--samples", "search.samples")
    yield row("search.iterations", "--iterations", "search.iterations")
    yield row("search.patience", "--patience", "search.patience")
    yield row("search.repairs", "--repairs", "search.repairs")
    yield row("search.profile", "--profile", "search.profile")
    yield row("budget.max_evals", "--max-evals", "search.maxEvals")
    yield row("budget.max_cost", "--max-cost", "search.maxCost")
    yield row("budget.max_tokens", "--max-tokens", None)
    yield row("budget.max_time", "--max-time", "search.maxTime")
    yield row("evaluation.device", "--device", "device")
    yield row("evaluation.size", "--size", "size")
    yield row("evaluation.jail", "--jail", "jail")
    yield row("evaluation.eval_backend", "--eval-backend", "evalBackend")
    yield row("evaluation.ray_address", "--ray-address", "rayAddress")
    yield row("evaluation.threads", "--threads", "search.threads")
    yield row("evaluation.timing_budget", "--timing-budget", "search.timingBudget")
    yield row("evaluation.parallel_evals", "--parallel-evals", None)
    yield row("llm.backend", "--backend", "llm.backend")
    yield row("llm.model", "--model", "llm.model")
    yield row("llm.base_url", "--base-url", "llm.baseUrl")
    for name in _ROLE_FILE_ONLY:
        yield row(f"llm.{name}", None, None)
    for role in ROLES:
        yield Setting(
            f"llm.roles.{role}.backend", None, f"llm.{role}.backend", f"llm.{role}.backend"
        )
        yield Setting(f"llm.roles.{role}.model", None, f"llm.{role}.model", f"llm.{role}.model")
        yield Setting(f"llm.roles.{role}.base_url", None, None, f"llm.{role}.base_url")
        for name in _ROLE_FILE_ONLY:
            yield Setting(f"llm.roles.{role}.{name}", None, None, f"llm.{role}.{name}")
    yield row("memory.path", "--memory", "memory.path")
    yield row("memory.enabled", "--no-memory", "memory.enabled")
    yield row("seed", "--seed", None)


SETTINGS: tuple[Setting, ...] = tuple(_rows())
BY_PATH = {setting.path: setting for setting in SETTINGS}
BY_CONFIG = {setting.config: setting for setting in SETTINGS}
BY_EDITOR = {setting.editor: setting for setting in SETTINGS if setting.editor}


def with_values(request: Any, values: Mapping[str, Any]) -> Any:
    """`request` (any dataclass of settings) with `values` set by field path, each checked
    against its field's type; RequestError names the first bad one. A path under
    `llm.roles.<role>` creates that role's settings when they are not there yet."""
    for path, value in values.items():
        request = _set(request, path.split("."), value, path)
    return request


def _set(holder: Any, parts: list[str], value: Any, path: str) -> Any:
    head, rest = parts[0], parts[1:]
    if isinstance(holder, Mapping):  # llm.roles: role → RoleSettings
        if head not in ROLES:
            raise RequestError(f"{path}: {head} is not a role: use one of {', '.join(ROLES)}")
        if not rest:
            raise RequestError(f"{path} must name a field of the role")
        inner = _set(holder.get(head, RoleSettings()), rest, value, path)
        return {**holder, head: inner}
    names = {f.name for f in dataclasses.fields(holder)}
    if head not in names:
        raise RequestError(f"unknown setting {path}")
    if rest:
        return replace(holder, **{head: _set(getattr(holder, head), rest, value, path)})
    hint = typing.get_type_hints(type(holder))[head]
    return replace(holder, **{head: convert(hint, value, path)})


def config_values(data: Mapping[str, Any], source: str) -> dict[str, Any]:
    """A parsed config file's settings by field path: `[search] iterations = 8` gives
    {"search.iterations": 8}; [prices] is kept whole as `llm.prices`. RequestError (naming
    `source` and the key) for a key that is not a setting."""
    values: dict[str, Any] = {}
    for key, value in _flatten(data):
        if key.startswith("prices"):
            continue
        setting = BY_CONFIG.get(key)
        if setting is None:
            raise RequestError(f"{source}: {key} is not a setting")
        values[setting.path] = value
    if "prices" in data:
        values["llm.prices"] = data["prices"]
    return values


def read_config(path: str | Path) -> dict[str, Any]:
    """A config file's settings by field path (see `config_values`); its [llm] and [prices]
    are checked as agents.llm.config reads them, so a bad value names the file and key."""
    try:
        with Path(path).open("rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as error:
        raise RequestError(f"{path}: not valid TOML: {error}") from None
    except OSError as error:
        raise RequestError(f"{path}: cannot read the config file: {error.strerror}") from None
    try:
        parse_settings(data, source=str(path))
    except ValueError as error:
        raise RequestError(str(error)) from None
    return config_values(data, str(path))


def _flatten(data: Mapping[str, Any], prefix: str = "") -> Iterable[tuple[str, Any]]:
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and name != "prices":
            yield from _flatten(value, name + ".")
        else:
            yield name, value
