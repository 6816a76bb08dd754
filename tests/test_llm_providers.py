"""Each provider client, through its real SDK, against a loopback server speaking its format."""

from __future__ import annotations

import logging
import re

import pytest
from fake_providers import (
    FakeProvider,
    Reply,
    anthropic_reply,
    disconnect,
    error_reply,
    gemini_reply,
    openai_reply,
    sse_reply,
)

from toy_agent import providers
from toy_agent.llm import (
    ClaudeLlmClient,
    GeminiLlmClient,
    LlmError,
    OpenAICompatibleLlmClient,
    create_llm_client,
)
from toy_agent.messages import FailedAttempt, Message, ToolCall, ToolResult, Usage

KEY = "sk-test-secret-1234"
PROVIDERS = {
    # provider: (client class, reply builder, path suffix of base URL, stop kwarg, cut-off, safety)
    "claude": (ClaudeLlmClient, anthropic_reply, "", "stop_reason", "max_tokens", "refusal"),
    "gemini": (GeminiLlmClient, gemini_reply, "", "finish_reason", "MAX_TOKENS", "SAFETY"),
    "openai": (
        OpenAICompatibleLlmClient,
        openai_reply,
        "/v1",
        "finish_reason",
        "length",
        "content_filter",
    ),
}
PATHS = {
    "claude": r"/v1/messages",
    "gemini": r"/v1\w*/models/test-model:(generateContent|streamGenerateContent\?alt=sse)",
    "openai": r"/v1/chat/completions",
}
READ_FILE = {
    "name": "read_file",
    "description": "Read a file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    },
}
CALLS = (ToolCall("read_file", {"path": "a.py"}, "c1"), ToolCall("list_files", {}, "c2"))
NATIVE_TURNS = [
    Message("user", "fix the bug"),
    Message("assistant", "Looking.", tool_calls=CALLS),
    Message(
        "user",
        "",
        tool_results=(
            ToolResult("c1", "read_file", "print(1)"),
            ToolResult("c2", "list_files", "denied", True),
        ),
    ),
]


@pytest.fixture
def server():
    with FakeProvider() as fake:
        yield fake


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request):
    return request.param


def make_client(provider: str, server: FakeProvider, **kwargs):
    cls, _, suffix, *_ = PROVIDERS[provider]
    client = cls(KEY, "test-model", base_url=server.url + suffix, **kwargs)
    client.retry_base_delay = 0.0  # connection errors carry no Retry-After
    return client


def reply(provider: str, text="", stop: str | None = None, **kwargs) -> Reply:
    _, build, _, stop_kwarg, *_ = PROVIDERS[provider]
    return build(text, **({stop_kwarg: stop} if stop else {}), **kwargs)


def ask(client, text="hi", **kwargs):
    return client.call_llm("You are terse.", [Message("user", text)], **kwargs)


# --- every provider -------------------------------------------------------------------------


@pytest.mark.slow
def test_returns_text_usage_and_stop_reason(provider, server):
    server.enqueue(reply(provider, "Hello there", usage=Usage(12, 3, 0)))
    response = ask(make_client(provider, server, max_tokens=77))
    assert response.text == "Hello there"
    assert response.stop_reason == "end"
    assert response.usage == Usage(12, 3, 0)
    (request,) = server.requests
    assert re.fullmatch(PATHS[provider], request.path)
    assert "77" in str(request.body) and "You are terse." in str(request.body)


@pytest.mark.slow
def test_rate_limit_is_retried_after_the_servers_retry_after(provider, server, caplog):
    server.enqueue(error_reply(429, "slow down", retry_after="0"), reply(provider, "ok"))
    client = make_client(provider, server)
    client.retry_base_delay = 1000.0  # only Retry-After: 0 keeps this test quick
    with caplog.at_level(logging.WARNING, "toy_agent.llm"):
        assert ask(client).text == "ok"
    assert len(server.requests) == 2
    assert "API error 429: slow down; retry 1/4 in 0.0s" in caplog.text


