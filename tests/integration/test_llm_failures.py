"""Provider failures become one line that says what to do, through the real anthropic and
openai SDKs against a loopback server: invalid JSON, an empty body, an empty completion, a
reply cut off mid-body, a proxy's HTML page (with 200 and with 502), JSON of the wrong shape.
Each is checked in process (the exact LLMError) and through `kernel-agent optimize` as a
subprocess (one line on stderr, no traceback, the failed calls in the cost line). Also: a
base URL with or without /v1 reaches the right path on both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agents.llm.base import EmptyReplyError, LLMError, Message, SystemPrompt
from agents.llm.config import LLMConfig, sdk_base_url
from agents.llm.factory import make_chat_model
from tests.conftest import ROOT
from tests.llm_server import ScriptedLLMServer, ScriptedReply

PROBLEM = ROOT / "bench" / "problems" / "13_gemm_divide_sum_scaling.py"
KEY = "sk-test-0123456789"
MODELS = {"anthropic": "claude-sonnet-4-5", "openai": "gpt-oss-120b"}
FAST = ("--no-profile", "--no-jail", "--no-memory", "--threads", "1", "--timing-budget", "0.3")
SHAPE = ("--beam", "1", "--plans", "2", "--samples", "1", "--iters", "1")


@dataclass(frozen=True)
class Raw:
    """Bytes to answer with, whatever was asked. `declared` larger than the body makes the
    connection close before the body is complete (a cut-off reply)."""

    status: int
    body: bytes
    content_type: str = "application/json"
    declared: int | None = None


class RawServer(ScriptedLLMServer):
    """The scripted server (same routing and request log), answering with raw bytes."""

    def __init__(self, raw: Raw) -> None:
        super().__init__(lambda _request: ScriptedReply())
        base: Any = self._httpd.RequestHandlerClass

        class RawHandler(base):
            def _send(self, status: int, headers: dict, payload: dict) -> None:
                self.send_response(raw.status)
                self.send_header("content-type", raw.content_type)
                self.send_header("content-length", str(raw.declared or len(raw.body)))
                self.end_headers()
                self.wfile.write(raw.body)
                self.close_connection = raw.declared is not None

        self._httpd.RequestHandlerClass = RawHandler


HTML = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>proxy</body></html>"
FAILURES = {
    "invalid JSON": (Raw(200, b'{"id": "msg_1", "content": ['), "not valid JSON"),
    "empty body": (Raw(200, b""), "reply was empty"),
    "HTML with 200": (Raw(200, HTML, "text/html"), "HTML page"),
    "HTML with 502": (Raw(502, HTML, "text/html; charset=utf-8"), "502 with an HTML page"),
    "cut-off body": (Raw(200, b'{"id": "msg_1", "con', declared=4000), "cut off"),
    "wrong shape": (Raw(200, b'{"status": "ok"}'), "JSON but not"),
    "garbled fields": (Raw(200, b'{"choices": [{"message": "hi"}], "content": "hi"}'), "JSON but"),
}
ADVICE = {
    "invalid JSON": "check that the base URL",
    "empty body": "check that the base URL",
    "HTML with 200": "check the base URL",
    "HTML with 502": "check the base URL",
    "cut-off body": "raise timeout_s",
    "wrong shape": "check that the base URL",
    "garbled fields": "check that the base URL",
}


def base_url(api: str, server: ScriptedLLMServer) -> str:
    return server.anthropic_url if api == "anthropic" else server.openai_url


async def call(api: str, url: str, **changes) -> str:
    values = {"model": MODELS[api], "base_url": url, "api_key": KEY, "max_attempts": 1}
    config = LLMConfig(backend=api, **{**values, **changes})
    model = make_chat_model(config)
    try:
        reply = await model.chat(SystemPrompt("You optimise kernels."), [Message("user", "Go.")])
    finally:
        await model.aclose()
    return reply.text


# --- in process: the exact error ------------------------------------------------------------


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("case", list(FAILURES))
async def test_each_failure_is_one_line_naming_the_fault_and_what_to_check(api, case):
    raw, words = FAILURES[case]
    with RawServer(raw) as server:
        url = base_url(api, server)
        with pytest.raises(LLMError) as caught:
            await call(api, url)
    message = str(caught.value)
    assert message.startswith(f"{api}:{MODELS[api]}: ")
    assert words in message and ADVICE[case] in message, message
    assert "\n" not in message and "Traceback" not in message
    assert caught.value.__cause__ is None
    assert len(server.requests) == 1  # reached the server once, no retry with max_attempts=1


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_garbled_token_counts_count_as_zero_instead_of_failing(api):
    both = {  # one body that reads as either API's reply, with token counts as text
        "choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}],
        "content": [{"type": "text", "text": "ok"}],
        "usage": {"prompt_tokens": "many", "input_tokens": "many", "output_tokens": None},
    }
    with RawServer(Raw(200, json.dumps(both).encode())) as server:
        assert await call(api, base_url(api, server)) == "ok"


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_an_empty_completion_says_the_model_returned_nothing_and_keeps_its_usage(api):
    reply = ScriptedReply("", input_tokens=700, output_tokens=0)
    with ScriptedLLMServer.from_queue([reply]) as server, pytest.raises(EmptyReplyError) as caught:
        await call(api, base_url(api, server))
    message = str(caught.value)
    assert "the model returned an empty completion" in message
    assert "check the model name" in message and "\n" not in message
    assert caught.value.usage.input_tokens == 700  # a failed call still reports its tokens


@pytest.mark.parametrize(("api", "limit"), [("anthropic", "max_tokens"), ("openai", "max_tokens")])
async def test_an_empty_completion_cut_at_the_limit_says_to_raise_it(api, limit):
    stop = "max_tokens" if api == "anthropic" else "length"
    reply = ScriptedReply("  \n", output_tokens=2048, stop_reason=stop)
    server = ScriptedLLMServer.from_queue([reply])
    with server, pytest.raises(EmptyReplyError, match=f"raise {limit} for this role"):
        await call(api, base_url(api, server))


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize(
    ("status", "advice"),
    [
        (429, "rate limited: try again later or lower max_concurrency"),
        (503, "kept failing: try again later"),
        (400, "check the model name and max_tokens"),
    ],
)
async def test_status_codes_end_in_what_to_do(api, status, advice):
    reply = ScriptedReply(status=status, retry_after=0)
    server = ScriptedLLMServer(lambda _request: reply)
    with server, pytest.raises(LLMError) as caught:
        await call(api, base_url(api, server), max_attempts=2)
    message = str(caught.value)
    assert f": {status} " in message and advice in message, message
    assert "\n" not in message
    assert len(server.requests) == (1 if status == 400 else 2)  # 400 is not retried


# --- base URLs: /v1 or not ------------------------------------------------------------------


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
async def test_a_base_url_with_or_without_v1_reaches_the_api(api, suffix):
    with ScriptedLLMServer.from_queue([ScriptedReply("ok")]) as server:
        url = f"http://127.0.0.1:{server.port}{suffix}"
        assert await call(api, url) == "ok"
    (request,) = server.requests
    expected = "/v1/messages" if api == "anthropic" else "/v1/chat/completions"
    assert request.path == expected


def test_base_url_normalisation_keeps_other_paths():
    assert sdk_base_url("openai", "https://host/api/openai/") == "https://host/api/openai"
    assert sdk_base_url("openai", "http://h/v1/chat/completions") == "http://h/v1"
    assert sdk_base_url("anthropic", "http://h/proxy/v1/messages") == "http://h/proxy"
    assert sdk_base_url("anthropic", None) is None


# --- through the CLI ------------------------------------------------------------------------


def optimize(api: str, url: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    config = tmp_path / "llm.toml"
    config.write_text("[llm]\nmax_attempts = 1\ntimeout_s = 10\n")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env["ANTHROPIC_API_KEY"] = env["OPENAI_API_KEY"] = KEY
    command = [sys.executable, "-m", "agents", "optimize", str(PROBLEM), "--llm", api]
    output = ("--output", str(tmp_path / "fast.py"))  # never next to the problem
    return subprocess.run(
        [*command, "--base-url", url, "--config", str(config), *output, *SHAPE, *FAST, *extra],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env=env,
    )


def assert_one_line(done: subprocess.CompletedProcess, *words: str) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("api", ["anthropic", "openai"])
@pytest.mark.parametrize("case", ["invalid JSON", "HTML with 200", "HTML with 502", "cut-off body"])
def test_the_cli_ends_a_failing_provider_with_one_line_and_counts_the_calls(api, case, tmp_path):
    raw, words = FAILURES[case]
    with RawServer(raw) as server:
        done = optimize(api, base_url(api, server), tmp_path)
        calls = len(server.requests)
    assert done.returncode == 1, done.stderr
    assert_one_line(done, f"{api}:{MODELS[api]}", words, ADVICE[case])
    assert "stopped: the model failed" in done.stdout
    assert "no model calls (offline)" not in done.stdout
    assert f"in {calls} model calls, {calls} failed" in done.stdout, done.stdout


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_the_cli_says_the_model_returned_nothing_and_reports_its_tokens(api, tmp_path):
    reply = ScriptedReply("", input_tokens=500, output_tokens=0)
    with ScriptedLLMServer(lambda _request: reply) as server:
        done = optimize(api, base_url(api, server), tmp_path, "--json")
    assert done.returncode == 1, done.stderr
    assert_one_line(done, "the model returned an empty completion")
    report = json.loads(done.stdout)
    assert "empty completion" in report["stopped_because"]
    assert report["cost"]["calls"] == report["cost"]["failed_calls"] == 2
    assert report["cost"]["roles"]["planner"]["input_tokens"] == 1000
    assert report["tokens"] == 1000


@pytest.mark.parametrize("api", ["anthropic", "openai"])
def test_the_cli_takes_a_base_url_with_v1_for_both_backends(api, tmp_path):
    """The request reaches /v1/messages (not /v1/v1/messages) and /v1/chat/completions."""
    with ScriptedLLMServer(lambda _request: ScriptedReply(status=401)) as server:
        url = f"http://127.0.0.1:{server.port}/v1"
        done = optimize(api, url if api == "anthropic" else url.removesuffix("/v1"), tmp_path)
        paths = {request.path for request in server.requests}
    assert paths == {"/v1/messages" if api == "anthropic" else "/v1/chat/completions"}
    assert_one_line(done, "the API key was refused")
