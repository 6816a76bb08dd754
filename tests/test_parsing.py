"""Parsing real, messy LLM replies into actions, for each action format."""

from __future__ import annotations

import json
import re

import pytest

from toy_agent.messages import LlmResponse, ToolCall
from toy_agent.parsing import (
    FORMAT_NAMES,
    Action,
    NativeFormat,
    Observation,
    ParsedResponse,
    ParseError,
    ReactFormat,
    XmlFormat,
    compact_parameters,
    get_format,
)


def _schema(required: list[str], **props: str) -> dict:
    properties = {name: {"type": kind} for name, kind in props.items()}
    return {"type": "object", "properties": properties, "required": required}


TOOLS = [
    {"name": "list_files", "description": "List files.", "parameters": _schema([], path="string")},
    {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": _schema(["path"], path="string", start_line="integer", end_line="integer"),
    },
    {
        "name": "write_file",
        "description": "Write a file.",
        "parameters": _schema(["path", "content"], path="string", content="string"),
    },
    {
        "name": "task_complete",
        "description": "Finish.",
        "parameters": _schema(["result"], result="string"),
    },
]


def xml(text: str) -> Action:
    parsed = XmlFormat().parse(LlmResponse(text))
    assert len(parsed.actions) == 1
    return parsed.actions[0]


def xml_error(text: str, stop_reason: str = "end") -> str:
    with pytest.raises(ParseError) as info:
        XmlFormat().parse(LlmResponse(text, stop_reason=stop_reason))  # type: ignore[arg-type]
    return str(info.value)


def react_parse(response: LlmResponse) -> ParsedResponse:
    """ReAct parsing needs the offered tools: plain-text input fills a tool's one parameter."""
    return ReactFormat().parse(response, TOOLS)


def react(text: str) -> Action:
    parsed = react_parse(LlmResponse(text))
    assert len(parsed.actions) == 1
    return parsed.actions[0]


def react_error(text: str) -> str:
    with pytest.raises(ParseError) as info:
        react_parse(LlmResponse(text))
    return str(info.value)


READ = Action("read_file", {"path": "src/app.py"})


# --- XML: the contract and the messy variants real models send ----------------------------


def test_xml_parses_the_canonical_reply():
    parsed = XmlFormat().parse(
        LlmResponse(
            "<THOUGHT>Look first.</THOUGHT>\n<ACTION>\n<tool_name>read_file</tool_name>\n"
            '<parameters>{"path": "src/app.py"}</parameters>\n</ACTION>'
        )
    )
    assert parsed.thought == "Look first."
    assert parsed.actions == (READ,)
    assert parsed.dropped_actions == 0
    assert parsed.notice == ""


@pytest.mark.parametrize(
    "text",
    [
        "Sure! Here is my next step.\n<THOUGHT>x</THOUGHT><ACTION><tool_name>read_file"
        '</tool_name><parameters>{"path": "src/app.py"}</parameters></ACTION>\nHope it helps.',
        "```xml\n<THOUGHT>x</THOUGHT>\n<ACTION>\n<tool_name>read_file</tool_name>\n"
        '<parameters>{"path": "src/app.py"}</parameters>\n</ACTION>\n```',
        "<thought>x</thought><action><tool_name>read_file</tool_name>"
        '<parameters>{"path": "src/app.py"}</parameters></action>',
        "<Thought>x</Thought><Action><Tool_Name>read_file</Tool_Name>"
        '<Parameters>{"path": "src/app.py"}</Parameters></Action>',
        "<ACTION><tool_name>\n  read_file \n</tool_name>"
        '<parameters>{"path": "src/app.py"}</parameters></ACTION>',
        "<ACTION><tool_name>read_file</tool_name>"
        '<parameters><![CDATA[{"path": "src/app.py"}]]></parameters></ACTION>',
        '<ACTION><tool_name>read_file</tool_name><parameters>\n{\n    "path": "src/app.py"\n}\n'
        "</parameters></ACTION>",
        "<ACTION><tool_name>read_file</tool_name>"
        "<parameters>{&quot;path&quot;: &quot;src/app.py&quot;}</parameters></ACTION>",
        '<ACTION><tool_name>read_file</tool_name><parameters>{"path": "src/app.py",}'
        "</parameters></ACTION>",
        "<ACTION><tool_name>read_file</tool_name><parameters>{'path': 'src/app.py'}"
        "</parameters></ACTION>",
        '<ACTION><tool_name>read_file</tool_name><parameters>\n```json\n{"path": "src/app.py"}'
        "\n```\n</parameters></ACTION>",
        '<ACTION><parameters>{"path": "src/app.py"}</parameters>'
        "<tool_name>read_file</tool_name></ACTION>",
        "<ACTION><tool_name>read_file</tool_name><parameters><path>src/app.py</path>"
        "</parameters></ACTION>",
        '<THOUGHT>x</THOUGHT><tool_name>read_file</tool_name><parameters>{"path": "src/app.py"}'
        "</parameters>",
        '<THOUGHT>x</THOUGHT>\n<ACTION>\n<tool_name>read_file</tool_name>\n<parameters>{"path": '
        '"src/app.py"}</parameters>',
    ],
    ids=[
        "prose-around",
        "xml-fence",
        "lowercase-tags",
        "mixed-case-tags",
        "whitespace-in-tool-name",
        "cdata",
        "pretty-printed-json",
        "xml-escaped-json",
        "trailing-comma",
        "python-single-quotes",
        "json-fence-inside-parameters",
        "parameters-before-tool-name",
        "parameters-as-child-tags",
        "action-tag-forgotten",
        "action-never-closed",
    ],
)
def test_xml_accepts_messy_but_clear_replies(text):
    assert xml(text) == READ