@pytest.mark.slow
def test_gemini_rate_limit_waits_for_the_retry_delay_in_its_body(server, caplog):
    retry_info = {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "0s"}
    error = {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}
    server.enqueue(Reply(429, {"error": {**error, "details": [retry_info]}}), gemini_reply("ok"))
    client = make_client("gemini", server)
    client.retry_base_delay = 1000.0
    with caplog.at_level(logging.WARNING, "toy_agent.llm"):
        assert ask(client).text == "ok"
    assert "retry 1/4 in 0.0s" in caplog.text


def test_openai_exhausted_quota_is_not_retried(server):
    error = {"message": "You exceeded your current quota", "type": "insufficient_quota"}
    server.enqueue(Reply(429, {"error": {**error, "code": "insufficient_quota"}}))
    with pytest.raises(LlmError, match="429: You exceeded .* — check the account's plan"):
        ask(make_client("openai", server))
    assert len(server.requests) == 1


@pytest.mark.slow
@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_retried(provider, server, status):
    server.enqueue(error_reply(status, "oops", retry_after="0"), reply(provider, "ok"))
    assert ask(make_client(provider, server)).text == "ok"
    assert len(server.requests) == 2


def test_anthropic_overloaded_529_is_retried(server):
    server.enqueue(error_reply(529, "Overloaded", retry_after="0"), anthropic_reply("ok"))
    assert ask(make_client("claude", server)).text == "ok"


def test_connection_reset_is_retried(provider, server):
    server.enqueue(disconnect(), reply(provider, "ok"))
    assert ask(make_client(provider, server)).text == "ok"
    assert len(server.requests) == 2


@pytest.mark.slow
def test_timeout_is_retried(provider, server):
    server.enqueue(Reply(delay=1.0), reply(provider, "ok"))
    assert ask(make_client(provider, server, timeout=0.2)).text == "ok"


@pytest.mark.slow
def test_exhausted_retries_name_the_last_status(provider, server):
    server.enqueue(*[error_reply(503, "busy", retry_after="0")] * 3)
    with pytest.raises(LlmError) as caught:
        ask(make_client(provider, server, max_retries=2))
    assert caught.value.status == 503
    assert str(caught.value) == (
        f"{provider} API error 503: busy — try again later, or raise --max-retries "
        "(gave up after 2 retries)"
    )
    assert len(server.requests) == 3


@pytest.mark.slow
def test_unreachable_server_is_an_llm_error(provider, server):
    server.enqueue(*[disconnect()] * 2)
    with pytest.raises(
        LlmError, match="connection to .* failed: .* — check the network and the base URL"
    ) as caught:
        ask(make_client(provider, server, max_retries=1))
    assert caught.value.status is None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("status", "fix"),
    [
        (401, "check {env}"),
        (403, "check that {env} may use test-model"),
        (404, "check the model name \\(test-model\\)"),
    ],
)
def test_permanent_errors_fail_at_once_with_the_fix(provider, server, status, fix):
    env = re.escape(" / ".join(providers.PROVIDERS[provider].key_variables))
    server.enqueue(error_reply(status, f"no luck for {KEY}", retry_after="0"))
    with pytest.raises(LlmError) as caught:
        ask(make_client(provider, server))
    message = str(caught.value)
    assert re.match(
        f"{provider} API error {status}: no luck for \\*\\*\\* — {fix.format(env=env)}", message
    )
    assert KEY not in message
    assert caught.value.status == status
    assert len(server.requests) == 1


@pytest.mark.slow
def test_bad_request_is_not_retried(provider, server):
    server.enqueue(error_reply(400, "prompt is too long"))
    with pytest.raises(LlmError, match="400: prompt is too long$"):
        ask(make_client(provider, server))
    assert len(server.requests) == 1


@pytest.mark.slow
@pytest.mark.parametrize("body", ["<html>gateway</html>", {"unexpected": True}])
def test_malformed_body_is_an_llm_error(provider, server, body):
    server.enqueue(Reply(200, body))  # said to be JSON
    said = "answered with an HTML page" if isinstance(body, str) else "malformed response"
    with pytest.raises(LlmError, match=said):
        ask(make_client(provider, server))
    assert len(server.requests) == 1


