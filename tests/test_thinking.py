"""Today's models through the real SDKs on loopback: the model's own turn goes back as it came
(Claude's signed thinking blocks, Gemini's thought signatures), effort and model options reach
each provider under its own field names, and the thinking is shown and kept.

The fake servers (tests/fake_providers.py) refuse what the real APIs refuse: a history that
drops or alters a signature gets their 400, so each run here would fail if the signatures
were lost on the way; the controls (`test_..._is_refused_...`) show that it does.
"""

from __future__ import annotations

import base64
import io
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from cli_helpers import run_main
from fake_providers import (
    FakeProvider,
    anthropic_error,
    anthropic_reply,
    claude_signature,
    gemini_reply,
    gemini_signature,
    openai_reply,
    responses_reply,
)
from fakes import ScriptedLlm

from toy_agent import ReactAgent
from toy_agent.budget import fit_to_budget
from toy_agent.events import JsonLinesWriter, LlmResponded, StepStarted
from toy_agent.llm import (
    ClaudeLlmClient,
    GeminiLlmClient,
    LlmConfigError,
    LlmError,
    OpenAICompatibleLlmClient,
    OpenAIResponsesLlmClient,
    claude_thinking,
    create_llm_client,
    to_anthropic_messages,
    to_gemini_contents,
)
from toy_agent.messages import LlmResponse, Message, SignedTurn, ToolCall, Usage
from toy_agent.redaction import REDACTED, Redactor

ROOT = Path(__file__).resolve().parents[1]
CLIENTS = {"claude": ClaudeLlmClient, "gemini": GeminiLlmClient}


def steps(provider: str, stream: bool, chunked: bool) -> list:
    """Three steps of native calls, each reply thinking first: read, list, complete."""
    calls = [
        ToolCall("read_file", {"path": "hello.py"}, "call_1"),
        ToolCall("list_files", {"path": "."}, "call_2"),
        ToolCall("task_complete", {"result": "it greets"}, "call_3"),
    ]
    thoughts = ["The greeting lives in hello.py.", "What else is there?", "Done: it greets."]
    if provider == "claude":
        replies = [
            anthropic_reply("", tool_calls=[c], thinking=t, stop_reason="tool_use", stream=stream)
            for c, t in zip(calls, thoughts, strict=True)
        ]
        replies[1] = anthropic_reply("", tool_calls=[calls[1]], thinking=True, redacted=True,
                                     stop_reason="tool_use", stream=stream)  # fmt: skip
    else:
        replies = [gemini_reply("", tool_calls=[c], thought=t, stream=stream)
                   for c, t in zip(calls, thoughts, strict=True)]  # fmt: skip
    return [replace(r, chunked=True) if chunked else r for r in replies]


def decoded(signature: str) -> bytes:
    return base64.urlsafe_b64decode(signature)


def client(provider: str, server: FakeProvider, cls: type | None = None, **settings):
    cls = cls or CLIENTS[provider]
    return cls("test-key", base_url=server.url, max_retries=0, environ={}, **settings)


@pytest.mark.parametrize("provider", ["claude", "gemini"])
@pytest.mark.parametrize(
    ("stream", "chunked"), [(False, False), (True, False), (True, True)],
    ids=["whole", "stream", "stream-through-a-proxy"],
)  # fmt: skip
def test_a_three_step_native_run_sends_each_signed_turn_back_as_it_came(
    provider, stream, chunked, repo
):
    with FakeProvider() as server:
        server.enqueue(*steps(provider, stream, chunked))
        agent = ReactAgent(client(provider, server), repo, tool_format="native", stream=stream)
        result = agent.run_result("what does hello.py do?")

    assert result.outcome == "completed", result.error
    assert result.result == "it greets" and len(server.requests) == 3
    last = server.requests[2].body
    if provider == "claude":
        first, second = [m["content"] for m in last["messages"] if m["role"] == "assistant"]
        assert first[0] == {
            "type": "thinking",
            "thinking": "The greeting lives in hello.py.",
            "signature": claude_signature("The greeting lives in hello.py."),
        }
        assert [b["type"] for b in second] == ["thinking", "redacted_thinking", "tool_use"]
        assert second[0]["thinking"] == ""  # omitted by default, its signature still there
    else:
        model_turns = [c["parts"] for c in last["contents"] if c["role"] == "model"]
        assert [p["text"] for p, *_ in model_turns] == [
            "The greeting lives in hello.py.", "What else is there?"]  # fmt: skip
        assert all(p.get("thought") for p, *_ in model_turns)
        call = model_turns[0][1]  # google-genai writes it URL-safe: the same bytes
        assert decoded(call["thoughtSignature"]) == decoded(
            gemini_signature("read_file", {"path": "hello.py"})
        )
    thinking = [m.thinking for m in agent.conversation_history if m.role == "assistant"]
    assert thinking[0] == "The greeting lives in hello.py."