def test_xml_missing_thought_gives_empty_thought():
    parsed = XmlFormat().parse(
        LlmResponse(
            '<ACTION><tool_name>read_file</tool_name><parameters>{"path": "a"}'
            "</parameters></ACTION>"
        )
    )
    assert parsed.thought == ""
    assert parsed.actions == (Action("read_file", {"path": "a"}),)


def test_xml_keeps_unescaped_code_in_json_strings():
    code = 'if a < b && c > d:\n\tprint("<ok> & done")\n'
    text = (
        "<THOUGHT>write it</THOUGHT><ACTION><tool_name>write_file</tool_name><parameters>"
        f'{{"path": "x.py", "content": {json.dumps(code)}}}</parameters></ACTION>'
    )
    assert xml(text) == Action("write_file", {"path": "x.py", "content": code})


def test_xml_repairs_literal_newlines_and_tabs_inside_json_strings():
    text = (
        "<ACTION><tool_name>write_file</tool_name><parameters>"
        '{"path": "a.py", "content": "def f():\n\treturn 1\n"}</parameters></ACTION>'
    )
    assert xml(text).parameters["content"] == "def f():\n\treturn 1\n"


def test_xml_content_containing_closing_tags_is_not_cut_at_the_tag():
    content = 'doc = "</parameters></ACTION><ACTION><tool_name>rm</tool_name>"\n'
    text = (
        "<ACTION><tool_name>write_file</tool_name><parameters>"
        f'{{"path": "t.py", "content": {json.dumps(content)}}}</parameters></ACTION>'
    )
    parsed = XmlFormat().parse(LlmResponse(text))
    assert parsed.actions == (Action("write_file", {"path": "t.py", "content": content}),)
    assert parsed.dropped_actions == 0


def test_xml_raw_json_wins_over_entity_unescaping():
    text = (
        "<ACTION><tool_name>write_file</tool_name>"
        '<parameters>{"path": "a.html", "content": "a &amp; b"}</parameters></ACTION>'
    )
    assert xml(text).parameters["content"] == "a &amp; b"


def test_xml_repairs_lone_backslashes_in_regexes():
    text = '<ACTION><tool_name>grep</tool_name><parameters>{"pattern": "\\d+\\.py"}</parameters>'
    assert xml(text) == Action("grep", {"pattern": "\\d+\\.py"})


@pytest.mark.parametrize(
    "parameters",
    ["<parameters></parameters>", "<parameters/>", "", "<parameters>  \n </parameters>"],
)
def test_xml_empty_or_missing_parameters_mean_no_arguments(parameters):
    text = f"<ACTION><tool_name>list_files</tool_name>{parameters}</ACTION>"
    assert xml(text) == Action("list_files", {})