@pytest.mark.slow
def test_cut_off_reply_reports_max_tokens_with_the_partial_text(provider, server):
    cut_off = PROVIDERS[provider][4]
    server.enqueue(reply(provider, "def half_a_func", stop=cut_off))
    response = ask(make_client(provider, server))
    assert (response.text, response.stop_reason) == ("def half_a_func", "max_tokens")


@pytest.mark.slow
def test_safety_stop_is_reported(provider, server):
    safety = PROVIDERS[provider][5]
    server.enqueue(reply(provider, "I can", stop=safety))
    response = ask(make_client(provider, server))
    assert (response.text, response.stop_reason) == ("I can", "safety")


@pytest.mark.slow
def test_gemini_blocked_prompt_is_safety_with_no_text(server):
    server.enqueue(gemini_reply(block_reason="PROHIBITED_CONTENT"))
    response = ask(make_client("gemini", server))
    assert (response.text, response.stop_reason) == ("", "safety")


@pytest.mark.slow
def test_streaming_passes_each_delta_and_returns_the_whole_response(provider, server):
    server.enqueue(reply(provider, ["Hel", "lo", " world"], stream=True, usage=Usage(8, 4, 2)))
    deltas: list[str] = []
    response = ask(make_client(provider, server), on_text=deltas.append)
    assert deltas == ["Hel", "lo", " world"]
    assert (response.text, response.stop_reason, response.usage) == (
        "Hello world",
        "end",
        Usage(8 + 2 * (provider == "claude"), 4, 2),
    )
    assert re.fullmatch(PATHS[provider], server.requests[0].path)


@pytest.mark.slow
def test_streaming_is_retried_before_any_text_arrives(provider, server):
    server.enqueue(
        error_reply(429, "later", retry_after="0"), reply(provider, ["a", "b"], stream=True)
    )
    deltas: list[str] = []
    assert ask(make_client(provider, server), on_text=deltas.append).text == "ab"
    assert deltas == ["a", "b"]


def test_a_stream_cut_after_text_is_retried_and_the_failed_attempt_recorded(provider, server):
    whole = reply(provider, ["first words", " and more"], stream=True)
    cut = whole.encoded().index(b"and more")  # hang up after the first delta went out
    server.enqueue(Reply(200, whole.body, whole.headers, cut_after=cut), whole)
    deltas: list[str] = []
    retries: list[FailedAttempt] = []
    response = ask(make_client(provider, server), on_text=deltas.append, on_retry=retries.append)
    assert response.text == "first words and more"
    assert deltas == ["first words", "first words", " and more"]
    assert response.attempts == tuple(retries)
    [failed] = retries  # told before the retry's text, so the view can void the first words
    assert failed.partial_text == "first words"
    assert "connection to" in failed.error and "failed" in failed.error
    assert len(server.requests) == 2


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_timeout_bounds_the_whole_response_of_a_trickling_server(provider, server, stream):
    """200 at once, then one byte every 20 ms: each read comes 25 times quicker than the
    timeout, but the whole body (hundreds of bytes) would take seconds."""
    whole = reply(provider, ["slow words"], stream=stream)
    assert len(whole.encoded()) * 0.02 > 2  # at least four times the timeout
    server.enqueue(Reply(200, whole.body, whole.headers, trickle=0.02))
    with pytest.raises(LlmError, match=r"no complete response within 0.5s"):
        ask(make_client(provider, server, timeout=0.5, max_retries=0),
            on_text=(lambda _: None) if stream else None)  # fmt: skip
    assert len(server.requests) == 1  # it was the reply that took too long, not the request


