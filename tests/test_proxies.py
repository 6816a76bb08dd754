"""Providers behind real proxies: the quirks of LiteLLM and API gateways, through the real SDKs
against loopback servers that answer the way those proxies do (tests/fake_providers.py)."""

from __future__ import annotations

import json
import logging
import re

import pytest
from cli_helpers import quickest_provider_env, toy_agent
from fake_providers import (
    FakeProvider,
    Reply,
    anthropic_reply,
    cut_stream,
    gemini_reply,
    openai_reply,
)
from fakes import xml_action
from test_view import CSI, SPINNER, Terminal, screen_lines

from toy_agent.agent import ReactAgent
from toy_agent.events import TrajectoryRecorder
from toy_agent.llm import (
    ClaudeLlmClient,
    GeminiLlmClient,
    LlmError,
    OpenAICompatibleLlmClient,
    create_llm_client,
    gemini_api_version,
)
from toy_agent.messages import FailedAttempt, Message, ToolCall, Usage
from toy_agent.redaction import Redactor
from toy_agent.variables import load_dotenv_file

pytestmark = pytest.mark.usefixtures("clean_env")  # see conftest

KEY = "sk-test-secret-proxy-1234"
CLIENTS = {
    "claude": ClaudeLlmClient,
    "gemini": GeminiLlmClient,
    "openai": OpenAICompatibleLlmClient,
}
REPLIES = {"claude": anthropic_reply, "gemini": gemini_reply, "openai": openai_reply}
SUFFIX = {"claude": "", "gemini": "", "openai": "/v1"}
CALLS = (ToolCall("read_file", {"path": "a.py"}, "c1"), ToolCall("list_files", {}, "c2"))
PATH_ONLY = {"type": "object", "properties": {"path": {"type": "string"}}}
READ_FILE = {"name": "read_file", "description": "Read a file", "parameters": PATH_ONLY}
# How each provider says "stopped to call tools".
TOOL_STOP = {"claude": {"stop_reason": "tool_use"}, "gemini": {"finish_reason": "STOP"},
             "openai": {"finish_reason": "tool_calls"}}  # fmt: skip
# Where each provider's stream is cut before any content: claude after message_start, openai
# after the chunk that only names the role, gemini (whose first event holds text) at once.
BEFORE_CONTENT = {"claude": b"message_start", "openai": b'"role"', "gemini": None}


@pytest.fixture
def server():
    with FakeProvider() as fake:
        yield fake


@pytest.fixture(params=sorted(CLIENTS))
def provider(request):
    return request.param


def make_client(provider: str, server: FakeProvider, **kwargs):
    client = CLIENTS[provider](KEY, "test-model", base_url=server.url + SUFFIX[provider], **kwargs)
    client.retry_base_delay = 0.0
    return client


def ask(client, **kwargs):
    return client.call_llm("You are terse.", [Message("user", "hi")], **kwargs)


def streamed(provider: str, text: list[str]) -> Reply:
    return REPLIES[provider](text, stream=True)


# --- 9: a streamed request answered with one JSON message ----------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
def test_a_streamed_request_answered_with_one_json_message_is_the_whole_reply(
    provider, server, content_type
):
    """LiteLLM answers `stream: true` for some models with the complete message."""
    whole = REPLIES[provider](
        "Reading both.", tool_calls=CALLS, usage=Usage(40, 9), **TOOL_STOP[provider]
    )
    server.enqueue(Reply(200, whole.body, {"Content-Type": content_type}))
    deltas: list[str] = []
    response = ask(make_client(provider, server), tools=[READ_FILE], on_text=deltas.append)
    assert (response.text, response.stop_reason, response.usage) == (
        "Reading both.",
        "tool_use",
        Usage(40, 9),
    )
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        (c.name, c.arguments) for c in CALLS
    ]
    assert deltas == ["Reading both."]  # the live view shows the text once, whole
    assert len(server.requests) == 1  # not taken for a cut stream and retried
    [request] = server.requests  # a streamed request: "stream" for two, the path for Gemini
    assert request.body.get("stream") is True or "streamGenerateContent" in request.path


