"""The config file and TOY_AGENT_ variables: precedence, validation, and what an untrusted
repository cannot set."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from fake_providers import FakeProvider, anthropic_reply
from fakes import xml_action

from toy_agent.cli import build_parser, main
from toy_agent.config import ConfigError, config_path, load_settings

ROOT = Path(__file__).resolve().parents[1]


def write_config(home: Path, text: str) -> Path:
    path = home / "config" / "toy-agent" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def settings(argv: list[str], environ: dict[str, str] | None = None, dotenv: Path | None = None):
    env = {**os.environ, **(environ or {})}
    return load_settings(build_parser(), argv, env, dotenv).args


def test_the_config_file_lives_under_xdg_config_home(home):
    assert config_path() == home / "config" / "toy-agent" / "config.toml"
    assert config_path({"XDG_CONFIG_HOME": "relative"}) == Path.home() / ".config" / (
        "toy-agent/config.toml"
    )


def test_flags_beat_the_environment_which_beats_the_config_file(home):
    write_config(home, 'max_iterations = 30\nmodel = "from-config"\nllm_provider = "openai"\n')
    env = {"TOY_AGENT_MAX_ITERATIONS": "20", "TOY_AGENT_MODEL": "from-env"}

    assert settings([]).max_iterations == 30
    assert settings([], env).max_iterations == 20
    assert settings(["--max-iterations", "10"], env).max_iterations == 10
    assert settings(["--max-iterations", "10"], env).model == "from-env"
    assert settings(["--model", "flag"], env).model == "flag"
    assert settings([], env).llm_provider == "openai"  # from the config, nothing above it
    assert settings(["--max-iterations", "10"]).context_budget == 100_000  # built-in default


def test_switches_and_repeatable_flags_take_their_natural_values(home):
    write_config(home, 'allow_commands = true\nmcp_server = ["a", "b"]\nsandbox = "off"\n')
    args = settings([])
    assert args.allow_commands is True and args.mcp_server == ["a", "b"] and args.sandbox == "off"
    assert settings([], {"TOY_AGENT_ALLOW_COMMANDS": "0"}).allow_commands is False
    assert settings(["--mcp-server", "c"]).mcp_server == ["c"]  # the flag replaces the list


def test_a_config_file_sets_defaults_for_a_real_run(home, tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    write_config(home, 'model = "claude-from-config"\nmax_retries = 0\n')
    with FakeProvider() as server:
        server.enqueue(anthropic_reply(xml_action("task_complete", result="ok")))
        for name, value in {**server.env("claude"), "TOY_AGENT_OUTPUT": "json"}.items():
            monkeypatch.setenv(name, value)
        code = main(["--task", "x", "--repo", str(repo)])

    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(out)["result"] == "ok"  # TOY_AGENT_OUTPUT=json
    assert server.requests[0].body["model"] == "claude-from-config"


@pytest.mark.parametrize(
    ("config", "environ", "message"),
    [
        ("modle = 'x'\n", {}, "unknown key 'modle' in"),
        ("max_iterations = 0\n", {}, "max_iterations: invalid value '0': must be at least 1"),
        ("llm_provider = 'bard'\n", {}, "llm_provider: invalid choice 'bard'"),
        ("allow_commands = 'yes please'\n", {}, "--allow-commands is on or off"),
        ("task = 'x'\n", {}, "--task is not a setting"),
        ("max_iterations = [\n", {}, "is not valid TOML"),
        ("", {"TOY_AGENT_MAX_ITERATIONS": "many"}, "TOY_AGENT_MAX_ITERATIONS: invalid value"),
        ("", {"TOY_AGENT_SANDBOX": "docker"}, "TOY_AGENT_SANDBOX: invalid choice 'docker'"),
        ("", {"TOY_AGENT_MODLE": "x"}, "unknown variable TOY_AGENT_MODLE"),
        ("hook = 'nope'\n", {}, "config.toml: hook: invalid value 'nope': expected EVENT"),
        ("", {"TOY_AGENT_HOOK": "after=x"}, "TOY_AGENT_HOOK: invalid value 'after=x': unknown"),
        ("model_option = ['top_p=1', 'x']\n", {}, "model_option: invalid value 'x': expected"),
        ("", {"TOY_AGENT_MODEL_OPTION": "x"}, "TOY_AGENT_MODEL_OPTION: invalid value 'x'"),
    ],
)
def test_bad_settings_exit_with_code_two_naming_the_key_or_variable(
    home, monkeypatch, capsys, config, environ, message
):
    write_config(home, config)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["--task", "x", "--replay", "missing.json"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err


def test_a_config_file_inside_the_repository_is_never_read_unless_named(home, tmp_path):
    repo = tmp_path / "repo"
    write_config(repo, "allow_commands = true\n")  # repo/config/toy-agent/config.toml
    inside = {"XDG_CONFIG_HOME": str(repo / "config")}
    parsed = load_settings(build_parser(), ["--repo", str(repo)], {**os.environ, **inside})
    assert parsed.args.allow_commands is False
    assert "never read" in parsed.warnings[0]

    named = ["--repo", str(repo), "--config", str(repo / "config" / "toy-agent" / "config.toml")]
    assert settings(named, inside).allow_commands is True


def test_a_dotenv_inside_the_repository_cannot_change_settings(home, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    hostile = repo / ".env"
    hostile.write_text("TOY_AGENT_ALLOW_COMMANDS=1\nTOY_AGENT_MCP_SERVER=sh -c evil\n")
    monkeypatch.chdir(repo)  # the usual case: toy-agent run inside the repository, --repo .
    parsed = load_settings(build_parser(), [], os.environ, hostile)
    assert parsed.args.allow_commands is False and parsed.args.mcp_server == []
    assert "TOY_AGENT_ALLOW_COMMANDS, TOY_AGENT_MCP_SERVER" in parsed.warnings[0]

    own = tmp_path / "own" / ".env"  # the user's own .env, not in or above the repository
    own.parent.mkdir()
    own.write_text("TOY_AGENT_MAX_ITERATIONS=7\n")
    assert settings(["--repo", str(repo)], dotenv=own).max_iterations == 7
    assert (
        settings(["--repo", str(repo)], {"TOY_AGENT_MAX_ITERATIONS": "9"}, own).max_iterations == 9
    )


def test_a_missing_named_config_file_is_an_error(home):
    with pytest.raises(ConfigError, match="not found"):
        settings(["--config", str(home / "nope.toml")])


def test_a_named_config_folder_is_called_a_folder_not_missing(home, capsys):
    assert main(["x", "--config", str(home)]) == 2
    assert capsys.readouterr().err == (
        f"toy-agent: error: config file {home} is a folder: name the TOML file in it\n"
    )


def test_json_output_set_by_the_environment_or_config_file_covers_usage_errors(
    home, tmp_path, monkeypatch, capsys
):
    missing = str(tmp_path / "nowhere")
    monkeypatch.setenv("TOY_AGENT_OUTPUT", "json")
    assert main(["x", "--repo", missing]) == 2  # an error once the settings are read
    out = json.loads(capsys.readouterr().out)
    assert out["outcome"] == "usage_error" and out["exit_code"] == 2
    assert out["error"] == f"--repo {missing} does not exist"
    assert main(["x", "--repo", missing, "--output", "text"]) == 2  # the flag still wins
    assert capsys.readouterr().out == ""

    monkeypatch.setenv("TOY_AGENT_OUTPUT", "stream-json")
    assert main(["x", "--mdoel", "m"]) == 2  # the flags themselves do not parse
    line = json.loads(capsys.readouterr().out)
    assert (line["type"], line["outcome"]) == ("run_finished", "usage_error")

    monkeypatch.delenv("TOY_AGENT_OUTPUT")
    write_config(home, 'output = "json"\nmax_iterations = 0\n')  # the file's other key is bad
    assert main(["x", "--repo", missing]) == 2
    out = json.loads(capsys.readouterr().out)
    assert "max_iterations: invalid value '0'" in out["error"] and out["exit_code"] == 2
