"""A scripted HTTP server that speaks the Anthropic Messages and OpenAI chat.completions APIs.

Tests drive the real SDK clients against it over loopback, so request encoding, response
parsing, error mapping, headers and timeouts are the SDKs' own. A handler decides each
reply; the server records every request (to assert on, and to grep for leaked keys) and
the most requests it ever had in flight at once.

    with ScriptedLLMServer.from_queue([ScriptedReply(status=529), ScriptedReply("hi")]) as srv:
        config = LLMConfig(backend="anthropic", base_url=srv.anthropic_url, api_key="sk-test")
"""

from __future__ import annotations

import collections
import itertools
import json
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

Api = Literal["anthropic", "openai"]

_ANTHROPIC_ERRORS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_ERRORS = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_denied",
    404: "invalid_request_error",
    429: "rate_limit_exceeded",
}
_MESSAGES = {
    400: "Bad request",
    401: "invalid x-api-key",
    403: "Permission denied",
    404: "Not found",
    429: "Rate limited",
    500: "Internal server error",
    502: "Bad gateway",
    503: "Service unavailable",
    504: "Gateway timeout",
    529: "Overloaded",
}


@dataclass(frozen=True)
class ScriptedRequest:
    api: Api
    model: str
    system: str  # all system text, blocks joined with "\n\n"
    system_blocks: list[Any]  # raw: Anthropic's `system` blocks, or OpenAI's system messages
    messages: list[tuple[str, str]]  # (role, text), system messages excluded
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any]
    path: str


@dataclass(frozen=True)
class ScriptedReply:
    """What to answer. Token counts follow our `Usage`: `input_tokens` excludes cached ones
    (for OpenAI the server reports prompt_tokens = input + cache_read + cache_write)."""

    text: str = ""  # the reply text; for errors, the error message (default by status)
    status: int = 200
    input_tokens: int = 10
    output_tokens: int = 5
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    delay_s: float = 0.0  # sleep before answering (longer than the client timeout → timeout)
    retry_after: float | None = None  # `retry-after` header, seconds
    retry_after_ms: float | None = None  # `retry-after-ms` header
    error_type: str | None = None  # provider error type; default by status
    stop_reason: str = "end_turn"
    headers: dict[str, str] = field(default_factory=dict)


Handler = Callable[[ScriptedRequest], ScriptedReply]


