"""Our own retry loop, so both SDKs behave alike and every retry is counted and explained.

Transient failures (429, 5xx, 529 overloaded, timeouts, dropped connections) are retried
with exponential backoff and full jitter, or after the server's `retry-after`. Anything
else fails at once, as do replies that are not the API's JSON (invalid JSON, an HTML page from
a proxy, JSON of the wrong shape). Either way the error is one line built from the status
code and a short body text, scrubbed of credentials, ending in what the user can do: SDK
exceptions carry request details, so they are never shown or chained.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
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
    """One failed attempt, as the backend understood it. `detail` is short and one line;
    `kind` picks the advice the final message gives (see `advice`)."""

    status: int | None  # HTTP status; None for timeouts and connection errors
    detail: str
    retry_after_s: float | None = None
    retryable: bool = True
    kind: str = "status"  # status | timeout | connection | cut | json | html | shape | sdk


class ReplyError(Exception):
    """Raised inside an attempt when the HTTP call succeeded but its reply is unusable (an
    HTML page, plain text, JSON of the wrong shape); carries the Failure to report."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.detail)
        self.failure = failure


def failure_from_status(status: int, headers: Mapping[str, str] | None, body: object) -> Failure:
    """A Failure from an HTTP error response (either provider's error JSON shape, or the
    HTML page a proxy sends instead)."""
    retryable = status in RETRYABLE_STATUS
    retry_after = parse_retry_after(headers) if retryable else None
    content_type = str(headers.get("content-type", "")) if headers else ""
    if looks_like_html(body) or "text/html" in content_type.lower():
        detail = f"{status} with an HTML page instead of the API's JSON"
        return Failure(status, detail, retry_after, retryable, kind="html")
    reason = _body_reason(body)
    detail = f"{status} {reason}" if reason else str(status)
    return Failure(status, detail, retry_after, retryable)


def looks_like_html(body: object) -> bool:
    """True for a web page (a proxy's error or login page), not an API's JSON."""
    if not isinstance(body, str):
        return False
    head = body.lstrip()[:200].lower()
    return head.startswith(("<!doctype html", "<html", "<head", "<body")) or (
        head.startswith("<") and "<html" in body[:2000].lower()
    )


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
    if isinstance(error, ReplyError):
        return error.failure
    if isinstance(error, json.JSONDecodeError):  # the SDK parses the body with json.loads
        detail = f"the reply was not valid JSON ({error.msg} at line {error.lineno})"
        if not error.doc.strip():
            detail = "the reply was empty, not the API's JSON"
        return Failure(200, detail, retryable=False, kind="json")
    if isinstance(error, status_error):
        response = getattr(error, "response", None)
        headers = getattr(response, "headers", None)
        status = int(getattr(error, "status_code", 0))
        return failure_from_status(status, headers, getattr(error, "body", None))
    if isinstance(error, timeout_error):
        return Failure(None, f"timed out after {timeout_s:g} s", kind="timeout")
    if isinstance(error, connection_error):
        cause = error.__cause__ or error.__context__
        reason = type(cause).__name__ if cause else "no connection"
        if reason == "RemoteProtocolError":  # the body ended early: a cut-off reply
            return Failure(None, "the reply was cut off before it was complete", kind="cut")
        return Failure(None, f"connection failed ({reason})", kind="connection")
    if isinstance(error, sdk_error):
        detail = f"unexpected {type(error).__name__} from the SDK"
        return Failure(None, detail, retryable=False, kind="sdk")
    return None


def advice(failure: Failure, where: str = "") -> str:
    """What the user can do about a failure, as the tail of its one line."""
    url = f" ({where})" if where else ""
    status = failure.status or 0
    if failure.kind == "html":
        return f"check the base URL{url} and that the model server behind any proxy is running"
    if failure.kind in ("json", "shape"):
        return f"check that the base URL{url} is the API's address and no proxy rewrites replies"
    if failure.kind == "cut":
        return f"check the server and any proxy at the base URL{url}, or raise timeout_s"
    if failure.kind == "timeout":
        return f"raise timeout_s in the [llm] config or check the server{url}"
    if failure.kind == "connection":
        return f"check that the server{url} is running and reachable"
    if status == 429:
        return "rate limited: try again later or lower max_concurrency in the [llm] config"
    if status >= 500:
        return f"the server{url} kept failing: try again later"
    if failure.kind == "sdk":
        return f"check the base URL{url} and the installed SDK version"
    return f"check the base URL{url} and the model name"


def one_line(text: str, limit: int = _DETAIL_CHARS) -> str:
    """Scrubbed, whitespace collapsed, at most `limit` characters: safe to show and log."""
    flat = " ".join(scrub(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def fatal_message(label: str, failure: Failure, key_env: str = "", where: str = "") -> str:
    """The one line for a failure that retrying cannot fix."""
    check = f"check {key_env}" if key_env else "check the API key"
    status, detail = failure.status, one_line(failure.detail)
    if failure.kind != "status":
        text = f"{detail}: {advice(failure, where)}"
    elif status == 401:
        text = f"the API key was refused: {check} ({detail})"
    elif status == 403:
        text = f"the API key may not use this model or endpoint: {check} ({detail})"
    elif status == 404:
        text = f"not found: check the model name and base_url ({detail})"
    elif status == 400:
        text = f"the request was rejected: {detail}: check the model name and max_tokens"
    elif status == 413:
        text = f"the request was too large: {detail}: use a model with a longer context"
    else:
        text = f"failed: {detail}: {advice(failure, where)}"
    return one_line(f"{label}: {text}", limit=500)


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    classify: Callable[[BaseException], Failure | None],
    *,
    label: str,
    policy: RetryPolicy,
    key_env: str = "",
    where: str = "",
    sleep: Sleep | None = None,
    rng: random.Random | None = None,
) -> tuple[T, int]:
    """Run `attempt` until it succeeds; return its result and the attempts it took.

    `classify` maps an exception to a Failure, or None for one that is not the provider's
    (a bug: it propagates unchanged). Raises LLMError with a one-line message that says
    what to do otherwise; `where` (the base URL) is named in that advice.
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
            message = fatal_message(label, failure, key_env, where)
            raise LLMError(message, attempts=number) from None
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
    text = f"{label}: gave up after {policy.max_attempts} {noun}: {failure.detail}"
    message = one_line(f"{text}: {advice(failure, where)}", 500)
    raise LLMError(message, attempts=policy.max_attempts) from None
