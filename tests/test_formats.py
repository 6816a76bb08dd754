"""Each action format driven through the real agent and each real provider SDK, on loopback.

These are the end-to-end checks of `--tool-format`: the agent does not branch on the format,
so what differs is only what goes over the wire and comes back.
"""

from __future__ import annotations

import json

import pytest
from fake_providers import FakeProvider, anthropic_reply, gemini_reply, openai_reply
from fakes import xml_action

from toy_agent import ReactAgent
from toy_agent.llm import create_llm_client
from toy_agent.messages import ToolCall

REPLY_BUILDERS = {"claude": anthropic_reply, "gemini": gemini_reply, "openai": openai_reply}


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "README.md").write_text("# demo project\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "main.py").write_text("print('hi')\n")
    return tmp_path


def client_for(provider: str, server: FakeProvider):
    env = server.env(provider)
    return create_llm_client(provider, max_retries=0, environ=env)


def sent_tool_names(provider: str, body: dict) -> list[str]:
    if provider == "claude":
        return [t["name"] for t in body["tools"]]
    if provider == "openai":
        return [t["function"]["name"] for t in body["tools"]]
    return [
        d["name"]
        for t in body["tools"]
        for d in t.get("functionDeclarations", t.get("function_declarations", []))
    ]


def answered_call_ids(provider: str, body: dict) -> list[str]:
    """The tool results in the last turn of a request, in the provider's own shape."""
    if provider == "claude":
        last = body["messages"][-1]["content"]
        return [b["tool_use_id"] for b in last if b.get("type") == "tool_result"]
    if provider == "openai":
        return [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
    parts = body["contents"][-1]["parts"]
    return [p.get("functionResponse", p.get("function_response"))["name"] for p in parts]


@pytest.mark.slow
@pytest.mark.parametrize("provider", ["claude", "gemini", "openai"])
def test_native_tool_calls_round_trip_through_each_provider(provider, repo):
    reply = REPLY_BUILDERS[provider]
    calls = (
        ToolCall("read_file", {"path": "README.md"}, "call_a"),
        ToolCall("list_files", {"path": "src"}, "call_b"),
    )
    with FakeProvider() as server:
        server.enqueue(
            reply("Looking around.", tool_calls=calls),
            reply("", tool_calls=(ToolCall("task_complete", {"result": "seen"}, "call_c"),)),
        )
        result = ReactAgent(client_for(provider, server), repo, tool_format="native").run(
            "look around"
        )

    assert result["success"] and result["result"] == "seen"
    first, second = server.requests[0].body, server.requests[1].body
    assert sent_tool_names(provider, first)[-1] == "task_complete"
    expected = ["read_file", "list_files"] if provider == "gemini" else ["call_a", "call_b"]
    assert answered_call_ids(provider, second) == expected
    assert "# demo project" in json.dumps(second) and "main.py" in json.dumps(second)


@pytest.mark.parametrize("provider", ["claude", "gemini", "openai"])
def test_text_formats_send_no_tool_schemas_and_parse_plain_text(provider, repo):
    reply = REPLY_BUILDERS[provider]
    with FakeProvider() as server:
        server.enqueue(
            reply(xml_action("read_file", path="src/main.py")),
            reply(xml_action("task_complete", result="prints hi")),
        )
        result = ReactAgent(client_for(provider, server), repo).run("what does main print?")

    assert result["result"] == "prints hi"
    assert "tools" not in server.requests[0].body
    assert "<OBSERVATION>" in json.dumps(server.requests[1].body)


def test_react_format_through_a_provider_ends_on_final_answer(repo):
    with FakeProvider() as server:
        server.enqueue(
            openai_reply('Thought: look\nAction: list_files\nAction Input: {"path": "."}'),
            openai_reply("Thought: done\nFinal Answer: a README and src/main.py"),
        )
        result = ReactAgent(client_for("openai", server), repo, tool_format="react").run("ls")

    assert result["result"] == "a README and src/main.py"
    assert "Final Answer:" in server.requests[0].body["messages"][0]["content"]


def test_native_call_with_broken_json_arguments_is_answered_with_an_error(repo):
    with FakeProvider() as server:
        server.enqueue(
            openai_reply(
                None,
                tool_calls=(ToolCall("read_file", {}, "call_x"),),
                finish_reason="tool_calls",
                raw_arguments=['{"path": "README.md"'],
            ),
            openai_reply(
                None,
                tool_calls=(ToolCall("task_complete", {"result": "ok"}, "c2"),),
                finish_reason="tool_calls",
            ),
        )
        ReactAgent(client_for("openai", server), repo, tool_format="native").run("read")

    tool_message = [m for m in server.requests[1].body["messages"] if m["role"] == "tool"][0]
    assert tool_message["tool_call_id"] == "call_x"
    assert "not a JSON object" in tool_message["content"]


@pytest.mark.parametrize("provider", ["claude", "gemini", "openai"])
def test_calls_after_a_task_complete_the_check_refused_are_each_answered(provider, repo):
    """The check fails, so the run goes on: the read_file written after task_complete in the
    same reply must get a result too, or the provider refuses the next request (the fakes
    answer an unanswered call with each API's own 400)."""
    reply = REPLY_BUILDERS[provider]
    calls = (ToolCall("task_complete", {"result": "done"}, "call_a"),
             ToolCall("read_file", {"path": "README.md"}, "call_b"))  # fmt: skip
    with FakeProvider() as server:
        server.enqueue(
            reply("", tool_calls=calls),
            reply("", tool_calls=(ToolCall("task_complete", {"result": "now"}, "call_c"),)),
        )
        agent = ReactAgent(client_for(provider, server), repo, tool_format="native",
                           check="test -f done.txt", check_retries=1, max_iterations=3)  # fmt: skip
        result = agent.run_result("finish")

    assert result.outcome == "check_failed" and len(server.requests) == 2, result.error
    expected = ["task_complete", "read_file"] if provider == "gemini" else ["call_a", "call_b"]
    assert answered_call_ids(provider, server.requests[1].body) == expected
    assert "Not run: task_complete came before it" in json.dumps(server.requests[1].body)
    assert "# demo project" not in json.dumps(server.requests[1].body)  # it did not run


def test_a_task_complete_with_no_result_is_a_failed_call_and_the_run_goes_on(repo):
    with FakeProvider() as server:
        server.enqueue(
            anthropic_reply("", tool_calls=(ToolCall("task_complete", {}, "call_a"),)),
            anthropic_reply(
                "", tool_calls=(ToolCall("task_complete", {"result": None}, "call_b"),)
            ),  # fmt: skip
            anthropic_reply(xml_action("task_complete", result="")),
            anthropic_reply(xml_action("task_complete", result="the summary")),
        )
        native = ReactAgent(client_for("claude", server), repo, tool_format="native",
                            max_iterations=2).run_result("finish")  # fmt: skip
        xml = ReactAgent(client_for("claude", server), repo, max_iterations=2).run_result("again")

    assert native.outcome == "max_iterations" and native.result == ""
    results = [b for m in server.requests[1].body["messages"] for b in m["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]  # fmt: skip
    assert results[0]["is_error"] and "task_complete needs a `result`" in str(results[0])
    assert xml.outcome == "completed" and xml.result == "the summary"
    assert "task_complete needs a `result`" in json.dumps(server.requests[3].body)
