"""The settings a job's worker accepts, checked before a process is started.

The manager checks them so a typo fails the job at once with one line; the worker maps them
onto the CLI's `optimize` arguments, so an editor run and a terminal run search alike.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from agents.llm.base import ROLES
from agents.llm.config import BACKENDS
from agents.profile.api import DEVICES
from agents.task import SIZES

JOB_KINDS = ("optimize", "profile")
TARGET_KINDS = ("module", "function", "triton", "cuda")

_COUNTS = ("beam", "plans", "samples", "iters", "patience", "max_evals", "threads", "repeat")
_COUNTS_ZERO = ("repairs", "seed")
_POSITIVE = ("max_cost", "max_time", "timing_budget")
_BOOLS = ("no_memory", "profile", "jail")
_STRINGS = ("model", "base_url", "memory", "config", "ray_address")
KNOWN = (
    "llm",
    "device",
    "size",
    "max_tokens",
    "parallel_evals",
    "eval_backend",
    *_COUNTS,
    *_COUNTS_ZERO,
    *_POSITIVE,
    *_BOOLS,
    *_STRINGS,
)


class SettingsError(ValueError):
    """A bad worker setting; one line naming it."""


def check_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with None values dropped and paths made absolute; SettingsError for the
    first bad one."""
    if not isinstance(settings, Mapping):
        raise SettingsError("settings must be an object of name → value")
    out: dict[str, Any] = {}
    for name, value in settings.items():
        if name not in KNOWN:
            raise SettingsError(f"unknown setting {name!r}: use one of {', '.join(KNOWN)}")
        if value is None:
            continue
        out[name] = _check(name, value)
    return out


def _check(name: str, value: Any) -> Any:
    if name == "llm":
        return _check_llm(value)
    if name == "device":
        return _choice(name, value, DEVICES)
    if name == "size":
        return _choice(name, value, SIZES)
    if name == "eval_backend":
        from agents.evalpool.service import BACKENDS as EVAL_BACKENDS  # ~0.1 s: when set only

        return _choice(name, value, EVAL_BACKENDS)
    if name in _COUNTS or name in ("max_tokens", "parallel_evals"):
        if not _integer(value) or value < 1:
            raise SettingsError(f"setting {name} must be a whole number of at least 1 ({value!r})")
        return value
    if name in _COUNTS_ZERO:
        if not _integer(value) or value < 0:
            raise SettingsError(f"setting {name} must be a whole number of at least 0 ({value!r})")
        return value
    if name in _POSITIVE:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or value <= 0:
            raise SettingsError(f"setting {name} must be a positive number ({value!r})")
        return float(value)
    if name in _BOOLS:
        if not isinstance(value, bool):
            raise SettingsError(f"setting {name} must be true or false ({value!r})")
        return value
    if not isinstance(value, str) or not value:
        raise SettingsError(f"setting {name} must be a non-empty string")
    if name == "base_url" and not value.startswith(("http://", "https://")):
        raise SettingsError(f"setting base_url must start with http:// or https:// ({value!r})")
    if name in ("memory", "config"):
        return os.path.abspath(os.path.expanduser(value))
    return value


def _check_llm(value: Any) -> Any:
    """A backend name, or a table like the config file's [llm]: defaults plus per-role tables."""
    if isinstance(value, str):
        return _choice("llm", value, BACKENDS)
    if not isinstance(value, Mapping):
        raise SettingsError(f"setting llm must be one of {', '.join(BACKENDS)} or a per-role table")
    for key, item in value.items():
        where = f"llm.{key}"
        if isinstance(item, Mapping):
            if key not in ROLES:
                raise SettingsError(f"setting {where} is not a role: use one of {', '.join(ROLES)}")
            for field, scalar in item.items():
                _check_llm_scalar(f"{where}.{field}", field, scalar)
        else:
            _check_llm_scalar(where, key, item)
    return {k: dict(v) if isinstance(v, Mapping) else v for k, v in value.items()}


def _check_llm_scalar(where: str, field: str, value: Any) -> None:
    if field in ("api_key", "api_keys", "key"):
        raise SettingsError(f"setting {where}: keys go in the job's env, never in settings")
    if not (value is None or isinstance(value, str | int | float | bool)):
        raise SettingsError(f"setting {where} must be a string, number or boolean")


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise SettingsError(f"setting {name} must be one of {', '.join(choices)} ({value!r})")
    return value


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
