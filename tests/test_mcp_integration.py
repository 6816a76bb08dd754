"""MCP tools through the agent and the CLI, against the real demo server over stdio."""

from __future__ import annotations

import json
import shlex
import socket
import sys
from pathlib import Path

import pytest
from fake_providers import FakeProvider, openai_reply
from fakes import ScriptedLlm, folder, write_replay, xml_action
from mcp_helpers import DEMO, DEMO_COMMAND, demo_in_process

from toy_agent import ReactAgent
from toy_agent.cli import main
from toy_agent.llm import OpenAICompatibleLlmClient
from toy_agent.mcp_tools import MCP_DESCRIPTION_MAX_CHARS, MCP_TOOLS_MAX, McpTools
from toy_agent.messages import ToolCall

SERVER_COMMAND = DEMO_COMMAND


@pytest.fixture
def repo(tmp_path):
    return folder(tmp_path / "repo", {"notes.txt": "local notes\n"})


@pytest.mark.slow
def test_agent_offers_and_runs_mcp_tools_next_to_local_ones(repo):
    llm = ScriptedLlm(
        xml_action("add", a=2, b=40),
        xml_action("fail"),
        xml_action("read_file", path="notes.txt"),
        xml_action("demo_server__read_file", path="anything"),
        xml_action("task_complete", result="42"),
    )
    agent = ReactAgent(llm, repo, mcp_server_url=SERVER_COMMAND)
    result = agent.run("add numbers")

    assert result["success"] and result["result"] == "42"
    prompt = llm.requests[0]["system"]
    add_block = prompt.split("<tool><name>add</name>", 1)[1].split("</tool>", 1)[0]
    params = json.loads(add_block.split("<parameters>", 1)[1].split("</parameters>", 1)[0])
    assert params == {"a": "integer", "b": "integer"}  # the server's schema, compact
    assert "<tool><name>demo_server__read_file</name>" in prompt  # clash with a local tool
    assert "42" in llm.requests[1]["messages"][-1].content
    failed = llm.requests[2]["messages"][-1].content  # the failing tool; the run goes on
    assert "Error: MCP tool 'fail'" in failed and "the demo tool failed on purpose" in failed
    assert "local notes" in llm.requests[3]["messages"][-1].content  # local read_file wins
    assert agent.mcp_tools_client is None  # the agent closed the servers it opened


@pytest.mark.slow
def test_cli_lists_tools_of_flag_and_config_servers(repo, tmp_path, capsys):
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "second": {"command": sys.executable, "args": [str(DEMO), "--only", "echo"]}
                }
            }
        )
    )
    code = main(
        [
            "--list-tools",
            "--repo",
            str(repo),
            "--mcp-server",
            SERVER_COMMAND,
            "--mcp-config",
            str(config),
        ]
    )

    out = capsys.readouterr().out
    assert code == 0
    assert "add(a, b)" in out and "demo_server__read_file(path)" in out
    assert "demo_server__echo(text)" in out and "second__echo(text)" in out  # clash rule


