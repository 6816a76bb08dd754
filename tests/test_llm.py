"""Provider-neutral pieces of toy_agent.llm: settings, retry timing, and the pure conversions."""

from __future__ import annotations

import email.utils
import json
import shutil
import subprocess
import sys
import time

import pytest
from fakes import folder, write_replay, xml_action

from toy_agent.cli import main
from toy_agent.llm import (
    GEMINI_NO_SIGNATURE,
    MAX_RETRY_WAIT,
    ClaudeLlmClient,
    GeminiLlmClient,
    LlmConfigError,
    OpenAICompatibleLlmClient,
    create_llm_client,
    from_anthropic_response,
    from_gemini_response,
    from_openai_response,
    merge_gemini_chunks,
    merge_openai_chunks,
    parse_retry_after,
    parse_tool_arguments,
    resolve_settings,
    retry_delay,
    to_anthropic_messages,
    to_anthropic_tools,
    to_gemini_contents,
    to_gemini_tools,
    to_openai_messages,
    to_openai_tools,
)
from toy_agent.messages import Message, ToolCall, ToolResult, Usage
from toy_agent.providers import PROVIDERS

READ_FILE = {
    "name": "read_file",
    "description": "Read a file",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
}
CALLS = (ToolCall("read_file", {"path": "a.py"}, "c1"), ToolCall("list_files", {}, "c2"))
RESULTS = (ToolResult("c1", "read_file", "print(1)"), ToolResult("c2", "list_files", "no", True))
NATIVE_TURNS = [
    Message("user", "fix the bug"),
    Message("assistant", "Let me look.", tool_calls=CALLS),
    Message("user", "", tool_results=RESULTS),
]


@pytest.mark.slow
def test_importing_llm_imports_no_provider_sdk():
    code = (
        "import sys, toy_agent.llm\n"
        "print([m for m in ('anthropic', 'openai', 'google.genai', 'httpx2') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- settings -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "variable"),
    [("claude", "ANTHROPIC_API_KEY"), ("gemini", "GEMINI_API_KEY"), ("openai", "OPENAI_API_KEY")],
)
def test_missing_key_is_a_config_error_naming_the_variable(provider, variable):
    with pytest.raises(LlmConfigError, match=f"^{variable}.* is not set: export it or put it"):
        create_llm_client(provider, environ={})


def test_gemini_accepts_google_api_key_too():
    assert resolve_settings("gemini", None, None, {"GOOGLE_API_KEY": "g"})[0] == "g"
    assert (
        resolve_settings("gemini", None, None, {"GOOGLE_API_KEY": "g", "GEMINI_API_KEY": "m"})[0]
        == "m"
    )


def test_unknown_provider_is_a_config_error():
    with pytest.raises(LlmConfigError, match="unknown LLM provider 'llama'"):
        create_llm_client("llama", environ={})


def test_openai_key_is_optional_when_a_base_url_points_at_a_local_server():
    key, url = resolve_settings("openai", None, None, {"OPENAI_BASE_URL": "http://h:1/v1"})
    assert (key, url) == ("not-needed", "http://h:1/v1")
    with pytest.raises(LlmConfigError, match="OPENAI_API_KEY"):
        resolve_settings("openai", None, None, {})


def test_explicit_base_url_wins_over_the_environment():
    env = {"ANTHROPIC_API_KEY": "k", "ANTHROPIC_BASE_URL": "http://env:1"}
    assert resolve_settings("claude", None, "http://flag:2", env) == ("k", "http://flag:2")
    assert resolve_settings("claude", None, None, env) == ("k", "http://env:1")
    assert resolve_settings("claude", None, None, {"ANTHROPIC_API_KEY": "k"})[1].startswith(
        "https://api.anthropic.com"
    )


