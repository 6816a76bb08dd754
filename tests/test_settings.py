"""One settings value (toy_agent.settings) and one builder (toy_agent.build) for every run:
a single run, a session's /model, a replay and each batch task on any executor."""

from __future__ import annotations

import json
import pickle
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import run_main
from fakes import ScriptedLlm, write_replay, xml_action

from toy_agent.batch.driver import run_batch
from toy_agent.batch.executors import EXECUTORS, Executor
from toy_agent.batch.tasks import Task
from toy_agent.build import build_agent, build_llm, build_tools
from toy_agent.cli import _settings, build_parser
from toy_agent.hooks import Hooks
from toy_agent.mcp_config import parse_server_arg
from toy_agent.permissions import CommandRules, Permissions
from toy_agent.redaction import Redactor
from toy_agent.settings import (
    AgentSettings,
    BatchSettings,
    ModelSettings,
    RunSettings,
    ToolSettings,
)

PARTS = {"llm": ModelSettings, "tools": ToolSettings, "agent": AgentSettings,
         "batch": BatchSettings}  # fmt: skip


def flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *argv: str) -> Any:
    """The parsed flags as the command line resolves them (config file, environment), from a
    folder with no .env."""
    monkeypatch.chdir(tmp_path)
    return _settings(build_parser(), list(argv))


def test_every_flag_default_is_the_settings_default() -> None:
    parsed = vars(build_parser().parse_args([]))
    compared = set()
    for cls in PARTS.values():
        for f in fields(cls):
            if f.name in parsed and f.name not in ("show_thinking", "stream"):
                default = parsed[f.name]
                assert (tuple(default) if isinstance(default, list) else default) == f.default, (
                    f.name
                )
                compared.add(f.name)
    assert {"max_retries", "timeout", "openai_api", "max_iterations", "tool_format",
            "context_budget", "check_retries", "check_timeout", "sandbox", "lint",
            "mcp_timeout", "attempts"} <= compared  # fmt: skip


def test_the_old_default_constants_read_the_settings() -> None:
    from toy_agent import agent
    from toy_agent import budget as context
    from toy_agent.batch import worker as task_runner

    assert AgentSettings.check_retries == agent.DEFAULT_CHECK_RETRIES
    assert agent.DEFAULT_CHECK_TIMEOUT == task_runner.DEFAULT_CHECK_TIMEOUT
    assert AgentSettings.check_timeout == agent.DEFAULT_CHECK_TIMEOUT
    assert AgentSettings.context_budget == context.DEFAULT_CONTEXT_BUDGET


def test_the_default_flags_make_the_default_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = RunSettings.from_args(flags(tmp_path, monkeypatch, "--task", "t"))

    assert settings == RunSettings(provider="claude", permissions=Permissions(), hooks=Hooks())


def test_the_flags_config_file_and_environment_reach_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("timeout = 9\nmax_iterations = 3\n")
    monkeypatch.setenv("TOY_AGENT_MAX_RETRIES", "1")
    args = flags(tmp_path, monkeypatch, "--config", str(config), "-m", "gpt-5-mini",
                 "--model-option", "temperature=0.2", "--mcp-server", "http://127.0.0.1:9/mcp",
                 "--lint-cmd", "*.py=ruff check {file}", "--deny-command", "rm*", "--stream",
                 "--sandbox-read", "/opt", "--show-thinking", "auto")  # fmt: skip

    settings = RunSettings.from_args(args)
    live = RunSettings.from_args(args, live=True)

    assert (settings.llm.provider, settings.llm.model) == ("openai", "gpt-5-mini")
    assert (settings.llm.timeout, settings.llm.max_retries) == (9.0, 1)
    assert settings.agent.max_iterations == 3
    assert settings.llm.model_options == (("temperature", 0.2),)
    assert settings.tools.mcp_servers == (parse_server_arg("http://127.0.0.1:9/mcp"),)
    assert settings.tools.lint_commands == ("*.py=ruff check {file}",)
    assert settings.tools.sandbox_read == ("/opt",)
    assert settings.agent.permissions == Permissions(rules=CommandRules((), ("rm*",)))
    # what only someone watching sees is asked for only with the live view
    assert (settings.llm.show_thinking, settings.agent.stream) == (False, False)
    assert (live.llm.show_thinking, live.agent.stream) == (True, True)


