"""toy_agent.mcp_config, the pure MCP parts: server arguments, config files, naming, result text."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from mcp_types import (
    Annotations,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from toy_agent.mcp_config import (
    McpError,
    McpServerConfig,
    assign_names,
    load_mcp_config,
    parse_server_arg,
    result_output,
    result_text,
)


@pytest.mark.parametrize(
    ("arg", "name"),
    [
        ("http://localhost:8000/mcp", "localhost"),
        ("HTTPS://api.example.com/mcp", "api.example.com"),
        ("uvx mcp-server-git --repository .", "mcp-server-git"),
        ("uvx --from git+https://x/y.git mcp-server-fetch", "mcp-server-fetch"),
        ("npx -y @modelcontextprotocol/server-filesystem /tmp", "server-filesystem"),
        ("npx -y some-server@1.2.3", "some-server"),
        (
            "docker run -i --rm -e TOKEN ghcr.io/github/github-mcp-server:latest",
            "github-mcp-server",
        ),
        ("python3 tests/mcp_servers/demo_server.py --port 1", "demo_server"),
        ("/usr/bin/python3.11 -m my_server.main", "my_server.main"),
        ("uv run --with mcp server.py", "server"),
        ("node build/index.js", "index"),  # nothing better to go by
        (
            "node /x/node_modules/@modelcontextprotocol/server-everything/dist/index.js stdio",
            "server-everything",
        ),  # fmt: skip
        ("python3 /srv/weather/server.py", "weather"),
        ("node ./my-tools/index.mjs", "my-tools"),
        ("sh -c 'echo Starting...; exec node /x/server-memory/dist/index.js'", "server-memory"),
        ("bash -c 'cd /srv && uvx mcp-server-git'", "mcp-server-git"),
        ("sh -c '\"unclosed'", "sh"),
        ("/opt/tools/my-mcp-server --verbose", "my-mcp-server"),
        ("uvx", "uvx"),
    ],
)
def test_server_names_come_from_the_host_or_the_package(arg: str, name: str) -> None:
    assert parse_server_arg(arg).name == name


@pytest.mark.parametrize(
    ("arg", "message"), [("", "empty"), ("   ", "empty"), ("cmd 'unclosed", "cannot split")]
)
def test_bad_server_args_are_usage_errors(arg: str, message: str) -> None:
    with pytest.raises(McpError, match=message):
        parse_server_arg(arg)


def test_config_needs_exactly_one_of_command_and_url() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        McpServerConfig("x")


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "mcp.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def test_config_file_in_the_claude_desktop_format(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DEMO_TOKEN", "s3cret")
    path = write(
        tmp_path,
        {
            "mcpServers": {
                "git": {
                    "command": "uvx",
                    "args": ["mcp-server-git", "--repository", "."],
                    "env": {"GIT_TOKEN": "${DEMO_TOKEN}", "LEVEL": "${UNSET_VAR:-info}"},
                },
                "web": {
                    "url": "https://example.com/mcp",
                    "headers": {"Authorization": "Bearer ${DEMO_TOKEN}"},
                },
                "typed": {"type": "streamable-http", "url": "http://127.0.0.1:1/mcp"},
                "local": {"type": "stdio", "command": "./server", "cwd": "/tmp"},
                "old": {"type": "sse", "url": "http://127.0.0.1:1/sse"},
                "off": {"command": "never-started", "disabled": True},
            }
        },
    )
    git, web, typed, local, old = load_mcp_config(path)
    assert git == McpServerConfig(
        "git",
        command=("uvx", "mcp-server-git", "--repository", "."),
        env={"GIT_TOKEN": "s3cret", "LEVEL": "info"},
    )
    assert web == McpServerConfig(
        "web", url="https://example.com/mcp", headers={"Authorization": "Bearer s3cret"}
    )
    assert (typed.url, typed.sse, local.cwd, old.sse) == (
        "http://127.0.0.1:1/mcp",
        False,
        "/tmp",
        True,
    )


def test_vs_code_servers_key_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, {"servers": {"a": {"command": "a"}}})
    assert load_mcp_config(path) == [McpServerConfig("a", command=("a",))]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"invalid JSON at line 1 column 2"),
        ([], r'expected an object with an "mcpServers" object'),
        ({"mcpServers": []}, r'expected an object with an "mcpServers" object'),
        ({"mcpServers": {"a": "uvx x"}}, r"server 'a': expected an object"),
        ({"mcpServers": {"a": {}}}, r'server \'a\': give either "command" \(stdio\) or "url"'),
        ({"mcpServers": {"a": {"command": "x", "url": "http://h"}}}, r'give either "command"'),
        ({"mcpServers": {"a": {"command": ""}}}, r'"command" must be a non-empty string'),
        ({"mcpServers": {"a": {"command": "x", "args": "y"}}}, r'"args" must be a list of str'),
        ({"mcpServers": {"a": {"command": "x", "env": {"N": 1}}}}, r'"env" must be an object of'),
        ({"mcpServers": {"a": {"url": "ftp://h"}}}, r'"url" must be an http:// or https:// URL'),
        ({"mcpServers": {"a": {"type": "ws", "url": "http://h"}}}, r"unknown type 'ws'"),
        ({"mcpServers": {"a": {"command": "${NO_SUCH_VAR_XYZ}"}}}, r"NO_SUCH_VAR_XYZ is not set"),
    ],
)
def test_bad_config_files_are_reported_precisely(
    tmp_path: Path, content: object, message: str
) -> None:
    path = write(tmp_path, content)
    with pytest.raises(McpError, match=message) as info:
        load_mcp_config(path)
    assert str(info.value).startswith(f"MCP config {path}")
    assert "\n" not in str(info.value)


def test_missing_config_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(McpError, match=r"cannot read MCP config .*nope.json: No such file"):
        load_mcp_config(tmp_path / "nope.json")


def test_unique_names_stay_and_clashes_get_the_server_prefix() -> None:
    names = assign_names([("git", ["status", "log"]), ("fs", ["log", "read_file"])])
    assert names == [["status", "git__log"], ["fs__log", "read_file"]]  # see test_routes


def test_names_are_sanitised_for_providers() -> None:
    long = "x" * 80
    names = assign_names([("my.server", ["get.weather", long, "a.b", "a_b"])])
    assert names == [["get_weather", "x" * 64, "my_server__a_b", "my_server__a_b_2"]]


def test_a_prefixed_name_already_taken_gets_a_number() -> None:
    names = assign_names([("s", ["x", "s__x"]), ("t", ["x"])])
    assert names == [["s__x", "s__x_2"], ["t__x"]]


def test_result_output_keeps_text_images_and_decoded_text_blobs() -> None:
    note = base64.b64encode(b"ship on Friday\n").decode()
    result = CallToolResult(
        content=[
            TextContent(type="text", text="first"),
            ImageContent(
                type="image",
                data="AAAA",
                mime_type="image/png",
                annotations=Annotations(audience=["user"], priority=0.5),
            ),  # fmt: skip
            EmbeddedResource(
                type="resource", resource=TextResourceContents(uri="file:///a", text="inline")
            ),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(uri="memo://n", blob=note, mime_type="text/plain"),
            ),
            EmbeddedResource(
                type="resource",
                resource=BlobResourceContents(
                    uri="file:///b", blob="AAAAAA==", mime_type="application/pdf"
                ),
            ),
            ResourceLink(
                type="resource_link", uri="memo://n", name="n.txt", mime_type="text/plain"
            ),
        ]
    )
    output = result_output(result, "notes", "read_resource")
    assert output.text.splitlines() == [
        "first",
        "[image 1: image/png, 3 bytes; for the user; priority 0.5]",
        "[resource file:///a (unknown type)]",
        "inline",
        "[resource memo://n (text/plain)]",
        "ship on Friday",
        "[resource file:///b: application/pdf, 4 bytes of binary data, not shown]",
        '[resource link: memo://n (n.txt, text/plain); read it with read_resource {"server": '
        '"notes", "uri": "memo://n"}]',
    ]
    assert [(i.mime_type, i.data, i.size) for i in output.images] == [("image/png", "AAAA", 3)]
    assert result_text(result) == result_output(result).text  # images described, not passed
    assert "its server offers no resources to read" in result_text(result)


def test_structured_content_is_json_when_there_is_no_text() -> None:
    result = CallToolResult(content=[], structured_content={"temp": 21.5, "unit": "°C"})
    assert json.loads(result_text(result)) == {"temp": 21.5, "unit": "°C"}


def test_the_readme_example_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("USER", "ada")
    path = Path(__file__).parent / "mcp_servers" / "example_mcp.json"
    demo, http = load_mcp_config(path)
    assert demo.command == ("python", "tests/mcp_servers/demo_server.py")
    assert demo.env == {"DEMO_GREETING": "ada"}
    assert (http.name, http.url, http.sse) == ("demo-http", "http://127.0.0.1:8765/mcp", False)


def test_a_servers_secrets_are_its_secret_looking_env_and_header_values(tmp_path: Path) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {
        "local": {"command": "srv", "env": {"GITHUB_TOKEN": "ghx0123456789abcdef",
                                           "LOG_LEVEL": "debug-everything", "API_KEY": "short"}},
        "remote": {"url": "https://mcp.example.com/mcp",
                   "headers": {"Authorization": "Bearer Zq8vLr2mXw9pTt4k",
                               "X-Demo": "hello-there"}},
    }}))  # fmt: skip

    local, remote = load_mcp_config(config)
    assert local.secrets == ("ghx0123456789abcdef",)
    assert remote.secrets == ("Bearer Zq8vLr2mXw9pTt4k",)
