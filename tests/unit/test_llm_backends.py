"""The LLM backends through the real anthropic and openai SDK clients, against a loopback
server that speaks both APIs: usage, cost, prompt caching, retries, timeouts, concurrency,
missing keys, key hygiene; and the TOML config."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import textwrap
from pathlib import Path

import pytest

from agents.llm.accounting import CostMeter
from agents.llm.anthropic_backend import SDK_TAKES_TEMPERATURE
from agents.llm.base import ChatModel, LLMError, Message, MissingAPIKeyError, SystemPrompt, Usage
from agents.llm.config import LLMConfig, RoleModels, load_settings, parse_settings
from agents.llm.factory import make_chat_model
from agents.llm.pricing import cost_usd, default_prices, find_price, unpriced_note
from agents.llm.retry import RetryPolicy, parse_retry_after
from tests.llm_server import ScriptedLLMServer, ScriptedReply, ScriptedRequest

KEY = "sk-ant-test-0123456789abcdef"
CANARY = "sk-ant-CANARY-do-not-leak-0123456789abcdef"
SYSTEM = SystemPrompt(static="You optimise kernels.", dynamic="Task: matmul 4096.")
HELLO = [Message("user", "Speed this up.")]


class Sleeps:
    """An injected sleep that records the delays and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def anthropic_config(server: ScriptedLLMServer, **changes) -> LLMConfig:
    values = {"model": "claude-sonnet-4-5", "api_key": KEY, "timeout_s": 5.0, "max_attempts": 4}
    return LLMConfig(backend="anthropic", base_url=server.anthropic_url, **{**values, **changes})


def openai_config(server: ScriptedLLMServer, **changes) -> LLMConfig:
    values = {"model": "gpt-oss-120b", "api_key": KEY, "timeout_s": 5.0, "max_attempts": 4}
    return LLMConfig(backend="openai", base_url=server.openai_url, **{**values, **changes})


def config_for(api: str, server: ScriptedLLMServer, **changes) -> LLMConfig:
    make = anthropic_config if api == "anthropic" else openai_config
    return make(server, **changes)


def sent_key(request: ScriptedRequest) -> str | None:
    """The key the SDK sent (x-api-key, or a bearer token as newer anthropic SDKs send it)."""
    if "x-api-key" in request.headers:
        return request.headers["x-api-key"]
    auth = request.headers.get("authorization", "")
    return auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None


async def ask(model: ChatModel, **kwargs):
    try:
        return await model.chat(SYSTEM, HELLO, **kwargs)
    finally:
        await model.aclose()


# --- success, usage, cost, caching ---------------------------------------------------------


async def test_anthropic_success_usage_cost_and_cache_control(sleeps):
    reply = ScriptedReply(
        "fused",
        input_tokens=1000,
        output_tokens=500,
        cache_read_tokens=2000,
        cache_write_tokens=300,
    )
    with ScriptedLLMServer.from_queue([reply]) as server:
        model = make_chat_model(anthropic_config(server), sleep=sleeps)
        assert isinstance(model, ChatModel) and model.label == "anthropic:claude-sonnet-4-5"
        result = await ask(model, max_tokens=321)
    assert result.text == "fused"
    assert result.stop_reason == "end_turn"
    assert result.attempts == 1
    assert result.usage == Usage(1000, 500, 2000, 300)
    assert result.cost_usd == pytest.approx((1000 * 3 + 500 * 15 + 2000 * 0.3 + 300 * 3.75) / 1e6)
    (request,) = server.requests
    assert request.api == "anthropic" and request.model == "claude-sonnet-4-5"
    assert sent_key(request) == KEY
    assert request.body["max_tokens"] == 321
    assert "temperature" not in request.body
    assert request.messages == [("user", "Speed this up.")]
    static, dynamic = request.system_blocks
    assert static == {
        "type": "text",
        "text": SYSTEM.static,
        "cache_control": {"type": "ephemeral"},
    }
    assert dynamic == {"type": "text", "text": SYSTEM.dynamic}
    assert request.system == SYSTEM.text()
    assert sleeps.delays == []


async def test_anthropic_static_only_system_is_one_cached_block():
    with ScriptedLLMServer.from_queue([ScriptedReply("ok")]) as server:
        model = make_chat_model(anthropic_config(server, temperature=0.2))
        await model.chat(SystemPrompt("static only"), HELLO, temperature=1.0)
        await model.aclose()
    (request,) = server.requests
    assert request.system_blocks == [
        {"type": "text", "text": "static only", "cache_control": {"type": "ephemeral"}}
    ]
    if SDK_TAKES_TEMPERATURE:
        assert request.body["temperature"] == 0.2  # the config's value wins over the call's
    else:
        assert "temperature" not in request.body