@pytest.mark.slow
def test_factory_builds_each_provider_with_its_default_model():
    env = {"ANTHROPIC_API_KEY": "a", "GEMINI_API_KEY": "g", "OPENAI_API_KEY": "o"}
    for provider, cls in [
        ("claude", ClaudeLlmClient),
        ("gemini", GeminiLlmClient),
        ("openai", OpenAICompatibleLlmClient),
    ]:
        client = create_llm_client(provider, environ=env, max_retries=7, timeout=9.0)
        assert type(client) is cls and client.provider == provider
        assert (client.model, client.max_retries, client.timeout) == (
            PROVIDERS[provider].default_model,
            7,
            9.0,
        )
    assert create_llm_client("openai", model="qwen2.5-coder", environ=env).model == "qwen2.5-coder"


# --- retry timing ---------------------------------------------------------------------------


def test_retry_after_in_seconds_milliseconds_or_http_date():
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "3"}) == 0.25
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < parse_retry_after({"retry-after": future}) <= 30
    past = email.utils.formatdate(time.time() - 30, usegmt=True)
    assert parse_retry_after({"retry-after": past}) == 0.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after(None) is None


def test_retry_delay_obeys_the_server_but_caps_it():
    assert retry_delay(0, 0.0) == 0.0
    assert retry_delay(3, 2.5) == 2.5
    assert retry_delay(0, 86400.0) == MAX_RETRY_WAIT


def test_retry_delay_backs_off_exponentially_with_jitter():
    for attempt in range(4):
        assert 0.5 * 2**attempt <= retry_delay(attempt, None, base=1.0) <= 2**attempt
    assert retry_delay(30, None) <= MAX_RETRY_WAIT
    assert retry_delay(5, None, base=0.0) == 0.0


# --- Anthropic conversions ------------------------------------------------------------------


def test_anthropic_tools_use_input_schema():
    assert to_anthropic_tools([READ_FILE]) == [
        {"name": "read_file", "description": "Read a file", "input_schema": READ_FILE["parameters"]}
    ]


def test_anthropic_messages_carry_tool_use_and_tool_result_blocks():
    user, assistant, results = to_anthropic_messages(NATIVE_TURNS)
    assert assistant["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "c1", "name": "read_file", "input": {"path": "a.py"}},
        {"type": "tool_use", "id": "c2", "name": "list_files", "input": {}},
    ]
    assert [b["tool_use_id"] for b in results["content"]] == ["c1", "c2"]
    assert [b["is_error"] for b in results["content"]] == [False, True]
    assert results["content"][0]["content"] == "print(1)"


def test_anthropic_messages_alternate_and_start_with_the_user():
    turns = to_anthropic_messages(
        [Message("assistant", "hello"), Message("user", "a"), Message("user", "b")]
    )
    assert [t["role"] for t in turns] == ["user", "assistant", "user"]
    assert [b["text"] for b in turns[2]["content"]] == ["a", "b"]


def test_anthropic_merged_user_turn_opens_with_its_tool_results():
    merged = to_anthropic_messages(
        [
            Message("user", "go"),
            Message("assistant", "", tool_calls=CALLS[:1]),
            Message("user", "note"),
            Message("user", "", tool_results=RESULTS[:1]),
        ]
    )[-1]["content"]
    assert [b["type"] for b in merged] == ["tool_result", "text"]


def test_anthropic_caches_the_last_user_block_only():
    turns = to_anthropic_messages(
        [Message("user", "one"), Message("assistant", "two"), Message("user", "three")]
    )
    marked = [b for t in turns for b in t["content"] if "cache_control" in b]
    assert marked == [{"type": "text", "text": "three", "cache_control": {"type": "ephemeral"}}]


def test_anthropic_never_sends_an_empty_text_block():
    turns = to_anthropic_messages([Message("user", ""), Message("assistant", "  ")])
    assert all(b["text"].strip() for t in turns for b in t["content"])


def test_anthropic_usage_counts_cache_reads_and_writes_as_input():
    data = {
        "content": [{"type": "text", "text": "hi"}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 5,
            "output_tokens": 7,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 20,
        },
    }
    usage = from_anthropic_response(data).usage
    assert (usage.input_tokens, usage.output_tokens, usage.cached_tokens) == (125, 7, 100)


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("end_turn", "end"),
        ("stop_sequence", "end"),
        ("tool_use", "tool_use"),
        ("max_tokens", "max_tokens"),
        ("refusal", "safety"),
        ("pause_turn", "other"),
    ],
)
def test_anthropic_stop_reasons(reason, expected):
    data = {"content": [], "stop_reason": reason, "usage": {"input_tokens": 1, "output_tokens": 1}}
    assert from_anthropic_response(data).stop_reason == expected


