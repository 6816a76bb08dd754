"""What a new user tripped on (issue 36), each through the real CLI: sessions that remember
their settings, a model name nobody claims, limits that say how to go on, errors in the user's
words, and what scripts were promised."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import quickest_provider_env, run_cli, run_main, toy_agent
from fake_providers import FakeProvider, Reply, openai_reply
from fakes import run_in_pty, write_replay, xml_action


def sessions_dir(home: Path) -> Path:
    return home / "state" / "toy-agent" / "sessions"


def sent(request) -> str:
    return json.dumps(request.body)


# --- 1. resume remembers the session ----------------------------------------------------------


REACT_DONE = 'Thought: done\nAction: task_complete\nAction Input: {"result": "ok"}'


def test_resume_goes_on_with_the_sessions_provider_model_base_url_and_command_settings(
    home, repo, capsys
):
    with FakeProvider() as server:
        server.enqueue(*(openai_reply(REACT_DONE) for _ in range(3)))
        url = server.url + "/v1"
        first = run_main(capsys, "--repo", str(repo), "--llm-provider", "openai", "-m", "gpt-4o",
                         "--base-url", url, "--allow-commands", "--permission-mode", "edits",
                         "--allow-command", "pytest*", "--tool-format", "react",
                         "--output", "json", "add a readme",
                         env={"OPENAI_API_KEY": "sk-first-secret"})  # fmt: skip
        assert first.returncode == 0, first.stderr
        session_id = json.loads(first.stdout)["session"]

        # A new shell: only a key, no provider, no base URL, no flags but the id.
        resumed = run_main(capsys, "--resume", session_id, "add a license",
                           env={"OPENAI_API_KEY": "sk-other"})  # fmt: skip
        assert resumed.returncode == 0, resumed.stderr
        body = server.requests[1].body
        assert body["model"] == "gpt-4o"
        assert "run_command" in sent(server.requests[1])  # the commands are offered again
        assert "Action Input:" in sent(server.requests[1])  # the react format
        assert f"restored from {session_id}: provider openai, model gpt-4o" in resumed.stderr
        assert f"base URL {url}" in resumed.stderr and "commands" in resumed.stderr

        # A flag on the new command line wins; what it does not name is still restored.
        flagged = run_main(capsys, "--resume", session_id, "-m", "gpt-4o-mini", "--output",
                           "json", "and a changelog",
                           env={"OPENAI_API_KEY": "sk-other"})  # fmt: skip
        assert flagged.returncode == 0, flagged.stderr
        assert server.requests[2].body["model"] == "gpt-4o-mini"
        result = json.loads(flagged.stdout)
        assert result["provider"] == "openai" and result["permission_mode"] == "edits"

    saved = (sessions_dir(home) / f"{session_id}.json").read_text()
    assert "sk-first-secret" not in saved and "sk-other" not in saved  # never its secrets
    settings = json.loads(saved)["settings"]
    assert settings["command_rules"] == {"allow": ["pytest*"], "deny": []}


def test_continue_restores_the_commands_and_a_flag_can_say_otherwise(home, repo, capsys):
    with FakeProvider() as server:
        server.enqueue(*(openai_reply(xml_action("task_complete", result="ok")) for _ in range(3)))
        env = {**server.env("openai")}
        first = run_main(capsys, "--repo", str(repo), "-m", "gpt-4o", "--allow-commands",
                         "look", env=env)  # fmt: skip
        assert first.returncode == 0, first.stderr
        again = run_main(capsys, "--repo", str(repo), "-c", "go on", env=env)
        assert again.returncode == 0, again.stderr
        assert "run_command" in sent(server.requests[1])
        read_only = run_main(capsys, "--repo", str(repo), "-c", "--permission-mode",
                             "read-only", "only look", env=env)  # fmt: skip
        assert read_only.returncode == 0, read_only.stderr
        assert "run_command" not in sent(server.requests[2])
        assert "--allow-commands has no effect" in read_only.stderr


def test_a_session_file_from_elsewhere_restores_no_setting(home, repo, tmp_path, capsys):
    """A file anyone could have written must not turn commands on or pick a base URL."""
    shared = tmp_path / "shared.json"
    shared.write_text(json.dumps({
        "format": "toy_agent.session/1", "repo": str(repo), "messages": [],
        "settings": {"provider": "openai", "model": "gpt-4o", "base_url": "http://evil.test/v1",
                     "allow_commands": True, "permission_mode": "auto"},
    }))  # fmt: skip
    reply = write_replay(tmp_path / "reply.json", xml_action("task_complete", result="ok"))
    proc = run_main(capsys, "--repo", str(repo), "--resume", str(shared), "--replay",
                    str(reply), "--output", "json", "go on")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "restored" not in proc.stderr
    assert json.loads(proc.stdout)["sandbox"] is not None  # the key exists; commands did not
    saved = json.loads(next(sessions_dir(home).glob("*.json")).read_text())
    assert saved["settings"]["allow_commands"] is False


@pytest.mark.slow
def test_the_banner_of_a_resumed_session_says_what_was_restored(home, repo, capsys):
    with FakeProvider() as server:
        server.enqueue(*(openai_reply(xml_action("task_complete", result="ok")) for _ in range(2)))
        first = run_main(capsys, "--repo", str(repo), "-m", "gpt-4o", "--base-url",
                         server.url + "/v1", "--allow-commands", "--output", "json", "look",
                         env={"OPENAI_API_KEY": "k"})  # fmt: skip
        session_id = json.loads(first.stdout)["session"]
        screen = run_in_pty(
            toy_agent("--resume", session_id, "go on"),
            {"OPENAI_API_KEY": "k", "XDG_STATE_HOME": str(home / "state"), "COLUMNS": "200"},
        )
    assert "toy-agent · openai gpt-4o" in screen
    assert f"restored from {session_id}: provider openai, model gpt-4o" in screen
    assert "commands" in screen and "✓ completed" in screen


# --- 5. a model name nobody claims --------------------------------------------------------------


def test_a_model_nobody_claims_with_a_base_url_goes_to_the_openai_compatible_provider(
    home, repo, capsys
):
    with FakeProvider() as server:
        server.enqueue(openai_reply(xml_action("task_complete", result="ok")))
        proc = run_main(capsys, "--repo", str(repo), "--model", "qwen2.5-coder", "--base-url",
                        server.url + "/v1", "--output", "json", "look")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert server.requests[0].body["model"] == "qwen2.5-coder"
    assert json.loads(proc.stdout)["provider"] == "openai"


def test_a_model_nobody_claims_from_the_config_without_a_base_url_names_the_choices(
    home, repo, capsys
):
    (home / "config" / "toy-agent").mkdir(parents=True)
    (home / "config" / "toy-agent" / "config.toml").write_text('model = "llama3.2"\n')
    proc = run_main(capsys, "--repo", str(repo), "--output", "json", "look")
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert "no provider claims the model name 'llama3.2'" in line
    assert "--llm-provider claude|gemini|openai" in line and "--base-url URL" in line
    assert json.loads(proc.stdout)["outcome"] == "usage_error"
    assert "ANTHROPIC_API_KEY" not in line


@pytest.mark.slow
def test_the_banner_says_an_unclaimed_model_went_to_an_openai_compatible_server(home, repo):
    with FakeProvider() as server:
        server.enqueue(openai_reply(xml_action("task_complete", result="ok")))
        screen = run_in_pty(
            toy_agent("--repo", str(repo), "-m", "llama3.2", "--base-url", server.url + "/v1",
                      "look"),
            {"COLUMNS": "200", "XDG_STATE_HOME": str(home / "state")},
        )  # fmt: skip
    assert "toy-agent · openai llama3.2" in screen
    assert f"openai-compatible server at {server.url}/v1: no provider claims llama3.2" in screen


# --- 4. the iteration limit says how to go on ---------------------------------------------------


def test_the_iteration_limit_says_how_to_go_on(home, repo, tmp_path, capsys, monkeypatch):
    replay = write_replay(tmp_path / "r.json", *[xml_action("list_files")] * 2)
    monkeypatch.chdir(repo)
    proc = run_main(capsys, "--replay", str(replay), "--max-iterations", "2", "look around")
    assert proc.returncode == 1
    assert "reached the iteration limit (2) without task_complete" in proc.stdout
    assert 'toy-agent -c "continue"' in proc.stdout
    assert "--max-iterations N" in proc.stdout and "max_iterations = N" in proc.stdout


# --- 9. scripts get what they were promised -----------------------------------------------------


def test_undo_with_nothing_to_undo_prints_one_json_object(home, repo, capsys):
    proc = run_main(capsys, "--repo", str(repo), "--undo", "--output", "json")
    assert proc.returncode == 1
    result = json.loads(proc.stdout)
    assert result["outcome"] == "nothing_to_undo" and result["exit_code"] == 1
    assert "nothing to undo" in result["error"]


def test_replaying_a_missing_file_says_it_is_not_found(home, repo, capsys):
    proc = run_main(capsys, "--repo", str(repo), "--replay", "missing.json")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "toy-agent: error: replay file not found: missing.json"


@pytest.mark.slow
def test_no_confirm_question_is_printed_when_no_one_can_answer(home, repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("run_command", command="echo hi"),
        xml_action("task_complete", result="done without it"),
    )
    proc = run_cli("--repo", str(repo), "--replay", str(replay), "--allow-commands",
                   "--permission-mode", "ask", "run it")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Allow run_command" not in proc.stderr + proc.stdout
    answered = run_cli("--repo", str(repo), "--replay", str(replay), "--allow-commands",
                       "--permission-mode", "ask", "--replay-lenient", "run it",
                       stdin="y\n")  # fmt: skip
    assert "Allow run_command echo hi? [y]es/[n]o[, why]/[a]ll: y" in answered.stderr


@pytest.mark.slow
def test_json_output_keeps_stderr_to_warnings_and_errors(home, repo, tmp_path):
    replay = write_replay(tmp_path / "r.json", xml_action("list_files"),
                          xml_action("task_complete", result="ok"))  # fmt: skip
    proc = run_cli("--repo", str(repo), "--replay", str(replay), "--output", "json", "look")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    verbose = run_cli("--repo", str(repo), "--replay", str(replay), "--output", "json",
                      "--log-level", "INFO", "look")  # fmt: skip
    assert "INFO" in verbose.stderr  # unless asked


# --- 10. small truths ---------------------------------------------------------------------------


def test_the_summary_names_no_sandbox_when_no_command_was_offered(home, repo, tmp_path, capsys):
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="ok"))
    proc = run_main(capsys, "--repo", str(repo), "--replay", str(replay), "look")
    assert proc.returncode == 0, proc.stderr
    assert "sandbox:" not in proc.stdout
    offered = run_main(capsys, "--repo", str(repo), "--replay", str(replay), "--allow-commands",
                       "--sandbox", "off", "look")  # fmt: skip
    assert "sandbox: off" in offered.stdout


def test_read_only_with_allow_commands_says_the_commands_are_dropped(home, repo, tmp_path, capsys):
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="ok"))
    proc = run_main(capsys, "--repo", str(repo), "--replay", str(replay), "--permission-mode",
                    "read-only", "--allow-commands", "look")  # fmt: skip
    assert proc.returncode == 0
    assert "toy-agent: warning: --permission-mode read-only" in proc.stderr
    assert "--allow-commands has no effect" in proc.stderr


# --- 8. errors in the user's words --------------------------------------------------------------

LOGIN_PAGE = "<!doctype html><html><head><title>Sign in - Corp Proxy</title></head></html>"


@pytest.mark.parametrize("provider", ["openai", "claude", "gemini"])
def test_a_proxy_answering_200_with_an_html_page_names_the_base_url(provider, home, repo, capsys):
    with FakeProvider() as server:
        server.enqueue(Reply(200, LOGIN_PAGE, {"Content-Type": "text/html"}))
        proc = run_main(capsys, "--repo", str(repo), "--llm-provider", provider, "look",
                        env=server.env(provider))  # fmt: skip
    assert proc.returncode == 3
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("toy-agent:")]
    assert 'answered with an HTML page ("Sign in - Corp Proxy"), not the API' in line
    assert "check the base URL" in line and server.url in line
    assert "AttributeError" not in line and "to_dict" not in line


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("TOY_AGENT_MAX_ITERATIONS", "abc", "--max-iterations wants a whole number, 1 or more"),
        ("TOY_AGENT_TIMEOUT", "soon", "--timeout wants a number of seconds above 0"),
        ("TOY_AGENT_MAX_COST", "lots", "--max-cost wants an amount of US dollars above 0"),
    ],
)
def test_a_variable_of_the_wrong_type_names_the_variable_and_the_type(
    variable, value, message, home, repo, capsys
):
    proc = run_main(capsys, "--repo", str(repo), "look", env={variable: value})
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"toy-agent: error: {variable}: invalid value {value!r}: {message}"
    )


def test_a_flag_of_the_wrong_type_says_what_it_wants(home, repo, capsys):
    proc = run_main(capsys, "--repo", str(repo), "--max-iterations", "abc", "look")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("toy-agent: error: argument --max-iterations: invalid value "
                                   "'abc': it wants a whole number, 1 or more")  # fmt: skip


@pytest.mark.slow
def test_an_mcp_server_printing_a_stray_json_line_is_named_with_its_line(home, repo, capsys):
    from mcp_helpers import DEMO_COMMAND

    script = f"echo {shlex.quote(json.dumps({'status': 'ready'}))}; exec {DEMO_COMMAND}"
    noisy = f"sh -c {shlex.quote(script)}"
    proc = run_main(capsys, "--repo", str(repo), "--list-tools", "--mcp-server", noisy)
    assert proc.returncode == 0, proc.stderr
    assert "echo(text)" in proc.stdout
    stray = [line for line in proc.stderr.splitlines() if "JSON" in line]
    assert stray == ["WARNING MCP server 'demo_server' wrote a line that is not JSON-RPC to its "
                     """stdout (ignored): '{"status": "ready"}'"""]  # fmt: skip
    assert "validation error" not in proc.stderr


# --- 2. a task that cannot fit is stopped before it costs ---------------------------------------


def test_a_task_larger_than_the_context_budget_is_refused_before_the_first_call(home, repo, capsys):
    with FakeProvider() as server:
        proc = run_main(capsys, "--repo", str(repo), "--task", "-", "--context-budget", "1000",
                        "--output", "json", env=quickest_provider_env(server),
                        stdin="a log line\n" * 600)  # fmt: skip
    assert proc.returncode == 2
    assert server.requests == []
    [line] = proc.stderr.strip().splitlines()
    assert "the task is 7 KB (about 1,649 tokens), more than the context budget of 1,000" in line
    assert "save it as a file in the repository" in line
    assert json.loads(proc.stdout)["outcome"] == "usage_error"


def test_a_large_task_below_the_budget_leaves_less_room_for_each_observation(home, repo, capsys):
    (repo / "big.txt").write_text("x" * 30_000 + "\n")
    task = "Here is the spec.\n" + "spec line\n" * 1_500  # 15,018 characters
    with FakeProvider() as server:
        server.enqueue(openai_reply(xml_action("read_file", path="big.txt")),
                       openai_reply(xml_action("task_complete", result="ok")))  # fmt: skip
        proc = run_main(capsys, "--repo", str(repo), "--context-budget", "8000", task,
                        env=quickest_provider_env(server))  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    observation = server.requests[1].body["messages"][-1]["content"]
    # A quarter of what the task leaves of the budget (32,000 - 15,018 characters), not a
    # quarter of the whole budget (8,000): the task is sent whole with every step.
    assert "x" * 3_000 in observation and len(observation) < 5_000


# --- 6. the demo's hints work as printed ----------------------------------------------------------


@pytest.mark.slow
def test_every_command_the_demo_prints_works_when_pasted(home, tmp_path, capsys):
    demo = run_main(capsys, "--demo")
    assert demo.returncode == 0, demo.stderr
    commands = [line.strip() for line in demo.stdout.splitlines() if line.startswith("  ")]
    tests = next(c for c in commands if c.endswith("python -m pytest"))
    resume = next(c for c in commands if c.startswith("toy-agent --resume"))
    assert "cost $0.0000" in demo.stdout  # a replay spends nothing

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    ran = subprocess.run(["sh", "-c", tests.replace("python", shlex.quote(sys.executable))],
                         cwd=elsewhere, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "passed" in ran.stdout

    with FakeProvider() as server:
        server.enqueue(openai_reply(xml_action("task_complete", result="a test added")))
        argv = shlex.split(resume)[1:]
        resumed = run_main(capsys, *argv, "--output", "json", cwd=elsewhere,
                           env=quickest_provider_env(server))  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    assert "Fix median()" in sent(server.requests[0])  # the demo's conversation goes on
    saved = json.loads((sessions_dir(home) / f"{argv[1]}.json").read_text())
    assert saved["runs"][0]["cost_usd"] == 0
