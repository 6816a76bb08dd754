"""Images and other non-text MCP content reaching the model: the wire shapes each real SDK
sends (against loopback providers), the size budget, the capability rule, what records keep,
and read_resource against a real SDK server over stdio."""

from __future__ import annotations

import base64
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_providers import FakeProvider, anthropic_reply, gemini_reply, openai_reply
from fakes import ScriptedLlm, xml_action

from toy_agent import ReactAgent
from toy_agent.budget import (
    IMAGE_MAX_BYTES,
    STEP_IMAGES_MAX,
    ImageBudget,
    admit_images,
    recent_images,
    tool_images,
)
from toy_agent.events import TrajectoryRecorder
from toy_agent.llm import (
    ClaudeLlmClient,
    GeminiLlmClient,
    OpenAICompatibleLlmClient,
    model_image_types,
    to_anthropic_messages,
    to_gemini_contents,
    to_openai_messages,
)
from toy_agent.mcp_tools import McpServerConfig, McpToolError, McpTools
from toy_agent.messages import Image, LlmResponse, Message, ToolCall, ToolOutput
from toy_agent.redaction import Redactor
from toy_agent.sessions import messages_from_trajectory

SERVERS = Path(__file__).parent / "mcp_servers"
sys.path.insert(0, str(SERVERS))
from content_data import NOTE_TEXT, PNG  # noqa: E402

PNG_B64 = base64.b64encode(PNG).decode()
PROVIDERS = {  # provider: (client class, URL suffix, a model that takes images, reply builder)
    "claude": (ClaudeLlmClient, "", "claude-sonnet-4-5", anthropic_reply),
    "gemini": (GeminiLlmClient, "", "gemini-2.5-flash", gemini_reply),
    "openai": (OpenAICompatibleLlmClient, "/v1", "gpt-4o", openai_reply),
}


@pytest.fixture
def content_mcp():
    from content_server import build_server  # the mcp SDK: imported by the tests that use it

    with McpTools(McpServerConfig("content", server=build_server())) as mcp:
        yield mcp


def _run(provider: str, fmt: str, mcp: McpTools, tmp_path: Path, model: str = "") -> Any:
    """The agent calls `screenshot`, then finishes; returns the second request's body."""
    cls, suffix, vision_model, build = PROVIDERS[provider]
    with FakeProvider() as server:
        if fmt == "native":
            server.enqueue(
                build("Looking.", tool_calls=(ToolCall("screenshot", {}, "call_1"),)),
                build("Done.", tool_calls=(ToolCall("task_complete", {"result": "ok"}, "c2"),)),
            )
        else:
            server.enqueue(
                build(xml_action("screenshot")), build(xml_action("task_complete", result="ok"))
            )
        client = cls("key", model or vision_model, base_url=server.url + suffix)
        result = ReactAgent(client, tmp_path, mcp_tools=mcp, tool_format=fmt).run("look")
        assert result["success"], result
        return server.requests[1].body


def _image_holders(body: Any) -> list[Any]:
    """Every dict in the request body that holds the PNG's base64 (in whatever key)."""
    found = []
    if isinstance(body, dict):
        if any(isinstance(v, str) and PNG_B64 in v for v in body.values()):
            found.append(body)
        for value in body.values():
            found += _image_holders(value)
    elif isinstance(body, list):
        for value in body:
            found += _image_holders(value)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["xml", "native"])
