"""The command line, through `main(argv)` and as a real subprocess."""

from __future__ import annotations

import gc
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import ROOT, cli_environment, quickest_provider_env, run_cli, toy_agent
from fake_providers import FakeProvider, Reply, anthropic_reply, error_reply, openai_reply
from fakes import run_in_pty, wait_until, write_replay, xml_action

from toy_agent import __version__
from toy_agent.cli import main
from toy_agent.messages import Usage

pytestmark = pytest.mark.usefixtures("clean_env")  # see conftest


def replayed(task: str, repo: Path, replay: Path) -> list[str]:
    """The arguments of a run of `task` in `repo` whose model is the recording `replay`."""
    return ["--task", task, "--repo", str(repo), "--llm-provider", "replay",
            "--replay", str(replay)]  # fmt: skip


@pytest.mark.slow
def test_help_lists_the_seed_flags_without_importing_provider_sdks():
    code = (
        "import sys\nfrom toy_agent.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('anthropic', 'openai', 'google.genai', 'mcp', 'rich',\n"
        "                      'tree_sitter')\n"
        "         if m in sys.modules]\n"
        "print('HEAVY', heavy)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    ).stdout
    assert "HEAVY []" in out
    for flag in (
        "--task",
        "--repo",
        "--max-iterations",
        "--llm-provider",
        "--log-level",
        "--log-file",
        "--mcp-server",
        "--model",
        "--trajectory",
        "--output",
    ):
        assert flag in out


def test_replay_run_completes_with_exit_code_zero_and_a_summary(repo, tmp_path, capsys):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("edit_file", path="hello.py", old_str="helo", new_str="hello"),
        xml_action("task_complete", result="Fixed the greeting."),
    )
    code = main(replayed("fix the greeting", repo, replay))

    out = capsys.readouterr().out
    assert code == 0
    assert (repo / "hello.py").read_text() == "print('hello')\n"
    assert "completed" in out and "iterations used: 2" in out
    assert "conversation length: 4" in out and "Fixed the greeting." in out
    assert "hello.py  +1 -1" in out


def test_json_output_is_one_object_on_stdout_for_scripts(repo, tmp_path, capsys):
    replay = write_replay(
        tmp_path / "r.json", xml_action("list_files"), xml_action("list_files", path="nowhere")
    )
    code = main([*replayed("loop", repo, replay), "--max-iterations", "2", "--output", "json"])

    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert code == 1
    assert result["success"] is False and result["outcome"] == "max_iterations"
    assert result["iterations"] == 2 and result["error"]
    assert set(result) >= {"success", "iterations", "conversation_length", "result", "error"}


@pytest.mark.slow
def test_trajectory_file_records_the_run_and_replays_it(repo, tmp_path, capsys):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("write_file", path="notes.md", content="# notes"),
        xml_action("task_complete", result="done"),
    )
    trajectory = tmp_path / "out" / "trajectory.json"
    args = ["--task", "write notes", "--repo", str(repo)]  # --replay implies the provider
    assert main([*args, "--replay", str(replay), "--trajectory", str(trajectory)]) == 0

    data = json.loads(trajectory.read_text())
    assert data["task"] == "write notes"
    assert data["settings"]["max_iterations"] == 10
    assert data["result"]["success"] is True
    step = data["steps"][0]
    assert step["actions"][0]["parameters"] == {"path": "notes.md", "content": "# notes"}
    assert "notes.md" in step["observations"][0]["content"]
    assert isinstance(step["llm_seconds"], float) and step["response"]["text"].startswith("<")
    (repo / "notes.md").unlink()
    assert main([*args, "--replay", str(trajectory)]) == 0
    assert (repo / "notes.md").read_text() == "# notes"