@pytest.mark.parametrize("provider", ["claude", "openai"])  # google-genai reads JSON itself
def test_a_json_answer_to_a_stream_that_is_not_a_message_is_a_malformed_response(provider, server):
    server.enqueue(Reply(200, {"unexpected": True}))
    with pytest.raises(LlmError, match="malformed response") as caught:
        ask(make_client(provider, server), on_text=lambda _: None)
    assert "network" not in str(caught.value)
    assert len(server.requests) == 1


# --- 10: Gemini behind a proxy serving /v1beta --------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
def test_gemini_behind_a_custom_base_url_asks_for_v1beta(stream):
    with FakeProvider(serves="/v1beta/") as proxy:
        proxy.enqueue(gemini_reply(["through the proxy"], stream=stream))
        environ = {"GEMINI_API_KEY": KEY, "GOOGLE_GEMINI_BASE_URL": proxy.url}
        client = create_llm_client("gemini", model="test-model", environ=environ)
        on_text = (lambda _: None) if stream else None
        assert ask(client, on_text=on_text).text == "through the proxy"
    [request] = proxy.requests
    assert request.path.startswith("/v1beta/models/test-model:")


@pytest.mark.slow
@pytest.mark.parametrize(("setting", "path"), [("v1", "/v1/"), ("beta", "/v1beta/")])
def test_gemini_api_version_variable_chooses_the_path_behind_a_proxy(setting, path):
    with FakeProvider(serves=path) as proxy:
        proxy.enqueue(gemini_reply("ok"))
        environ = {"GEMINI_API_KEY": KEY, "GOOGLE_GEMINI_BASE_URL": proxy.url,
                   "GOOGLE_GENAI_API_VERSION": setting}  # fmt: skip
        assert ask(create_llm_client("gemini", model="m", environ=environ)).text == "ok"
    assert proxy.requests[0].path.startswith(f"{path}models/m:generateContent")


def test_gemini_on_googles_own_url_keeps_the_sdks_api_version():
    """Without a custom base URL (or with Google's own, spelt either way) nothing is chosen
    here: google-genai asks for its default version, as before."""
    for url in (
        "https://generativelanguage.googleapis.com/",
        "https://generativelanguage.googleapis.com",
    ):
        assert gemini_api_version(url, {}) is None
    assert gemini_api_version("https://generativelanguage.googleapis.com/", {
        "GOOGLE_GENAI_API_VERSION": "v1alpha"}) == "v1alpha"  # fmt: skip
    assert gemini_api_version("http://litellm:4000", {}) == "v1beta"