def test_claude_gets_an_image_block_in_the_tool_turn(fmt, content_mcp, tmp_path):
    body = _run("claude", fmt, content_mcp, tmp_path)
    last = body["messages"][-1]
    assert last["role"] == "user"
    image = {"type": "base64", "media_type": "image/png", "data": PNG_B64}
    if fmt == "native":
        result = last["content"][0]
        assert result["type"] == "tool_result"
        assert result["content"][0]["type"] == "text"
        assert "The login page:" in result["content"][0]["text"]
        assert {"type": "image", "source": image} == {
            k: v for k, v in result["content"][1].items() if k != "cache_control"
        }
    else:
        text, block = last["content"][0], last["content"][1]
        assert text["type"] == "text" and "<OBSERVATION>" in text["text"]
        assert block["type"] == "image" and block["source"] == image
    assert _image_holders(body) == [image]


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["xml", "native"])
def test_gemini_gets_inline_data_beside_the_observation(fmt, content_mcp, tmp_path):
    body = _run("gemini", fmt, content_mcp, tmp_path)
    parts = body["contents"][-1]["parts"]
    assert body["contents"][-1]["role"] == "user"
    inline = [p["inlineData"] for p in parts if "inlineData" in p]
    assert [(i.get("mimeType", i.get("mime_type")), i["data"]) for i in inline] == [
        ("image/png", PNG_B64)
    ]
    if fmt == "native":
        assert "functionResponse" in parts[0]
        assert "The login page:" in json.dumps(parts[0]["functionResponse"]["response"])
    else:
        assert "<OBSERVATION>" in parts[0]["text"]


@pytest.mark.parametrize("fmt", ["xml", "native"])
def test_openai_gets_a_data_url_in_a_user_message(fmt, content_mcp, tmp_path):
    body = _run("openai", fmt, content_mcp, tmp_path)
    messages = body["messages"]
    last = messages[-1]
    assert last["role"] == "user" and isinstance(last["content"], list)
    url = f"data:image/png;base64,{PNG_B64}"
    assert last["content"][1] == {"type": "image_url", "image_url": {"url": url}}
    if fmt == "native":  # a tool message takes no image: it comes in the user message after
        assert messages[-2]["role"] == "tool" and isinstance(messages[-2]["content"], str)
        assert "The login page:" in messages[-2]["content"]
    else:
        assert "<OBSERVATION>" in last["content"][0]["text"]
    assert len(_image_holders(body)) == 1


def test_a_model_not_known_to_take_images_is_told_so_and_sent_none(content_mcp, tmp_path):
    body = _run("openai", "xml", content_mcp, tmp_path, model="qwen2.5-coder")
    assert _image_holders(body) == []
    observation = body["messages"][-1]["content"]
    assert "[image 1: image/png, 71 bytes; for the assistant; priority 0.9]" in observation
    assert (
        "[image 1 not shown to you: the model qwen2.5-coder is not known to take images]"
        in observation
    )


def test_which_models_take_images():
    assert "image/png" in model_image_types("claude", "claude-haiku-4-5")
    assert not model_image_types("claude", "claude-2.1")
    assert "image/gif" not in model_image_types("gemini", "gemini-2.5-pro")
    assert model_image_types("openai", "gpt-4o-mini") and model_image_types("openai", "gpt-5")
    assert model_image_types("openai", "llava:13b") and model_image_types("openai", "qwen2.5-vl")
    for text_only in ("o3-mini", "qwen2.5-coder", "llama3.1", "deepseek-r1", "gpt-3.5-turbo"):
        assert not model_image_types("openai", text_only), text_only
    assert not model_image_types("replay", "claude-sonnet-4-5")


def test_the_budget_refuses_big_fake_and_too_many_images():
    types = model_image_types("claude", "claude-sonnet-4-5")
    big = Image("image/png", PNG_B64, IMAGE_MAX_BYTES + 1, "x")
    fake = Image.from_base64(base64.b64encode(b"not really a png").decode(), "image/png")
    webp = Image.from_base64(base64.b64encode(b"RIFF\0\0\0\0WEBPVP8 ").decode(), "image/png")
    sent, notes = admit_images([big, fake, webp], types, "claude-x", ImageBudget())
    assert [i.mime_type for i in sent] == ["image/webp"]  # typed by its bytes, not its label
    assert notes == [
        f"[image 1 not shown to you: it has {IMAGE_MAX_BYTES + 1:,} bytes, over the limit of "
        f"{IMAGE_MAX_BYTES:,} per image]",
        "[image 2 not shown to you: its data is not a PNG, JPEG, GIF or WebP image]",
    ]
    png = Image.from_base64(PNG_B64, "image/png")
    budget = ImageBudget()
    sent, notes = admit_images([png] * (STEP_IMAGES_MAX + 1), types, "claude-x", budget)
    assert len(sent) == STEP_IMAGES_MAX and "one step sends at most" in notes[0]
    gif = Image.from_base64(base64.b64encode(b"GIF89a....").decode(), "image/gif")
    gemini = model_image_types("gemini", "gemini-2.5-flash")
    assert admit_images([gif], gemini, "gemini-2.5-flash", ImageBudget())[1] == [
        "[image 1 not shown to you: the model gemini-2.5-flash does not take image/gif]"
    ]


