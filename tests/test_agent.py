"""The real loop, driven by a scripted LLM, over real files in tmp_path."""

from __future__ import annotations

import base64
import json
import threading
import time

import pytest
from fakes import BlockingLlm, ScriptedLlm, native_call, xml_action

from toy_agent import ReactAgent
from toy_agent.events import (
    RunFinished,
    RunStarted,
    StepFinished,
    TextDelta,
    ToolFinished,
    TrajectoryRecorder,
)
from toy_agent.llm import AdaptedClient, LlmClient, LlmError, ReplayLlmClient
from toy_agent.messages import Image, LlmResponse, Message, ToolOutput, Usage
from toy_agent.redaction import Redactor
from toy_agent.tools import CodeRepositoryTools


@pytest.fixture
def repo(tmp_path):
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def greet():\n    return 'helo'\n")
    (root / "README.md").write_text("# demo\n")
    return root


def test_agent_reads_edits_and_completes_the_task(repo):
    llm = ScriptedLlm(
        xml_action("list_files", path="."),
        xml_action("read_file", path="src/app.py"),
        xml_action("edit_file", path="src/app.py", old_str="'helo'", new_str="'hello'"),
        xml_action("task_complete", result="Fixed the typo in greet()."),
    )
    result = ReactAgent(llm, repo, max_iterations=10).run("Fix the typo in greet")

    assert (repo / "src" / "app.py").read_text() == "def greet():\n    return 'hello'\n"
    assert result["success"] is True
    assert result["outcome"] == "completed"
    assert result["iterations"] == 4
    assert result["result"] == "Fixed the typo in greet()."
    # task, then (assistant, observation) x3, then the final assistant message
    assert result["conversation_length"] == 8
    assert result["files_changed"] == [{"path": "src/app.py", "added": 1, "removed": 1}]
    observation = llm.requests[2]["messages"][-1].content
    assert observation.startswith("<OBSERVATION>") and "return 'helo'" in observation


def test_system_prompt_lists_every_tool_in_the_spec_format(repo):
    llm = ScriptedLlm(xml_action("task_complete", result="done"))
    agent = ReactAgent(llm, repo)
    agent.run("anything")

    prompt = llm.requests[0]["system"]
    assert "Available Tools:" in prompt
    for name in (
        "list_files",
        "read_file",
        "write_file",
        "search_in_files",
        "get_file_info",
        "task_complete",
    ):
        block = prompt.split(f"<tool><name>{name}</name>", 1)[1].split("</tool>", 1)[0]
        params = json.loads(block.split("<parameters>", 1)[1].split("</parameters>", 1)[0])
        assert isinstance(params, dict) and all(isinstance(v, str) for v in params.values())
        assert "<description>" in block
    assert "<THOUGHT>" in prompt and "<ACTION>" in prompt
    assert "run_command" not in prompt  # only offered with allow_commands


def test_unparseable_reply_becomes_an_observation_and_the_loop_goes_on(repo):
    llm = ScriptedLlm(
        "I think I should look around first.", xml_action("task_complete", result="ok")
    )
    result = ReactAgent(llm, repo).run("task")

    assert result["success"] is True and result["iterations"] == 2
    feedback = llm.requests[1]["messages"][-1].content
    assert "ACTION" in feedback and "<tool_name>" in feedback


def test_unknown_tool_is_reported_with_the_available_ones(repo):
    llm = ScriptedLlm(
        xml_action("read_fil", path="README.md"), xml_action("task_complete", result="ok")
    )
    ReactAgent(llm, repo).run("task")

    observation = llm.requests[1]["messages"][-1].content
    assert "Unknown tool 'read_fil'" in observation
    assert "Did you mean read_file?" in observation
    assert "list_files" in observation and "task_complete" in observation


def test_path_outside_the_repository_is_refused_and_nothing_is_written(repo, tmp_path):
    llm = ScriptedLlm(
        xml_action("write_file", path="../escaped.txt", content="x"),
        xml_action("read_file", path=str(tmp_path / "secret.txt")),
        xml_action("task_complete", result="ok"),
    )
    (tmp_path / "secret.txt").write_text("TOP SECRET")
    ReactAgent(llm, repo).run("task")

    assert not (tmp_path / "escaped.txt").exists()
    assert "TOP SECRET" not in llm.sent_text()
    assert "../escaped.txt is outside the repository" in llm.requests[1]["messages"][-1].content
    assert "secret.txt is outside the repository" in llm.requests[2]["messages"][-1].content


def test_iteration_limit_ends_the_run_as_not_completed(repo):
    llm = ScriptedLlm(*[xml_action("list_files", path=".")] * 3)
    result = ReactAgent(llm, repo, max_iterations=3).run("never finishes")

    assert result["success"] is False
    assert result["outcome"] == "max_iterations"
    assert result["iterations"] == 3
    assert "iteration limit (3)" in result["error"]