async def test_openai_success_usage_cost_and_cached_tokens():
    reply = ScriptedReply("done", input_tokens=1000, output_tokens=200, cache_read_tokens=400)
    with ScriptedLLMServer.from_queue([reply]) as server:
        model = make_chat_model(openai_config(server), default_prices())
        result = await ask(model, max_tokens=99, temperature=0.0)
    assert result.text == "done" and result.stop_reason == "stop" and result.attempts == 1
    assert result.usage == Usage(input_tokens=1000, output_tokens=200, cache_read_tokens=400)
    assert result.cost_usd == pytest.approx((1000 * 0.15 + 200 * 0.6 + 400 * 0.15) / 1e6)
    (request,) = server.requests
    assert request.api == "openai" and request.model == "gpt-oss-120b"
    assert sent_key(request) == KEY
    assert request.system_blocks == [{"role": "system", "content": SYSTEM.text()}]
    assert request.messages == [("user", "Speed this up.")]
    assert request.body["max_tokens"] == 99 and request.body["temperature"] == 0.0


async def test_cache_tokens_reach_the_cost_meter():
    replies = [
        ScriptedReply("a", input_tokens=100, output_tokens=10, cache_write_tokens=900),
        ScriptedReply("b", input_tokens=100, output_tokens=10, cache_read_tokens=900),
    ]
    meter = CostMeter()
    with ScriptedLLMServer.from_queue(replies) as server:
        model = make_chat_model(anthropic_config(server))
        for _ in replies:
            meter.add("planner", await model.chat(SYSTEM, HELLO))
        await model.aclose()
    summary = meter.to_json()
    assert summary["cache_read_tokens"] == 900 and summary["cache_write_tokens"] == 900
    assert summary["cache_hit_share"] == pytest.approx(900 / 1100, abs=1e-4)
    expected = (200 * 3 + 20 * 15 + 900 * 0.3 + 900 * 3.75) / 1e6
    assert summary["cost_usd"] == pytest.approx(expected, abs=1e-6)
    assert summary["roles"]["planner"]["calls"] == 2


async def test_unknown_model_costs_nothing_and_says_so():
    with ScriptedLLMServer.from_queue([ScriptedReply("x", input_tokens=10**6)]) as server:
        model = make_chat_model(openai_config(server, model="my-finetune"))
        result = await ask(model)
    assert result.cost_usd == 0.0
    assert model.priced is False
    assert cost_usd("my-finetune", result.usage, default_prices()) is None
    assert unpriced_note("my-finetune").startswith("no price known for my-finetune")


# --- retries -------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_429_with_retry_after_then_success(api, sleeps):
    replies = [ScriptedReply(status=429, retry_after=2), ScriptedReply("ok")]
    with ScriptedLLMServer.from_queue(replies) as server:
        result = await ask(make_chat_model(config_for(api, server), sleep=sleeps))
    assert result.text == "ok" and result.attempts == 2
    assert sleeps.delays == [2.0]
    assert len(server.requests) == 2


async def test_retry_after_ms_and_the_cap(sleeps):
    replies = [
        ScriptedReply(status=429, retry_after_ms=1500),
        ScriptedReply(status=503, retry_after=600),
        ScriptedReply("ok"),
    ]
    with ScriptedLLMServer.from_queue(replies) as server:
        result = await ask(make_chat_model(anthropic_config(server), sleep=sleeps))
    assert result.attempts == 3
    assert sleeps.delays == [1.5, 60.0]


async def test_529_overloaded_then_success_backs_off_with_seeded_jitter(sleeps):
    replies = [ScriptedReply(status=529), ScriptedReply(status=529), ScriptedReply("ok")]
    with ScriptedLLMServer.from_queue(replies) as server:
        model = make_chat_model(anthropic_config(server), sleep=sleeps, rng=random.Random(7))
        result = await ask(model)
    assert result.attempts == 3
    expected = random.Random(7)
    assert sleeps.delays == [expected.uniform(0, 1.0), expected.uniform(0, 2.0)]


async def test_retries_are_counted_by_the_meter(sleeps):
    replies = [ScriptedReply(status=500), ScriptedReply("ok")]
    meter = CostMeter()
    with ScriptedLLMServer.from_queue(replies) as server:
        meter.add("executor", await ask(make_chat_model(openai_config(server), sleep=sleeps)))
    assert meter.to_json()["roles"]["executor"]["retries"] == 1