def test_xml_empty_parameters_do_not_borrow_the_next_actions_parameters():
    text = (
        "<ACTION><tool_name>list_files</tool_name></ACTION>"
        '<ACTION><tool_name>read_file</tool_name><parameters>{"path": "a"}</parameters></ACTION>'
    )
    parsed = XmlFormat().parse(LlmResponse(text))
    assert parsed.actions == (Action("list_files", {}),)
    assert parsed.dropped_actions == 1


def test_xml_takes_only_the_first_of_several_actions_and_says_so():
    action = (
        '<ACTION><tool_name>read_file</tool_name><parameters>{"path": "%s"}</parameters></ACTION>'
    )
    parsed = XmlFormat().parse(LlmResponse(action % "a" + action % "b" + action % "c"))
    assert parsed.actions == (Action("read_file", {"path": "a"}),)
    assert parsed.dropped_actions == 2
    assert "only the first action was executed; 2 more" in parsed.notice


def test_xml_ignores_everything_after_a_hallucinated_observation():
    text = (
        '<ACTION><tool_name>read_file</tool_name><parameters>{"path": "a"}</parameters></ACTION>'
        "<OBSERVATION>print('hi')</OBSERVATION><THOUGHT>now edit</THOUGHT>"
        '<ACTION><tool_name>write_file</tool_name><parameters>{"path": "a"}</parameters></ACTION>'
    )
    parsed = XmlFormat().parse(LlmResponse(text))
    assert parsed.actions == (Action("read_file", {"path": "a"}),)
    assert parsed.dropped_actions == 0


def test_xml_thought_may_mention_tags_without_confusing_the_parser():
    text = (
        "<THOUGHT>I will send an <ACTION> and wait for the <OBSERVATION>.</THOUGHT>"
        '<ACTION><tool_name>read_file</tool_name><parameters>{"path": "src/app.py"}</parameters>'
        "</ACTION>"
    )
    assert xml(text) == READ


# --- XML: precise errors --------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n\t "])
def test_xml_empty_reply_is_reported_as_empty(text):
    assert "reply was empty" in xml_error(text)


def test_xml_reply_without_action_says_no_action_block():
    assert "No <ACTION> block found" in xml_error("I think we should read the file first.")


def test_xml_action_without_tool_name_says_so():
    message = xml_error('<ACTION><parameters>{"path": "a"}</parameters></ACTION>')
    assert "has no <tool_name>" in message


def test_xml_invalid_json_names_the_error_position_and_excerpt():
    message = xml_error(
        '<ACTION><tool_name>read_file</tool_name><parameters>{"path": "a" "b": 1}'
        "</parameters></ACTION>"
    )
    assert "<parameters> of your ACTION are not valid JSON" in message
    assert "Expecting ',' delimiter at line 1, column 14" in message
    assert '\'{"path": "a" "b": 1}\'' in message


def test_xml_non_object_parameters_say_an_object_is_needed():
    message = xml_error('<ACTION><tool_name>read_file</tool_name><parameters>["a"]</parameters>')
    assert "must be a JSON object" in message
    assert "not a list" in message


def test_xml_reply_cut_off_inside_the_parameters_says_cut_off():
    text = '<ACTION><tool_name>write_file</tool_name><parameters>{"path": "a", "content": "lo'
    assert "cut off in the middle of the action" in xml_error(text)
    assert "at the output token limit" in xml_error(text, stop_reason="max_tokens")


def test_xml_reply_cut_off_before_the_tool_name_says_cut_off():
    assert "cut off" in xml_error("<THOUGHT>go</THOUGHT>\n<ACTION>\n<tool_")


def test_xml_observation_written_before_any_action_is_refused():
    message = xml_error(
        "<THOUGHT>x</THOUGHT><OBSERVATION>file contents</OBSERVATION>"
        '<ACTION><tool_name>read_file</tool_name><parameters>{"path": "a"}</parameters></ACTION>'
    )
    assert "<OBSERVATION> you wrote yourself" in message


# --- XML: prompt and messages ---------------------------------------------------------------