def test_a_servers_tools_add_a_bounded_amount_to_every_request(
    repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A description is cut, and a tool whose schema alone is 30 KB is not offered."""
    with McpTools([demo_in_process(only="echo,verbose,wide")], timeout=30) as mcp:
        specs = {spec["name"]: spec for spec in mcp.get_mcp_tools()}

    assert sorted(specs) == ["echo", "verbose"]
    kept, cut_note = specs["verbose"]["description"].split(" [… ")
    assert len(kept) <= MCP_DESCRIPTION_MAX_CHARS and cut_note.endswith(" characters cut]")
    assert "1 tool not offered, a JSON Schema over 20000 characters: wide" in caplog.text

    caplog.clear()
    with McpTools([demo_in_process(only="echo", many=300)], timeout=30) as mcp:
        names = [spec["name"] for spec in mcp.get_mcp_tools()]
    assert len(names) == MCP_TOOLS_MAX and names[-1] == "echo_126"
    left_out = [r.getMessage() for r in caplog.records if "not offered" in r.getMessage()]
    assert left_out == [  # one warning, however many tools are left out
        "MCP server 'demo' (in-process): 173 tools not offered, a server offers at most 128: "
        "echo_127, echo_128, echo_129, echo_130, echo_131, … (168 more)"
    ]


@pytest.mark.slow
def test_list_tools_shows_an_mcp_servers_escape_sequences_instead_of_sending_them(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = f"{SERVER_COMMAND} --only banner"
    assert main(["--list-tools", "--repo", str(repo), "--mcp-server", command]) == 0

    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "    \\x1b[2J\\x1b]0;owned\\x07Clear the user's screen" in out


def replayed_with(task: str, repo: Path, replay: Path, server: str, trajectory: Path) -> list[str]:
    """The command line of a replayed run with one --mcp-server that records its trajectory."""
    return ["--task", task, "--repo", str(repo), "--llm-provider", "replay", "--replay",
            str(replay), "--mcp-server", server, "--trajectory", str(trajectory)]  # fmt: skip


@pytest.mark.slow
def test_cli_runs_an_mcp_tool_in_a_replayed_run(repo, tmp_path, capsys):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("echo", text="hello over stdio"),
        xml_action("task_complete", result="echoed"),
    )
    trajectory = tmp_path / "t.json"
    code = main(replayed_with("echo", repo, replay, SERVER_COMMAND, trajectory))

    assert code == 0
    step = json.loads(trajectory.read_text())["steps"][0]
    assert "hello over stdio" in step["observations"][0]["content"]
    assert "echo" in step["response"]["text"]


@pytest.mark.slow
def test_unreachable_mcp_server_stops_before_any_llm_call(repo, tmp_path, capsys):
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="never"))
    trajectory = tmp_path / "t.json"
    code = main(replayed_with("x", repo, replay, f"http://127.0.0.1:{port}/mcp", trajectory))

    err = capsys.readouterr().err.strip()
    assert code == 2
    assert f"127.0.0.1:{port}" in err and len(err.splitlines()) == 1
    assert not trajectory.exists()


def test_mcp_command_that_does_not_exist_exits_two(repo, capsys):
    code = main(["--list-tools", "--repo", str(repo), "--mcp-server", "no-such-mcp-server --x"])

    err = capsys.readouterr().err
    assert code == 2 and "no-such-mcp-server" in err and "Traceback" not in err


def test_an_mcp_error_says_error_once_in_the_openai_native_format(repo):
    with FakeProvider() as server:
        server.enqueue(
            openai_reply(None, tool_calls=[ToolCall("fail", {}, "c1")], finish_reason="tool_calls"),
            openai_reply(
                None,
                tool_calls=[ToolCall("task_complete", {"result": "ok"}, "c2")],
                finish_reason="tool_calls",
            ),  # fmt: skip
        )
        llm = OpenAICompatibleLlmClient("key", "gpt-test", base_url=server.url + "/v1")
        with McpTools([demo_in_process("demo_server", "fail")], timeout=30) as mcp:
            agent = ReactAgent(llm, repo, mcp_tools=mcp, tool_format="native")
            assert agent.run("fail")["success"]
        answer = server.requests[1].body["messages"][-1]

    assert answer["role"] == "tool" and answer["tool_call_id"] == "c1"
    assert answer["content"].startswith("Error: MCP tool 'fail' (server 'demo_server') reported")


@pytest.mark.slow
def test_stream_json_carries_an_mcp_tools_progress(repo, tmp_path, capsys):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("steps", count=3, pause=0.01),
        xml_action("task_complete", result="done"),
    )
    server = f"{SERVER_COMMAND} --only steps"
    code = main(["--task", "count", "--repo", str(repo), "--replay", str(replay),
                 "--mcp-server", server, "--output", "stream-json"])  # fmt: skip

    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert code == 0
    progress = [line for line in lines if line["type"] == "tool_progress"]
    assert progress == [
        {"type": "tool_progress", "iteration": 1, "tool": "steps", "progress": n, "total": 3,
         "message": f"step {n} of 3"}
        for n in (1, 2, 3)
    ]  # fmt: skip
    kinds = [line["type"] for line in lines]
    assert kinds.index("tool_started") < kinds.index("tool_progress") < kinds.index("tool_finished")
    import jsonschema  # a dependency of mcp

    schema = json.loads((Path(__file__).parent.parent / "docs" / "output.schema.json").read_text())
    validator = jsonschema.Draft202012Validator(schema)
    for line in lines:
        validator.validate(line)  # tool_progress is in the documented schema


def test_a_replay_without_task_replays_the_recorded_task(repo, tmp_path, capsys):
    recording = tmp_path / "recorded.json"
    assert main(["--task", "echo it", "--repo", str(repo), "--llm-provider", "replay",
                 "--replay", str(write_replay(tmp_path / "r.json",
                                              xml_action("task_complete", result="done"))),
                 "--trajectory", str(recording)]) == 0  # fmt: skip
    capsys.readouterr()
    code = main(["--replay", str(recording), "--repo", str(repo), "--output", "json"])

    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["success"] and out["result"] == "done"
    assert json.loads(recording.read_text())["task"] == "echo it"


def test_a_replay_of_a_recording_without_task_still_asks_for_one(repo, tmp_path, capsys):
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="done"))
    code = main(["--replay", str(replay), "--repo", str(repo), "--output", "json"])

    assert code == 2 and "--task is required" in capsys.readouterr().err


SERVICE_KEY = "Zq8vLr2mXw9pTt4kBn7c"  # a literal secret in the config file, in no variable


def secret_config(path: Path, *args: str) -> Path:
    """An mcpServers file giving the server SERVICE_KEY in its env, as users give API keys."""
    server = {"command": sys.executable, "args": list(args), "env": {"MY_SERVICE_KEY": SERVICE_KEY}}
    path.write_text(json.dumps({"mcpServers": {"svc": server}}))
    return path


@pytest.mark.slow
def test_a_secret_in_the_config_files_env_is_redacted_from_a_failed_starts_stderr(
    repo, tmp_path, capsys
):
    code = "import os, sys; sys.stderr.write('auth failed: ' + os.environ['MY_SERVICE_KEY'])"
    config = secret_config(tmp_path / "mcp.json", "-c", code + "; sys.exit(1)")
    log = tmp_path / "run.log"
    exit_code = main(["--list-tools", "--repo", str(repo), "--mcp-config", str(config),
                      "--log-file", str(log)])  # fmt: skip

    err = capsys.readouterr().err
    assert exit_code == 2
    assert "(stderr: auth failed: [REDACTED])" in err and SERVICE_KEY not in err
    assert "auth failed: [REDACTED]" in log.read_text() and SERVICE_KEY not in log.read_text()


@pytest.mark.slow
def test_a_secret_in_the_config_files_env_is_redacted_from_what_its_server_says(
    repo, tmp_path, capsys
):
    config = secret_config(tmp_path / "mcp.json", str(DEMO), "--only", "env,crash_loudly")
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("env", name="MY_SERVICE_KEY"),
        xml_action("crash_loudly", name="MY_SERVICE_KEY"),
        xml_action("task_complete", result="done"),
    )
    trajectory, log = tmp_path / "t.json", tmp_path / "run.log"
    code = main(["--task", "x", "--repo", str(repo), "--llm-provider", "replay", "--replay",
                 str(replay), "--mcp-config", str(config), "--trajectory", str(trajectory),
                 "--log-file", str(log)])  # fmt: skip

    assert code == 0
    steps = json.loads(trajectory.read_text())["steps"]
    echoed, crashed = (step["observations"][0]["content"] for step in steps[:2])
    assert "[REDACTED]" in echoed and SERVICE_KEY not in echoed
    assert "(stderr: fatal: upstream rejected key [REDACTED])" in crashed
    assert SERVICE_KEY not in trajectory.read_text() and SERVICE_KEY not in log.read_text()
    assert "[svc stderr] fatal: upstream rejected key [REDACTED]" in log.read_text()


@pytest.mark.slow
def test_read_resource_with_a_server_that_is_no_string_is_a_tool_error_not_a_crash(
    repo, tmp_path, capsys
):
    content = shlex.join([sys.executable, str(DEMO.parent / "content_server.py")])
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("read_resource", server=["content_server"]),
        xml_action("read_resource", server={"name": "content_server"}, uri="memo://notes.txt"),
        xml_action("read_resource", server="content_server", uri=["memo://notes.txt"]),
        xml_action("task_complete", result="done"),
    )
    trajectory = tmp_path / "t.json"
    code = main(replayed_with("x", repo, replay, content, trajectory))

    assert code == 0
    listed, by_object, by_list = (
        step["observations"][0]["content"]
        for step in json.loads(trajectory.read_text())["steps"][:3]
    )
    assert listed == ('Error: read_resource: server must be one of: content_server '
                      '(got ["content_server"], not a string)')  # fmt: skip
    assert 'server must be one of: content_server (got {"name": "content_server"}' in by_object
    assert "uri must be a resource URI string" in by_list