async def test_529_forever_gives_up_with_one_line(sleeps):
    with ScriptedLLMServer(lambda _r: ScriptedReply(status=529)) as server:
        model = make_chat_model(anthropic_config(server, max_attempts=4), sleep=sleeps)
        with pytest.raises(LLMError) as caught:
            await ask(model)
    message = str(caught.value)
    assert message == (
        "anthropic:claude-sonnet-4-5: gave up after 4 attempts: 529 Overloaded: "
        f"the server ({server.anthropic_url}) kept failing: try again later"
    )
    assert caught.value.__cause__ is None and caught.value.__suppress_context__
    assert len(server.requests) == 4 and len(sleeps.delays) == 3


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_timeout_then_success(api, sleeps):
    replies = [ScriptedReply(delay_s=1.0), ScriptedReply("late but fine")]
    with ScriptedLLMServer.from_queue(replies) as server:
        model = make_chat_model(config_for(api, server, timeout_s=0.2), sleep=sleeps)
        result = await ask(model)
    assert result.text == "late but fine" and result.attempts == 2
    assert len(sleeps.delays) == 1


async def test_timeout_forever_names_the_timeout(sleeps):
    with ScriptedLLMServer(lambda _r: ScriptedReply(delay_s=1.0)) as server:
        config = openai_config(server, timeout_s=0.15, max_attempts=2)
        with pytest.raises(
            LLMError, match=r"gave up after 2 attempts: timed out after 0\.15 s: raise timeout_s"
        ):
            await ask(make_chat_model(config, sleep=sleeps))


async def test_connection_refused_is_retried_then_explained(sleeps):
    with ScriptedLLMServer(lambda _r: ScriptedReply()) as server:
        url = server.anthropic_url
    config = LLMConfig(backend="anthropic", base_url=url, api_key=KEY, max_attempts=2)
    with pytest.raises(LLMError, match=r"gave up after 2 attempts: connection failed"):
        await ask(make_chat_model(config, sleep=sleeps))
    assert len(sleeps.delays) == 1


async def test_a_raising_handler_is_a_500_and_is_retried(sleeps):
    calls = []

    def handler(request: ScriptedRequest) -> ScriptedReply:
        calls.append(request)
        if len(calls) == 1:
            raise RuntimeError("scripted failure")
        return ScriptedReply("recovered")

    with ScriptedLLMServer(handler) as server:
        result = await ask(make_chat_model(anthropic_config(server), sleep=sleeps))
    assert result.text == "recovered" and result.attempts == 2
    assert "scripted failure" in server.errors[0]


# --- errors that retrying cannot fix -------------------------------------------------------


@pytest.mark.parametrize(
    ("api", "env"), [("anthropic", "ANTHROPIC_API_KEY"), ("openai", "OPENAI_API_KEY")]
)
async def test_401_fails_at_once_with_a_clear_line(api, env, sleeps):
    server = ScriptedLLMServer(lambda _r: ScriptedReply(status=401))
    with server, pytest.raises(LLMError) as caught:
        await ask(make_chat_model(config_for(api, server), sleep=sleeps))
    message = str(caught.value)
    assert message.startswith(f"{api}:")
    assert f"the API key was refused: check {env}" in message
    assert "\n" not in message
    assert len(server.requests) == 1 and sleeps.delays == []


@pytest.mark.parametrize(
    ("status", "words"),
    [(400, "the request was rejected"), (403, "may not use this model"), (404, "model name")],
)
async def test_other_client_errors_fail_at_once(status, words, sleeps):
    server = ScriptedLLMServer(lambda _r: ScriptedReply(status=status, text="no such thing"))
    with server, pytest.raises(LLMError, match=words) as caught:
        await ask(make_chat_model(anthropic_config(server), sleep=sleeps))
    assert "no such thing" in str(caught.value)
    assert len(server.requests) == 1 and sleeps.delays == []


# --- concurrency ---------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_concurrency_limit_is_respected(api):
    with ScriptedLLMServer(lambda _r: ScriptedReply("ok", delay_s=0.1)) as server:
        model = make_chat_model(config_for(api, server, max_concurrency=2))
        replies = await asyncio.gather(*(model.chat(SYSTEM, HELLO) for _ in range(6)))
        await model.aclose()
    assert [r.text for r in replies] == ["ok"] * 6
    assert len(server.requests) == 6
    assert server.max_in_flight == 2


# --- keys ----------------------------------------------------------------------------------