def test_xml_prompt_lists_every_tool_with_its_parameters_as_compact_json():
    section = XmlFormat().prompt_section(TOOLS)
    assert section.startswith("Available Tools:\n")
    blocks = re.findall(r"<tool>.*?</tool>", section)
    assert len(blocks) == len(TOOLS)
    assert (
        "<tool><name>read_file</name><description>Read a file.</description><parameters>"
        '{"path":"string","start_line":"integer, optional","end_line":"integer, optional"}'
        "</parameters></tool>"
    ) in blocks
    assert "<THOUGHT>" in section and "task_complete" in section


def test_compact_parameters_keep_defaults_enums_and_unexplained_descriptions():
    tool = {
        "name": "weather",
        "description": "Weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris."},
                "units": {"enum": ["metric", "imperial"], "default": "metric"},
                "days": {"type": "array", "items": {"type": "integer"}},
            },
            "required": ["city"],
        },
    }
    assert json.loads(compact_parameters(tool)) == {
        "city": "string",  # the description names it: no need to repeat
        "units": '"metric" | "imperial" = "metric"',
        "days": "integer[], optional",
    }
    tool["description"] = "Weather."
    assert json.loads(compact_parameters(tool))["city"] == "string: City name, e.g. Paris."


def test_xml_prompt_example_parses_with_the_parser():
    section = XmlFormat().prompt_section(TOOLS)
    example = section.split("Example:\n", 1)[1]
    assert XmlFormat().parse(LlmResponse(example)).actions == (READ,)


def test_xml_error_message_contains_the_error_and_a_parsable_example():
    message = XmlFormat().error_message(ParseError("No <ACTION> block found"))
    assert message.role == "user"
    assert message.content.startswith("<OBSERVATION>\nYour reply could not be parsed: No <ACTION>")
    example = message.content.split("like this:\n", 1)[1]
    assert XmlFormat().parse(LlmResponse(example)).actions == (READ,)


def test_xml_observation_message_wraps_the_content():
    message = XmlFormat().observation_message([Observation(READ, "print('hi')")])
    assert message.role == "user"
    assert message.content == "<OBSERVATION>\nprint('hi')\n</OBSERVATION>"


def test_xml_several_observations_get_one_labelled_block_each():
    listing = Action("list_files", {})
    message = XmlFormat().observation_message(
        [Observation(READ, "code"), Observation(listing, "a.py")]
    )
    assert message.content == (
        '<OBSERVATION tool="read_file">\ncode\n</OBSERVATION>\n'
        '<OBSERVATION tool="list_files">\na.py\n</OBSERVATION>'
    )


# --- ReAct text format ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        'Thought: look first\nAction: read_file\nAction Input: {"path": "src/app.py"}',
        '**Thought:** look\n**Action:** read_file\n**Action Input:** {"path": "src/app.py"}',
        '**Action**: `read_file`\n**Action Input**: {"path": "src/app.py"}',
        'Thought: x\nAction: read_file\nAction Input:\n```json\n{\n  "path": "src/app.py"\n}\n```',
        "Thought: x\nAction: read_file\nAction Input: src/app.py",
        'Thought: x\nAction: read_file\nAction Input: "src/app.py"',
        "thought: x\naction: read_file\naction input: {'path': 'src/app.py'}",
        'Action: read_file\nAction Input: {"path": "src/app.py"}\nObservation: import os\n'
        "Thought: now I know\nFinal Answer: done",
    ],
    ids=[
        "canonical",
        "markdown-bold",
        "bold-label-colon-outside",
        "fenced-multiline-json",
        "plain-text-single-parameter",
        "quoted-plain-text",
        "lowercase-python-dict",
        "hallucinated-observation",
    ],
)
def test_react_accepts_messy_but_clear_replies(text):
    assert react(text) == READ


def test_react_repairs_literal_newlines_inside_json_strings():
    text = (
        'Thought: write\nAction: write_file\nAction Input: {"path": "a.py", "content": '
        '"Observation: not a label\nAction: neither\n"}'
    )
    parsed = react_parse(LlmResponse(text))
    content = "Observation: not a label\nAction: neither\n"
    assert parsed.actions == (Action("write_file", {"path": "a.py", "content": content}),)
    assert parsed.dropped_actions == 0