def test_provider_failure_ends_the_run_with_its_message(repo):
    llm = ScriptedLlm(LlmError("claude", "invalid x-api-key", status=401))
    result = ReactAgent(llm, repo).run("task")

    assert result["outcome"] == "provider_error"
    assert result["error"] == "claude API error 401: invalid x-api-key"


def test_reply_cut_off_by_the_token_limit_is_not_executed(repo):
    cut = LlmResponse(
        xml_action("write_file", path="big.txt", content="partial"), stop_reason="max_tokens"
    )
    llm = ScriptedLlm(cut, xml_action("task_complete", result="ok"))
    ReactAgent(llm, repo).run("task")

    assert not (repo / "big.txt").exists()
    assert "output-token limit" in llm.requests[1]["messages"][-1].content


def test_secrets_in_files_never_reach_the_llm(repo, monkeypatch):
    monkeypatch.setenv("DEPLOY_TOKEN", "s3cr3t-deploy-value-123")
    (repo / "config.env").write_text(
        "DEPLOY_TOKEN=s3cr3t-deploy-value-123\n"
        "OPENAI=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789\n"
    )
    llm = ScriptedLlm(
        xml_action("read_file", path="config.env"), xml_action("task_complete", result="ok")
    )
    ReactAgent(llm, repo, redactor=Redactor()).run("task")

    sent = llm.sent_text()
    assert "s3cr3t-deploy-value-123" not in sent
    assert "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789" not in sent
    assert "DEPLOY_TOKEN=[REDACTED]" in sent


def test_the_same_action_three_times_in_a_row_gets_a_warning(repo):
    llm = ScriptedLlm(
        *[xml_action("read_file", path="README.md")] * 3, xml_action("task_complete", result="ok")
    )
    ReactAgent(llm, repo).run("task")

    observations = [llm.requests[i]["messages"][-1].content for i in (1, 2, 3)]
    assert "same parameters" not in observations[0] + observations[1]
    assert "same parameters 3 times in a row" in observations[2]


def test_events_arrive_in_order_for_a_scripted_run(repo):
    events = []
    llm = ScriptedLlm(
        xml_action("read_file", path="README.md"), xml_action("task_complete", result="ok")
    )
    ReactAgent(llm, repo, on_event=events.append).run("task")

    kinds = [type(e).__name__ for e in events if type(e).__name__ != "LlmRequested"]
    assert kinds == [
        "RunStarted",
        "StepStarted",
        "LlmResponded",
        "ToolStarted",
        "ToolFinished",
        "StepFinished",
        "StepStarted",
        "LlmResponded",
        "StepFinished",
        "RunFinished",
    ]
    assert isinstance(events[0], RunStarted) and events[0].task == "task"
    finished = [e for e in events if isinstance(e, ToolFinished)][0]
    assert finished.observation.action.tool_name == "read_file"
    assert "# demo" in finished.observation.content
    assert isinstance(events[-1], RunFinished) and events[-1].result["success"]


def test_cancel_from_another_thread_stops_the_call_in_flight(repo):
    llm = BlockingLlm()
    agent = ReactAgent(llm, repo)
    results = []
    worker = threading.Thread(target=lambda: results.append(agent.run("task")))
    worker.start()
    assert llm.called.wait(10)
    agent.cancel()
    worker.join(10)
    llm.release.set()

    assert not worker.is_alive()
    assert results[0]["outcome"] == "cancelled"
    assert results[0]["success"] is False


def test_refused_confirmation_becomes_an_observation(repo):
    asked = []
    llm = ScriptedLlm(
        xml_action("write_file", path="new.txt", content="hi"),
        xml_action("task_complete", result="ok"),
    )
    agent = ReactAgent(llm, repo, confirm=lambda action: asked.append(action) or False)
    agent.run("task")

    assert [a.tool_name for a in asked] == ["write_file"]
    assert not (repo / "new.txt").exists()
    assert "declined" in llm.requests[1]["messages"][-1].content


@pytest.mark.slow
def test_the_wait_for_a_confirmation_is_not_counted_as_the_tools_time(repo):
    def slow_yes(action):
        time.sleep(CONFIRM_WAIT)  # a person reading the preview
        return True

    events = []
    llm = ScriptedLlm(
        xml_action("write_file", path="new.txt", content="hi"),
        xml_action("task_complete", result="ok"),
    )
    ReactAgent(llm, repo, confirm=slow_yes, on_event=events.append).run("task")

    assert (repo / "new.txt").read_text() == "hi"
    [finished] = [e for e in events if isinstance(e, ToolFinished)]
    [step, _] = [e.step for e in events if isinstance(e, StepFinished)]
    assert finished.seconds < CONFIRM_WAIT and step.tool_seconds == finished.seconds