def test_missing_anthropic_key_names_the_variable(repo, capsys):
    code = main(["--task", "x", "--repo", str(repo)])

    err = capsys.readouterr().err
    assert code == 2
    assert "ANTHROPIC_API_KEY" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_dotenv_comes_from_the_working_directory_never_the_repo(
    repo, clean_env, capsys, monkeypatch
):
    monkeypatch.setenv("GEMINI_API_KEY", "")  # restored after the test, whatever .env sets
    monkeypatch.delenv("GEMINI_API_KEY")
    (repo / ".env").write_text("ANTHROPIC_API_KEY=from-the-repo\n")
    assert main(["--task", "x", "--repo", str(repo)]) == 2  # the repo's .env was ignored
    capsys.readouterr()

    (clean_env / ".env").write_text("GEMINI_API_KEY=from-cwd\n")
    assert main(["--list-tools", "--repo", str(repo)]) == 0
    assert os.environ.get("GEMINI_API_KEY") == "from-cwd"
    assert os.environ.get("ANTHROPIC_API_KEY") is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repo", "does/not/exist"], "--repo does/not/exist does not exist"),
        (["--llm-provider", "replay"], "--llm-provider replay needs --replay FILE"),
        (["--llm-provider", "replay", "--replay", "missing.json"], "replay file not found"),
        (
            ["--llm-provider", "gemini", "--replay", "run.json"],
            "--replay is for --llm-provider replay, not gemini",
        ),
        (
            ["--replay", "r.json", "--trajectory", "/proc/nope/t.json"],
            "cannot write --trajectory /proc/nope/t.json",
        ),
        (["--task", "-", "--confirm", "--replay", "r.json"], "--confirm reads answers from stdin"),
    ],
)
def test_configuration_mistakes_are_one_line_and_exit_code_two(
    args, message, capsys, monkeypatch, tmp_path
):
    write_replay(Path("r.json"), xml_action("task_complete", result="never"))
    monkeypatch.setattr("sys.stdin", io.StringIO("a task from stdin"))
    code = main(["--task", "x", *args])

    err = capsys.readouterr().err.strip()
    assert code == 2
    assert message in err and len(err.splitlines()) == 1


def test_bad_flag_values_exit_with_code_two(capsys):
    assert main(["--task", "x", "--max-iterations", "0"]) == 2
    err = capsys.readouterr().err
    assert err == "toy-agent: error: argument --max-iterations: must be at least 1, got 0\n"


@pytest.mark.slow
def test_task_dash_reads_the_task_from_stdin(repo, tmp_path):
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="ok"))
    trajectory = tmp_path / "t.json"
    proc = run_cli(*replayed("-", repo, replay), "--trajectory", str(trajectory),
                   stdin="Explain hello.py\nin one line\n")  # fmt: skip

    assert proc.returncode == 0, proc.stderr
    assert json.loads(trajectory.read_text())["task"] == "Explain hello.py\nin one line"


def test_list_tools_prints_every_tool_and_exits_zero(repo, capsys):
    assert main(["--list-tools", "--repo", str(repo), "--allow-commands"]) == 0

    out = capsys.readouterr().out
    for line in (
        "read_file(path, start_line?, end_line?)",
        "run_command(command, timeout?)",
        "task_complete(result)",
    ):
        assert line in out


@pytest.mark.slow
def test_confirm_is_driven_through_stdin(repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("write_file", path="a.txt", content="A"),
        xml_action("write_file", path="b.txt", content="B"),
        xml_action("task_complete", result="ok"),
    )
    proc = run_cli(*replayed("write", repo, replay), "--confirm", stdin="n\ny\n")

    assert proc.returncode == 0, proc.stderr
    assert not (repo / "a.txt").exists()
    assert (repo / "b.txt").read_text() == "B"
    assert "+A" in proc.stderr and "Allow write_file a.txt?" in proc.stderr


@pytest.mark.slow
def test_non_tty_output_has_no_spinner_or_escape_codes(repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json", xml_action("list_files"), xml_action("task_complete", result="ok")
    )
    proc = run_cli(
        "--task", "look", "--repo", str(repo), "--llm-provider", "replay", "--replay", str(replay)
    )

    assert proc.returncode == 0
    assert "\r" not in proc.stdout and "\033[" not in proc.stdout
    assert "Iteration 1/10" in proc.stderr  # INFO logging goes to stderr, not stdout