def test_react_final_answer_completes_the_task_with_the_whole_answer():
    parsed = react_parse(
        LlmResponse("Thought: all done\nFinal Answer: Fixed the bug.\n\n- one\n- two\n")
    )
    assert parsed.thought == "all done"
    assert parsed.actions == (
        Action("task_complete", {"result": "Fixed the bug.\n\n- one\n- two"}),
    )


def test_react_prose_without_thought_label_becomes_the_thought():
    parsed = react_parse(LlmResponse("Let me look.\nAction: list_files"))
    assert parsed.thought == "Let me look."
    assert parsed.actions == (Action("list_files", {}),)


def test_react_plain_text_input_for_task_complete_works_without_a_prompt():
    parsed = ReactFormat().parse(LlmResponse("Action: task_complete\nAction Input: All good."))
    assert parsed.actions == (Action("task_complete", {"result": "All good."}),)


def test_react_plain_text_input_maps_to_the_only_optional_parameter():
    assert react("Action: list_files\nAction Input: src") == Action("list_files", {"path": "src"})


def test_react_actions_after_a_hallucinated_observation_are_not_counted_as_dropped():
    text = (
        'Action: read_file\nAction Input: {"path": "src/app.py"}\nObservation: x = 1\n'
        'Action: write_file\nAction Input: {"path": "a", "content": ""}'
    )
    parsed = react_parse(LlmResponse(text))
    assert parsed.actions == (READ,)
    assert parsed.dropped_actions == 0


def test_react_plain_text_input_for_a_multi_parameter_tool_is_an_error():
    message = react_error("Action: write_file\nAction Input: a.py hello")
    assert "`Action Input` for write_file must be a JSON object" in message


def test_react_second_action_is_dropped_and_counted():
    text = (
        'Action: read_file\nAction Input: {"path": "src/app.py"}\n'
        'Action: read_file\nAction Input: {"path": "b"}\n'
    )
    parsed = react_parse(LlmResponse(text))
    assert parsed.actions == (READ,)
    assert parsed.dropped_actions == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "reply was empty"),
        ("I will now read the file.", "No `Action:` line found"),
        ("Action:\nAction Input: {}", "has no tool name"),
        ('Action: read_file\nAction Input: {"path": "a" "b"}', "not valid JSON: Expecting ','"),
        ('Action: read_file\nAction Input: ["a"]', "not a list"),
        ('Action: write_file\nAction Input: {"path": "a", "content": "x', "cut off"),
        ("Thought: x\nObservation: y\nAction: read_file", "Observation:` you wrote yourself"),
        ("Final Answer:   ", "Final Answer:` is empty"),
    ],
)
def test_react_unparseable_replies_get_precise_errors(text, expected):
    assert expected in react_error(text)


def test_react_prompt_lists_tools_and_its_example_parses():
    fmt = ReactFormat()
    section = fmt.prompt_section(TOOLS)
    assert section.startswith("Available Tools:\n- list_files: List files.")
    assert 'Parameters: {"path":"string","content":"string"}' in section
    assert "Observation" in section and "Final Answer:" in section
    example = section.split("Example:\n", 1)[1]
    assert fmt.parse(LlmResponse(example), TOOLS).actions == (READ,)


def test_react_messages_use_observation_lines():
    fmt = ReactFormat()
    assert fmt.observation_message([Observation(READ, "code")]).content == "Observation: code"
    error = fmt.error_message(ParseError("No `Action:` line found")).content
    assert error.startswith("Observation: Your reply could not be parsed: No `Action:`")
    assert fmt.parse(LlmResponse(error.split("when done):\n", 1)[1]), TOOLS).actions == (READ,)


# --- Native tool calling --------------------------------------------------------------------


def test_native_returns_every_tool_call_in_order_with_its_id():
    response = LlmResponse(
        "Reading both.",
        tool_calls=(
            ToolCall("read_file", {"path": "a"}, id="call_1"),
            ToolCall("read_file", '{"path": "b"}', id="call_2"),  # type: ignore[arg-type]
            ToolCall("list_files", None, id="call_3"),  # type: ignore[arg-type]
        ),
    )
    parsed = NativeFormat().parse(response)
    assert parsed.thought == "Reading both."
    assert parsed.actions == (
        Action("read_file", {"path": "a"}, "call_1"),
        Action("read_file", {"path": "b"}, "call_2"),
        Action("list_files", {}, "call_3"),
    )