def test_a_gemini_api_version_in_the_repositorys_env_is_ignored(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    text = "GOOGLE_GENAI_API_VERSION=v1alpha\nGEMINI_API_KEY=from-file\n"
    (repo / ".env").write_text(text)
    (tmp_path / "own").mkdir()
    (tmp_path / "own" / ".env").write_text(text)
    warnings: list[str] = []
    taken = load_dotenv_file(repo / ".env", repo, environ={}, warnings=warnings)
    assert taken == {"GEMINI_API_KEY": "from-file"}
    assert "ignoring GOOGLE_GENAI_API_VERSION" in warnings[0]
    outside = load_dotenv_file(tmp_path / "own" / ".env", repo, environ={})  # the user's own
    assert outside["GOOGLE_GENAI_API_VERSION"] == "v1alpha"


# --- 11: a stream cut by closing the socket ------------------------------------------------


@pytest.mark.slow
def test_a_stream_cut_before_any_content_is_retried_like_any_transient_error(
    provider, server, caplog
):
    whole = streamed(provider, ["whole answer"])
    server.enqueue(*[cut_stream(whole, after=BEFORE_CONTENT[provider])] * 2, whole)
    deltas: list[str] = []
    with caplog.at_level(logging.WARNING, "toy_agent.llm"):
        response = ask(make_client(provider, server, max_retries=2), on_text=deltas.append)
    assert response.text == "whole answer" and deltas == ["whole answer"]
    assert len(server.requests) == 3
    assert "retry 1/2 in" in caplog.text and "retry 2/2 in" in caplog.text
    assert [a.partial_text for a in response.attempts] == ["", ""]


@pytest.mark.slow
def test_a_stream_cut_before_any_content_counts_against_max_retries(provider, server):
    whole = streamed(provider, ["never"])
    server.enqueue(*[cut_stream(whole, after=BEFORE_CONTENT[provider])] * 3)
    with pytest.raises(LlmError, match=r"\(gave up after 2 retries\)$") as caught:
        ask(make_client(provider, server, max_retries=2), on_text=lambda _: None)
    assert caught.value.status is None
    assert len(server.requests) == 3


@pytest.mark.slow
def test_a_stream_cut_after_content_is_retried_once_and_the_view_told_first(provider, server):
    whole = streamed(provider, ["first words", " and more"])
    server.enqueue(cut_stream(whole, after=b"first words"), whole)
    seen: list[str] = []
    response = ask(
        make_client(provider, server),
        on_text=seen.append,
        on_retry=lambda attempt: seen.append(f"<retry: {attempt.partial_text}>"),
    )
    assert seen == ["first words", "<retry: first words>", "first words", " and more"]
    assert response.text == "first words and more"
    [failed] = response.attempts
    assert failed.partial_text == "first words" and "failed" in failed.error
    assert KEY not in failed.error


@pytest.mark.slow
def test_a_stream_cut_after_content_twice_is_not_retried_again(provider, server):
    whole = streamed(provider, ["first words", " and more"])
    server.enqueue(*[cut_stream(whole, after=b"first words")] * 2, whole)
    with pytest.raises(LlmError, match=r"failed: .* \(gave up after 1 retry\)$"):
        ask(make_client(provider, server, max_retries=4), on_text=lambda _: None)
    assert len(server.requests) == 2


def test_with_max_retries_zero_a_cut_stream_is_not_retried(server):
    whole = streamed("claude", ["first words", " and more"])
    server.enqueue(cut_stream(whole, after=b"first words"), whole)
    with pytest.raises(LlmError, match="connection to .* failed"):
        ask(make_client("claude", server, max_retries=0), on_text=lambda _: None)
    assert len(server.requests) == 1


@pytest.mark.slow
def test_the_trajectory_records_the_cut_attempt_redacted(server, tmp_path):
    secret = "hunter2-database-password-value"
    done = xml_action("task_complete", result="ok", thought=f"The password is {secret}.")
    first = f"<THOUGHT>The password is {secret}"
    whole = anthropic_reply([first, done.removeprefix(first)], stream=True)
    server.enqueue(cut_stream(whole, after=b"The password is"), whole)
    client = make_client("claude", server)
    trajectory = tmp_path / "t.json"
    redactor = Redactor(secrets=[secret])
    agent = ReactAgent(client, tmp_path, stream=True, redactor=redactor,
                       on_event=TrajectoryRecorder(trajectory, redactor.redact_obj))  # fmt: skip
    assert agent.run("x")["result"] == "ok"

    [step] = json.loads(trajectory.read_text())["steps"]
    [attempt] = step["attempts"]
    assert attempt["partial_text"] == "<THOUGHT>The password is [REDACTED]"
    assert "failed" in attempt["error"]
    assert step["response"]["text"] == done.replace(secret, "[REDACTED]")
    assert secret not in trajectory.read_text()


@pytest.mark.slow
def test_a_call_that_fails_for_good_leaves_its_attempts_in_the_trajectory(server, tmp_path):
    whole = anthropic_reply(["<THOUGHT>Reading", " the files.</THOUGHT>"], stream=True)
    server.enqueue(*[cut_stream(whole, after=b"Reading")] * 2)
    trajectory = tmp_path / "t.json"
    agent = ReactAgent(make_client("claude", server), tmp_path, stream=True,
                       on_event=TrajectoryRecorder(trajectory))  # fmt: skip
    result = agent.run("x")

    assert result["outcome"] == "provider_error" and "gave up after 1 retry" in result["error"]
    data = json.loads(trajectory.read_text())
    assert data["steps"] == []  # no step: the call never answered
    failed = data["failed_call"]
    assert failed["iteration"] == 1 and failed["error"] == result["error"]
    assert [a["partial_text"] for a in failed["attempts"]] == ["<THOUGHT>Reading"] * 2
    assert all("connection to" in a["error"] for a in failed["attempts"])


def test_without_retries_the_trajectory_has_no_attempts(server, tmp_path):
    server.enqueue(anthropic_reply(xml_action("task_complete", result="ok"), stream=True))
    trajectory = tmp_path / "t.json"
    agent = ReactAgent(make_client("claude", server), tmp_path, stream=True,
                       on_event=TrajectoryRecorder(trajectory))  # fmt: skip
    agent.run("x")
    assert "attempts" not in json.loads(trajectory.read_text())["steps"][0]


def test_failed_attempt_is_plain_data():
    assert FailedAttempt("HTTP 503: busy") == FailedAttempt("HTTP 503: busy", "")


# --- through the command line, on a terminal ------------------------------------------------


@pytest.mark.slow
def test_the_live_view_says_it_retries_and_never_runs_two_attempts_together(repo, tmp_path):
    first = ["<THOUGHT>Look at the ", 'files first.</THOUGHT>\n<ACTION>\n<tool_name>list_files'
             '</tool_name>\n<parameters>{"path": "."}</parameters>\n</ACTION>']  # fmt: skip
    whole = openai_reply(first, stream=True)
    done = openai_reply(xml_action("task_complete", result="ok", thought="All done."),
                        stream=True)  # fmt: skip
    with FakeProvider() as server:
        server.enqueue(cut_stream(whole, after=b"Look at the "), whole, done)
        term = Terminal(toy_agent("--task", "x", "--repo", str(repo), "--stream"), tmp_path,
                        quickest_provider_env(server))  # fmt: skip
        output = term.finish()

    assert term.proc.returncode == 0, output
    lines = [line.strip() for line in screen_lines(output) if not SPINNER.match(line)]
    retry = next(i for i, line in enumerate(lines) if "↻ retrying, the text above is void" in line)
    assert "connection to" in lines[retry]
    assert lines[retry - 1] == "Look at the"  # the first attempt's words, on their own line
    assert "Look at the files first." in lines[retry + 1 :]  # the retry's, on a new line
    plain = CSI.sub("", output)
    assert "Look at the Look at the" not in plain and "Look at the files first." in plain


@pytest.mark.slow
def test_a_stream_cut_on_every_attempt_exits_3_and_names_the_cut(repo, tmp_path):
    whole = openai_reply(["never seen"], stream=True)
    with FakeProvider() as server:
        server.enqueue(*[cut_stream(whole, after=b'"role": "assistant"')] * 2)
        term = Terminal(
            toy_agent("--task", "x", "--repo", str(repo), "--stream", "--max-retries", "1"),
            tmp_path, {**quickest_provider_env(server), "OPENAI_API_KEY": KEY}, columns=400,
        )  # fmt: skip
        output = term.finish()
        requests = len(server.requests)

    assert term.proc.returncode == 3, output
    assert requests == 2
    [error] = [line for line in screen_lines(output) if "error:" in line]  # one line, once
    assert re.fullmatch(r"toy-agent: error: openai API error: connection to "
                        r"http://127\.0\.0\.1:\d+/v1 failed: peer closed connection .* — check "
                        r"the network and the base URL "
                        r"\(gave up after 1 retry\)", error.strip())  # fmt: skip
    assert "✗ not completed (provider_error)" in output
    assert "Traceback" not in output and KEY not in output


@pytest.mark.slow
def test_a_batch_worker_gets_the_api_version_with_the_key_and_base_url(monkeypatch):
    from toy_agent.batch.executors import provider_environment
    from toy_agent.batch.worker import RunSettings

    with FakeProvider(serves="/v1alpha/") as proxy:
        proxy.enqueue(gemini_reply("ok"))
        monkeypatch.setenv("GEMINI_API_KEY", KEY)
        monkeypatch.setenv("GOOGLE_GENAI_API_VERSION", "v1alpha")
        environ = provider_environment(RunSettings(provider="gemini", base_url=proxy.url))
        monkeypatch.delenv("GOOGLE_GENAI_API_VERSION")  # the worker has only what it is given
        assert environ["GOOGLE_GENAI_API_VERSION"] == "v1alpha"
        assert ask(create_llm_client("gemini", model="m", environ=environ)).text == "ok"