@pytest.mark.slow
def test_terminal_view_in_a_pseudo_terminal_shows_each_step(repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("read_file", path="hello.py", thought="Read the script first."),
        xml_action("read_file", path="missing.py"),
        xml_action("task_complete", result="ok"),
    )
    output = run_in_pty(toy_agent(*replayed("look", repo, replay)))

    plain = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", output)
    assert "\033[32m" in output  # coloured on a terminal
    assert "thought (" in plain and "Read the script first." in plain
    assert "✓ read_file hello.py" in plain
    assert "✗ read_file missing.py" in plain
    assert "✓ completed" in plain and "iterations used: 3" in plain


@pytest.mark.slow
@pytest.mark.parametrize(("flag", "env"), [("--quiet", {}), ("--stream", {"NO_COLOR": "1"})])
def test_quiet_and_no_color_are_honoured_on_a_terminal(flag, env, repo, tmp_path):
    replay = write_replay(
        tmp_path / "r.json", xml_action("list_files"), xml_action("task_complete", result="ok")
    )
    output = run_in_pty(toy_agent(*replayed("look", repo, replay), flag), env)

    assert "✓ completed" in output
    if flag == "--quiet":  # no live view, no INFO log: just the summary
        assert "list_files" not in output and "\r" not in output.replace("\r\n", "\n")
    else:
        assert "list_files" in output
        assert not re.search(r"\x1b\[[0-9;]*m", output)  # NO_COLOR: no colour


@pytest.mark.slow
def test_a_run_with_claude_through_the_real_sdk_on_a_loopback_server(repo, monkeypatch, capsys):
    with FakeProvider() as server:
        server.enqueue(
            anthropic_reply(xml_action("read_file", path="hello.py"), usage=Usage(120, 30)),
            error_reply(529, "overloaded", retry_after="0"),
            anthropic_reply(
                xml_action("task_complete", result="It prints helo."), usage=Usage(200, 20, 100)
            ),
        )
        for name, value in server.env("claude", key="sk-ant-test-secret-key-123456").items():
            monkeypatch.setenv(name, value)
        code = main(
            [
                "--task",
                "what does hello.py print?",
                "--repo",
                str(repo),
                "--output",
                "json",
                "--max-retries",
                "2",
            ]
        )

    result = json.loads(capsys.readouterr().out)
    assert code == 0
    assert result["result"] == "It prints helo."
    assert result["usage"]["output_tokens"] == 50 and result["usage"]["cached_tokens"] == 100
    assert len(server.requests) == 3  # the 529 was retried
    second_turn = server.requests[1].body["messages"]
    assert "print('helo')" in json.dumps(second_turn)


class _CollectorWatch(FakeProvider):
    """Notes, as each request arrives, whether the garbage collector runs and how many objects
    it has frozen."""

    def __init__(self) -> None:
        super().__init__()
        self.collector: list[tuple[bool, int]] = []

    def reply_to(self, request):
        self.collector.append((gc.isenabled(), gc.get_freeze_count()))
        return super().reply_to(request)


@pytest.mark.slow
@pytest.mark.parametrize("as_process", [True, False])
def test_the_process_starts_with_the_collector_paused_and_runs_with_it_on(
    as_process, repo, monkeypatch
):
    argv = ["--task", "x", "--repo", str(repo), "--quiet"]
    monkeypatch.setattr(sys, "argv", ["toy-agent", *argv])
    gc.unfreeze()
    try:
        with _CollectorWatch() as server:
            server.enqueue(anthropic_reply(xml_action("task_complete", result="ok")))
            for name, value in server.env("claude").items():
                monkeypatch.setenv(name, value)
            code = main() if as_process else main(argv)
        frozen = gc.get_freeze_count()
    finally:
        gc.unfreeze()

    assert code == 0 and gc.isenabled()
    [(collecting, frozen_by_then)] = server.collector
    assert collecting  # on again for the run itself
    if as_process:  # what startup built (the SDK's classes, mostly) is never collected
        assert frozen_by_then > 10_000 and frozen > 10_000
    else:  # main(argv) from Python leaves the caller's collector alone
        assert frozen == frozen_by_then == 0


