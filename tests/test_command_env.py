"""What a command's environment holds: an allow-list, plus what the user names.

A credential's name does not always say so: `DATABASE_URL` holds a password,
`PIP_EXTRA_INDEX_URL` a token. Each test runs real processes (`env`, through run_command in real
bubblewrap and unsandboxed, and a grep the search starts) and reads what they were given.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from cli_helpers import run_main
from fakes import ScriptedLlm, write_replay, xml_action

from toy_agent.agent import ReactAgent
from toy_agent.redaction import REDACTED, Redactor
from toy_agent.sandbox import bwrap_problem
from toy_agent.tools import CodeRepositoryTools
from toy_agent.variables import child_environment, named_variables, withheld_variables

BWRAP_PROBLEM = bwrap_problem() if sys.platform.startswith("linux") else "not Linux"
needs_bwrap = pytest.mark.skipif(BWRAP_PROBLEM is not None, reason=str(BWRAP_PROBLEM))
SANDBOXES = [pytest.param("bwrap", marks=needs_bwrap), "off"]

# Credentials whose names say nothing of it, and two that load code or sign as the user.
WITHHELD = {
    "DATABASE_URL": "postgres://app:hunter2-db-password@db.internal:5432/app",
    "PIP_EXTRA_INDEX_URL": "https://__token__:pypi-index-token-0123456789@pypi.corp/simple",
    "SENTRY_DSN": "https://0123456789abcdef0123456789abcdef@o1.ingest.sentry.io/42",
    "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXXXXXX",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent-socket-of-the-user",
    "PYTHONPATH": "/nonexistent/evil-python-path",
}
ALLOWED = {"LANG": "C.UTF-8", "LC_MESSAGES": "C", "TZ": "UTC", "VIRTUAL_ENV": "/opt/venv-x"}


def environment_of(output: str) -> dict[str, str]:
    """`env`'s lines in a run_command observation (after its `$ env` and status lines)."""
    listing = output.split("\n", 2)[2]
    return dict(line.split("=", 1) for line in listing.splitlines() if "=" in line)


@pytest.fixture
def user_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**WITHHELD, **ALLOWED, "MYAPP_MODE": "test", "MYAPP_LEVEL": "3"}.items():
        monkeypatch.setenv(name, value)


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_command_gets_the_allow_list_and_what_the_user_named_only(
    sandbox: str, repo: Path, user_environment: None
) -> None:
    tools = CodeRepositoryTools(
        repo, allow_commands=True, sandbox=sandbox,
        command_env=["SENTRY_DSN", "CI=1", "MYAPP_*", "NOT_SET_ANYWHERE"],
    )  # fmt: skip
    env = environment_of(tools.run_command("env"))

    assert not [name for name in WITHHELD if name != "SENTRY_DSN" and name in env]
    assert env["SENTRY_DSN"] == WITHHELD["SENTRY_DSN"]  # named: its value from the user's
    assert env["CI"] == "1" and env["MYAPP_MODE"] == "test" and env["MYAPP_LEVEL"] == "3"
    assert "NOT_SET_ANYWHERE" not in env
    assert {name: env.get(name) for name in ALLOWED} == ALLOWED
    assert env["PATH"] and env["TERM"] == "dumb"
    others = set(env) - {*ALLOWED, "SENTRY_DSN", "CI", "MYAPP_MODE", "MYAPP_LEVEL"}
    assert not [name for name in others if name.startswith(("DATABASE", "PIP_", "SLACK"))]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("grep") is None, reason="needs grep")