def _drop_signatures(message: Message) -> Message:
    if message.turn is None:
        return message
    blocks = tuple(
        {k: v for k, v in b.items() if k != "thought_signature"}
        for b in message.turn.blocks
        if b.get("type") not in ("thinking", "redacted_thinking")
    )
    return replace(message, turn=replace(message.turn, blocks=blocks))


def _alter(message: Message) -> Message:
    if message.turn is None:
        return message
    blocks = tuple(
        {**b, "thinking": b["thinking"] + " (edited)"} if b.get("type") == "thinking"
        else {**b, "function_call": {**b["function_call"], "args": {"path": "other.py"}}}
        if "function_call" in b else b
        for b in message.turn.blocks
    )  # fmt: skip
    return replace(message, turn=replace(message.turn, blocks=blocks))


@pytest.mark.parametrize(
    ("provider", "damage", "refusal"),
    [
        ("claude", "drop", "Expected `thinking` or `redacted_thinking`, but found `tool_use`"),
        ("claude", "forget", "Expected `thinking` or `redacted_thinking`, but found `tool_use`"),
        ("claude", "alter", "Invalid `signature` in `thinking` block"),
        ("gemini", "drop", "Function call is missing a thought_signature in functionCall parts"),
        ("gemini", "alter", "Corrupted thought signature"),
    ],
)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_same_run_is_refused_when_its_history_loses_or_alters_a_signature(
    provider, damage, refusal, stream, repo
):
    """The control of the test above: the servers do check what they are sent."""
    hurt = {"drop": _drop_signatures, "alter": _alter,
            "forget": lambda m: replace(m, turn=None)}[damage]  # fmt: skip

    class Careless(CLIENTS[provider]):  # type: ignore[misc, valid-type]
        def call_llm(self, system_prompt, messages, **kwargs):
            return super().call_llm(system_prompt, [hurt(m) for m in messages], **kwargs)

    with FakeProvider() as server:
        server.enqueue(*steps(provider, stream, False))
        agent = ReactAgent(client(provider, server, Careless), repo, tool_format="native",
                           stream=stream)  # fmt: skip
        result = agent.run_result("what does hello.py do?")

    assert result.outcome == "provider_error" and len(server.requests) == 2
    assert "API error 400" in str(result.error) and refusal in str(result.error)


def test_a_turn_of_another_model_is_rebuilt_without_its_signatures():
    turn = SignedTurn("claude", "claude-sonnet-5-5", (
        {"type": "thinking", "thinking": "x", "signature": claude_signature("x")},
        {"type": "tool_use", "id": "c1", "name": "list_files", "input": {}},
    ))  # fmt: skip
    history = [
        Message("user", "go"),
        Message("assistant", "", (ToolCall("list_files", {}, "c1"),), turn=turn),
    ]
    same = to_anthropic_messages(history, "claude-sonnet-5-5")[1]["content"]
    other = to_anthropic_messages(history, "claude-opus-5")[1]["content"]
    assert same[0]["type"] == "thinking"
    assert [b["type"] for b in other] == ["tool_use"]  # no other model's signature
    (gemini_call,) = to_gemini_contents(history, "gemini-3-pro")[1]["parts"]
    assert "signature" not in json.dumps(gemini_call["function_call"])
    assert gemini_call["thought_signature"] == b"skip_thought_signature_validator"


def test_openai_reasoning_tokens_are_counted_and_billed_as_output(repo):
    with FakeProvider() as server:
        server.enqueue(openai_reply("", tool_calls=[ToolCall("task_complete", {"result": "ok"},
                                                             "c1")], finish_reason="tool_calls",
                                    usage=Usage(1_000, 500, reasoning_tokens=400)))  # fmt: skip
        llm = client("openai", server, OpenAICompatibleLlmClient, model="gpt-5-mini")
        result = ReactAgent(llm, repo, tool_format="native").run_result("x")

    assert result.usage == Usage(1_000, 500, reasoning_tokens=400)
    assert result.cost_usd == pytest.approx((1_000 * 0.25 + 500 * 2.00) / 1e6)