def test_missing_anthropic_key_is_one_sentence_naming_the_variable(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError) as caught:
        make_chat_model(LLMConfig(backend="anthropic"))
    message = str(caught.value)
    assert "ANTHROPIC_API_KEY" in message and "--llm offline" in message
    assert message.endswith(".") and message.count(". ") == 0 and "\n" not in message


def test_missing_key_names_a_custom_variable(monkeypatch):
    monkeypatch.delenv("MY_CLAUDE_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="set MY_CLAUDE_KEY in the environment"):
        make_chat_model(LLMConfig(backend="anthropic", api_key_env="MY_CLAUDE_KEY"))


def test_openai_needs_a_key_only_without_base_url(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="set OPENAI_API_KEY"):
        make_chat_model(LLMConfig(backend="openai"))


async def test_local_openai_server_gets_a_placeholder_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with ScriptedLLMServer.from_queue([ScriptedReply("hi")]) as server:
        config = LLMConfig(backend="openai", base_url=server.openai_url, model="qwen3-coder")
        result = await ask(make_chat_model(config))
    assert result.text == "hi"
    assert sent_key(server.requests[0]) == "not-needed"


async def test_key_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with ScriptedLLMServer.from_queue([ScriptedReply("hi")]) as server:
        config = LLMConfig(backend="anthropic", base_url=server.anthropic_url)
        await ask(make_chat_model(config))
    assert sent_key(server.requests[0]) == KEY


def test_offline_is_not_an_llm_backend():
    with pytest.raises(ValueError, match="offline is not an LLM backend"):
        make_chat_model(LLMConfig(backend="offline"))


@pytest.mark.parametrize("api", ["anthropic", "openai"])
async def test_the_key_never_leaks(api, caplog, sleeps):
    caplog.set_level(logging.DEBUG)
    echo = f"invalid key {CANARY} (Authorization: Bearer {CANARY})"
    scripts = {
        "401": [ScriptedReply(status=401, text=echo)],
        "400": [ScriptedReply(status=400, text=echo)],
        "529": [ScriptedReply(status=529, text=echo)] * 2,
        "timeout": [ScriptedReply(delay_s=1.0)] * 2,
    }
    messages, meter = [], CostMeter()
    for name, replies in scripts.items():
        with ScriptedLLMServer.from_queue(replies) as server:
            config = config_for(api, server, api_key=CANARY, max_attempts=2, timeout_s=0.2)
            assert CANARY not in repr(config)
            with pytest.raises(LLMError) as caught:
                await ask(make_chat_model(config, sleep=sleeps))
            messages.append(str(caught.value))
            assert CANARY in server.all_text(), name  # it was sent, so the check means something
    with ScriptedLLMServer.from_queue([ScriptedReply("ok")]) as server:
        model = make_chat_model(config_for(api, server, api_key=CANARY))
        meter.add("planner", await ask(model))
        assert CANARY not in repr(model)
    assert len(messages) == 4 and all("\n" not in m for m in messages)
    assert not [m for m in messages if CANARY in m or "CANARY" in m]
    assert CANARY not in caplog.text
    assert "retrying" in caplog.text  # the retry warnings were captured and are clean
    assert CANARY not in json.dumps(meter.to_json())


# --- retry helpers -------------------------------------------------------------------------


def test_parse_retry_after():
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, now=1445412480) == 10
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after(None) is None


def test_backoff_is_full_jitter_and_capped():
    policy = RetryPolicy(base_delay_s=1.0, max_delay_s=4.0)
    rng = random.Random(0)
    delays = [policy.backoff_s(n, rng) for n in range(1, 9) for _ in range(50)]
    assert all(0 <= d <= 4.0 for d in delays)
    assert max(delays) > 3.0
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