def test_native_reply_without_tool_calls_asks_for_one():
    with pytest.raises(ParseError, match="did not call any tool.*task_complete"):
        NativeFormat().parse(LlmResponse("I am done, I think."))


def test_native_arguments_that_are_not_an_object_are_an_error():
    response = LlmResponse("", tool_calls=(ToolCall("read_file", "[1]", id="c"),))  # type: ignore[arg-type]
    with pytest.raises(ParseError, match="arguments of your read_file call must be a JSON object"):
        NativeFormat().parse(response)


def test_native_observation_message_answers_every_call_in_order():
    first, second = Action("read_file", {}, "c1"), Action("write_file", {}, "c2")
    message = NativeFormat().observation_message(
        [Observation(first, "code"), Observation(second, "denied", is_error=True)]
    )
    assert message.role == "user"
    assert [(r.call_id, r.name, r.content, r.is_error) for r in message.tool_results] == [
        ("c1", "read_file", "code", False),
        ("c2", "write_file", "denied", True),
    ]


def test_native_prompt_names_tools_without_xml_instructions():
    fmt = NativeFormat()
    section = fmt.prompt_section(TOOLS)
    assert fmt.native_tools is True
    assert "read_file" in section and "task_complete" in section
    assert "<ACTION>" not in section
    assert fmt.error_message(ParseError("no tool")).content == "no tool"


# --- Choosing a format ----------------------------------------------------------------------


def test_get_format_builds_a_fresh_instance_of_each_named_format():
    for name in FORMAT_NAMES:
        fmt = get_format(name)
        assert fmt.name == name
        assert get_format(name) is not fmt


def test_get_format_rejects_unknown_names():
    with pytest.raises(ValueError, match="unknown action format 'json'.*xml, react, native"):
        get_format("json")


# --- the thought without the protocol, piece by piece ---------------------------------------

REPLIES = {
    "xml": (
        "Some prose.\n\n<THOUGHT>Use <div> tags & a < b.</THOUGHT>\n<ACTION>\n<tool_name>x"
        '</tool_name>\n<parameters>{"a": "</THOUGHT>"}</parameters>\n</ACTION>',
        "Some prose.\n\nUse <div> tags & a < b.\n",
    ),
    "react": (
        '**Thought:** Check a: b.\nThen this.\nAction: read_file\nAction Input: {"path":'
        ' "Thought: no"}\n',
        "Check a: b.\nThen this.\n",
    ),
    "native": ("Plain <THOUGHT> text.", "Plain <THOUGHT> text."),
}


def test_the_thought_filter_leaves_out_the_action_parse_finds() -> None:
    """The live view's thought and the parser read the protocol by the same rule: a lost
    <ACTION> before <tool-name> starts the action for both."""
    reply = 'Look first. <tool-name>read_file</tool-name><parameters>{"path": "a"}</parameters>'
    xml = get_format("xml")
    parsed = xml.parse(LlmResponse(reply))
    assert parsed.actions[0].tool_name == "read_file"
    assert xml.thought(reply) == "Look first. "


@pytest.mark.parametrize("tool_format", REPLIES)
def test_thought_text_is_the_same_however_the_reply_is_cut(tool_format):
    reply, thought = REPLIES[tool_format]
    action_format = get_format(tool_format)
    assert action_format.thought(reply) == thought
    for cut in range(len(reply) + 1):
        pieces = action_format.thought_filter()
        assert pieces.feed(reply[:cut]) + pieces.feed(reply[cut:]) + pieces.flush() == thought
    one_by_one = action_format.thought_filter()
    assert "".join(one_by_one.feed(c) for c in reply) + one_by_one.flush() == thought


def xml_reply(text: str) -> ParsedResponse:
    return XmlFormat().parse(LlmResponse(text), TOOLS)


ACTION = '<ACTION><tool_name>list_files</tool_name><parameters>{"path": "src"}</parameters>'
ACTION += "</ACTION>"


