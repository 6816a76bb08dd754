"""Property tests: what an LLM writes round-trips, and nothing but ParseError escapes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toy_agent.messages import LlmResponse
from toy_agent.parsing import Action, ParsedResponse, ParseError, ReactFormat, XmlFormat

NASTY = [
    "</ACTION>", "</parameters>", "<ACTION>", "<OBSERVATION>", "]]>", "<![CDATA[", "&quot;",
    "&amp;", "<", "&", '"', "'", "\\", "\n", "\t", "{", "}", "[", "]", "Observation: ",
    "\nAction: x\n", "<tool_name>", "```",
]  # fmt: skip

text = st.text() | st.lists(st.sampled_from(NASTY) | st.text(max_size=4)).map("".join)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | text,
    lambda children: st.lists(children, max_size=3) | st.dictionaries(text, children, max_size=3),
    max_leaves=8,
)
tool_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,30}", fullmatch=True)
parameters = st.dictionaries(text, json_values, max_size=4)
thoughts = st.text(st.characters(blacklist_characters="<"), max_size=40)


def _dump(params: dict, indent: int | None) -> str:
    """JSON the way models write it: inlined raw, never XML-escaped."""
    return json.dumps(params, ensure_ascii=False, indent=indent)


@pytest.mark.slow
@settings(max_examples=400)
@given(tool_names, parameters, thoughts, st.sampled_from([None, 2]), st.booleans())
def test_xml_reply_round_trips_any_tool_and_parameters(name, params, thought, indent, prose):
    reply = (
        ("Here is my step:\n" if prose else "")
        + f"<THOUGHT>{thought}</THOUGHT>\n<ACTION>\n<tool_name>{name}</tool_name>\n"
        + f"<parameters>{_dump(params, indent)}</parameters>\n</ACTION>"
    )
    parsed = XmlFormat().parse(LlmResponse(reply))
    assert parsed.actions == (Action(name, params),)
    assert parsed.thought == thought.strip()
    assert parsed.dropped_actions == 0


@pytest.mark.slow
@settings(max_examples=400)
@given(tool_names, parameters, st.sampled_from([None, 2]))
def test_react_reply_round_trips_any_tool_and_parameters(name, params, indent):
    reply = f"Thought: go\nAction: {name}\nAction Input: {_dump(params, indent)}\n"
    parsed = ReactFormat().parse(LlmResponse(reply))
    assert parsed.actions == (Action(name, params),)


def _parse_or_parse_error(fmt, reply: str) -> None:
    try:
        result = fmt.parse(LlmResponse(reply))
    except ParseError as exc:
        assert str(exc)
    else:
        assert isinstance(result, ParsedResponse)
        assert result.actions
        assert all(isinstance(a.parameters, dict) for a in result.actions)


@pytest.mark.slow
@settings(max_examples=600)
@given(text)
def test_arbitrary_text_raises_nothing_but_parse_error(reply):
    _parse_or_parse_error(XmlFormat(), reply)
    _parse_or_parse_error(ReactFormat(), reply)


SOUP = [
    "<THOUGHT>", "</THOUGHT>", "<ACTION>", "</ACTION>", "<tool_name>", "</tool_name>",
    "<parameters>", "</parameters>", "<parameters/>", "<![CDATA[", "]]>", "<OBSERVATION>",
    "Thought: ", "Action: ", "Action Input: ", "Final Answer: ", "Observation: ", "\n",
    '{"a": ', '"', "'", "}", "[", "1,", "&quot;", "read_file", "```json\n",
]  # fmt: skip
tag_soup = st.lists(st.sampled_from(SOUP) | st.text(max_size=3), max_size=30).map("".join)


@pytest.mark.slow
@settings(max_examples=600)
@given(tag_soup)
def test_tag_soup_raises_nothing_but_parse_error(reply):
    _parse_or_parse_error(XmlFormat(), reply)
    _parse_or_parse_error(ReactFormat(), reply)