def test_the_collector_is_on_again_after_a_usage_error(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["toy-agent", "--max-iterations", "0", "--task", "x"])
    frozen = gc.get_freeze_count()  # the suite's own (tests/conftest.py), less any freed since
    assert main() == 2
    assert gc.isenabled() and gc.get_freeze_count() <= frozen  # main froze nothing more
    assert "--max-iterations" in capsys.readouterr().err


def test_a_rejected_key_exits_with_code_three_and_one_line(repo, monkeypatch, capsys):
    with FakeProvider() as server:
        server.enqueue(error_reply(401, "invalid x-api-key"))
        for name, value in server.env("claude", key="sk-ant-wrong-key-000000000").items():
            monkeypatch.setenv(name, value)
        code = main(["--task", "x", "--repo", str(repo), "--output", "json"])

    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert code == 3
    assert "401" in result["error"] and "ANTHROPIC_API_KEY" in result["error"]
    assert "sk-ant-wrong-key" not in captured.out + captured.err
    assert len(server.requests) == 1  # never retried


@pytest.mark.slow
def test_ctrl_c_during_an_llm_call_writes_the_trajectory_and_exits_130(repo, tmp_path):
    trajectory = tmp_path / "t.json"
    with FakeProvider() as server:
        server.enqueue(
            openai_reply(xml_action("list_files")),
            Reply(delay=30, body=openai_reply("late").body),
        )
        proc = subprocess.Popen(
            toy_agent("--task", "look", "--repo", str(repo), "--trajectory", str(trajectory)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=cli_environment(quickest_provider_env(server)),
        )
        wait_until(lambda: len(server.requests) == 2, "the second request")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)

    assert proc.returncode == 130, err
    assert "cancelled" in out
    data = json.loads(trajectory.read_text())
    assert data["result"]["outcome"] == "cancelled"
    assert [s["actions"][0]["tool_name"] for s in data["steps"]] == ["list_files"]


def test_secrets_stay_out_of_the_log_file_and_the_trajectory(repo, tmp_path, monkeypatch, capsys):
    secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
    monkeypatch.setenv("GITHUB_TOKEN", secret)
    (repo / "ci.env").write_text(f"GITHUB_TOKEN={secret}\n")
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("read_file", path="ci.env"),
        xml_action("task_complete", result="read it"),
    )
    log, trajectory = tmp_path / "run.log", tmp_path / "run.json"
    code = main([*replayed(f"check the token {secret}", repo, replay), "--log-file", str(log),
                 "--trajectory", str(trajectory)])  # fmt: skip

    captured = capsys.readouterr()
    assert code == 0
    for text in (log.read_text(), trajectory.read_text(), captured.out, captured.err):
        assert secret not in text
    assert "GITHUB_TOKEN=[REDACTED]" in log.read_text()  # the DEBUG log has the observation
    assert "GITHUB_TOKEN=[REDACTED]" in trajectory.read_text()


def test_show_diff_prints_the_full_diff_of_changed_files(repo, tmp_path, capsys):
    replay = write_replay(
        tmp_path / "r.json",
        xml_action("edit_file", path="hello.py", old_str="helo", new_str="hi"),
        xml_action("write_file", path="new.txt", content="fresh\n"),
        xml_action("task_complete", result="ok"),
    )
    assert main([*replayed("x", repo, replay), "--show-diff"]) == 0

    out = capsys.readouterr().out
    assert "-print('helo')" in out and "+print('hi')" in out
    assert "--- /dev/null" in out and "+fresh" in out
    assert "new.txt  +1 -0" in out