# --- config --------------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kernel-agent.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_toml_per_role_overrides_and_prices(tmp_path):
    path = write(
        tmp_path,
        """
        [search]
        budget = 3

        [llm]
        model = "claude-opus-4-5"
        max_concurrency = 8
        timeout_s = 30

        [llm.summarizer]
        model = "claude-haiku-4-5"
        max_tokens = 512

        [llm.executor]
        backend = "openai"
        base_url = "http://localhost:8000/v1"
        model = "openai/gpt-oss-120b"

        [prices."openai/gpt-oss-120b"]
        input = 0
        output = 0

        [prices."my-model"]
        input = 1.5
        output = 6
        cache_read = 0.15
        """,
    )
    settings = load_settings(path)
    models = settings.models
    assert models.default.label == "anthropic:claude-opus-4-5"
    planner = models.for_role("planner")
    assert planner.model == "claude-opus-4-5" and planner.max_concurrency == 8
    assert planner.timeout_s == 30 and planner.api_key_env == "ANTHROPIC_API_KEY"
    summarizer = models.for_role("summarizer")
    assert summarizer.model == "claude-haiku-4-5" and summarizer.max_tokens == 512
    executor = models.for_role("executor")
    assert executor.backend == "openai" and executor.api_key_env == "OPENAI_API_KEY"
    assert executor.base_url == "http://localhost:8000/v1" and executor.max_concurrency == 8
    assert set(models.roles) == {"planner", "executor", "repairer", "summarizer"}
    assert find_price("gpt-oss-120b", settings.prices).output == 0
    mine = settings.prices["my-model"]
    assert (mine.input, mine.output, mine.cache_read, mine.cache_write) == (1.5, 6, 0.15, 1.5)
    assert settings.prices["claude-sonnet-4-5"].input == 3  # defaults kept
    offline = models.with_changes(backend="offline")
    assert {c.label for c in offline.roles.values()} == {"offline:offline"}


def test_no_file_gives_defaults():
    settings = load_settings(None)
    assert settings.models.for_role("repairer") == LLMConfig()
    assert LLMConfig().max_concurrency == 4 and LLMConfig().timeout_s == 120
    assert LLMConfig().max_attempts == 5


@pytest.mark.parametrize(
    ("toml", "names"),
    [
        ("[llm]\nbackend = 'gemini'", "llm.backend must be one of anthropic, openai, offline"),
        ("[llm.planner]\nmax_concurrency = 0", "llm.planner.max_concurrency"),
        ("[llm]\ntimeout_s = -1", "llm.timeout_s must be a number of seconds above 0"),
        ("[llm]\nmax_attempts = 'five'", "llm.max_attempts must be a whole number"),
        ("[llm]\ntemperature = 7", "llm.temperature must be a number from 0 to 2"),
        ("[llm]\nbase_url = 'localhost:8000'", "llm.base_url must start with http://"),
        ("[llm]\nmodle = 'x'", "llm.modle is not a setting"),
        ("[llm.planer]\nmodel = 'x'", "llm.planer is not a role"),
        ("[llm.executor]\napi_key = 'sk-secret'", "llm.executor.api_key must not be in a file"),
        ("[prices.m]\ninput = 1", 'prices."m".output is missing'),
        ("[prices.m]\ninput = -1\noutput = 1", 'prices."m".input must not be negative'),
        ("[prices.m]\ninput = 1\noutput = 2\ncached = 1", 'prices."m".cached is not a price'),
        ("[llm\nmodel = 'x'", "not valid TOML"),
    ],
)
def test_bad_values_name_the_key(tmp_path, toml, names):
    path = write(tmp_path, toml)
    with pytest.raises(ValueError) as caught:
        load_settings(path)
    message = str(caught.value)
    assert names in message and str(path) in message
    assert "\n" not in message and "sk-secret" not in message


def test_config_repr_hides_the_key():
    config = LLMConfig(api_key=CANARY)
    assert CANARY not in repr(config) and "api_key=" not in repr(config)
    with pytest.raises(ValueError) as caught:
        LLMConfig(api_key=123)  # type: ignore[arg-type]
    assert "LLMConfig.api_key" in str(caught.value) and "123" not in str(caught.value)


def test_role_overrides_in_code():
    default = LLMConfig(model="claude-sonnet-4-5", api_key="k-in-memory")
    models = RoleModels.build(
        default, {"repairer": {"backend": "openai", "base_url": "http://x/v1"}}
    )
    repairer = models.for_role("repairer")
    assert repairer.model == "gpt-oss-120b" and repairer.api_key is None  # not inherited
    assert models.for_role("planner").api_key == "k-in-memory"
    assert parse_settings({}).models.default == LLMConfig()


def test_dated_and_prefixed_model_names_find_their_price():
    prices = default_prices()
    assert find_price("claude-sonnet-4-5-20250929", prices) == prices["claude-sonnet-4-5"]
    assert find_price("claude-sonnet-4-20250514", prices) == prices["claude-sonnet-4"]
    assert find_price("claude-opus-4-5", prices).input == 5.0
    assert find_price("Qwen/Qwen3-Coder-480B-A35B-Instruct", prices) is not None
    assert find_price("gpt-oss:120b", prices) == prices["gpt-oss-120b"]
    assert find_price("gpt-4o", prices) is None
    for price in prices.values():
        assert price.cache_read <= price.input <= price.cache_write