def test_a_stream_that_ends_early_is_not_a_reply_and_is_retried_once_only(provider, server):
    """The connection closes cleanly after some deltas but before the provider's last event:
    no finish reason, so it is a cut connection, never a complete answer. Cut after text
    twice, the call gives up although --max-retries allows more."""
    whole = reply(provider, ["first words", " and the end"], stream=True)
    body = whole.encoded()
    cut = body[: body.index(b"\n\n", body.index(b"first words")) + 2]  # up to the first delta
    server.enqueue(*[Reply(200, cut, whole.headers)] * 2, reply(provider, "again"))
    with pytest.raises(LlmError, match=r"ended .* \(gave up after 1 retry\)$"):
        ask(make_client(provider, server, max_retries=3), on_text=lambda _: None)
    assert len(server.requests) == 2


def test_a_stream_cut_before_any_text_is_retried(provider, server):
    whole = reply(provider, ["whole answer"], stream=True)
    server.enqueue(Reply(200, b"", whole.headers), whole)  # closed cleanly, nothing sent
    assert ask(make_client(provider, server), on_text=lambda _: None).text == "whole answer"
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "body",
    ["<html><body>Bad gateway, but 200</body></html>", "[" * 5000 + "]" * 5000],
    ids=["html", "deep-json"],
)
def test_a_200_that_is_not_the_apis_json_is_a_provider_error(provider, server, body):
    headers = {"Content-Type": "text/html" if body.startswith("<") else "application/json"}
    server.enqueue(Reply(200, body, headers))
    said = "answered with an HTML page, not the API's JSON" if "<" in body else "malformed"
    with pytest.raises(LlmError, match=said):
        ask(make_client(provider, server))
    assert len(server.requests) == 1
    if "<" in body:  # a streamed request gets the same page, and the same words
        server.enqueue(Reply(200, body, headers))
        with pytest.raises(LlmError, match=said):
            ask(make_client(provider, server), on_text=lambda _: None)


@pytest.mark.parametrize(
    ("provider", "event"),
    [
        (
            "claude",
            (
                "error",
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            ),
        ),
        ("openai", (None, {"error": {"message": "Overloaded", "type": "server_error"}})),
    ],
)
def test_error_event_before_any_text_is_retried(server, provider, event):
    server.enqueue(sse_reply([event]), reply(provider, ["fine"], stream=True))
    assert ask(make_client(provider, server), on_text=lambda _: None).text == "fine"
    assert len(server.requests) == 2


def test_streamed_tool_calls_come_back_in_order(provider, server):
    server.enqueue(reply(provider, "Reading.", tool_calls=CALLS, stream=True))
    response = ask(make_client(provider, server), tools=[READ_FILE], on_text=lambda _: None)
    assert response.tool_calls == CALLS
    assert response.stop_reason == "tool_use"


def test_logs_request_and_response_at_debug_and_one_info_line_without_the_key(
    provider, server, caplog
):
    server.enqueue(reply(provider, "logged", usage=Usage(12, 3, 0)))
    with caplog.at_level(logging.DEBUG, "toy_agent.llm"):
        ask(make_client(provider, server))
    mine = [r for r in caplog.records if r.name == "toy_agent.llm"]
    assert "model=test-model" in mine[0].getMessage() and "messages=1" in mine[0].getMessage()
    assert "logged" in mine[1].getMessage()
    (info,) = [r for r in mine if r.levelno == logging.INFO]
    assert "12 input tokens" in info.getMessage() and "3 output" in info.getMessage()
    assert KEY not in caplog.text


def test_base_url_variable_is_honoured_by_the_factory(provider, server):
    server.enqueue(reply(provider, "via env"))
    client = create_llm_client(provider, model="test-model", environ=server.env(provider))
    assert ask(client).text == "via env"
    assert len(server.requests) == 1


def test_factory_reads_the_process_environment_by_default(server, monkeypatch):
    for name, value in server.env("claude").items():
        monkeypatch.setenv(name, value)
    server.enqueue(anthropic_reply("from os.environ"))
    assert ask(create_llm_client("claude")).text == "from os.environ"


# --- native tool calling, per wire format ---------------------------------------------------