def test_settings_travel_by_pickle_without_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-never-in-settings-1234")
    args = flags(tmp_path, monkeypatch, "-m", "gpt-5-mini", "--hook", "post_tool=true",
                 "--mcp-server", "python -m server", "--permission-mode", "edits",
                 "--effort", "low", "--check", "pytest -q", "--env", "docker:img")  # fmt: skip
    settings = RunSettings.from_args(args)

    data = pickle.dumps(settings)

    assert pickle.loads(data) == settings
    assert b"sk-test-never-in-settings" not in data


def test_a_task_line_wins_for_its_own_fields_only() -> None:
    settings = RunSettings(effort="low", max_iterations=10, check="make test", attempts=2,
                           setup="pip install -e .", env="host", max_retries=1)  # fmt: skip
    task = Task("t", "/repo", "fix", check="pytest", max_iterations=3, effort="high",
                attempts=4, setup="make", env="docker:img")  # fmt: skip

    mine = settings.for_task(task)

    assert (mine.llm.effort, mine.agent.max_iterations, mine.agent.check) == (
        "high", 3, "pytest")  # fmt: skip
    assert (mine.batch.attempts, mine.batch.setup, mine.batch.env) == (4, "make", "docker:img")
    assert mine.llm.max_retries == 1
    assert settings.for_task(Task("u", "/repo", "fix")) == settings


def test_a_field_is_named_once_across_the_parts() -> None:
    names = [f.name for cls in PARTS.values() for f in fields(cls)]

    assert len(names) == len(set(names))
    assert not set(names) & set(PARTS)  # RunSettings(model="x") is the model's name
    assert RunSettings(model="gpt-5", sandbox="off", attempts=3) == RunSettings(
        llm=ModelSettings(model="gpt-5"), tools=ToolSettings(sandbox="off"),
        batch=BatchSettings(attempts=3))  # fmt: skip
    with pytest.raises(TypeError, match="sandbx"):
        RunSettings(sandbx="off")


def test_the_slash_model_switch_keeps_the_model_settings_but_the_provider_s_own() -> None:
    first = ModelSettings(provider="openai", model="llama3", base_url="http://127.0.0.1:1/v1",
                          openai_api="responses", effort="low", max_retries=1)  # fmt: skip

    same = first.switched_to("qwen3", "openai")
    other = first.switched_to("claude-sonnet-4-5", "openai")

    assert (same.provider, same.model, same.base_url, same.openai_api) == (
        "openai", "qwen3", "http://127.0.0.1:1/v1", "responses")  # fmt: skip
    assert (other.provider, other.base_url, other.openai_api) == ("claude", None, "chat")
    assert (other.effort, other.max_retries) == ("low", 1)


def test_the_builder_gives_the_agent_every_setting(tmp_path: Path) -> None:
    settings = RunSettings(make_llm=lambda: ScriptedLlm(), max_iterations=4, tool_format="react",
                           context_budget=50_000, check="true", check_retries=1,
                           check_timeout=7.0, lint="strict", sandbox="off", allow_commands=True,
                           max_cost=1.0, price_input=1.0, price_output=2.0)  # fmt: skip
    redactor = Redactor()
    llm = build_llm(settings.llm)

    agent = build_agent(settings, llm, build_tools(settings.tools, tmp_path, redactor),
                        redactor=redactor)  # fmt: skip

    assert agent.llm_client.client is llm  # adapted once, where it enters
    assert (agent.max_iterations, agent.format.name, agent.context_budget) == (4, "react", 50_000)
    assert (agent.check, agent.check_retries, agent.check_timeout) == ("true", 1, 7.0)
    assert agent.tools.allow_commands and agent.tools.sandbox == "off"
    assert agent.cost.limit == 1.0