@pytest.mark.slow
@pytest.mark.parametrize("entry", [["-m", "toy_agent"], [str(ROOT / "main.py")]])
def test_module_and_script_entry_points_print_the_version(entry):
    proc = subprocess.run(
        [sys.executable, *entry, "--version"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )

    assert proc.returncode == 0
    assert proc.stdout.strip() == f"toy-agent {__version__}"


DEMO = ROOT / "toy_agent" / "demo" / "repo"
DEMO_TRAJECTORY = ROOT / "toy_agent" / "demo" / "trajectory.json"
DEMO_TASK = "Fix median() in stats.py so that tests/test_stats.py passes"


def test_the_readme_quick_start_replays_the_demo_exactly(tmp_path, capsys):
    import shutil

    copy = shutil.copytree(DEMO, tmp_path / "demo")
    code = main(["--llm-provider", "replay", "--replay", str(DEMO_TRAJECTORY), "--repo",
                 str(copy), "--task", DEMO_TASK, "--output", "json"])  # fmt: skip
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["outcome"] == "completed", result
    assert result["files_changed"] == [{"path": "stats.py", "added": 1, "removed": 1}]


@pytest.mark.slow
def test_a_replay_that_leaves_the_recording_stops_as_diverged(tmp_path, capsys):
    import shutil

    copy = shutil.copytree(DEMO, tmp_path / "demo")
    args = ["--replay", str(DEMO_TRAJECTORY), "--repo", str(copy), "--task", DEMO_TASK]
    assert main([*args, "--output", "json"]) == 0
    capsys.readouterr()
    assert main([*args, "--output", "json"]) == 1  # the fix is already there: edit_file fails
    result = json.loads(capsys.readouterr().out)
    assert result["outcome"] == "replay_diverged"
    assert "left the recording" in result["error"] and "Recorded:" in result["error"]
    assert main([*args, "--replay-lenient"]) == 0  # today's behaviour, on request


@pytest.mark.parametrize(
    "recording",
    [
        {"steps": [{"response": {"text": 123}}]},
        {"steps": [{"response": None}]},
        {"steps": [], "settings": "x"},
        {"steps": "no"},
        [1, 2],
    ],
    ids=["text-number", "response-null", "settings-string", "steps-string", "a-list"],
)
def test_a_malformed_replay_file_is_a_usage_error(recording, repo, tmp_path, capsys):
    replay = tmp_path / "bad.json"
    replay.write_text(json.dumps(recording))
    assert main(["--task", "x", "--repo", str(repo), "--replay", str(replay)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("toy-agent: error: ") and "is not a toy_agent trajectory" in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("not json", "not valid JSON"),
        ("[]", "expected an object"),
        ("null", "expected an object"),
        ('{"steps": 5}', "steps: expected a list"),
    ],
    ids=["not-json", "a-list", "null", "steps-number"],
)
def test_a_replay_without_a_task_names_what_is_wrong_with_a_bad_recording(
    content, problem, repo, tmp_path, capsys
):
    replay = tmp_path / "r.json"
    replay.write_text(content)
    assert main(["--repo", str(repo), "--replay", str(replay)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"toy-agent: error: {replay} is not a toy_agent trajectory ({problem}")
    assert "--task is required" not in err and len(err.strip().splitlines()) == 1


def test_a_deny_rule_with_a_check_is_not_called_unused(repo, capsys):
    base = ["--list-tools", "--repo", str(repo), "--check", "true"]
    assert main([*base, "--deny-command", "rm"]) == 0
    assert capsys.readouterr().err == ""  # it refuses a matching --check (docs/checks.md)
    assert main([*base, "--deny-command", "rm", "--allow-command", "ls"]) == 0
    assert capsys.readouterr().err == (
        "toy-agent: warning: --allow-command applies to run_command, which is off: add "
        "--allow-commands to offer it\n"
    )


def test_the_reference_flag_table_lists_exactly_the_parsers_flags():
    from toy_agent.cli import build_parser

    reference = (ROOT / "docs" / "cli.md").read_text()
    table = reference.split("\n## Flags\n", 1)[1].split("\n## ", 1)[0]
    documented = set()
    for row in table.splitlines():
        if row.startswith("| `"):
            first_cell = row.split("|")[1]
            documented |= set(re.findall(r"(?<![\w-])(--?[a-z][\w-]*)", first_cell))
    assert documented == set(build_parser().flags) - {"-h", "--help"}


def test_a_positional_task_and_short_flags_work_like_the_long_ones(repo, tmp_path, capsys):
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="done"))
    code = main(["fix the greeting", "-r", str(repo), "--replay", str(replay), "-q",
                 "--output", "json"])  # fmt: skip
    assert code == 0 and json.loads(capsys.readouterr().out)["result"] == "done"
    assert main(["a", "--task", "b", "-r", str(repo), "--replay", str(replay)]) == 2
    assert "give the task once" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("model", "provider"),
    [("claude-opus-4-1", "claude"), ("gemini-2.5-pro", "gemini"), ("gpt-5", "openai"),
     ("o3-mini", "openai"), ("o4", "openai"), (None, "claude")],
)  # fmt: skip
def test_the_model_name_picks_the_provider(model, provider):
    from toy_agent.cli import provider_for_model

    assert provider_for_model(model) == provider


