"""McpTools against real MCP servers (tests/mcp_servers/demo_server.py) over stdio and HTTP."""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp_helpers import demo_command, demo_in_process, demo_stdio

from toy_agent.mcp_tools import (
    McpError,
    McpServerConfig,
    McpToolError,
    McpTools,
    parse_server_arg,
)
from toy_agent.routes import RouteTable
from toy_agent.tools import CodeRepositoryTools


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_http_server(*args: str) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    proc = subprocess.Popen(
        [*demo_command("--port", str(port), *args)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc, port
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"demo HTTP server did not start on port {port}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(10)


def is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def loop_threads() -> int:
    return sum(thread.name == "mcp-loop" for thread in threading.enumerate())


def wait_for_pid(path: Path) -> int:
    deadline = time.monotonic() + 10
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, "the server never wrote its PID"
        time.sleep(0.02)
    return int(path.read_text())


@pytest.fixture(scope="module")
def http_server() -> Iterator[str]:
    """A Streamable HTTP demo server offering only echo, add and header."""
    proc, port = start_http_server("--only", "echo,add,header")
    yield f"http://127.0.0.1:{port}/mcp"
    stop(proc)


@pytest.fixture(scope="module")
def both(http_server: str) -> Iterator[McpTools]:
    """One stdio and one HTTP server with clashing tools, shared by read-mostly tests."""
    servers = [
        demo_stdio("local"),
        McpServerConfig("remote", url=http_server, headers={"X-Demo": "hello"}),
    ]
    with McpTools(servers, timeout=10) as tools:
        yield tools


@pytest.mark.slow
def test_tools_carry_the_servers_real_schemas_and_descriptions(both: McpTools) -> None:
    specs = {spec["name"]: spec for spec in both.get_mcp_tools()}
    assert specs["local__add"]["description"] == "Add two integers."
    schema = specs["local__add"]["parameters"]
    assert schema["properties"]["a"]["type"] == "integer"
    assert schema["required"] == ["a", "b"]
    assert specs["remote__echo"]["parameters"]["required"] == ["text"]


@pytest.mark.slow
def test_clashing_names_get_the_server_prefix_and_others_stay(both: McpTools) -> None:
    names = [spec["name"] for spec in both.get_mcp_tools()]
    assert names == [
        "local__echo",
        "local__add",
        "fail",
        "slow",
        "crash",
        "env",
        "local__header",
        "picture",
        "read_file",  # unique among the servers; the route table keeps local names free
        "remote__echo",
        "remote__add",
        "remote__header",
    ]


@pytest.mark.slow
def test_calls_reach_the_right_server(both: McpTools) -> None:
    assert both.execute_mcp_tool("local__add", {"a": 2, "b": 40}) == "42"
    assert both.execute_mcp_tool("remote__echo", {"text": "über <&>"}) == "über <&>"
    assert both.execute_mcp_tool("read_file", {"path": "x"}) == "remote read of x"


@pytest.mark.slow
def test_a_server_tool_named_like_a_local_one_is_offered_once_qualified(
    both: McpTools, tmp_path: Path
) -> None:
    """McpTools handed to the agent as-is (the README's API) must not put a second read_file
    in the prompt: providers reject duplicate names in native mode."""
    (tmp_path / "x").write_text("local text\n")
    routes = RouteTable.build(CodeRepositoryTools(tmp_path), [both])
    assert routes.names.count("read_file") == 1
    assert routes.names[-1] == "task_complete"
    assert "local__read_file" in routes.names
    assert routes.call("local__read_file", {"path": "x"}) == "remote read of x"
    assert "local text" in routes.call("read_file", {"path": "x"})


@pytest.mark.slow
def test_http_headers_are_sent(both: McpTools) -> None:
    assert both.execute_mcp_tool("remote__header", {"name": "X-Demo"}) == "hello"


@pytest.mark.slow
def test_non_text_content_is_summarised(both: McpTools) -> None:
    assert both.execute_mcp_tool("picture", {}) == "[image 1: image/png, 15 bytes]"


@pytest.mark.slow
def test_tool_error_result_raises_with_the_servers_text(both: McpTools) -> None:
    with pytest.raises(McpToolError, match="reported an error: .*failed on purpose"):
        both.execute_mcp_tool("fail", {})


@pytest.mark.slow
def test_invalid_arguments_come_back_as_the_servers_validation_error(both: McpTools) -> None:
    with pytest.raises(McpToolError, match="validation error"):
        both.execute_mcp_tool("local__add", {"a": "not a number"})


@pytest.mark.slow
def test_unknown_tool_lists_the_mcp_tools(both: McpTools) -> None:
    with pytest.raises(McpToolError, match="Unknown MCP tool 'nope', should be one of: local__ec"):
        both.execute_mcp_tool("nope", {})


@pytest.mark.slow
def test_stdio_env_is_merged_over_the_sdk_safe_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOY_AGENT_SECRET", "must not leak")
    with McpTools(demo_stdio(env={"DEMO_VAR": "from config"}), timeout=10) as tools:
        assert tools.execute_mcp_tool("env", {"name": "DEMO_VAR"}) == "from config"
        assert tools.execute_mcp_tool("env", {"name": "PATH"}) == os.environ["PATH"]
        assert tools.execute_mcp_tool("env", {"name": "TOY_AGENT_SECRET"}) == ""


@pytest.mark.slow
def test_a_plain_url_string_is_enough(http_server: str) -> None:
    with McpTools(http_server, timeout=10) as tools:
        assert [t["name"] for t in tools.get_mcp_tools()] == ["echo", "add", "header"]
        assert tools.execute_mcp_tool("add", {"a": 1, "b": 2}) == "3"


@pytest.mark.slow
def test_legacy_sse_transport_from_a_config_file(tmp_path: Path) -> None:
    proc, port = start_http_server("--sse", "--only", "echo")
    try:
        config = tmp_path / "mcp.json"
        url = f"http://127.0.0.1:{port}/sse"
        config.write_text(json.dumps({"mcpServers": {"old": {"type": "sse", "url": url}}}))
        from toy_agent.mcp_tools import load_mcp_config

        with McpTools(load_mcp_config(config), timeout=10) as tools:
            assert tools.execute_mcp_tool("echo", {"text": "sse"}) == "sse"
    finally:
        stop(proc)


@pytest.mark.slow
def test_a_hanging_tool_times_out_and_the_session_stays_usable(tmp_path: Path) -> None:
    with McpTools(demo_stdio(), timeout=60) as tools:
        tools.timeout = 1  # calls only: a busy machine may take longer to start the server
        started = time.monotonic()
        with pytest.raises(McpToolError, match="'slow' .*timed out after 1s"):
            tools.execute_mcp_tool("slow", {"seconds": 600})
        assert time.monotonic() - started < 300  # cut by the timeout, not the tool's end
        tools.timeout = 60  # the next call may take its time on a busy machine
        assert tools.execute_mcp_tool("echo", {"text": "still here"}) == "still here"


@pytest.mark.slow
def test_a_crashed_stdio_server_fails_calls_fast_and_others_keep_working(
    tmp_path: Path, http_server: str
) -> None:
    pid_file = tmp_path / "pid"
    servers = [demo_stdio("local", "--pid-file", str(pid_file)), http_server]
    with McpTools(servers, timeout=10) as tools:
        pid = wait_for_pid(pid_file)
        with pytest.raises(McpToolError, match="closed the connection"):
            tools.execute_mcp_tool("crash", {})
        started = time.monotonic()
        with pytest.raises(McpToolError, match="'local'.*closed the connection"):
            tools.execute_mcp_tool("local__echo", {"text": "x"})
        assert time.monotonic() - started < 2
        assert tools.execute_mcp_tool("127_0_0_1__echo", {"text": "ok"}) == "ok"
    assert not is_alive(pid)


@pytest.mark.slow
def test_an_http_server_dying_mid_run_fails_calls_without_hanging() -> None:
    proc, port = start_http_server("--only", "echo")
    try:
        with McpTools(f"http://127.0.0.1:{port}/mcp", timeout=10) as tools:
            assert tools.execute_mcp_tool("echo", {"text": "up"}) == "up"
            stop(proc)
            started = time.monotonic()
            for _ in range(2):
                with pytest.raises(McpToolError, match="'echo'"):
                    tools.execute_mcp_tool("echo", {"text": "down"})
            assert time.monotonic() - started < 5
    finally:
        stop(proc)


@pytest.mark.slow
def test_close_terminates_the_stdio_server_and_is_idempotent(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    loops_before = loop_threads()
    tools = McpTools(demo_stdio("demo", "--linger", "60", "--pid-file", str(pid_file)))
    pid = wait_for_pid(pid_file)
    assert is_alive(pid)
    assert loop_threads() == loops_before + 1
    tools.close()
    tools.close()
    assert not is_alive(pid)
    assert loop_threads() == loops_before
    with pytest.raises(McpToolError, match="closed"):
        tools.execute_mcp_tool("echo", {"text": "x"})


@pytest.mark.slow
def test_ctrl_c_during_a_call_leaves_no_server_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with (
        pytest.raises(KeyboardInterrupt),
        McpTools(demo_stdio("demo", "--linger", "60", "--pid-file", str(pid_file))) as tools,
    ):
        pid = wait_for_pid(pid_file)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        tools.execute_mcp_tool("slow", {"seconds": 60})
    assert not is_alive(pid)


@pytest.mark.slow
def test_a_caller_that_forgets_close_leaves_no_server_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    lingering = demo_command("--linger", "60", "--pid-file", str(pid_file))
    code = (
        "import sys\nfrom toy_agent.mcp_tools import McpTools\n"
        f"tools = McpTools({shlex.join(lingering)!r})\n"
        "print(tools.execute_mcp_tool('echo', {'text': 'bye'}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=Path(__file__).parent.parent,
        check=True,
    )
    assert out.stdout == "bye\n"
    assert not is_alive(wait_for_pid(pid_file))


def test_unreachable_url_fails_fast_naming_the_server() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    started = time.monotonic()
    with pytest.raises(McpError, match=rf"^MCP server '127.0.0.1' \({url}\): ConnectError"):
        McpTools(url, timeout=10)
    assert time.monotonic() - started < 3


@pytest.mark.slow
def test_wrong_http_path_is_reported_after_both_transports_were_tried(http_server: str) -> None:
    with pytest.raises(McpError) as info:
        McpTools(http_server.replace("/mcp", "/nope"), timeout=10)
    message = str(info.value)
    assert "Streamable HTTP answered 404, and the legacy SSE transport failed too" in message
    assert "404 Not Found" in message and "\n" not in message


def test_missing_command_is_reported_in_one_line() -> None:
    with pytest.raises(McpError) as info:
        McpTools("no-such-mcp-server-xyz --flag", timeout=10)
    assert str(info.value) == (
        "MCP server 'no-such-mcp-server-xyz' (no-such-mcp-server-xyz --flag): "
        "command not found: no-such-mcp-server-xyz"
    )


def test_a_command_that_exits_at_once_quotes_its_stderr() -> None:
    code = "import sys; sys.stderr.write('boom: no token\\n'); sys.exit(3)"
    with pytest.raises(McpError, match=r"exited .*during startup \(stderr: boom: no token\)$"):
        McpTools(McpServerConfig("quitter", command=(sys.executable, "-c", code)), timeout=10)


@pytest.mark.slow
def test_a_server_that_never_answers_initialize_is_bounded_by_the_timeout() -> None:
    code = "import time; time.sleep(60)"
    started = time.monotonic()
    with pytest.raises(McpError, match=r"'mute'.*no answer to initialize within 0.5s"):
        McpTools(McpServerConfig("mute", command=(sys.executable, "-c", code)), timeout=0.5)
    assert time.monotonic() - started < 8  # 0.5s + the SDK's bounded stdin-close/TERM shutdown


@pytest.mark.slow
def test_a_failing_server_closes_the_ones_already_started(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    quit_once_good_is_up = (
        f"import os, sys, time\nwhile not os.path.exists({str(pid_file)!r}): time.sleep(0.02)\n"
        "sys.exit(1)"
    )
    servers = [
        demo_stdio("good", "--pid-file", str(pid_file)),
        McpServerConfig("bad", command=(sys.executable, "-c", quit_once_good_is_up)),
    ]
    with pytest.raises(McpError, match="'bad'"):
        McpTools(servers, timeout=10)
    assert not is_alive(wait_for_pid(pid_file))


@pytest.mark.slow
def test_servers_start_concurrently(tmp_path: Path) -> None:
    """Each server notes when it started and when it was ready (the SDK's import and 1 s
    later): started one after the other, a server would start only after the one before was
    ready."""
    times = tmp_path / "times.txt"
    slow = ("--only", "echo", "--startup-delay", "1", "--times-file", str(times))
    with McpTools([demo_stdio(f"s{n}", *slow) for n in range(3)], timeout=60) as tools:
        assert len(tools.get_mcp_tools()) == 3
    spans = [tuple(map(float, line.split())) for line in times.read_text().splitlines()]
    assert len(spans) == 3
    assert max(started for started, _ in spans) < min(ready for _, ready in spans)


def test_same_named_servers_are_renamed_so_prefixes_stay_distinct() -> None:
    with McpTools([demo_in_process("demo", "echo")] * 2, timeout=10) as tools:
        assert [t["name"] for t in tools.get_mcp_tools()] == ["demo__echo", "demo-2__echo"]
        assert tools.execute_mcp_tool("demo-2__echo", {"text": "two"}) == "two"


@pytest.mark.slow
def test_importing_the_module_does_not_import_the_sdk() -> None:
    code = "import sys, toy_agent.mcp_tools; print('mcp' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parent.parent,
        check=True,
    )
    assert out.stdout.strip() == "False"


@pytest.mark.slow
def test_parse_server_arg_keeps_urls_and_splits_commands() -> None:
    assert parse_server_arg("https://example.com/mcp") == McpServerConfig(
        "example.com", url="https://example.com/mcp"
    )
    config = parse_server_arg("uvx mcp-server-git --repository 'my repo'")
    assert config.command == ("uvx", "mcp-server-git", "--repository", "my repo")
    assert config.name == "mcp-server-git"


@pytest.mark.slow
def test_a_servers_own_error_in_the_sdks_codes_is_shown_not_taken_for_a_closure_or_timeout() -> (
    None
):
    with McpTools(demo_stdio("demo", "--only", "refuse,echo"), timeout=30) as tools:
        with pytest.raises(McpToolError) as closed:
            tools.execute_mcp_tool("refuse", {"code": -32000, "message": "boom\x1b[31m red"})
        with pytest.raises(McpToolError) as timed:
            tools.execute_mcp_tool("refuse", {"code": -32001, "message": "quota exceeded"})
        assert tools.execute_mcp_tool("echo", {"text": "still here"}) == "still here"
    assert str(closed.value) == (
        "MCP tool 'refuse' (server 'demo'): MCPError: boom\\x1b[31m red (code -32000)"
    )
    assert str(timed.value) == (
        "MCP tool 'refuse' (server 'demo'): MCPError: quota exceeded (code -32001)"
    )