# --- Gemini conversions ---------------------------------------------------------------------


def test_gemini_tools_are_function_declarations_with_raw_json_schema():
    assert to_gemini_tools([READ_FILE]) == [
        {
            "function_declarations": [
                {
                    "name": "read_file",
                    "description": "Read a file",
                    "parameters_json_schema": READ_FILE["parameters"],
                }
            ]
        }
    ]


def test_gemini_contents_use_model_role_and_function_parts():
    user, model, results = to_gemini_contents(NATIVE_TURNS)
    assert (user["role"], model["role"], results["role"]) == ("user", "model", "user")
    # A turn that is not the model's own (no signed turn kept) carries Gemini's placeholder on
    # its first call, which Gemini 3 takes in place of a signature.
    assert model["parts"][1] == {
        "function_call": {"id": "c1", "name": "read_file", "args": {"path": "a.py"}},
        "thought_signature": GEMINI_NO_SIGNATURE,
    }
    assert "thought_signature" not in model["parts"][2]
    assert [p["function_response"]["response"] for p in results["parts"]] == [
        {"output": "print(1)"},
        {"error": "no"},
    ]


def test_gemini_synthesises_stable_call_ids_and_reports_tool_use():
    part = {"function_call": {"name": "list_files", "args": {}}}
    data = {"candidates": [{"content": {"parts": [part, part]}, "finish_reason": "STOP"}]}
    response = from_gemini_response(data)
    assert [c.id for c in response.tool_calls] == ["call_0", "call_1"]
    assert response.stop_reason == "tool_use"


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("STOP", "end"),
        ("MAX_TOKENS", "max_tokens"),
        ("SAFETY", "safety"),
        ("RECITATION", "safety"),
        ("BLOCKLIST", "safety"),
        ("PROHIBITED_CONTENT", "safety"),
        ("SPII", "safety"),
        ("MALFORMED_FUNCTION_CALL", "other"),
    ],
)
def test_gemini_finish_reasons(reason, expected):
    data = {"candidates": [{"content": {"parts": [{"text": "x"}]}, "finish_reason": reason}]}
    assert from_gemini_response(data).stop_reason == expected


def test_gemini_blocked_prompt_is_safety_with_empty_text():
    response = from_gemini_response({"prompt_feedback": {"block_reason": "PROHIBITED_CONTENT"}})
    assert (response.text, response.stop_reason) == ("", "safety")
    with pytest.raises(ValueError):
        from_gemini_response({})


def test_gemini_thoughts_are_not_answer_text_but_are_billed():
    parts = [{"text": "hmm", "thought": True}, {"text": "answer"}]
    data = {
        "candidates": [{"content": {"parts": parts}, "finish_reason": "STOP"}],
        "usage_metadata": {
            "prompt_token_count": 9,
            "candidates_token_count": 2,
            "thoughts_token_count": 5,
            "cached_content_token_count": 4,
        },
    }
    response = from_gemini_response(data)
    assert response.text == "answer"
    assert response.thinking == "hmm"  # shown as the step's thinking, not as its text
    assert response.usage == Usage(9, 7, 4, reasoning_tokens=5)


def test_gemini_stream_chunks_merge_into_one_response():
    deltas: list[str] = []
    merged = merge_gemini_chunks(
        [
            {"candidates": [{"content": {"parts": [{"text": "Hel"}]}}]},
            {
                "candidates": [{"content": {"parts": [{"text": "lo"}]}, "finish_reason": "STOP"}],
                "usage_metadata": {"prompt_token_count": 3},
            },
        ],
        deltas.append,
    )
    response = from_gemini_response(merged)
    assert (deltas, response.text, response.stop_reason) == (["Hel", "lo"], "Hello", "end")
    assert response.usage.input_tokens == 3


