"""The catalogue and non-text content against the official reference servers from npm
(server-memory's nested schemas; server-everything's image, resource links and resources).

They use the `reference_servers` fixture (tests/reference_servers.py: the pinned npm servers,
installed once), which comes with the reference-server tests; where it is not set up, or node
is missing, these skip saying so."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from fake_providers import FakeProvider, anthropic_reply
from fakes import ScriptedLlm, xml_action

from toy_agent import ReactAgent
from toy_agent.llm import ClaudeLlmClient
from toy_agent.mcp_tools import McpServerConfig, McpTools

pytestmark = pytest.mark.slow  # see pyproject's markers


def _command(request: pytest.FixtureRequest, package: str, *args: str) -> tuple[str, ...]:
    try:
        servers = request.getfixturevalue("reference_servers")
    except pytest.FixtureLookupError:
        pytest.skip("the reference_servers fixture (pinned npm MCP servers) is not set up here")
    import reference_servers as ref

    return tuple(servers.command(getattr(ref, package), *args))


def test_server_memory_create_entities_shows_every_field_in_the_prompt(request, tmp_path):
    command = _command(request, "MEMORY")
    config = McpServerConfig("memory", command=command,
                             env={"MEMORY_FILE_PATH": str(tmp_path / "memory.json")})  # fmt: skip
    llm = ScriptedLlm(xml_action("task_complete", result="ok"))
    with McpTools(config, timeout=30) as mcp:
        ReactAgent(llm, tmp_path, mcp_tools=mcp).run("remember")
    prompt = llm.requests[0]["system"]
    block = prompt.split("<tool><name>create_entities</name>", 1)[1].split("</tool>", 1)[0]
    params = json.loads(block.split("<parameters>", 1)[1].split("</parameters>", 1)[0])
    entities = params["entities"]
    assert entities.startswith("Array<{name: string")
    assert "entityType: string" in entities and "observations: string[]" in entities


def _image_holders(body: Any, data: str) -> list[Any]:
    if isinstance(body, dict):
        own = [body] if data in body.values() else []
        return own + [h for v in body.values() for h in _image_holders(v, data)]
    if isinstance(body, list):
        return [h for v in body for h in _image_holders(v, data)]
    return []


def test_server_everything_image_reaches_claude_and_its_resource_links_are_read(
    request, tmp_path: Path
):
    command = _command(request, "EVERYTHING", "stdio")
    with FakeProvider() as server, McpTools(McpServerConfig("everything", command=command),
                                            timeout=30) as mcp:  # fmt: skip
        server.enqueue(
            anthropic_reply(xml_action("get-tiny-image")),
            anthropic_reply(xml_action("get-resource-links", count=1)),
            anthropic_reply(
                xml_action(
                    "read_resource", server="everything", uri="demo://resource/dynamic/blob/1"
                )  # fmt: skip
            ),
            anthropic_reply(xml_action("task_complete", result="ok")),
        )
        client = ClaudeLlmClient("key", "claude-sonnet-4-5", base_url=server.url)
        assert ReactAgent(client, tmp_path, mcp_tools=mcp).run("look")["success"]
        bodies = [r.body for r in server.requests]
    blocks = bodies[1]["messages"][-1]["content"]
    image = next(b for b in blocks if b["type"] == "image")
    assert image["source"]["media_type"] == "image/png"
    assert base64.b64decode(image["source"]["data"]).startswith(b"\x89PNG")
    assert "[image 1: image/png, 4,033 bytes]" in blocks[0]["text"]
    link = bodies[2]["messages"][-1]["content"][0]["text"]
    assert 'read it with read_resource {"server": "everything", "uri": "demo://resource/' in link
    read = bodies[3]["messages"][-1]["content"][0]["text"]
    assert "[resource demo://resource/dynamic/blob/1 (text/plain)]" in read
    assert "This is a base64 blob" in read  # decoded, not `[resource: ..., 56 bytes]`
