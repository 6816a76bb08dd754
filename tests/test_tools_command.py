"""run_command with real processes: output, limits, timeouts that kill the whole group."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from toy_agent.tools import COMMAND_MAX_TIMEOUT, CodeRepositoryTools, ToolError


@pytest.fixture
def tools(tmp_path: Path) -> CodeRepositoryTools:
    return CodeRepositoryTools(tmp_path, allow_commands=True)


def is_running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may never reap it)."""
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return status.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_runs_in_the_repo_root_and_reports_exit_code_and_both_streams(
    tools: CodeRepositoryTools, tmp_path: Path
) -> None:
    out = tools.run_command("pwd; echo oops >&2; exit 3")
    lines = out.splitlines()
    assert lines[0] == "$ pwd; echo oops >&2; exit 3"
    assert lines[1].startswith("[exit code 3, ")
    assert lines[2:] == [str(tmp_path), "oops"]


def test_environment_disables_pagers_colour_and_prompts(tools: CodeRepositoryTools) -> None:
    out = tools.run_command('echo "$PAGER $GIT_PAGER $TERM $NO_COLOR $GIT_TERMINAL_PROMPT"')
    assert out.splitlines()[2] == "cat cat dumb 1 0"


def test_stdin_is_closed_so_reading_programs_do_not_hang(tools: CodeRepositoryTools) -> None:
    out = tools.run_command("read line; echo got:$?", timeout=5)
    assert "got:1" in out


@pytest.mark.slow
def test_timeout_kills_the_whole_process_group(tools: CodeRepositoryTools, tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(ToolError, match="timed out after 1s") as err:
        tools.run_command("echo started; sleep 30 & echo $! > child.pid; wait", timeout=1)
    assert time.monotonic() - started < 10
    assert "Output so far:\nstarted" in str(err.value)
    child = int((tmp_path / "child.pid").read_text())
    deadline = time.monotonic() + 5
    while is_running(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not is_running(child)


def test_background_child_holding_the_output_cannot_hang_it(tools: CodeRepositoryTools) -> None:
    started = time.monotonic()
    out = tools.run_command("sleep 30 & echo done", timeout=20)
    assert time.monotonic() - started < 10
    assert "done" in out and "[exit code 0" in out


def test_long_output_keeps_head_and_tail(tools: CodeRepositoryTools) -> None:
    out = tools.run_command("seq 1 100000", timeout=30)
    lines = out.splitlines()
    assert lines[2] == "1" and lines[-1] == "100000"
    assert "bytes (" in out and "lines) cut: run the command again piped through" in out
    assert len(out) < 20_000


@pytest.mark.slow
def test_endless_output_is_bounded_by_the_timeout(tools: CodeRepositoryTools) -> None:
    with pytest.raises(ToolError, match="timed out") as err:
        tools.run_command("yes", timeout=1)
    assert len(str(err.value)) < 20_000 and "lines) cut: " in str(err.value)


def test_bad_arguments_are_refused(tools: CodeRepositoryTools) -> None:
    with pytest.raises(ToolError, match="empty"):
        tools.run_command("  ")
    with pytest.raises(ToolError, match=f"between 1 and {COMMAND_MAX_TIMEOUT}"):
        tools.run_command("true", timeout=0)
    with pytest.raises(ToolError, match="must be an integer"):
        tools.execute("run_command", {"command": "true", "timeout": "soon"})


def test_signal_death_is_reported(tools: CodeRepositoryTools) -> None:
    assert "[killed by signal 9" in tools.run_command("kill -9 $$")