def test_a_missing_key_names_the_provider_whose_key_is_set(repo, capsys, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-real")
    assert main(["x", "-r", str(repo)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("or use --llm-provider openai (its key is set)")
    assert len(err.splitlines()) == 1


def test_an_alias_reaches_its_provider_end_to_end(repo, capsys, monkeypatch):
    with FakeProvider() as server:
        server.enqueue(anthropic_reply(xml_action("task_complete", result="via alias")))
        for name, value in server.env("claude").items():
            monkeypatch.setenv(name, value)
        code = main(["x", "-r", str(repo), "--llm-provider", "anthropic", "--output", "json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and (result["provider"], result["result"]) == ("claude", "via alias")
    assert server.requests[0].path == "/v1/messages"


def test_a_mistyped_flag_is_one_line_with_a_suggestion_and_json_still_gets_an_object(capsys):
    assert main(["--mdoel", "x", "--output", "json"]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == (
        "toy-agent: error: unrecognized arguments: --mdoel (did you mean --model?)"
    )
    assert json.loads(captured.out) == {
        "schema_version": 1,
        "success": False,
        "outcome": "usage_error",
        "error": "unrecognized arguments: --mdoel (did you mean --model?)",
        "exit_code": 2,
    }


def test_help_has_examples_and_the_environment_it_reads(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "examples:" in out and 'toy-agent "fix the failing test"' in out
    assert "ANTHROPIC_API_KEY" in out and "TOY_AGENT_<FLAG>" in out


@pytest.mark.slow
def test_a_missing_dependency_is_one_line_naming_the_install_command(tmp_path, clean_env):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'dotenv':\n"
        "            raise ModuleNotFoundError(\"No module named 'dotenv'\", name='dotenv')\n"
        "sys.meta_path.insert(0, Block())\n"
    )
    (clean_env / ".env").write_text("TOY_AGENT_MAX_ITERATIONS=3\n")  # python-dotenv reads it
    done = run_cli("x", "-r", str(tmp_path), env={"PYTHONPATH": str(blocker)})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("toy-agent: error: the dotenv package is missing")
    assert "pip install" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
def test_stream_json_is_one_object_per_line_ending_with_the_json_result(tmp_path):
    import shutil

    copy = shutil.copytree(DEMO, tmp_path / "demo")
    args = ["--replay", str(DEMO_TRAJECTORY), "-r", str(copy), DEMO_TASK]
    streamed = run_cli(*args, "--output", "stream-json")
    lines = [json.loads(line) for line in streamed.stdout.splitlines()]
    types = [line["type"] for line in lines]
    assert types[0] == "run_started" and types[-1] == "run_finished"
    assert {"step_started", "llm_response", "tool_started", "tool_finished"} <= set(types)
    shutil.rmtree(copy)
    shutil.copytree(DEMO, copy)
    whole = json.loads(run_cli(*args, "--output", "json").stdout)
    last = {k: v for k, v in lines[-1].items() if k != "type"}
    assert last.keys() == whole.keys()
    assert (last["outcome"], last["provider"], last["trajectory"]) == ("completed", "replay", None)


def test_help_groups_the_flags(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for group in ("task:", "provider:", "tools:", "MCP:", "output:", "logging:"):
        assert f"\n{group}\n" in out, group