@pytest.mark.parametrize(
    "thought",
    [
        "Only at the end will I call <tool_name>task_complete</tool_name>.",
        "An action looks like <ACTION>...</ACTION>; first I list.",
        "I could <tool_name>write_file</tool_name><parameters>{}</parameters> but not yet.",
    ],
)
def test_tags_a_closed_thought_mentions_are_its_text_and_the_action_is_the_one_after_it(thought):
    parsed = xml_reply(f"<THOUGHT>{thought}</THOUGHT>\n{ACTION}")
    assert parsed.thought == thought
    assert parsed.actions == (Action("list_files", {"path": "src"}),)
    assert parsed.dropped_actions == 0


@pytest.mark.parametrize(
    "literal", ["{'path': b'README.md'}", "{'path': 'a', 'lines': {1, 2}}", "{'n': 1j}",
                "{'path': ...}", "{'n': 1e999}"],
)  # fmt: skip
def test_python_literals_json_cannot_say_are_refused_not_passed_to_a_tool(literal):
    with pytest.raises(ParseError, match="not valid JSON"):
        xml_reply(
            f"<ACTION><tool_name>read_file</tool_name><parameters>{literal}</parameters></ACTION>"
        )
    with pytest.raises(ParseError, match="not valid JSON"):
        ReactFormat().parse(LlmResponse(f"Action: read_file\nAction Input: {literal}"), TOOLS)


def test_a_python_literal_json_can_say_arrives_as_json_would():
    literal = "{'path': 'a.py', 'range': (1, 2), 'ok': True}"
    parsed = xml_reply(f"<tool_name>read_file</tool_name><parameters>{literal}</parameters>")
    assert parsed.actions[0].parameters == {"path": "a.py", "range": [1, 2], "ok": True}


@pytest.mark.parametrize(
    "body",
    [
        '<parameters type="json">{"path": "src"}</parameters>',
        '<parameters format=json>{"path": "src"}</parameters>',
        '{"path": "src"}',  # a bare object, no <parameters>
        "<parameters>\n<path><![CDATA[src]]></path>\n</parameters>",
    ],
)
def test_parameters_the_model_wrote_are_read_however_they_are_wrapped(body):
    parsed = xml_reply(f"<ACTION><tool_name>list_files</tool_name>{body}</ACTION>")
    assert parsed.actions[0].parameters == {"path": "src"}


@pytest.mark.parametrize(
    "body", ['<input>{"path": "src"}</input>', '<parameter name="path">src</parameter>', "src"]
)
def test_text_in_an_action_that_is_not_read_is_a_parse_error_naming_it(body):
    with pytest.raises(ParseError, match="outside <tool_name> and <parameters>") as error:
        xml_reply(f"<THOUGHT>t</THOUGHT><ACTION><tool_name>list_files</tool_name>{body}</ACTION>")
    assert body[:20] in str(error.value)


def test_cdata_in_a_child_element_is_unwrapped_and_its_text_kept_exactly():
    content = 'if a < b and c > d:\n    print("ok")\n'
    parsed = xml_reply("<ACTION><tool_name>write_file</tool_name><parameters><path>cmp.py</path>"
                 f"<content><![CDATA[{content}]]></content></parameters></ACTION>")  # fmt: skip
    assert parsed.actions[0].parameters == {"path": "cmp.py", "content": content}


def test_a_second_action_without_action_tags_is_counted_as_dropped():
    parsed = xml_reply("<THOUGHT>t</THOUGHT><tool_name>list_files</tool_name><parameters>{}"
                       '</parameters><tool_name>write_file</tool_name><parameters>{"path": "n"}'
                       "</parameters>")  # fmt: skip
    assert parsed.actions == (Action("list_files", {}),) and parsed.dropped_actions == 1


@pytest.mark.parametrize(
    ("after", "parameters"),
    [('{"path": "src"}', {"path": "src"}), ('```json\n{"path": "src"}\n```', {"path": "src"}),
     ("", {})],
)  # fmt: skip
def test_react_parameters_under_the_action_line_without_a_label_are_read(after, parameters):
    parsed = ReactFormat().parse(LlmResponse(f"Thought: t\nAction: list_files\n{after}"), TOOLS)
    assert parsed.actions == (Action("list_files", parameters),)


def test_react_prose_under_the_action_line_is_a_parse_error_naming_it():
    with pytest.raises(ParseError, match="'I will wait for it.', which is not read"):
        ReactFormat().parse(LlmResponse("Action: list_files\nI will wait for it."), TOOLS)
