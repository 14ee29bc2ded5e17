"""Our own retry loop, so both SDKs behave alike and every retry is counted and explained.

Transient failures (429, 5xx, 529 overloaded, timeouts, dropped connections) are retried
with exponential backoff and full jitter, or after the server's `retry-after`. Anything
else fails at once. Either way the error is one line built from the status code and a short
body text, scrubbed of credentials: SDK exceptions carry request details, so they are
never shown or chained.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from agents.llm.base import LLMError
from memory.store import scrub

log = logging.getLogger("kernel_agent.llm")

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504, 529})
_DETAIL_CHARS = 200


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5
    base_delay_s: float = 1.0  # the first backoff is uniform in [0, base_delay_s]
    max_delay_s: float = 30.0  # cap on one backoff
    retry_after_cap_s: float = 60.0  # cap on a server-requested wait

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")

    def backoff_s(self, failed_attempts: int, rng: random.Random) -> float:
        """Full jitter: uniform in [0, min(cap, base * 2^(n-1))]."""
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (failed_attempts - 1))
        return rng.uniform(0.0, ceiling)


@dataclass(frozen=True)
class Failure:
    """One failed attempt, as the backend understood it. `detail` is short and one line."""

    status: int | None  # HTTP status; None for timeouts and connection errors
    detail: str
    retry_after_s: float | None = None
    retryable: bool = True


def failure_from_status(status: int, headers: Mapping[str, str] | None, body: object) -> Failure:
    """A Failure from an HTTP error response (either provider's error JSON shape)."""
    reason = _body_reason(body)
    detail = f"{status} {reason}" if reason else str(status)
    retryable = status in RETRYABLE_STATUS
    retry_after = parse_retry_after(headers) if retryable else None
    return Failure(status, detail, retry_after, retryable)


def _body_reason(body: object) -> str:
    """`error.message` (else `error.type`) from Anthropic's or OpenAI's error body."""
    error: Any = body
    if isinstance(error, Mapping) and isinstance(error.get("error"), Mapping):
        error = error["error"]
    if isinstance(error, Mapping):
        for name in ("message", "type", "code"):
            if isinstance(error.get(name), str) and error[name].strip():
                return error[name]
        return ""
    return error if isinstance(error, str) else ""


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, else `retry-after` (seconds or
    an HTTP date); None when absent or unreadable."""
    if not headers:
        return None
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def sdk_failure(
    error: BaseException,
    *,
    status_error: type[Exception],
    timeout_error: type[Exception],
    connection_error: type[Exception],
    sdk_error: type[Exception],
    timeout_s: float,
) -> Failure | None:
    """Classify an exception of either SDK (they share one shape); None if it is not one."""
    if isinstance(error, status_error):
        response = getattr(error, "response", None)
        headers = getattr(response, "headers", None)
        status = int(getattr(error, "status_code", 0))
        return failure_from_status(status, headers, getattr(error, "body", None))
    if isinstance(error, timeout_error):
        return Failure(None, f"timed out after {timeout_s:g} s")
    if isinstance(error, connection_error):
        cause = error.__cause__ or error.__context__
        reason = type(cause).__name__ if cause else "no connection"
        return Failure(None, f"connection failed ({reason})")
    if isinstance(error, sdk_error):
        return Failure(None, f"unexpected {type(error).__name__} from the SDK", retryable=False)
    return None


def one_line(text: str, limit: int = _DETAIL_CHARS) -> str:
    """Scrubbed, whitespace collapsed, at most `limit` characters: safe to show and log."""
    flat = " ".join(scrub(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def fatal_message(label: str, failure: Failure, key_env: str = "") -> str:
    """The one line for a failure that retrying cannot fix."""
    check = f"check {key_env}" if key_env else "check the API key"
    status, detail = failure.status, one_line(failure.detail)
    if status == 401:
        text = f"the API key was refused: {check} ({detail})"
    elif status == 403:
        text = f"the API key may not use this model or endpoint: {check} ({detail})"
    elif status == 404:
        text = f"not found: check the model name and base_url ({detail})"
    elif status == 400:
        text = f"the request was rejected: {detail}"
    else:
        text = f"failed: {detail}"
    return one_line(f"{label}: {text}", limit=400)


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    classify: Callable[[BaseException], Failure | None],
    *,
    label: str,
    policy: RetryPolicy,
    key_env: str = "",
    sleep: Sleep | None = None,
    rng: random.Random | None = None,
) -> tuple[T, int]:
    """Run `attempt` until it succeeds; return its result and the attempts it took.

    `classify` maps an exception to a Failure, or None for one that is not the provider's
    (a bug: it propagates unchanged). Raises LLMError with a one-line message otherwise.
    """
    sleep = sleep or asyncio.sleep
    rng = rng or random.Random()
    for number in range(1, policy.max_attempts + 1):
        try:
            return await attempt(), number
        except Exception as error:
            failure = classify(error)
            if failure is None:
                raise
        if not failure.retryable:
            raise LLMError(fatal_message(label, failure, key_env)) from None
        if number == policy.max_attempts:
            break
        if failure.retry_after_s is not None:
            delay = min(failure.retry_after_s, policy.retry_after_cap_s)
        else:
            delay = policy.backoff_s(number, rng)
        log.warning(
            "%s: attempt %d of %d failed (%s); retrying in %.1f s",
            label,
            number,
            policy.max_attempts,
            one_line(failure.detail),
            delay,
        )
        await sleep(delay)
    noun = "attempt" if policy.max_attempts == 1 else "attempts"
    raise LLMError(
        one_line(f"{label}: gave up after {policy.max_attempts} {noun}: {failure.detail}", 400)
    ) from None
