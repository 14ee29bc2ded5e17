"""Checks on a reply that arrived but cannot be used, shared by both backends.

The SDKs hand back whatever the server sent when it is not the API's JSON: a proxy's HTML
page becomes a `str`, an unrelated JSON object becomes a model whose fields are all None.
Both would otherwise fail later with an AttributeError deep in a role, so they become a
`Failure` here, with a message that says what was wrong and what to check.
"""

from __future__ import annotations

from agents.llm.retry import Failure, ReplyError, looks_like_html

_CUT = {"max_tokens", "length"}


def unusable_reply(response: object, expected: str) -> ReplyError:
    """The error for a 200 reply that is not `expected` (not retried: a misrouted URL or a
    proxy answers the same way every time)."""
    if looks_like_html(response):
        detail = "the reply was an HTML page instead of the API's JSON"
        return ReplyError(Failure(200, detail, retryable=False, kind="html"))
    if isinstance(response, str):
        detail = "the reply was plain text instead of the API's JSON"
    else:
        detail = f"the reply was JSON but not {expected}"
    return ReplyError(Failure(200, detail, retryable=False, kind="shape"))


def empty_reply_message(label: str, stop_reason: str, output_tokens: int, limit_name: str) -> str:
    """One line for a completion with no text, saying what to change."""
    stop = stop_reason or "none given"
    spent = f"{output_tokens} output tokens" if output_tokens else "no output tokens"
    if stop_reason in _CUT:
        todo = (
            f"the output limit was used up before any text: raise {limit_name} for this role "
            "in the [llm] config, or use a model that answers without long reasoning"
        )
    else:
        todo = "check the model name and that the server serves that model, or try another model"
    return f"{label}: the model returned an empty completion (stop reason {stop}, {spent}): {todo}"


def count(value: object) -> int:
    """A token count from a reply's usage: a non-negative int, else 0 (a server that sends
    none, null or text must not break the accounting)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(0, value)