def test_a_tools_images_share_the_steps_budget_and_each_one_left_out_is_a_line():
    types = model_image_types("claude", "claude-sonnet-4-5")
    png = Image.from_base64(PNG_B64, "image/png")
    budget = ImageBudget()
    assert tool_images("plain text", types, "claude-x", budget) == ("plain text", ())
    first = tool_images(ToolOutput("shot 1", (png,) * (STEP_IMAGES_MAX - 1)), types, "m", budget)
    assert first == ("shot 1", (png,) * (STEP_IMAGES_MAX - 1))
    text, images = tool_images(ToolOutput("shot 2", (png, png)), types, "claude-x", budget)
    assert images == (png,)  # the step's budget had room for one more
    assert text == (f"shot 2\n[image 2 not shown to you: one step sends at most "
                    f"{STEP_IMAGES_MAX} images and 8,000,000 bytes]")  # fmt: skip
    text, images = tool_images(ToolOutput("shot", (png,)), frozenset(), "", ImageBudget())
    assert (text, images) == ("shot\n[image 1 not shown to you: the model in use is not known "
                              "to take images]", ())  # fmt: skip


def test_only_the_newest_images_are_resent():
    png = Image.from_base64(PNG_B64, "image/png")
    history = [Message("user", f"obs {n}", images=(png, png)) for n in range(6)]
    sent = recent_images(history, limit=3)
    assert [sum(bool(i.data) for i in m.images) for m in sent] == [0, 0, 0, 0, 1, 2]
    assert [len(m.images) for m in sent] == [2] * 6  # the older ones go as a text stub


def test_records_keep_a_reference_and_a_resumed_conversation_sends_a_stub(content_mcp, tmp_path):
    trajectory = tmp_path / "run.json"
    recorder = TrajectoryRecorder(trajectory)
    llm = ScriptedLlm(xml_action("screenshot"), xml_action("task_complete", result="ok"))
    llm.provider, llm.model = "claude", "claude-sonnet-4-5"  # type: ignore[misc]
    agent = ReactAgent(llm, tmp_path, mcp_tools=content_mcp, on_event=recorder)
    assert agent.run("look")["success"]
    assert llm.requests[1]["messages"][-1].images[0].data == PNG_B64
    recorded = trajectory.read_text()
    assert PNG_B64 not in recorded
    observation = json.loads(recorded)["steps"][0]["observations"][0]
    assert observation["images"] == [
        {
            "mime_type": "image/png",
            "bytes": len(PNG),
            "sha256": Image.from_base64(PNG_B64, "").sha256,
        }
    ]
    from_trajectory = messages_from_trajectory(json.loads(recorded))[2]
    assert [(i.mime_type, i.size, i.data) for i in from_trajectory.images] == [
        ("image/png", len(PNG), "")
    ]
    saved = [m.to_dict() for m in agent.conversation_history]
    assert PNG_B64 not in json.dumps(saved)
    resumed = [Message.from_dict(m) for m in saved]
    for wire in (
        to_anthropic_messages(resumed),
        to_gemini_contents(resumed),
        to_openai_messages("", resumed),
    ):
        text = json.dumps(wire)
        assert "no longer shown to you; call the tool again to see it" in text
        assert '"image"' not in text and "inline_data" not in text and "image_url" not in text


def test_a_replay_sees_the_observations_the_recording_saw(content_mcp, tmp_path):
    from toy_agent.llm import ReplayLlmClient

    trajectory = tmp_path / "run.json"
    llm = ScriptedLlm(xml_action("screenshot"), xml_action("task_complete", result="ok"))
    llm.provider, llm.model = "claude", "claude-sonnet-4-5"  # type: ignore[misc]
    ReactAgent(llm, tmp_path, mcp_tools=content_mcp, on_event=TrajectoryRecorder(trajectory)).run(
        "look"
    )
    replay = ReplayLlmClient(trajectory)
    result = ReactAgent(replay, tmp_path, mcp_tools=content_mcp).run("look")
    assert result["outcome"] == "completed"


