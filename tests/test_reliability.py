"""Fault injection: whatever the repository, the provider or the terminal does, the run ends
with a clear line, a documented exit code, and its trajectory and summary intact."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from cli_helpers import cli_environment, quickest_provider_env, run_cli, run_main, toy_agent
from fake_providers import FakeProvider, anthropic_reply, error_reply, openai_reply
from fakes import ScriptedLlm, folder, native_call, write_replay, xml_action

from toy_agent.agent import ReactAgent
from toy_agent.events import StepStarted, TrajectoryRecorder

REPLIES = {"claude": anthropic_reply, "openai": openai_reply}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return folder(tmp_path / "repo", {"ok.py": "print('ok')\n"})


@pytest.mark.slow
@pytest.mark.parametrize("provider", sorted(REPLIES))
def test_a_file_name_and_a_task_that_are_not_utf8_reach_the_model_escaped(provider, repo, tmp_path):
    os.close(os.open(os.fsencode(repo) + b"/caf\xe9.py", os.O_CREAT | os.O_WRONLY))
    trajectory = tmp_path / "run.json"
    with FakeProvider() as server:
        build = REPLIES[provider]
        server.enqueue(build(xml_action("list_files")),
                       build(xml_action("task_complete", result="listed")))  # fmt: skip
        done = run_cli(b"--task", b"look at caf\xe9", "--repo", str(repo), "--llm-provider",
                       provider, "--trajectory", str(trajectory), env=server.env(provider),
                       text=False)  # fmt: skip
        sent = [json.dumps(r.body) for r in server.requests]
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert "look at caf\\\\xe9" in sent[0]  # the task, escaped
    assert "caf\\\\xe9.py" in sent[1]  # the listing, escaped
    steps = json.loads(trajectory.read_text(encoding="utf-8"))["steps"]
    assert "caf\\xe9.py" in steps[0]["observations"][0]["content"]


@pytest.mark.parametrize("tool_format", ["xml", "native"])
def test_parameters_nested_hundreds_deep_become_an_error_observation(tool_format, repo, tmp_path):
    deep: object = "x"
    for _ in range(600):
        deep = {"a": deep}
    reply = (xml_action("read_file", path=deep) if tool_format == "xml"
             else native_call(("read_file", {"path": deep})))  # fmt: skip
    done = (xml_action("task_complete", result="ok") if tool_format == "xml"
            else native_call(("task_complete", {"result": "ok"})))  # fmt: skip
    llm = ScriptedLlm(reply, done)
    recorder = TrajectoryRecorder(tmp_path / "t.json")
    result = ReactAgent(llm, repo, tool_format=tool_format, on_event=recorder).run("x")
    assert result["outcome"] == "completed"
    assert "nested more than 32 levels deep" in llm.sent_text()
    assert recorder.error is None and json.loads((tmp_path / "t.json").read_text())["steps"]


def test_the_trajectory_is_on_disk_after_every_step(repo, tmp_path):
    path = tmp_path / "t.json"
    seen: list[int] = []

    def peek(event: object) -> None:
        if isinstance(event, StepStarted) and event.iteration > 1:
            seen.append(len(json.loads(path.read_text())["steps"]))

    llm = ScriptedLlm(xml_action("list_files"), xml_action("read_file", path="ok.py"),
                      xml_action("task_complete", result="ok"))  # fmt: skip
    ReactAgent(llm, repo, on_event=[TrajectoryRecorder(path), peek]).run("x")
    assert seen == [1, 2]
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_an_unwritable_trajectory_still_prints_the_summary_then_one_error(repo, tmp_path, capsys):
    replay = write_replay(tmp_path / "r.json", xml_action("task_complete", result="fine"))
    done = run_main(capsys, "--task", "x", "--repo", str(repo), "--replay", str(replay),
                    "--trajectory", "/dev/full")  # fmt: skip
    assert done.returncode == 0
    assert "✓ completed" in done.stdout and "fine" in done.stdout
    assert done.stderr.strip().splitlines()[-1] == (
        "toy-agent: error: cannot write the trajectory /dev/full: No space left on device"
    )
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_a_closed_stdout_ends_quietly(repo, tmp_path):
    big = "".join(f"line {i}\n" for i in range(20000))
    write = xml_action("write_file", path="big.txt", content=big)
    replay = write_replay(tmp_path / "r.json", write, xml_action("task_complete", result="wrote"))
    argv = toy_agent("--task", "x", "--repo", str(repo), "--replay", str(replay), "--show-diff",
                     "--quiet")  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=cli_environment())  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()  # like `| head -1`
    err = proc.stderr.read().decode()
    assert proc.wait(60) in (0, 141)
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_why_the_provider_failed_is_in_the_log(repo, tmp_path, capsys):
    log = tmp_path / "run.log"
    with FakeProvider() as server:
        server.enqueue(error_reply(401, "invalid x-api-key"))
        done = run_main(capsys, "--task", "x", "--repo", str(repo), "--log-file", str(log),
                        env=quickest_provider_env(server))  # fmt: skip
    assert done.returncode == 3
    error = "toy-agent: error: openai API error 401: invalid x-api-key — check OPENAI_API_KEY"
    assert error in done.stderr
    text = log.read_text()
    assert "LLM call failed" in text and "Traceback" in text  # the traceback at DEBUG
    assert "httpcore" not in text


def test_why_a_tool_failed_is_logged_at_info(repo, caplog):
    caplog.set_level("INFO", logger="toy_agent")
    llm = ScriptedLlm(xml_action("read_file", path="nope.py"),
                      xml_action("task_complete", result="ok"))  # fmt: skip
    ReactAgent(llm, repo).run("x")
    assert any(r.levelname == "INFO" and "Tool read_file failed" in r.getMessage()
               and "No such file or directory: nope.py" in r.getMessage()
               for r in caplog.records)  # fmt: skip


def test_a_declined_edit_is_counted_and_shown(repo, tmp_path, capsys):
    replay = write_replay(tmp_path / "r.json", xml_action("write_file", path="a.txt", content="A"),
                          xml_action("task_complete", result="tried"))  # fmt: skip
    args = ["--task", "x", "--repo", str(repo), "--replay", str(replay), "--confirm"]
    done = run_main(capsys, *args, stdin="n\n")
    assert "tool errors: 1 (1 declined by you)" in done.stdout
    as_json = run_main(capsys, *args, "--output", "json", stdin="n\n")
    result = json.loads(as_json.stdout)
    assert (result["tool_errors"], result["declined"]) == (1, 1)
