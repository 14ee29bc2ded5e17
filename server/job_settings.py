"""A job's settings, by the request's own field paths (`search.iterations`, `memory.enabled`:
agents/request/table.py), checked and turned into the typed request its worker runs.

The manager does this before a process is started, so a typo or a bad value fails the job at
once with one line naming the setting; the worker then runs an `OptimizeRequest` exactly as
the CLI would, so an editor run and a terminal run search alike.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from agents.request.defaults import EVAL_BACKENDS
from agents.request.requests import OptimizeRequest, ProfileRequest
from agents.request.settings import RequestError
from agents.request.table import BY_PATH, with_values
from agents.request.target import Target

_COUNTS = (
    "search.beam",
    "search.plans",
    "search.samples",
    "search.iterations",
    "search.patience",
    "budget.max_evals",
    "budget.max_tokens",
    "evaluation.threads",
    "evaluation.parallel_evals",
)
_COUNTS_ZERO = ("search.repairs", "seed")
_POSITIVE = ("budget.max_cost", "budget.max_time", "evaluation.timing_budget")
_SECRETS = ("api_key", "api_keys", "key")
PROFILE_FIELDS = {
    "evaluation.device": "device",
    "evaluation.size": "size",
    "evaluation.threads": "threads",
    "evaluation.jail": "jail",
}
"""The settings a profile job takes, and their names in a `ProfileRequest`."""


class SettingsError(ValueError):
    """A bad job setting; one line naming it."""


def check_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with None values dropped; SettingsError for the first unknown path or
    value out of range (types are checked when the request is built)."""
    if not isinstance(settings, Mapping):
        raise SettingsError("settings must be an object of field path → value")
    out: dict[str, Any] = {}
    for path, value in settings.items():
        if str(path).rsplit(".", 1)[-1] in _SECRETS:
            raise SettingsError(f"setting {path}: keys go in the job's env, never in settings")
        if path not in BY_PATH:
            raise SettingsError(f"unknown setting {path!r}: see agents/request/table.py")
        if value is not None:
            out[path] = _check(path, value)
    return out


def _check(path: str, value: Any) -> Any:
    whole = isinstance(value, int) and not isinstance(value, bool)
    if path in _COUNTS and (not whole or value < 1):
        raise SettingsError(f"setting {path} must be a whole number of at least 1 ({value!r})")
    if path in _COUNTS_ZERO and (not whole or value < 0):
        raise SettingsError(f"setting {path} must be a whole number of at least 0 ({value!r})")
    if path in _POSITIVE:
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value <= 0:
            raise SettingsError(f"setting {path} must be a positive number ({value!r})")
    if path == "evaluation.eval_backend" and value not in EVAL_BACKENDS:
        choices = ", ".join(EVAL_BACKENDS)
        raise SettingsError(f"setting {path} must be one of {choices} ({value!r})")
    if path.endswith("base_url") and not str(value).startswith(("http://", "https://")):
        raise SettingsError(f"setting {path} must start with http:// or https:// ({value!r})")
    if path in ("memory.path", "evaluation.ray_address") and not (isinstance(value, str) and value):
        raise SettingsError(f"setting {path} must be a non-empty string")
    return value


def optimize_request(target: Target, settings: Mapping[str, Any]) -> OptimizeRequest:
    """The request a worker runs for `target` under `settings`; SettingsError in one line."""
    values = check_settings(settings)
    try:
        return with_values(OptimizeRequest(target=target), values)
    except RequestError as error:
        raise SettingsError(str(error)) from None


def profile_request(target: Target, settings: Mapping[str, Any]) -> ProfileRequest:
    """The profile of `target`'s problem where a search would evaluate it (device, size,
    threads, jail); the search's other settings do not apply to a profile."""
    values = check_settings(settings)
    try:
        request = with_values(OptimizeRequest(target=target), values)
    except RequestError as error:
        raise SettingsError(str(error)) from None
    evaluation = request.evaluation
    return ProfileRequest(
        problem=target.problem,
        **{name: getattr(evaluation, path.split(".")[1]) for path, name in PROFILE_FIELDS.items()},
    )