CONFIRM_WAIT = 0.5  # far longer than writing a 2-byte file takes


@pytest.mark.slow
def test_requests_stay_within_the_context_budget_on_huge_files(repo):
    (repo / "huge.txt").write_text(("x" * 199 + "\n") * 20_000)  # 4 MB
    budget = 20_000
    reads = [xml_action("read_file", path="huge.txt", start_line=1 + 300 * i) for i in range(8)]
    llm = ScriptedLlm(*reads, xml_action("task_complete", result="ok"))
    ReactAgent(llm, repo, max_iterations=20, context_budget=budget).run("read it all")

    sizes = [sum(len(m.content) for m in r["messages"]) for r in llm.requests]
    assert max(sizes) <= budget * 4 * 1.1
    assert "elided" in json.dumps([m.to_dict() for m in llm.requests[-1]["messages"]])
    assert llm.requests[-1]["messages"][0].content == "read it all"  # the task stays whole


def test_usage_is_summed_over_the_run(repo):
    llm = ScriptedLlm(
        LlmResponse(xml_action("list_files"), usage=Usage(100, 10, 0)),
        LlmResponse(xml_action("task_complete", result="ok"), usage=Usage(150, 5, 90)),
    )
    result = ReactAgent(llm, repo).run("task")

    assert result["usage"] == Usage(250, 15, 90).to_dict()


def test_a_recorded_trajectory_replays_the_same_run(repo, tmp_path):
    trajectory = tmp_path / "run.json"
    script = [
        xml_action("write_file", path="notes.txt", content="first"),
        xml_action("task_complete", result="wrote notes"),
    ]
    recorded = ReactAgent(ScriptedLlm(*script), repo, on_event=TrajectoryRecorder(trajectory)).run(
        "write notes"
    )
    (repo / "notes.txt").unlink()

    data = json.loads(trajectory.read_text())
    assert data["task"] == "write notes"
    assert [s["actions"][0]["tool_name"] for s in data["steps"]] == ["write_file", "task_complete"]
    assert data["steps"][0]["observations"][0]["is_error"] is False
    replayed = ReactAgent(ReplayLlmClient(trajectory), repo).run("write notes")

    assert replayed["result"] == recorded["result"] == "wrote notes"
    assert (repo / "notes.txt").read_text() == "first"


def test_native_tool_calls_all_run_in_order_and_are_all_answered(repo):
    llm = ScriptedLlm(
        native_call(("read_file", {"path": "README.md"}), ("list_files", {"path": "src"})),
        native_call(("task_complete", {"result": "looked"})),
    )
    result = ReactAgent(llm, repo, tool_format="native").run("look around")

    assert result["success"]
    assert [t["name"] for t in llm.requests[0]["tools"]][-1] == "task_complete"
    answer = llm.requests[1]["messages"][-1]
    assert [r.call_id for r in answer.tool_results] == ["call_0", "call_1"]
    assert "# demo" in answer.tool_results[0].content
    assert "app.py" in answer.tool_results[1].content


def test_react_final_answer_ends_the_run(repo):
    llm = ScriptedLlm(
        'Thought: check the readme\nAction: read_file\nAction Input: {"path": "README.md"}',
        "Thought: I know now\nFinal Answer: It is a demo.",
    )
    result = ReactAgent(llm, repo, tool_format="react").run("what is it?")

    assert result["success"] and result["result"] == "It is a demo."
    assert llm.requests[1]["messages"][-1].content.startswith("Observation:")


def test_only_the_first_of_several_xml_actions_runs_and_the_llm_is_told(repo):
    two = (
        xml_action("write_file", path="one.txt", content="1")
        + "\n"
        + xml_action("write_file", path="two.txt", content="2")
    )
    llm = ScriptedLlm(two, xml_action("task_complete", result="ok"))
    ReactAgent(llm, repo).run("task")

    assert (repo / "one.txt").exists() and not (repo / "two.txt").exists()
    assert "only the first action was executed" in llm.requests[1]["messages"][-1].content


def test_streaming_hands_text_deltas_to_subscribers(repo):
    deltas = []
    llm = ScriptedLlm(xml_action("task_complete", result="ok"))
    ReactAgent(
        llm,
        repo,
        stream=True,
        on_event=lambda e: deltas.append(e.text) if isinstance(e, TextDelta) else None,
    ).run("task")

    assert "".join(deltas).startswith("<THOUGHT>")


def test_without_streaming_no_text_deltas_are_emitted(repo):
    events = []
    ReactAgent(
        ScriptedLlm(xml_action("task_complete", result="ok")), repo, on_event=events.append
    ).run("task")

    assert not any(isinstance(e, TextDelta) for e in events)