# --- effort and model options -------------------------------------------------------------


@pytest.mark.parametrize(
    ("provider", "model", "effort", "show", "expected"),
    [
        ("claude", "claude-sonnet-5-5", "low", True,
         {"thinking": {"type": "adaptive", "display": "summarized"},
          "output_config": {"effort": "low"}}),
        ("claude", "claude-sonnet-5-5", None, False, {}),
        ("claude", "claude-sonnet-4-6", "high", False,
         {"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}),
        ("claude", "claude-sonnet-4-5", "medium", False,
         {"thinking": {"type": "enabled", "budget_tokens": 8192}}),
        ("openai", "gpt-5-mini", "medium", False, {"reasoning_effort": "medium"}),
    ],
)  # fmt: skip
def test_effort_reaches_the_request_under_each_providers_own_fields(
    provider, model, effort, show, expected
):
    reply = {"claude": anthropic_reply, "openai": openai_reply}[provider]
    with FakeProvider() as server:
        server.enqueue(reply("hi"))
        env = server.env(provider)
        llm = create_llm_client(provider, model=model, effort=effort, show_thinking=show,
                                max_retries=0, environ=env)  # fmt: skip
        llm.call_llm("sys", [Message("user", "hi")])

    body = server.requests[0].body
    fields = ("thinking", "output_config", "reasoning_effort")
    assert {k: body[k] for k in fields if k in body} == expected
    if "budget_tokens" in json.dumps(expected):  # the budget counts within max_tokens
        assert body["max_tokens"] > expected["thinking"]["budget_tokens"]


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("claude-sonnet-5-5", {"output_config": {"effort": "low"}}),
        ("claude-opus-4-7", {"output_config": {"effort": "low"}}),
        ("claude-opus-4-6", {"thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}}),
        ("claude-sonnet-4-5-20250929", {"thinking": {"type": "enabled", "budget_tokens": 2048}}),
        ("claude-opus-4-20250514", {"thinking": {"type": "enabled", "budget_tokens": 2048}}),
        ("claude-3-7-sonnet-latest", {"thinking": {"type": "enabled", "budget_tokens": 2048}}),
        ("claude-3-5-haiku", {}),  # does not think: nothing to ask
    ],
)
def test_claude_effort_follows_the_models_generation(model, expected):
    assert claude_thinking(model, "low", show=False) == expected


@pytest.mark.parametrize(
    ("model", "effort", "expected"),
    [("gemini-3-pro", "high", {"thinkingLevel": "HIGH", "includeThoughts": True}),
     ("gemini-2.5-flash", "low", {"thinkingBudget": 1024, "includeThoughts": True})],
)  # fmt: skip
def test_gemini_effort_is_its_thinking_level_or_budget_and_options_join_the_config(
    model, effort, expected
):
    with FakeProvider() as server:
        server.enqueue(gemini_reply("hi"))
        llm = create_llm_client("gemini", model=model, effort=effort, show_thinking=True,
                                model_options={"temperature": 0.2, "max_tokens": 999},
                                max_retries=0, environ=server.env("gemini"))  # fmt: skip
        llm.call_llm("sys", [Message("user", "hi")])

    config = server.requests[0].body["generationConfig"]
    # The API reads proto3 JSON: either spelling of a field, an enum in any case.
    camel = {re.sub(r"_(\w)", lambda m: m[1].upper(), k): v
             for k, v in config["thinkingConfig"].items()}  # fmt: skip
    assert {k: v.upper() if isinstance(v, str) else v for k, v in camel.items()} == expected
    assert (config["temperature"], config["maxOutputTokens"]) == (0.2, 999)


@pytest.mark.parametrize("model", ["gemini-2.0-flash", "gemini-2.0-flash-lite-001",
                                   "gemini-1.5-pro"])  # fmt: skip
def test_a_gemini_model_that_does_not_think_is_asked_for_no_thinking(model, repo):
    """--show-thinking (on by default with the live view) asks a thinking model for its
    summaries; Gemini 2.0 and 1.5 refuse any thinkingConfig, so they are asked nothing."""
    with FakeProvider() as server:
        server.enqueue(gemini_reply("", tool_calls=[ToolCall("task_complete", {"result": "ok"})]),
                       gemini_reply("hi"))  # fmt: skip
        llm = create_llm_client("gemini", model=model, show_thinking=True, max_retries=0,
                                environ=server.env("gemini"))  # fmt: skip
        result = ReactAgent(llm, repo, tool_format="native").run_result("x")
        thinking = create_llm_client("gemini", model="gemini-2.5-flash", show_thinking=True,
                                     max_retries=0, environ=server.env("gemini"))  # fmt: skip
        thinking.call_llm("sys", [Message("user", "hi")])

    assert result.outcome == "completed", result.error
    assert "thinkingConfig" not in server.requests[0].body.get("generationConfig", {})
    assert "thinkingConfig" in server.requests[1].body["generationConfig"]  # 2.5 still asked


def test_effort_on_a_gemini_model_that_does_not_think_is_a_usage_error(repo, capsys, home):
    with FakeProvider() as server:
        done = run_main(capsys, "--task", "x", "--repo", str(repo), "--llm-provider", "gemini",
                        "--model", "gemini-2.0-flash", "--effort", "low",
                        env=server.env("gemini"))  # fmt: skip
        with pytest.raises(LlmConfigError, match="--effort: gemini-1.5-pro does not think"):
            create_llm_client("gemini", model="gemini-1.5-pro", effort="high",
                              environ=server.env("gemini"))  # fmt: skip

    assert done.returncode == 2 and server.requests == []  # refused before anything was sent
    (line,) = done.stderr.strip().splitlines()
    assert "--effort: gemini-2.0-flash does not think" in line and "remove the option" in line


def test_model_options_reach_the_body_as_named(tmp_path):
    with FakeProvider() as server:
        server.enqueue(openai_reply("hi"), anthropic_reply("hi"))
        for provider, model in (("openai", "gpt-5-mini"), ("claude", "claude-sonnet-4-5")):
            env = server.env(provider)
            llm = create_llm_client(provider, model=model, environ=env, max_retries=0,
                                    model_options={"temperature": 0.2, "seed": 7,
                                                   "max_tokens": 1234})  # fmt: skip
            llm.call_llm("sys", [Message("user", "hi")])

    openai, claude = (r.body for r in server.requests)
    assert (openai["temperature"], openai["seed"], openai["max_tokens"]) == (0.2, 7, 1234)
    assert (claude["temperature"], claude["seed"], claude["max_tokens"]) == (0.2, 7, 1234)


def test_a_model_that_refuses_an_option_is_named_with_it_in_one_line(repo, capsys, home):
    with FakeProvider() as server:
        done = run_main(capsys, "--task", "x", "--repo", str(repo), "--model-option",
                        "temperature=0.2", env=server.env("claude"))  # fmt: skip
        assert server.requests == []  # refused before anything was sent
        with pytest.raises(LlmConfigError, match="--model-option top_k: claude-opus-5 does not"):
            create_llm_client("claude", model="claude-opus-5", model_options={"top_k": 5},
                              environ=server.env("claude"))  # fmt: skip
        # A refusal the table does not know of comes back as the API's 400, named the same way
        server.enqueue(anthropic_error(400, "top_k: Extra inputs are not permitted"))
        llm = create_llm_client(
            "claude",
            model="claude-sonnet-4-5",
            max_retries=0,
            model_options={"top_k": 5},
            environ=server.env("claude"),
        )
        with pytest.raises(LlmError) as raised:
            llm.call_llm("sys", [Message("user", "hi")])

    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "--model-option temperature" in line and "claude-sonnet-5-5" in line
    assert "claude-sonnet-4-5 refused --model-option top_k" in str(raised.value)
    assert str(raised.value).count("\n") == 0


def test_effort_is_a_config_key_and_a_task_field(home, tmp_path):
    from toy_agent.batch.tasks import BatchError, parse_tasks

    (tmp_path / "r").mkdir()
    [task] = parse_tasks([json.dumps({"id": "a", "repo": "r", "task": "t", "effort": "low"})],
                         base=tmp_path)  # fmt: skip
    assert task.effort == "low"
    with pytest.raises(BatchError, match="'effort' must be one of low, medium, high"):
        parse_tasks([json.dumps({"id": "a", "repo": "r", "task": "t", "effort": "max"})],
                    base=tmp_path)  # fmt: skip


def test_effort_and_options_are_recorded_in_the_trajectory_and_shown_in_the_report(
    repo, tmp_path, capsys, home
):
    trajectory = tmp_path / "run.json"
    with FakeProvider() as server:
        server.enqueue(
            anthropic_reply(
                "",
                tool_calls=[ToolCall("task_complete", {"result": "ok"}, "c1")],
                thinking="Easy one.",
            )
        )
        config = home / "config" / "toy-agent" / "config.toml"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.write_text('effort = "low"\nmodel_option = ["seed=7"]\n')
        done = run_main(capsys, "--task", "x", "--repo", str(repo), "--tool-format", "native",
                        "--trajectory", str(trajectory), env=server.env("claude"))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert server.requests[0].body["output_config"] == {"effort": "low"}
    assert server.requests[0].body["seed"] == 7
    recorded = json.loads(trajectory.read_text())
    assert (recorded["settings"]["effort"], recorded["settings"]["model_options"]) == (
        "low", {"seed": 7})  # fmt: skip
    assert recorded["steps"][0]["response"]["thinking"] == "Easy one."

    page = tmp_path / "report.html"
    assert run_main(capsys, "report", str(trajectory), "-o", str(page)).returncode == 0
    text = page.read_text()
    assert "<dt>effort</dt><dd>low</dd>" in text and "Easy one." in text


# --- sessions, replays, redaction, elision --------------------------------------------------


def test_a_resumed_session_sends_the_recorded_signatures_and_closes_the_old_loop(
    repo, capsys, home
):
    with FakeProvider() as server:
        env = server.env("claude")
        server.enqueue(
            anthropic_reply("", tool_calls=[ToolCall("read_file", {"path": "hello.py"}, "c1")],
                            thinking="Read it first.", stop_reason="tool_use"),
            anthropic_reply("", tool_calls=[ToolCall("task_complete", {"result": "a typo"},
                                                     "c2")], stop_reason="tool_use"),
            anthropic_reply("", tool_calls=[ToolCall("task_complete", {"result": "fixed"},
                                                     "c3")], stop_reason="tool_use"),
        )  # fmt: skip
        args = ("--repo", str(repo), "--tool-format", "native", "-q")
        first = run_main(capsys, "--task", "what is wrong?", *args, env=env)
        again = run_main(capsys, "--continue", "--task", "fix it", *args, env=env)

    assert (first.returncode, again.returncode) == (0, 0), again.stderr
    [session] = (home / "state" / "toy-agent" / "sessions").glob("*.json")
    assert claude_signature("Read it first.") in session.read_text()  # not [REDACTED]
    messages = server.requests[2].body["messages"]
    assert messages[1]["content"][0]["signature"] == claude_signature("Read it first.")
    roles = [(m["role"], [b["type"] for b in m["content"]]) for m in messages]
    # the old loop closed before the new task
    assert roles[-3:] == [("user", ["tool_result"]), ("assistant", ["text"]), ("user", ["text"])]


def test_a_replayed_run_keeps_the_recorded_turns_and_a_resume_of_it_sends_them(
    repo, tmp_path, capsys, home
):
    recorded, replayed = tmp_path / "run.json", tmp_path / "replayed.json"
    with FakeProvider() as server:
        env = server.env("gemini")
        server.enqueue(
            gemini_reply("", tool_calls=[ToolCall("read_file", {"path": "hello.py"})],
                         thought="Look first."),
            gemini_reply("", tool_calls=[ToolCall("task_complete", {"result": "typo"})]),
            gemini_reply("", tool_calls=[ToolCall("task_complete", {"result": "again"})]),
        )  # fmt: skip
        args = ("--repo", str(repo), "--tool-format", "native", "-q", "--llm-provider", "gemini")
        assert run_main(capsys, "--task", "look", *args, "--trajectory", str(recorded),
                        env=env).returncode == 0  # fmt: skip
        assert run_main(capsys, "--task", "look", "--repo", str(repo), "--tool-format",
                        "native", "-q", "--replay", str(recorded), "--trajectory",
                        str(replayed)).returncode == 0  # fmt: skip
        resumed = run_main(capsys, "--resume", str(replayed), "--task", "once more", *args,
                           env=env)  # fmt: skip

    assert resumed.returncode == 0, resumed.stderr
    turns = [[s["response"].get("turn") for s in json.loads(p.read_text())["steps"]]
             for p in (recorded, replayed)]  # fmt: skip
    assert turns[0] == turns[1] and turns[0][0]["blocks"][0]["text"] == "Look first."
    model_parts = [c["parts"] for c in server.requests[2].body["contents"] if c["role"] == "model"]
    signed = model_parts[0][1]
    assert decoded(signed["thoughtSignature"]) == decoded(
        gemini_signature("read_file", {"path": "hello.py"})
    )


def test_redaction_leaves_signatures_alone_and_unsigns_a_block_whose_text_it_changed():
    secret = "sk-ant-" + "a1B2c3D4e5F6g7H8i9J0" * 2
    redactor = Redactor([secret])
    signature = claude_signature("plain")
    assert redactor.redact(signature) == REDACTED  # what a signature alone looks like to it
    data = {"blocks": [
        {"type": "thinking", "thinking": "plain", "signature": signature},
        {"type": "thinking", "thinking": f"key {secret}", "signature": "Eq" + "x" * 60},
        {"type": "redacted_thinking", "data": "Zm9v" * 20},
        {"thought_signature": "QUJD" * 20, "function_call": {"name": "f", "args": {}}},
    ]}  # fmt: skip
    kept, unsigned, redacted, part = redactor.redact_obj(data)["blocks"]
    assert kept["signature"] == signature and redacted["data"] == "Zm9v" * 20
    assert part["thought_signature"] == "QUJD" * 20
    assert unsigned == {"type": "thinking", "thinking": f"key {REDACTED}"}
    turn = SignedTurn("claude", "m", tuple(redactor.redact_obj(data)["blocks"][:2]))
    message = Message("assistant", "", turn=turn)
    sent = to_anthropic_messages([Message("user", "go"), message], "m")[1]["content"]
    assert [b.get("thinking") for b in sent] == ["plain"]  # the broken block is left out


def test_context_elision_never_cuts_into_a_signed_turn():
    turn = SignedTurn("claude", "m", ({"type": "thinking", "thinking": "t", "signature": "s"},))
    big = "x" * 40_000
    history = [Message("user", "task"),
               Message("assistant", big, turn=turn), Message("user", big),
               Message("assistant", big), Message("user", big),
               *[Message("assistant", "a"), Message("user", "b")] * 2]  # fmt: skip
    fitted = fit_to_budget(history, 10_000)
    assert fitted[1] is history[1]  # whole, signature and all
    assert len(fitted[2].content) < 1_000 and len(fitted[3].content) < 1_000


# --- the thinking, shown -------------------------------------------------------------------


def test_stream_json_has_the_thinking_as_its_own_event_valid_against_the_schema():
    import jsonschema

    schema = json.loads((ROOT / "docs" / "output.schema.json").read_text())
    out = io.StringIO()
    writer = JsonLinesWriter(out, Redactor(["hunter2-secret"]).redact_obj)
    response = LlmResponse("", usage=Usage(5, 9, reasoning_tokens=4),
                           thinking="Check hunter2-secret first.",
                           turn=SignedTurn("claude", "m", ({"type": "thinking"},)))  # fmt: skip
    writer(LlmResponded(1, response, 0.5))
    thinking, reply = map(json.loads, out.getvalue().splitlines())
    assert thinking == {"type": "thinking", "iteration": 1,
                        "text": f"Check {REDACTED} first."}  # fmt: skip
    assert reply["type"] == "llm_response" and "turn" not in reply and "thinking" not in reply
    assert reply["usage"]["reasoning_tokens"] == 4
    validator = jsonschema.Draft202012Validator(schema)
    for line in (thinking, reply):
        validator.validate(line)


def test_the_live_view_shows_the_thinking_dimmed_and_folded_when_long():
    from toy_agent.view import THINKING_LINES, TerminalView

    out = io.StringIO()
    view = TerminalView(out, color=True, width=100)
    thinking = "\n".join(f"idea {n}" for n in range(1, 11))
    view(StepStarted(1, 5))
    view(LlmResponded(1, LlmResponse("", thinking=thinking), 1.0))
    view.close()

    text = out.getvalue()
    assert "thinking: idea 1" in text and f"idea {THINKING_LINES}" in text
    assert f"idea {THINKING_LINES + 1}" not in text
    assert f"… {10 - THINKING_LINES} more lines" in text
    assert "\x1b[2m" in text  # dim


def test_the_report_of_a_session_keeps_each_steps_thinking(tmp_path, repo):
    from toy_agent.report import write_report
    from toy_agent.sessions import SessionRecorder, SessionStore
    from toy_agent.tools import CodeRepositoryTools

    store = SessionStore(tmp_path / "sessions")
    tools = CodeRepositoryTools(repo)
    done = LlmResponse("", (ToolCall("task_complete", {"result": "ok"}, "c1"),),
                       thinking="Nothing to do here.")  # fmt: skip
    llm = ScriptedLlm(done)
    sessions = SessionRecorder(store, store.new(repo), tools, lambda: agent.conversation_history)
    agent = ReactAgent(llm, tools=tools, on_event=sessions, tool_format="native")
    agent.run_result("look")
    [path] = (tmp_path / "sessions").glob("*.json")
    page = write_report([str(path)], tmp_path / "r.html")
    assert "Nothing to do here." in page.read_text()


# --- OpenAI's Responses API ------------------------------------------------------------------


def responses_steps(stream: bool) -> list:
    calls = [
        ToolCall("read_file", {"path": "hello.py"}, "call_1"),
        ToolCall("list_files", {"path": "."}, "call_2"),
        ToolCall("task_complete", {"result": "it greets"}, "call_3"),
    ]
    return [
        responses_reply("Reading.", tool_calls=[c], reasoning=f"step {n}", turn=n, stream=stream,
                        usage=Usage(10, 8, reasoning_tokens=5))
        for n, c in enumerate(calls, 1)
    ]  # fmt: skip


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_responses_api_sends_each_reasoning_item_back_before_its_calls(stream, repo):
    with FakeProvider() as server:
        server.enqueue(*responses_steps(stream))
        llm = create_llm_client("openai", model="gpt-5-mini", openai_api="responses",
                                effort="high", show_thinking=True, max_retries=0,
                                environ=server.env("openai"))  # fmt: skip
        agent = ReactAgent(llm, repo, tool_format="native", stream=stream)
        result = agent.run_result("what does hello.py do?")

    assert result.outcome == "completed", result.error
    assert result.usage.reasoning_tokens == 15
    first, last = server.requests[0].body, server.requests[2].body
    assert first["reasoning"] == {"effort": "high", "summary": "auto"}
    assert first["store"] is False and first["include"] == ["reasoning.encrypted_content"]
    kinds = [(i.get("type") or i.get("role"), i.get("id")) for i in last["input"]]
    assert kinds[1:4] == [("reasoning", "rs_1"), ("message", "msg_1"), ("function_call", "fc_1")]
    assert kinds[4] == ("function_call_output", None)
    assert [m.thinking for m in agent.conversation_history if m.role == "assistant"][:2] == [
        "step 1", "step 2"]  # fmt: skip


def test_the_responses_api_refuses_a_call_whose_reasoning_item_was_dropped(repo):
    class Careless(OpenAIResponsesLlmClient):
        def call_llm(self, system_prompt, messages, **kwargs):
            kept = [replace(m, turn=replace(m.turn, blocks=tuple(
                b for b in m.turn.blocks if b.get("type") != "reasoning"))) if m.turn else m
                for m in messages]  # fmt: skip
            return super().call_llm(system_prompt, kept, **kwargs)

    with FakeProvider() as server:
        server.enqueue(*responses_steps(False))
        llm = Careless("k", "gpt-5-mini", base_url=server.url + "/v1", max_retries=0, environ={})
        result = ReactAgent(llm, repo, tool_format="native").run_result("x")

    assert result.outcome == "provider_error" and len(server.requests) == 2
    assert "of type 'function_call' was provided without its required 'reasoning' item: 'rs_1'" in (
        str(result.error))  # fmt: skip


def test_a_continued_responses_session_leaves_out_the_reasoning_item_redaction_unsigned(
    repo, capsys, home
):
    """A summary that held a secret is redacted in the saved session, and its item loses its
    encrypted_content: the next task of the session sends the turn without that item (a bare
    one is a 404 under store: false) and its call without the id that would tie it to it."""
    token = "ghp_" + "a1B2c3D4e5F6" * 3
    with FakeProvider() as server:
        env = server.env("openai")
        server.enqueue(
            responses_reply("Reading.", reasoning=f"The token is {token}.", turn=1,
                            tool_calls=[ToolCall("read_file", {"path": "hello.py"}, "call_1")]),
            responses_reply("", tool_calls=[ToolCall("task_complete", {"result": "a"}, "call_2")],
                            reasoning="Done.", turn=2),
            responses_reply("", tool_calls=[ToolCall("task_complete", {"result": "b"}, "call_3")],
                            reasoning="Again.", turn=3),
        )  # fmt: skip
        args = ("--repo", str(repo), "--tool-format", "native", "-q", "--llm-provider", "openai",
                "--openai-api", "responses", "--model", "gpt-5-mini")  # fmt: skip
        first = run_main(capsys, "--task", "look", *args, env=env)
        again = run_main(capsys, "--continue", "--task", "once more", *args, env=env)

    assert (first.returncode, again.returncode) == (0, 0), again.stderr
    [session] = (home / "state" / "toy-agent" / "sessions").glob("*.json")
    assert token not in session.read_text()
    sent = server.requests[2].body["input"]
    kinds = [(i.get("type") or i.get("role"), i.get("id")) for i in sent]
    assert ("reasoning", "rs_1") not in kinds and ("reasoning", "rs_2") in kinds
    assert kinds[1:3] == [("assistant", None), ("function_call", None)]  # untied from rs_1
    assert sent[2]["call_id"] == "call_1" and sent[1]["content"][0]["text"] == "Reading."
    assert kinds[4:6] == [("reasoning", "rs_2"), ("function_call", "fc_2")]  # whole: signed


def test_a_bare_reasoning_item_gets_the_apis_404_and_a_hint_that_is_not_the_model_name(repo):
    class Bare(OpenAIResponsesLlmClient):  # sends each reasoning item without its content
        def _body(self, request):
            body = super()._body(request)
            body["input"] = [{k: v for k, v in i.items() if k != "encrypted_content"}
                             for i in body["input"]]  # fmt: skip
            return body

    with FakeProvider() as server:
        server.enqueue(*responses_steps(False))
        llm = Bare("k", "gpt-5-mini", base_url=server.url + "/v1", max_retries=0, environ={})
        result = ReactAgent(llm, repo, tool_format="native").run_result("x")

    assert result.outcome == "provider_error" and len(server.requests) == 2
    error = str(result.error)
    assert "404" in error and "Item with id 'rs_1' not found. Items are not persisted" in error
    assert "check the model name" not in error and "start a new session" in error


def test_openai_api_responses_is_a_flag_of_the_openai_provider_only(repo, capsys, home):
    with FakeProvider() as server:
        env = {**server.env("openai"), **server.env("claude")}
        wrong = run_main(capsys, "--task", "x", "--repo", str(repo), "--openai-api", "responses",
                         "--llm-provider", "claude", env=env)  # fmt: skip
        server.enqueue(
            responses_reply("", tool_calls=[ToolCall("task_complete", {"result": "ok"}, "c1")])
        )
        right = run_main(
            capsys,
            "--task",
            "x",
            "--repo",
            str(repo),
            "--openai-api",
            "responses",
            "--llm-provider",
            "openai",
            "--tool-format",
            "native",
            env=env,
        )

    assert wrong.returncode == 2 and "--openai-api responses is for" in wrong.stderr
    assert right.returncode == 0, right.stderr
    assert server.requests[0].path == "/v1/responses"


@pytest.mark.parametrize("provider", ["claude", "gemini"])
def test_a_conversation_moved_to_another_model_sends_none_of_the_first_models_signatures(
    provider, repo
):
    models = {"claude": ("claude-sonnet-5-5", "claude-opus-5"),
              "gemini": ("gemini-3-pro", "gemini-3-flash")}[provider]  # fmt: skip
    with FakeProvider() as server:
        server.enqueue(*steps(provider, False, False)[1:], *steps(provider, False, False)[2:])
        first = ReactAgent(client(provider, server, model=models[0]), repo, tool_format="native")
        first.run_result("look")
        second = ReactAgent(client(provider, server, model=models[1]), repo, tool_format="native")
        result = second.run_result("again", history=first.conversation_history)

    assert result.outcome == "completed", result.error
    body = server.requests[-1].body
    sent = json.dumps(body)
    assert '"thinking"' not in sent and '"thought": true' not in sent
    if provider == "claude":
        assert '"signature"' not in sent
    else:  # each rebuilt call carries Gemini's placeholder, never the first model's signature
        signatures = [p["thoughtSignature"] for c in body["contents"] for p in c["parts"]
                      if "thoughtSignature" in p]  # fmt: skip
        assert signatures and {decoded(s) for s in signatures} == {
            b"skip_thought_signature_validator"}  # fmt: skip