class ScriptedLLMServer:
    """ThreadingHTTPServer on 127.0.0.1 (free port) in a daemon thread; a context manager."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[ScriptedRequest] = []
        self.errors: list[str] = []  # tracebacks of handlers that raised (answered with 500)
        self.max_in_flight = 0
        self._in_flight = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_request_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @classmethod
    def from_queue(cls, replies: Iterable[ScriptedReply]) -> ScriptedLLMServer:
        """Answer the requests with `replies` in order; one more request is a handler error."""
        queue = collections.deque(replies)
        lock = threading.Lock()

        def handler(_request: ScriptedRequest) -> ScriptedReply:
            with lock:
                if not queue:
                    raise AssertionError("ScriptedLLMServer: no scripted reply left")
                return queue.popleft()

        return cls(handler)

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def anthropic_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"  # the SDK posts to /v1/messages

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"  # the SDK posts to /chat/completions

    def start(self) -> ScriptedLLMServer:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self) -> ScriptedLLMServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def all_text(self) -> str:
        """Every recorded request (headers and body) as one string, for leak checks."""
        with self._lock:
            return "\n".join(json.dumps([r.headers, r.body]) for r in self.requests)

    # --- called from the request threads ---------------------------------------------------

    def _record(self, request: ScriptedRequest) -> None:
        with self._lock:
            self.requests.append(request)
            self._in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)

    def _done(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _answer(self, request: ScriptedRequest) -> tuple[int, dict[str, str], dict[str, Any]]:
        """(status, headers, JSON body) for one request; a raising handler gives a 500."""
        try:
            reply = self.handler(request)
        except Exception:
            with self._lock:
                self.errors.append(traceback.format_exc())
            reply = ScriptedReply(status=500, text="the scripted handler raised")
        if reply.delay_s:
            time.sleep(reply.delay_s)
        headers = dict(reply.headers)
        if reply.retry_after is not None:
            headers["retry-after"] = f"{reply.retry_after:g}"
        if reply.retry_after_ms is not None:
            headers["retry-after-ms"] = f"{reply.retry_after_ms:g}"
        number = next(self._ids)
        if reply.status != 200:
            return reply.status, headers, _error_body(request.api, reply, number)
        if request.api == "anthropic":
            return 200, headers, _anthropic_body(request, reply, number)
        return 200, headers, _openai_body(request, reply, number)


def _make_request_handler(server: ScriptedLLMServer) -> type[BaseHTTPRequestHandler]:
    class RequestHandler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {}, {"error": {"message": "body is not JSON"}})
                return
            path = self.path.split("?", 1)[0]
            if path.endswith("/v1/messages"):
                api: Api = "anthropic"
            elif path.endswith("/chat/completions"):
                api = "openai"
            else:
                self._send(404, {}, {"error": {"message": f"no such endpoint {path}"}})
                return
            request = _parse(api, path, {k.lower(): v for k, v in self.headers.items()}, body)
            server._record(request)
            try:
                status, headers, payload = server._answer(request)
            finally:
                # Before the reply is written: the client cannot start its next request
                # until it has this one, so the count never over-reports.
                server._done()
            self._send(status, headers, payload)

        def _send(self, status: int, headers: dict[str, str], payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return RequestHandler


def _text_of(content: Any) -> str:
    """A message's text, whether a string or a list of content blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def _parse(api: Api, path: str, headers: dict[str, str], body: dict[str, Any]) -> ScriptedRequest:
    messages = body.get("messages") or []
    if api == "anthropic":
        system = body.get("system") or []
        blocks = [{"type": "text", "text": system}] if isinstance(system, str) else list(system)
        chat = [(m.get("role", ""), _text_of(m.get("content"))) for m in messages]
    else:
        blocks = [m for m in messages if m.get("role") in ("system", "developer")]
        chat = [
            (m.get("role", ""), _text_of(m.get("content")))
            for m in messages
            if m.get("role") not in ("system", "developer")
        ]
    system_text = "\n\n".join(
        _text_of(b.get("content")) if api == "openai" else b.get("text", "") for b in blocks
    )
    return ScriptedRequest(
        api=api,
        model=str(body.get("model", "")),
        system=system_text,
        system_blocks=blocks,
        messages=chat,
        headers=headers,
        body=body,
        path=path,
    )


def _error_body(api: Api, reply: ScriptedReply, number: int) -> dict[str, Any]:
    message = reply.text or _MESSAGES.get(reply.status, f"HTTP {reply.status}")
    if api == "anthropic":
        kind = reply.error_type or _ANTHROPIC_ERRORS.get(reply.status, "api_error")
        return {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": f"req_{number:06d}",
        }
    kind = reply.error_type or _OPENAI_ERRORS.get(reply.status, "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _anthropic_body(request: ScriptedRequest, reply: ScriptedReply, number: int) -> dict[str, Any]:
    return {
        "id": f"msg_{number:06d}",
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": reply.text}],
        "model": request.model,
        "stop_reason": reply.stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": reply.input_tokens,
            "output_tokens": reply.output_tokens,
            "cache_read_input_tokens": reply.cache_read_tokens,
            "cache_creation_input_tokens": reply.cache_write_tokens,
        },
    }


def _openai_body(request: ScriptedRequest, reply: ScriptedReply, number: int) -> dict[str, Any]:
    prompt = reply.input_tokens + reply.cache_read_tokens + reply.cache_write_tokens
    details: dict[str, int] = {"cached_tokens": reply.cache_read_tokens}
    if reply.cache_write_tokens:
        details["cache_write_tokens"] = reply.cache_write_tokens
    finish = "stop" if reply.stop_reason == "end_turn" else reply.stop_reason
    return {
        "id": f"chatcmpl-{number:06d}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply.text},
                "finish_reason": finish,
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": reply.output_tokens,
            "total_tokens": prompt + reply.output_tokens,
            "prompt_tokens_details": details,
        },
    }
