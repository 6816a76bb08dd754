"""McpTools and the CLI against the official MCP reference servers from npm (pinned in
tests/reference_servers.py) over stdio, Streamable HTTP and SSE, and against our own
SDK-built demo server where a check needs a behaviour the reference servers lack."""

from __future__ import annotations

import logging
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import reference_servers as ref
from mcp_helpers import DEMO, demo_in_process

from toy_agent.mcp_tools import (
    McpProgress,
    McpServerConfig,
    McpToolError,
    McpTools,
    parse_server_arg,
    reporting_progress,
)

pytestmark = pytest.mark.slow  # see pyproject's markers

TASK_ONLY = "simulate-research-query"  # execution.taskSupport: "required"


def everything_stdio(servers: ref.ReferenceServers) -> McpServerConfig:
    return parse_server_arg(shlex.join(servers.command(ref.EVERYTHING, "stdio")))


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The CLI's main() in this process (the MCP servers are the processes worth waiting
    for): its exit code, stdout and stderr."""
    from toy_agent.cli import main

    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def logged(caplog: pytest.LogCaptureFixture, prefix: str) -> list[logging.LogRecord]:
    """The records whose message starts with `prefix`, waiting a while for the first."""
    deadline = time.monotonic() + 10
    while not (records := [r for r in caplog.records if r.getMessage().startswith(prefix)]):
        assert time.monotonic() < deadline, f"no log record starting {prefix!r}"
        time.sleep(0.02)
    return records


@pytest.fixture(params=["stdio", "streamableHttp", "sse"])
def everything(request: pytest.FixtureRequest, reference_servers) -> McpServerConfig:
    """server-everything over each transport; the URLs as a user would type them."""
    if request.param == "stdio":
        return everything_stdio(reference_servers)
    fixture = "everything_http" if request.param == "streamableHttp" else "everything_sse"
    return parse_server_arg(request.getfixturevalue(fixture))


def test_server_everything_works_over_every_transport(everything: McpServerConfig) -> None:
    with McpTools(everything, timeout=20) as tools:
        names = {spec["name"] for spec in tools.get_mcp_tools()}
        assert {"echo", "get-sum", "trigger-long-running-operation"} <= names
        assert tools.execute_mcp_tool("echo", {"message": "hi <&>"}) == "Echo: hi <&>"
        assert tools.execute_mcp_tool("get-sum", {"a": 2, "b": 40}).endswith("42.")


def test_a_server_started_from_its_dist_index_js_is_named_after_its_package(
    reference_servers,
) -> None:
    config = everything_stdio(reference_servers)
    assert config.command[1].endswith("/dist/index.js")
    assert config.name == "server-everything"


def test_a_tool_that_must_run_as_a_task_is_left_out_with_one_warning_naming_it(
    reference_servers, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="toy_agent.mcp_tools")
    with McpTools(everything_stdio(reference_servers), timeout=20) as tools:
        names = {spec["name"] for spec in tools.get_mcp_tools()}
    assert TASK_ONLY not in names and "echo" in names
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    assert TASK_ONLY in warnings[0] and "task" in warnings[0]


def with_call_limits(config: McpServerConfig, timeout: float, ceiling: float) -> McpTools:
    """Connected with time to spare on a busy machine, then calls bounded as given."""
    tools = McpTools(config, timeout=60)
    tools.timeout, tools.ceiling = timeout, ceiling
    return tools


def test_progress_reaches_the_listener_and_keeps_a_long_call_alive(reference_servers) -> None:
    seen: list[McpProgress] = []
    tools = with_call_limits(everything_stdio(reference_servers), timeout=1, ceiling=60)
    with tools, reporting_progress(seen.append):  # 2s in all, progress every 0.2s
        text = tools.execute_mcp_tool(
            "trigger-long-running-operation", {"duration": 2, "steps": 10}
        )
    assert text.startswith("Long running operation completed")
    assert [(p.progress, p.total) for p in seen] == [(n, 10) for n in range(1, 11)]


def test_progress_cannot_keep_a_call_alive_past_the_ceiling(reference_servers) -> None:
    with with_call_limits(everything_stdio(reference_servers), timeout=1, ceiling=2) as tools:
        with pytest.raises(McpToolError, match="stopped after 2s, the most a call may take"):
            # progress every 0.2s, well within the timeout, for 3s (it ends soon after, so
            # the server exits as soon as it is closed)
            tools.execute_mcp_tool("trigger-long-running-operation", {"duration": 3, "steps": 15})
        assert tools.execute_mcp_tool("echo", {"message": "still"}) == "Echo: still"


def test_without_progress_the_call_times_out_naming_it() -> None:
    tools = with_call_limits(demo_in_process(only="slow"), timeout=0.5, ceiling=60)
    with tools, pytest.raises(McpToolError, match=r"timed out after 0.5s without progress"):
        tools.execute_mcp_tool("slow", {"seconds": 30})


def test_the_ceiling_is_600_seconds_or_the_timeout_if_longer() -> None:
    demo = demo_in_process(only="echo")
    with McpTools(demo, timeout=30) as tools, McpTools(demo, timeout=900) as patient:
        assert (tools.ceiling, patient.ceiling) == (600, 900)


def test_progress_messages_come_from_our_own_sdk_server_too() -> None:
    seen: list[McpProgress] = []
    demo = demo_in_process(only="steps")
    with McpTools(demo, timeout=10) as tools, reporting_progress(seen.append):
        assert tools.execute_mcp_tool("steps", {"count": 3, "pause": 0.01}) == "3 steps done"
    assert seen == [McpProgress(n, 3, f"step {n} of 3") for n in (1, 2, 3)]


def test_progress_messages_are_redacted() -> None:
    seen: list[McpProgress] = []
    demo = demo_in_process(only="steps")
    tools = McpTools(demo, timeout=10, redact=lambda text: text.replace(" of ", " [REDACTED] "))
    with tools, reporting_progress(seen.append):
        tools.execute_mcp_tool("steps", {"count": 1, "pause": 0.01})
    assert [p.message for p in seen] == ["step 1 [REDACTED] 1"]


def test_server_log_records_reach_our_log_at_their_level(
    reference_servers, caplog: pytest.LogCaptureFixture
) -> None:
    """server-everything sends one record of a random level at once, naming its level."""
    caplog.set_level(logging.DEBUG, logger="toy_agent.mcp_tools")
    levels = {"Debug": logging.DEBUG, "Info": logging.INFO, "Notice": logging.INFO,
              "Warning": logging.WARNING, "Error": logging.ERROR, "Critical": logging.CRITICAL,
              "Alert": logging.CRITICAL, "Emergency": logging.CRITICAL}  # fmt: skip
    with McpTools(everything_stdio(reference_servers), timeout=20) as tools:
        tools.execute_mcp_tool("toggle-simulated-logging", {})
        records = logged(caplog, "[server-everything] ")
        tools.execute_mcp_tool("toggle-simulated-logging", {})
    message = records[0].getMessage()
    assert message.startswith("[server-everything] ")
    word = message.removeprefix("[server-everything] ").split("-", 1)[0].split(" ", 1)[0]
    assert records[0].levelno == levels[word]


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("debug", logging.DEBUG),
        ("notice", logging.INFO),
        ("error", logging.ERROR),
        ("emergency", logging.CRITICAL),
    ],  # fmt: skip
)
# servers still send log records, deprecated (SEP-2577) or not; ours does in this process
@pytest.mark.filterwarnings("ignore:The logging capability is deprecated")
def test_a_log_record_is_redacted_and_its_control_characters_escaped(
    level: str, expected: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="toy_agent.mcp_tools")
    demo = demo_in_process(only="shout")
    secret = "sk-test-0123456789abcdef"
    text = f"key {secret}\x1b[2J\nsecond line"
    with McpTools(demo, timeout=10, redact=lambda t: t.replace(secret, "[REDACTED]")) as tools:
        assert tools.execute_mcp_tool("shout", {"level": level, "text": text}) == "logged"
        records = logged(caplog, "[demo demo.shout]")
    (record,) = records
    assert record.levelno == expected
    assert record.getMessage() == "[demo demo.shout] key [REDACTED]\\x1b[2J\\nsecond line"


def test_a_stray_stdout_line_gives_one_warning_and_no_traceback(
    reference_servers, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    server = shlex.join(reference_servers.command(ref.EVERYTHING, "stdio"))
    noisy = f"sh -c {shlex.quote(f'echo Starting...; exec {server}')}"
    code, out, err = cli(capsys, "--list-tools", "--repo", str(tmp_path), "--mcp-server", noisy)

    assert code == 0, err
    assert "get-sum(a, b)" in out
    assert "Traceback" not in err
    assert "ERROR" not in err
    stray = [line for line in err.splitlines() if "JSON" in line]
    assert stray == [
        "WARNING MCP server 'server-everything' wrote a line that is not JSON-RPC to its "
        "stdout (ignored): 'Starting...'"
    ]
    code, _, err = cli(capsys, "--list-tools", "--repo", str(tmp_path), "--mcp-server", noisy,
                       "--log-level", "DEBUG")  # fmt: skip
    assert code == 0 and "Traceback" in err  # the details, when asked


def test_a_legacy_sse_url_on_the_command_line_falls_back_to_sse(
    everything_sse: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "--list-tools", "--repo", str(tmp_path), "--mcp-server",
                         everything_sse, "--log-level", "INFO")  # fmt: skip

    assert code == 0, err
    assert "get-sum(a, b)" in out
    assert "trying the legacy SSE transport" in err


def test_our_own_sdk_sse_server_is_reached_from_a_plain_url() -> None:
    port = ref.free_port()
    proc = subprocess.Popen(
        [sys.executable, str(DEMO), "--port", str(port), "--sse", "--only", "echo"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        ref.wait_listening(proc, port)
        with McpTools(f"http://127.0.0.1:{port}/sse", timeout=10) as tools:
            assert tools.execute_mcp_tool("echo", {"text": "over sse"}) == "over sse"
    finally:
        proc.kill()
        proc.wait(10)


def test_streamable_http_is_still_tried_first(everything_http: str, caplog) -> None:
    caplog.set_level(logging.INFO, logger="toy_agent.mcp_tools")
    with McpTools(everything_http, timeout=20) as tools:
        assert tools.execute_mcp_tool("echo", {"message": "x"}) == "Echo: x"
    assert "SSE" not in caplog.text


def test_a_second_reference_server_works_too(reference_servers, tmp_path: Path) -> None:
    memory = McpServerConfig(
        "memory",
        command=reference_servers.command(ref.MEMORY),
        env={"MEMORY_FILE_PATH": str(tmp_path / "memory.jsonl")},
    )
    with McpTools(memory, timeout=20) as tools:
        entity = {"name": "toy_agent", "entityType": "project", "observations": ["a ReAct agent"]}
        tools.execute_mcp_tool("create_entities", {"entities": [entity]})
        assert "a ReAct agent" in tools.execute_mcp_tool("read_graph", {})