# --- OpenAI conversions ---------------------------------------------------------------------


def test_openai_tools_are_functions():
    assert to_openai_tools([READ_FILE]) == [{"type": "function", "function": READ_FILE}]


def test_openai_messages_put_each_tool_result_in_a_tool_message():
    system, user, assistant, *tools = to_openai_messages("be brief", NATIVE_TURNS)
    assert system == {"role": "system", "content": "be brief"}
    assert assistant["tool_calls"][0] == {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
    }
    assert tools == [
        {"role": "tool", "tool_call_id": "c1", "content": "print(1)"},
        {"role": "tool", "tool_call_id": "c2", "content": "no"},  # the agent's text, as it is
    ]


def test_openai_arguments_that_are_not_a_json_object_are_kept_raw():
    assert parse_tool_arguments('{"path": "a"}') == ({"path": "a"}, "")
    assert parse_tool_arguments("") == ({}, "")
    assert parse_tool_arguments('{"path": ') == ({}, '{"path": ')
    assert parse_tool_arguments("[1]") == ({}, "[1]")


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("stop", "end"),
        ("length", "max_tokens"),
        ("tool_calls", "tool_use"),
        ("content_filter", "safety"),
        (None, "other"),
    ],
)
def test_openai_finish_reasons(reason, expected):
    data = {"choices": [{"message": {"content": "x"}, "finish_reason": reason}]}
    assert from_openai_response(data).stop_reason == expected


def test_openai_stream_chunks_join_tool_arguments_by_index():
    def chunk(**delta):
        return {"model": "m", "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}

    merged = merge_openai_chunks(
        [
            chunk(content="ok"),
            chunk(
                tool_calls=[{"index": 0, "id": "a", "function": {"name": "f", "arguments": '{"x"'}}]
            ),
            chunk(
                tool_calls=[{"index": 1, "id": "b", "function": {"name": "g", "arguments": "{}"}}]
            ),
            chunk(tool_calls=[{"index": 0, "function": {"arguments": ": 1}"}}]),
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
            {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}},
        ]
    )
    response = from_openai_response(merged)
    assert response.tool_calls == (ToolCall("f", {"x": 1}, "a"), ToolCall("g", {}, "b"))
    assert (response.text, response.stop_reason, response.usage.input_tokens) == (
        "ok",
        "tool_use",
        4,
    )
    json.dumps(merged)  # stays plain JSON, so DEBUG logging can print it


# --- replay ----------------------------------------------------------------------------------


def test_a_recording_replays_on_a_copy_elsewhere_though_its_observations_name_the_repo(
    tmp_path, capsys, home
):
    """README: record with --trajectory, replay with --replay on a copy of the repository. An
    observation that names the repository's root names the copy's in the replay: the same."""
    repo = folder(tmp_path / "repo", {"hello.py": "print('hi')\n"})
    outside = tmp_path / "notes.txt"
    script = write_replay(
        tmp_path / "script.json",
        xml_action("read_file", path=str(outside)),  # refused: outside the repository (ROOT)
        xml_action("read_file", path="hello.py"),
        xml_action("task_complete", result="read"),
    )
    run = tmp_path / "run.json"
    args = ["--task", "read", "--output", "json", "--llm-provider", "replay"]
    assert main([*args, "--repo", str(repo), "--replay", str(script),
                 "--trajectory", str(run)]) == 0  # fmt: skip
    recorded = json.loads(run.read_text())
    assert f"outside the repository ({repo})" in recorded["steps"][0]["observations"][0]["content"]
    capsys.readouterr()

    copy = shutil.copytree(repo, tmp_path / "elsewhere" / "copy")
    code = main([*args, "--repo", str(copy), "--replay", str(run)])
    result = json.loads(capsys.readouterr().out)

    assert (code, result["outcome"]) == (0, "completed"), result.get("error")
    # still a check: an observation that differs in more than the root is a divergence
    (copy / "hello.py").write_text("print('bye')\n")
    assert main([*args, "--repo", str(copy), "--replay", str(run)]) == 1
    assert json.loads(capsys.readouterr().out)["outcome"] == "replay_diverged"