def test_a_single_run_and_a_batch_task_build_the_same_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = write_replay(tmp_path / "recording.json",
                          xml_action("write_file", path="done.txt", content="x\n"),
                          xml_action("task_complete", result="ok"))  # fmt: skip
    common = ["--replay", str(replay), "--max-iterations", "7", "--context-budget", "50000",
              "--allow-commands", "--sandbox", "off", "--command-env", "FOO=bar",
              "--permission-mode", "edits", "--allow-command", "pytest*",
              "--check", "test -f done.txt", "--check-retries", "1", "--lint", "strict",
              "--hook", "post_tool=true"]  # fmt: skip
    single, plain = tmp_path / "single", tmp_path / "plain"
    for folder in (single, plain):
        folder.mkdir()
        (folder / "notes.txt").write_text("original\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "repo": str(plain), "task": "write it"}) + "\n")

    one = run_main(capsys, "--task", "write it", "--repo", str(single), "--trajectory",
                   str(tmp_path / "single.json"), *common)  # fmt: skip
    batch = run_main(capsys, "--tasks-file", str(tasks), "--out", str(tmp_path / "out"),
                     *common)  # fmt: skip

    assert (one.returncode, batch.returncode) == (0, 0), one.stderr + batch.stderr
    ran = json.loads((tmp_path / "single.json").read_text())
    task = json.loads((tmp_path / "out" / "trajectories" / "t.json").read_text())
    for trajectory in (ran, task):
        del trajectory["settings"]["repo"]  # each its own copy
    assert ran["settings"] == task["settings"]
    assert ran["settings"]["max_iterations"] == 7
    assert ran["settings"]["permission_mode"] == "edits"
    assert ran["settings"]["hooks"]


def test_a_new_executor_is_one_class(tmp_path: Path) -> None:
    class InlineExecutor(Executor):  # defining it registers it
        """A whole executor: each task runs in the caller's thread when it is submitted."""

        name, summary, runs_here = "inline-test", "in the caller's thread", True

        def __init__(self, settings: RunSettings, scratch: Path, workers: int,
                     address: str | None = None):  # fmt: skip
            from toy_agent.batch.worker import run_task

            self._run = lambda task: run_task(task, settings, scratch)
            self._done: dict[str, dict[str, Any]] = {}

        def submit(self, task: Task) -> str:
            self._done[task.id] = self._run(task)
            return task.id

        def finished(self, handles: Any, timeout: float) -> list[tuple[Any, dict[str, Any]]]:
            return [(h, self._done.pop(h)) for h in handles]

        def cancel(self, handles: Any) -> None:
            pass

    try:
        assert EXECUTORS["inline-test"] is InlineExecutor
        assert build_parser().parse_args(["--executor", "inline-test"]).executor == "inline-test"
        (tmp_path / "plain").mkdir()
        tasks = [{"id": f"t{i}", "repo": str(tmp_path / "plain"), "task": "write",
                  "check": "test -f out.txt"} for i in range(2)]  # fmt: skip
        settings = RunSettings(sandbox="off", make_llm=lambda: ScriptedLlm(
            xml_action("write_file", path="out.txt", content="x\n"),
            xml_action("task_complete", result="ok")))  # fmt: skip

        summary = run_batch(tasks, tmp_path / "out", settings, executor="inline-test")

        assert (summary.passed, summary.failed) == (2, 0)
    finally:
        EXECUTORS.pop("inline-test", None)


def test_the_executor_flag_lists_the_registry() -> None:
    action = next(a for a in build_parser()._actions if a.dest == "executor")

    assert tuple(action.choices or ()) == tuple(EXECUTORS) == ("local", "ray")
    assert action.default == "local"
    assert action.help == "local threads, or Ray tasks on a cluster (default: local)"