@pytest.mark.slow
def test_text_blobs_embedded_resources_and_links_over_stdio(tmp_path):
    """The real SDK server as a subprocess: a text blob is decoded, a resource link says how to
    read it, read_resource lists and reads (an image resource comes as an image), and what it
    reads is redacted like every observation."""
    command = shlex.join([sys.executable, str(SERVERS / "content_server.py")])
    llm = ScriptedLlm(
        xml_action("attachment"),
        xml_action("find_notes"),
        xml_action("read_resource", server="content_server"),
        xml_action("read_resource", server="content_server", uri="memo://notes.txt"),
        xml_action("read_resource", server="content_server", uri="memo://logo.png"),
        xml_action("read_resource", server="content_server", uri="memo://secret.txt"),
        xml_action("read_resource", server="elsewhere"),
        xml_action("task_complete", result="ok"),
    )
    llm.provider, llm.model = "openai", "gpt-4o"  # type: ignore[misc]
    with McpTools(command) as mcp:
        assert ReactAgent(llm, tmp_path, mcp_tools=mcp, redactor=Redactor()).run("x")["success"]
    prompt = llm.requests[0]["system"]
    assert "<tool><name>read_resource</name>" in prompt
    assert '<parameters>{"server":"\\"content_server\\"","uri":"string, optional"}' in prompt
    seen = [r["messages"][-1] for r in llm.requests[1:]]
    assert f"[resource memo://notes.txt (text/plain)]\n{NOTE_TEXT.strip()}" in seen[0].content
    assert (
        "[resource link: memo://notes.txt (notes.txt, text/plain: The meeting notes); read it "
        'with read_resource {"server": "content_server", "uri": "memo://notes.txt"}]'
        in seen[1].content
    )
    assert "memo://logo.png  logo.png, image/png" in seen[2].content
    assert "memo://notes.txt  notes.txt, text/plain: The meeting notes" in seen[2].content
    assert NOTE_TEXT.strip() in seen[3].content
    assert "[image 1: resource memo://logo.png, image/png, 71 bytes]" in seen[4].content
    assert [i.data for i in seen[4].images] == [PNG_B64]
    assert "sk-ant-api03-" not in seen[5].content and "token=" in seen[5].content
    assert "Error: read_resource: server must be one of: content_server" in seen[6].content


def test_read_resource_mistakes_are_tool_errors(content_mcp):
    with pytest.raises(McpToolError, match="uri must be a resource URI string"):
        content_mcp.call("read_resource", {"server": "content", "uri": 7})
    with pytest.raises(McpToolError, match=r"read_resource \(server 'content'\): .*memo://nope"):
        content_mcp.call("read_resource", {"server": "content", "uri": "memo://nope"})
    assert "memo://notes.txt" in content_mcp.call("read_resource", {})  # one server: implied


def test_read_resource_is_not_offered_without_resources(tmp_path):
    from mcp_helpers import demo_in_process

    with McpTools(demo_in_process()) as mcp:
        assert "read_resource" not in [t["name"] for t in mcp.get_mcp_tools()]


def test_an_image_a_tool_returns_counts_against_the_context(content_mcp, tmp_path):
    llm = ScriptedLlm(
        LlmResponse("", (ToolCall("screenshot", {}, "a"),), stop_reason="tool_use"),
        LlmResponse("", (ToolCall("task_complete", {"result": "ok"}, "b"),)),
    )
    llm.provider, llm.model = "gemini", "gemini-2.5-flash"  # type: ignore[misc]
    agent = ReactAgent(llm, tmp_path, mcp_tools=content_mcp, tool_format="native")
    assert agent.run("look")["success"]
    result = llm.requests[1]["messages"][-1].tool_results[0]
    assert [i.mime_type for i in result.images] == ["image/png"]