def test_one_file_changed_through_two_spellings_is_one_change(tmp_path):
    llm = ScriptedLlm(
        xml_action("write_file", path="a.py", content="one\n"),
        xml_action("edit_file", path="./a.py", old_str="one", new_str="two"),
        xml_action("task_complete", result="ok"),
    )
    result = ReactAgent(llm, tmp_path).run_result("x")
    assert result.files_changed == ({"path": "a.py", "added": 1, "removed": 0},)
    assert list(result.diffs) == ["a.py"]
    assert "+two" in result.diffs["a.py"] and "/dev/null" in result.diffs["a.py"]


def test_contradicting_tools_is_an_error_and_tools_decide_the_rest(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    tools = CodeRepositoryTools(a)
    with pytest.raises(ValueError, match="contradicts tools"):
        ReactAgent(ScriptedLlm(), repo_path=b, tools=tools)
    with pytest.raises(ValueError, match="allow_commands=True contradicts"):
        ReactAgent(ScriptedLlm(), tools=tools, allow_commands=True)
    agent = ReactAgent(ScriptedLlm(), tools=tools)
    assert agent.repo_path == a and agent.tools is tools


def test_a_diff_of_a_file_without_a_final_newline_counts_one_line_each_way(tmp_path):
    (tmp_path / "f.txt").write_text("x")
    llm = ScriptedLlm(xml_action("edit_file", path="f.txt", old_str="x", new_str="y"),
                      xml_action("task_complete", result="ok"))  # fmt: skip
    result = ReactAgent(llm, tmp_path).run_result("x")
    assert result.files_changed == ({"path": "f.txt", "added": 1, "removed": 1},)
    assert (
        "-x\n\\ No newline at end of file\n+y\n\\ No newline at end of file\n"
        in (result.diffs["f.txt"])
    )


def test_the_spec_methods_accept_plain_strings(tmp_path):
    class TextClient(LlmClient):  # written to the seed spec: call_llm returns a str
        def call_llm(self, system_prompt, messages, *, tools=None, on_text=None):
            return xml_action("task_complete", result="plain")

    agent = ReactAgent(TextClient(), tmp_path)
    assert agent.run("x")["result"] == "plain"
    assert agent._execute_tool("task_complete", {"result": "done"}) == "done"
    assert agent._parse_response(xml_action("list_files")).actions[0].tool_name == "list_files"


class SeedSpecLlm:
    """A client as the original spec wrote one: no LlmClient, no attributes but its replies,
    and `call_llm(system_prompt, messages)` answering with text."""

    def __init__(self, *replies: str):
        self.replies = list(replies)
        self.sent: list[list[Message]] = []

    def call_llm(self, system_prompt, messages):
        self.sent.append(list(messages))
        return self.replies.pop(0)


def test_a_seed_spec_client_runs_a_whole_task_and_is_sent_no_images(repo):
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(32)).decode()

    def screenshot() -> ToolOutput:
        """Take a screenshot."""
        return ToolOutput("the screen", (Image.from_base64(png, "image/png"),))

    llm = SeedSpecLlm(
        xml_action("screenshot"),
        xml_action("edit_file", path="src/app.py", old_str="'helo'", new_str="'hello'"),
        xml_action("task_complete", result="fixed the typo"),
    )
    agent = ReactAgent(llm, repo, tools=[screenshot])
    result = agent.run_result("fix the typo")
    assert (result.outcome, result.result, result.iterations) == ("completed", "fixed the typo", 3)
    assert "return 'hello'" in (repo / "src" / "app.py").read_text()
    observation = llm.sent[1][-1]
    assert not observation.images
    assert "[image 1 not shown to you: the model in use is not known to take images]" in (
        observation.content
    )
    settings = agent.settings()
    assert (settings["provider"], settings["model"], settings["image_types"]) == (
        "SeedSpecLlm", "", [])  # fmt: skip
    assert (settings["base_url"], settings["effort"], settings["model_options"]) == (
        None, None, {})  # fmt: skip


def test_the_client_is_adapted_once_and_the_one_given_stays_reachable(repo):
    llm = ScriptedLlm(xml_action("task_complete", result="ok"))
    llm.retry_base_delay = 0.5  # type: ignore[attr-defined]  # one of its own attributes
    agent = ReactAgent(llm, repo)
    assert isinstance(agent.llm_client, AdaptedClient) and agent.llm_client.client is llm
    assert (agent.llm_client.provider, agent.llm_client.model) == ("scripted", "scripted-1")
    assert agent.llm_client.retry_base_delay == 0.5  # what the adapter lacks reads through
    again = ReactAgent(agent.llm_client, repo)
    assert again.llm_client is agent.llm_client  # an adapted client is not wrapped twice
    seed = SeedSpecLlm(xml_action("task_complete", result="switched"))
    agent.llm_client = seed  # what interactive /model does: the new client is adapted too
    assert agent.llm_client.client is seed and agent.run("x")["result"] == "switched"