def test_claude_tool_round_trip(server):
    server.enqueue(anthropic_reply("Reading.", tool_calls=CALLS, stop_reason="tool_use"))
    response = make_client("claude", server).call_llm("sys", NATIVE_TURNS, tools=[READ_FILE])
    assert response.tool_calls == CALLS and response.stop_reason == "tool_use"
    body = server.requests[0].body
    assert body["tools"] == [
        {"name": "read_file", "description": "Read a file", "input_schema": READ_FILE["parameters"]}
    ]
    assert [b["type"] for b in body["messages"][1]["content"]] == ["text", "tool_use", "tool_use"]
    results = body["messages"][2]["content"]
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in results] == [
        ("tool_result", "c1", False),
        ("tool_result", "c2", True),
    ]


def test_claude_marks_system_and_history_for_prompt_caching(server):
    server.enqueue(anthropic_reply("ok", usage=Usage(50, 5, 1000)))
    turns = [Message("user", "task"), Message("assistant", "step"), Message("user", "result")]
    response = make_client("claude", server).call_llm("long system prompt", turns)
    body = server.requests[0].body
    assert body["system"] == [
        {"type": "text", "text": "long system prompt", "cache_control": {"type": "ephemeral"}}
    ]
    assert body["messages"][-1]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    breakpoints = str(body).count("'cache_control'")
    assert breakpoints == 2  # the API allows at most 4
    assert response.usage == Usage(1050, 5, 1000)


def test_gemini_tool_round_trip(server):
    server.enqueue(
        gemini_reply(
            "Reading.",
            tool_calls=[ToolCall("read_file", {"path": "a.py"}), ToolCall("list_files", {})],
        )
    )
    response = make_client("gemini", server).call_llm("sys", NATIVE_TURNS, tools=[READ_FILE])
    assert response.tool_calls == (
        ToolCall("read_file", {"path": "a.py"}, "call_0"),
        ToolCall("list_files", {}, "call_1"),
    )
    assert response.stop_reason == "tool_use"
    body = server.requests[0].body
    (declaration,) = body["tools"][0]["functionDeclarations"]
    schema = declaration.get("parametersJsonSchema") or declaration.get("parameters_json_schema")
    assert (declaration["name"], schema) == ("read_file", READ_FILE["parameters"])
    assert body["systemInstruction"]["parts"] == [{"text": "sys"}]
    user, model, results = body["contents"]
    assert model["role"] == "model"
    assert model["parts"][1]["functionCall"] == {
        "id": "c1",
        "name": "read_file",
        "args": {"path": "a.py"},
    }
    assert results["role"] == "user"
    assert [p["functionResponse"]["response"] for p in results["parts"]] == [
        {"output": "print(1)"},
        {"error": "denied"},
    ]


def test_openai_tool_round_trip(server):
    server.enqueue(openai_reply(None, tool_calls=CALLS, finish_reason="tool_calls"))
    response = make_client("openai", server).call_llm("sys", NATIVE_TURNS, tools=[READ_FILE])
    assert response.tool_calls == CALLS and response.text == ""
    body = server.requests[0].body
    assert body["tools"] == [{"type": "function", "function": READ_FILE}]
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "tool", "tool"]
    assert body["messages"][2]["tool_calls"][1]["function"] == {
        "name": "list_files",
        "arguments": "{}",
    }
    assert body["messages"][4] == {"role": "tool", "tool_call_id": "c2", "content": "denied"}


def test_openai_invalid_arguments_reach_the_agent_raw(server):
    server.enqueue(
        openai_reply(
            None, tool_calls=CALLS[:1], raw_arguments=['{"path": "a.py'], finish_reason="tool_calls"
        )
    )
    (call,) = make_client("openai", server).call_llm("sys", NATIVE_TURNS).tool_calls
    assert (call.arguments, call.arguments_error) == ({}, '{"path": "a.py')


def test_openai_local_server_needs_no_key(server, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server.enqueue(openai_reply("local"))
    client = OpenAICompatibleLlmClient(model="qwen2.5-coder", base_url=server.url + "/v1")
    assert ask(client).text == "local"
    assert server.requests[0].header("authorization") == "Bearer not-needed"
    assert server.requests[0].body["max_tokens"] == 8192  # local servers know max_tokens