def test_the_grep_a_search_starts_gets_the_allow_list_too(
    repo: Path, tmp_path: Path, user_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A grep first on PATH writes down the environment it was given, then searches."""
    dump = tmp_path / "grep-env.txt"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    grep = bin_dir / "grep"
    grep.write_text(f'#!/bin/sh\nenv > "{dump}"\nexec {shutil.which("grep")} "$@"\n')
    grep.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    tools = CodeRepositoryTools(repo, search_backend="grep", command_env=["SENTRY_DSN"])

    assert "hello.py" in tools.search_in_files("helo")
    env = dict(line.split("=", 1) for line in dump.read_text().splitlines() if "=" in line)
    assert not [name for name in WITHHELD if name in env]  # named for commands, not for grep
    assert env["LANG"] == "C.UTF-8" and env["LC_ALL"] == "C.UTF-8"


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", SANDBOXES)
def test_a_command_that_fails_for_a_withheld_variable_tells_the_model_once(
    sandbox: str, repo: Path, user_environment: None
) -> None:
    """The model sees why (through a real run), so it can ask the user instead of guessing."""
    read = xml_action(
        "run_command", command="python3 -c \"import os; print(os.environ['DATABASE_URL'])\""
    )
    llm = ScriptedLlm(read, read, xml_action("task_complete", result="ok"))
    tools = CodeRepositoryTools(repo, allow_commands=True, sandbox=sandbox)
    ReactAgent(llm, repo, tools=tools, redactor=Redactor()).run("connect to the database")

    first, second = (request["messages"][-1].content for request in llm.requests[1:])
    note = (
        "[Note: DATABASE_URL is not passed to commands; the user can pass it with "
        "--command-env DATABASE_URL]"
    )
    assert "KeyError: 'DATABASE_URL'" in first and note in first
    assert "KeyError: 'DATABASE_URL'" in second and "[Note: DATABASE_URL" not in second
    assert "hunter2-db-password" not in llm.sent_text()


@pytest.mark.parametrize(
    ("output", "exit_code", "withheld"),
    [
        ("KeyError: 'DATABASE_URL'", 1, ["DATABASE_URL"]),
        ("error: SENTRY_DSN is not set, events are dropped", 0, ["SENTRY_DSN"]),
        ("Missing environment variable: SLACK_WEBHOOK_URL", 0, ["SLACK_WEBHOOK_URL"]),
        ("connecting with $DATABASE_URL failed", 2, ["DATABASE_URL"]),
        ("DATABASE_URL_OLD is not set", 1, ["DATABASE_URL_OLD"]),  # not DATABASE_URL
        ("all 12 tests passed; SENTRY_DSN configured", 0, []),  # it went on: no failure
        ("KeyError: 'LANG'", 1, []),  # commands get it: not withheld
        ("KeyError: 'NOT_IN_YOUR_ENVIRONMENT'", 1, []),  # --command-env would not help
        ("KeyError: 'OPENAI_API_KEY'", 1, []),  # the agent's own key is never suggested
    ],
)
def test_which_variables_a_failed_command_missed(
    output: str, exit_code: int, withheld: list[str]
) -> None:
    environ = {**WITHHELD, **ALLOWED, "OPENAI_API_KEY": "sk-x", "DATABASE_URL_OLD": "x"}
    assert withheld_variables(output, exit_code, (), environ) == withheld


def test_a_named_variable_is_not_reported_as_withheld() -> None:
    named = named_variables(["DATABASE_URL"], WITHHELD)
    assert withheld_variables("KeyError: 'DATABASE_URL'", 1, named, WITHHELD) == []


def test_named_variables_come_from_the_users_environment_or_as_written() -> None:
    environ = {"CI_JOB": "7", "CI_REF": "main", "DATABASE_URL": "postgres://x", "CIA": "no"}
    named = named_variables(["DATABASE_URL", "CI_*", "MODE=fast", "ABSENT"], environ)
    assert named == {"DATABASE_URL": "postgres://x", "CI_JOB": "7", "CI_REF": "main",
                     "MODE": "fast"}  # fmt: skip
    assert child_environment(environ=environ) == {}


def test_a_secret_named_value_the_user_passes_is_redacted_from_observations(repo: Path) -> None:
    value = "s3cr3t-passed-by-name-0123"
    tools = CodeRepositoryTools(repo, redactor=Redactor(environ={}),
                                command_env=[f"DEPLOY_TOKEN={value}"])  # fmt: skip
    assert tools.redactor.redact(f"token is {value}") == f"token is {REDACTED}"


# ----------------------------------------------------------------------------- the CLI
@pytest.mark.slow
def test_command_env_from_the_flag_the_config_file_and_toy_agent_command_env(
    home: Path, repo: Path, tmp_path: Path, user_environment: None, capsys
) -> None:
    """The user's three ways, merged as every repeatable setting is (a flag replaces the
    config's list); the run's settings name the variables, never their values."""
    (home / "config" / "toy-agent").mkdir(parents=True)
    (home / "config" / "toy-agent" / "config.toml").write_text('command_env = ["SENTRY_DSN"]\n')
    replay = write_replay(tmp_path / "r.json", xml_action("run_command", command="env"),
                          xml_action("task_complete", result="done"))  # fmt: skip

    def passed(*flags: str, env: dict[str, str] | None = None) -> tuple[set[str], dict]:
        trajectory = tmp_path / "t.json"
        done = run_main(capsys, "--task", "look", "--repo", str(repo), "--replay", str(replay),
                        "--allow-commands", "--sandbox", "off", "--trajectory", str(trajectory),
                        *flags, env=env)  # fmt: skip
        assert done.returncode == 0, done.stderr
        recorded = json.loads(trajectory.read_text())
        observation = json.dumps(recorded["steps"][0]["observations"])
        assert not [value for value in WITHHELD.values() if "://" in value and value in observation]
        return {name for name in WITHHELD if f"{name}=" in observation}, recorded["settings"]

    assert passed()[0] == {"SENTRY_DSN"}
    assert passed(env={"TOY_AGENT_COMMAND_ENV": "SLACK_WEBHOOK_URL"})[0] == {"SLACK_WEBHOOK_URL"}
    names, settings = passed("--command-env", "DATABASE_URL", "--command-env", "PYTHONPATH")
    assert names == {"DATABASE_URL", "PYTHONPATH"}
    assert settings["command_env"] == ["DATABASE_URL", "PYTHONPATH"]
    assert "hunter2" not in json.dumps(settings)


def test_a_repositorys_env_cannot_pass_a_variable_to_commands(
    home: Path, repo: Path, tmp_path: Path, user_environment: None, capsys
) -> None:
    (repo / ".env").write_text("TOY_AGENT_COMMAND_ENV=DATABASE_URL\n")
    done = run_main(capsys, "--list-tools", "--allow-commands", "--sandbox", "off", cwd=repo)
    assert done.returncode == 0, done.stderr
    assert "ignoring TOY_AGENT_COMMAND_ENV" in done.stderr
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("command environment:"))
    assert "DATABASE_URL" not in line


def test_a_bad_command_env_name_is_a_usage_error(repo: Path, capsys) -> None:
    done = run_main(capsys, "--list-tools", "--repo", str(repo), "--command-env", "NO SUCH=1")
    assert done.returncode == 2
    assert "'NO SUCH=1' is not NAME or NAME=VALUE" in done.stderr
