"""Turning LLM output into actions, one `ActionFormat` per way of writing them.

A format owns four things and nothing else: the response-format section of the system
prompt, parsing a reply into actions, the message that carries observations back, and which
part of a reply streaming in is the thought (what the terminal view shows of it).

The text formats are parsed by a tolerant scanner rather than an XML parser: real replies
carry code (`<`, `&`, even `</ACTION>`) unescaped inside JSON, and an XML parser would either
reject them or silently decode entities the model meant literally.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from toy_agent.catalogue import compact_parameters
from toy_agent.lint import EditCheck
from toy_agent.messages import (
    CommandResult,
    Image,
    LlmResponse,
    Message,
    Note,
    ToolResult,
    ToolSpec,
)

FORMAT_NAMES = ("xml", "react", "native")
MAX_PARAMETER_DEPTH = 32
Params = dict[str, Any]  # tool arguments, always a dict whatever the format


@dataclass(frozen=True)
class Action:
    tool_name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""  # the provider's id of a native tool call, echoed in its result
    arguments_error: str = ""  # a native call's raw arguments, when they were not an object


@dataclass(frozen=True)
class ParsedResponse:
    thought: str
    actions: tuple[Action, ...]
    dropped_actions: int = 0  # further actions in the reply that a one-action format ignored

    @property
    def notice(self) -> str:
        """A line for the agent to add to the observation, so the model learns the rule."""
        if not self.dropped_actions:
            return ""
        return (
            f"Note: only the first action was executed; {self.dropped_actions} more were "
            "ignored. Send one action per reply and wait for its observation."
        )


@dataclass(frozen=True)
class Observation:
    """What one action produced, as the LLM will see it."""

    action: Action
    content: str
    is_error: bool = False
    images: tuple[Image, ...] = ()  # sent beside the text (text formats) or in the result
    command: CommandResult | None = None  # how a command ended (run_command), as data
    edit_check: EditCheck | None = None  # what a file change introduced (see toy_agent.lint)
    notes: tuple[Note, ...] = ()  # what the agent's rules did to it (a cut, a warning, ...)


def _images(observations: Sequence[Observation]) -> tuple[Image, ...]:
    return tuple(image for o in observations for image in o.images)


class ParseError(Exception):
    """The reply could not be turned into an action; the message is written for the LLM."""


class ActionFormat(ABC):
    name: str = ""
    native_tools: bool = False  # True: tool schemas go to the provider, not into the prompt

    @abstractmethod
    def prompt_section(self, tools: Sequence[ToolSpec]) -> str:
        """The system prompt's tool list and response-format instructions, with an example."""

    @abstractmethod
    def parse(self, response: LlmResponse, tools: Sequence[ToolSpec] = ()) -> ParsedResponse:
        """Return the thought and at least one action, or raise ParseError. `tools` are the
        tools the model was offered."""

    @abstractmethod
    def observation_message(self, observations: Sequence[Observation]) -> Message:
        """The user message that carries these observations back to the LLM."""

    @abstractmethod
    def error_message(self, error: ParseError) -> Message:
        """The user message telling the LLM its reply could not be parsed, and why."""

    def action_text(self, thought: str, actions: Sequence[Action]) -> str:
        """A reply taking `actions`, written in this format: how native tool calls of an
        earlier run read when the conversation goes on in a text format. (Native: the thought
        alone, as the calls travel beside the text.)"""
        return thought

    def observation_texts(self, message: Message, tools: Sequence[str]) -> list[str] | None:
        """The texts of the observations of `tools` that `message` carries, as
        `observation_message` wrote them (None: it did not). Read by the same template that
        wrote it, so no reader has to know this format's wrapping."""
        if not tools:
            return None
        if message.tool_results:
            texts = [r.content for r in message.tool_results]
            return texts if len(texts) == len(tools) else None
        marks = [f"\x00{n}\x00" for n in range(len(tools))]
        written = self.observation_message(
            [Observation(Action(tool), mark) for tool, mark in zip(tools, marks, strict=True)]
        ).content
        pieces, rest = [], written
        for mark in marks:
            piece, _, rest = rest.partition(mark)
            pieces.append(piece)
        text, end = message.content, len(message.content) - len(rest)
        if not text.startswith(pieces[0]) or not text.endswith(rest) or end < len(pieces[0]):
            return None
        texts, at = [], len(pieces[0])
        for separator in pieces[1:]:
            found = text.find(separator, at, end)
            if found < 0:
                return None
            texts.append(text[at:found])
            at = found + len(separator)
        return [*texts, text[at:end]]

    def thought_filter(self) -> ThoughtFilter:
        """A filter for one reply as it streams in: what of it is the thought."""
        return ThoughtFilter()

    def thought(self, text: str) -> str:
        """The thought in a whole reply, the protocol around it left out."""
        thought = self.thought_filter()
        return thought.feed(text) + thought.flush()


class ThoughtFilter:
    """The thought in a reply, fed in the pieces it streams in: each `feed` returns the
    thought text that its piece completes, and what may still turn out to be protocol (a tag,
    a label) is held back until the next piece tells. This one keeps everything: the native
    format's text is all thought, its calls travel beside it."""

    def __init__(self) -> None:
        self._pending = ""

    def feed(self, text: str) -> str:
        self._pending += text
        return self._split(final=False)

    def flush(self) -> str:
        """What was held back, at the end of the reply."""
        return self._split(final=True)

    def _split(self, final: bool) -> str:
        text, self._pending = self._pending, ""
        return text


def get_format(name: str) -> ActionFormat:
    """A format instance by name."""
    formats: dict[str, type[ActionFormat]] = {
        "xml": XmlFormat,
        "react": ReactFormat,
        "native": NativeFormat,
    }
    if name not in formats:
        raise ValueError(f"unknown action format {name!r}; choose one of: {', '.join(formats)}")
    return formats[name]()


# --- Tolerant JSON, shared by the text formats -------------------------------------------

_JSON_HINT = (
    "Write one JSON object: double-quoted keys and strings, quotes inside strings escaped "
    'as \\", newlines as \\n.'
)
_JSON_ESCAPES = frozenset('"\\/bfnrtu')
_TRAILING_COMMA = re.compile(r",\s*[}\]]")
# Whitespace and an optional ```json fence opener before a JSON value.
_LEAD = re.compile(r"\s*(?:```[\w+-]*[ \t]*\n)?\s*")


def _skip_lead(text: str, pos: int) -> int:
    lead = _LEAD.match(text, pos)
    return lead.end() if lead else pos


def _json_end(text: str, start: int) -> int | None:
    """Index just past the bracket closing the one at `start`, skipping quoted strings.

    So a `</ACTION>` inside a file's content never ends the parameters early. None when the
    text ends first: the reply was cut off (or its quotes are broken).
    """
    depth, quote, i = 0, "", start
    while i < len(text):
        char = text[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None


def _repair_json(text: str) -> str:
    """Fix two common model slips: trailing commas, and lone backslashes (`"\\d+"` regexes)."""
    out: list[str] = []
    in_string, i = False, 0
    while i < len(text):
        char = text[i]
        if in_string and char == "\\":
            escaped = text[i + 1 : i + 2]
            if escaped and escaped in _JSON_ESCAPES:
                out.append(char + escaped)
                i += 2
                continue
            char = "\\\\"
        elif char == '"':
            in_string = not in_string
        elif not in_string and char == "," and _TRAILING_COMMA.match(text, i):
            char = ""
        out.append(char)
        i += 1
    return "".join(out)


def _load_json(raw: str) -> Any:
    """json.loads, then repairs; raises the raw text's own JSONDecodeError if nothing works.

    Raw text comes first: entities are only unescaped when that is what makes it valid.
    """
    variants = [raw, _repair_json(raw)]
    if "&" in raw:
        import html  # here: only a reply with entities needs it

        unescaped = html.unescape(raw)
        variants += [unescaped, _repair_json(unescaped)]
    first_error: json.JSONDecodeError | None = None
    for variant in variants:
        try:
            return json.loads(variant, strict=False)  # strict=False: raw newlines in strings
        except json.JSONDecodeError as exc:
            first_error = first_error or exc
        except (ValueError, RecursionError):  # e.g. an integer too long to convert
            pass
    if "'" in raw:  # a Python dict: single quotes, True, None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # invalid escapes in a Python literal
                value = ast.literal_eval(raw)
            # only what JSON could have said: bytes, sets, complex numbers, `...` are refused
            return json.loads(json.dumps(value, allow_nan=False))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            pass
    raise first_error or json.JSONDecodeError("unreadable value", raw, 0)


def _unlabelled(rest: str, where: str, mistake: str, how: str) -> Params:
    """Parameters written where the format has no label for them (a bare JSON object in an
    ACTION, on the line after `Action:`): read; any other text there is a mistake the model is
    told of (`mistake` with the text, then `how`), never dropped."""
    rest = rest.strip().removeprefix("```json").removeprefix("```").strip()
    if not rest:
        return {}
    if rest.startswith("{"):
        return _decode_object(rest, where)
    raise ParseError(f"{mistake.format(_excerpt(rest, 0))}, which is not read. {how}")


def _excerpt(text: str, pos: int) -> str:
    return repr(text[max(0, pos - 30) : pos + 30])


def _decode_object(raw: str, where: str) -> dict[str, Any]:
    """The parameters object written as `raw`, or a ParseError saying what is wrong with it."""
    raw = raw.strip().removesuffix("```").strip()
    if not raw:
        return {}
    try:
        value = _load_json(raw)
    except json.JSONDecodeError as exc:
        raise ParseError(
            f"{where} are not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}, "
            f"near {_excerpt(raw, exc.pos)}. {_JSON_HINT}"
        ) from None
    return _require_object(value, where)


def _require_object(value: Any, where: str) -> dict[str, Any]:
    """Parameters always end up a dict[str, Any], whatever the format."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        kind = {"list": "a list", "str": "a string", "bool": "a boolean"}.get(
            type(value).__name__, f"a {type(value).__name__}"
        )
        raise ParseError(
            f'{where} must be a JSON object such as {{"path": "src/app.py"}}, not {kind}.'
        )
    if nesting_depth(value) > MAX_PARAMETER_DEPTH:
        raise ParseError(
            f"{where} are nested more than {MAX_PARAMETER_DEPTH} levels deep; no tool takes "
            "that. Send flat parameters."
        )
    return {str(key): item for key, item in value.items()}


def nesting_depth(value: Any) -> int:
    """How deep lists and objects nest in `value`, counted without recursion (a reply can
    nest thousands deep; Python's recursion limit must never be what stops us)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            deepest = max(deepest, depth)
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return deepest


def _clean_name(name: str) -> str:
    """`read_file`, "read_file", [read_file], read_file() all name read_file."""
    return name.strip("`'\"*[]() \t\r\n")


def _cut_off(where: str, stop_reason: str) -> ParseError:
    why = " at the output token limit" if stop_reason == "max_tokens" else ""
    return ParseError(
        f"Your reply was cut off{why} in the middle of the action ({where} is unfinished). "
        "Send the complete action again, and keep it shorter (e.g. write smaller files)."
    )


def _tool_list(tools: Sequence[ToolSpec], render: Callable[[ToolSpec, str], str]) -> str:
    """The spec's `Available Tools:` section, one entry per tool with its parameters as JSON."""
    return "Available Tools:\n" + "\n".join(render(t, compact_parameters(t)) for t in tools)


def _xml_tool(tool: ToolSpec, schema: str) -> str:
    description = tool.get("description", "")
    return (
        f"<tool><name>{tool['name']}</name><description>{description}</description>"
        f"<parameters>{schema}</parameters></tool>"
    )


def _react_tool(tool: ToolSpec, schema: str) -> str:
    return f"- {tool['name']}: {tool.get('description', '')} Parameters: {schema}"


# --- XML: <THOUGHT>...</THOUGHT><ACTION><tool_name/><parameters/></ACTION> ----------------

_XML_WHERE = "The <parameters> of your ACTION"
_XML_PARAMS = 'Put the parameters in <parameters>: <parameters>{"path": "src/app.py"}</parameters>.'
_XML_EXAMPLE = """<THOUGHT>I need to see how the app starts.</THOUGHT>
<ACTION><tool_name>read_file</tool_name><parameters>{"path": "src/app.py"}</parameters></ACTION>"""
_XML_RULES = """Response format: your reasoning in <THOUGHT>...</THOUGHT>, then one action:
<ACTION><tool_name>NAME</tool_name><parameters>{JSON object}</parameters></ACTION>
Then stop: the result comes back in an <OBSERVATION> (never write one yourself). Write the
JSON as is, no XML escaping. Example:
"""

# A closed THOUGHT ends at its </THOUGHT>, whatever tags it mentions (`I will call
# <tool_name>task_complete</tool_name> at the end`); an unclosed one at the first action tag.
_THOUGHT_CLOSED = re.compile(r"<thought\s*>(.*?)</thought\s*>", re.I | re.S)
_THOUGHT = re.compile(r"<thought\s*>(.*?)(?=<action\s*>|<tool_name\s*>|\Z)", re.I | re.S)
_ACTION_START_TAGS = ("action", "tool_name", "tool-name")  # a lost <ACTION> is tolerated
_ACTION_OPEN = re.compile(r"<action\s*>|(?=<tool[_-]name\s*>)", re.I)
_ACTION_TAG = re.compile(r"<action\s*>", re.I)
_NAME_TAG = re.compile(r"<tool[_-]name\s*>", re.I)
_NAME_CLOSE = re.compile(r"</(?:tool_name|tool-name|name)\s*>", re.I)
_ACTION_CLOSE = re.compile(r"</action\s*>", re.I)
_OBSERVATION = re.compile(r"<observation\b", re.I)
_NAME = re.compile(r"<(?:tool_name|tool-name|name)\s*>([^<]*)", re.I)
_PARAMS_OPEN = re.compile(r"<(parameters|params|arguments|args)\b[^<>]*?(/?)>", re.I)
_CHILD_OPEN = re.compile(r"\s*<(\w+)\s*>")


def _child_elements(body: str) -> dict[str, Any]:
    """`<parameters><path>a.py</path></parameters>`: some models write XML, not JSON."""
    children: dict[str, Any] = {}
    pos = 0
    while tag := _CHILD_OPEN.match(body, pos):
        close = body.find(f"</{tag.group(1)}>", tag.end())
        if close < 0:
            return {}
        value = body[tag.end() : close]
        inner = value.strip()
        if inner.startswith("<![CDATA[") and inner.endswith("]]>"):
            value = inner[9:-3]
        children[tag.group(1)] = value
        pos = close + len(tag.group(1)) + 3
    return children if not body[pos:].strip() else {}


class XmlFormat(ActionFormat):
    """The default: the seed's XML contract, parsed as leniently as real replies need."""

    name = "xml"

    def prompt_section(self, tools: Sequence[ToolSpec]) -> str:
        return f"{_tool_list(tools, _xml_tool)}\n\n{_XML_RULES}{_XML_EXAMPLE}"

    def parse(self, response: LlmResponse, tools: Sequence[ToolSpec] = ()) -> ParsedResponse:
        text = response.text
        if not text.strip():
            raise ParseError("Your reply was empty. Answer with a <THOUGHT> and one <ACTION>.")
        thought_m = _THOUGHT_CLOSED.search(text) or _THOUGHT.search(text)
        first = _ACTION_OPEN.search(text)
        thought, start = "", 0
        if thought_m and (first is None or thought_m.start() < first.start()):
            thought, start = thought_m.group(1).strip(), thought_m.end()
        action_m = _ACTION_OPEN.search(text, start)
        observation = _OBSERVATION.search(text, start)
        if observation and (action_m is None or observation.start() < action_m.start()):
            raise ParseError(
                "Your reply contains an <OBSERVATION> you wrote yourself, with no <ACTION> "
                "before it. Never write observations: send one <ACTION>, then stop and wait."
            )
        if action_m is None:
            raise ParseError(
                "No <ACTION> block found in your reply. Every reply needs exactly one <ACTION> "
                "with a <tool_name> and <parameters>; call task_complete when you are done."
            )
        action, end = self._action(text, action_m.end(), response.stop_reason)
        observation = _OBSERVATION.search(text, end)
        stop = observation.start() if observation else len(text)
        dropped = max(len(_ACTION_TAG.findall(text, end, stop)),
                      len(_NAME_TAG.findall(text, end, stop)))  # fmt: skip
        return ParsedResponse(thought, (action,), dropped_actions=dropped)

    def _action(self, text: str, start: int, stop_reason: str) -> tuple[Action, int]:
        """The ACTION whose body starts at `start`, and the index where it ends."""
        close = _ACTION_CLOSE.search(text, start)
        limit = close.start() if close else len(text)  # a later ACTION's tags are not ours
        params_m = _PARAMS_OPEN.search(text, start, limit)
        name_m = _NAME.search(text, start, params_m.start() if params_m else limit)
        parameters: Params = {}
        end = start
        if params_m:
            parameters, end = self._parameters(text, params_m, stop_reason)
        if name_m is None:  # the tool name may follow the parameters
            close = _ACTION_CLOSE.search(text, end)
            name_m = _NAME.search(text, end, close.start() if close else len(text))
        name = _clean_name(name_m.group(1)) if name_m else ""
        if not name:
            if _ACTION_CLOSE.search(text, start) is None:
                raise _cut_off("its <tool_name>", stop_reason)
            raise ParseError(
                "Your <ACTION> has no <tool_name>. Name the tool inside it: "
                "<tool_name>read_file</tool_name>."
            )
        end = max(end, name_m.end()) if name_m else end
        close = _ACTION_CLOSE.search(text, end)
        if params_m is None and close and name_m:  # nothing the model wrote goes unread
            rest = _NAME_CLOSE.sub("", text[start : name_m.start()] + text[end : close.start()])
            parameters = _unlabelled(rest, _XML_WHERE, "Your <ACTION> holds {} outside "
                                     "<tool_name> and <parameters>", _XML_PARAMS)  # fmt: skip
        return Action(name, parameters), close.end() if close else end

    def _parameters(self, text: str, tag: re.Match[str], stop_reason: str) -> tuple[Params, int]:
        """Decode a <parameters> body, finding its end string-aware rather than by tag."""
        if tag.group(2):  # <parameters/>
            return {}, tag.end()
        pos = _skip_lead(text, tag.end())
        if text.startswith("<![CDATA[", pos):
            end = text.find("]]>", pos)
            if end < 0:
                raise _cut_off("its <parameters>", stop_reason)
            return _decode_object(text[pos + 9 : end], _XML_WHERE), end + 3
        candidates = []  # (body start, body end, resume at)
        json_end = _json_end(text, pos) if text[pos : pos + 1] in ("{", "[") else None
        if json_end:
            candidates.append((pos, json_end, json_end))
        closing = re.compile(rf"</{tag.group(1)}\s*>", re.I).search(text, tag.end())
        if closing:
            candidates.append((tag.end(), closing.start(), closing.end()))
        if not candidates:
            raise _cut_off("its <parameters>", stop_reason)
        error: ParseError | None = None
        for begin, stop, resume in candidates:
            body = text[begin:stop]
            children = _child_elements(body)
            if children:
                return children, resume
            try:
                return _decode_object(body, _XML_WHERE), resume
            except ParseError as exc:
                error = error or exc
        raise error  # type: ignore[misc]

    def action_text(self, thought: str, actions: Sequence[Action]) -> str:
        calls = (
            f"<ACTION><tool_name>{a.tool_name}</tool_name>"
            f"<parameters>{json.dumps(a.parameters, ensure_ascii=False)}</parameters></ACTION>"
            for a in actions
        )
        return "\n".join((f"<THOUGHT>{thought}</THOUGHT>", *calls))

    def thought_filter(self) -> ThoughtFilter:
        return _XmlThought()

    def observation_message(self, observations: Sequence[Observation]) -> Message:
        images = _images(observations)
        if len(observations) == 1:
            text = f"<OBSERVATION>\n{observations[0].content}\n</OBSERVATION>"
            return Message("user", text, images=images)
        blocks = (
            f'<OBSERVATION tool="{o.action.tool_name}">\n{o.content}\n</OBSERVATION>'
            for o in observations
        )
        return Message("user", "\n".join(blocks), images=images)

    def error_message(self, error: ParseError) -> Message:
        return Message(
            "user",
            f"<OBSERVATION>\nYour reply could not be parsed: {error}\n</OBSERVATION>\n"
            f"Reply with a <THOUGHT> and exactly one <ACTION>, like this:\n{_XML_EXAMPLE}",
        )


_TAG = re.compile(r"<(/?)([A-Za-z_-]+)\s*>")
_TAG_SO_FAR = re.compile(r"</?[A-Za-z_-]*\s*")  # a tag whose `>` has not arrived yet


class _XmlThought(ThoughtFilter):
    """Leaves out the THOUGHT tags and each action, from the tag that opens it (as `parse`
    finds it) to `</ACTION>`; any other tag is text the thought talks about (`<div>`)."""

    def __init__(self) -> None:
        super().__init__()
        self._in_action = False

    def _split(self, final: bool) -> str:
        out: list[str] = []
        text = self._pending
        while text:
            if self._in_action:
                end = _ACTION_CLOSE.search(text)
                if end is None:
                    text = "" if final else text[-10:]  # a `</ACTION>` may come in pieces
                    break
                text, self._in_action = text[end.end() :], False
                continue
            lt = text.find("<")
            if lt < 0:
                out.append(text)
                text = ""
                break
            out.append(text[:lt])
            text = text[lt:]
            tag = _TAG.match(text)
            if tag:
                name = tag.group(2).lower()
                if name in _ACTION_START_TAGS and not tag.group(1):
                    self._in_action = True
                elif name != "thought":
                    out.append(tag.group())
                text = text[tag.end() :]
            elif not final and len(text) < 20 and _TAG_SO_FAR.fullmatch(text):
                break
            else:
                out.append("<")
                text = text[1:]
        self._pending = text
        return "".join(out)


# --- ReAct text: Thought: / Action: / Action Input: / Final Answer: -----------------------

_REACT_WHERE = "The `Action Input` parameters"
_REACT_PARAMS = 'Put the parameters after the label: Action Input: {"path": "src/app.py"}'
_REACT_EXAMPLE = """Thought: I need to see how the app starts.
Action: read_file
Action Input: {"path": "src/app.py"}"""
_REACT_RULES = """Response format, one action per reply:
Thought: your reasoning
Action: a tool name from the list
Action Input: its parameters as one JSON object
Then stop: the result comes back as "Observation: ..." (never write one yourself). When done,
reply with `Thought: ...` and `Final Answer: the result`. Example:
"""
# A label at the start of a line, tolerating markdown: **Action:**, ### Thought:, - Action:
_REACT_LABEL = re.compile(
    r"^[ \t>*_#`-]*(thought|action[ \t_]*input|action|final[ \t_]*answer|observation)"
    r"[ \t*_`]*:[ \t*`]*",
    re.I | re.M,
)
_LABEL_WORDS = ("thought", "actioninput", "finalanswer", "observation")  # as _kind names them


def _kind(label: re.Match[str]) -> str:
    """'thought', 'actioninput', 'action', 'finalanswer' or 'observation'."""
    return re.sub(r"[ \t_]", "", label.group(1)).lower()


def _single_param(tool: ToolSpec) -> str | None:
    """The parameter a plain-text Action Input means, when the tool has an obvious one."""
    schema = tool.get("parameters") or {}
    required, properties = schema.get("required") or [], list(schema.get("properties") or {})
    if len(required) == 1:
        return str(required[0])
    return properties[0] if len(properties) == 1 else None


class ReactFormat(ActionFormat):
    """The classic ReAct text format, for models that drift out of XML."""

    name = "react"

    def prompt_section(self, tools: Sequence[ToolSpec]) -> str:
        return f"{_tool_list(tools, _react_tool)}\n\n{_REACT_RULES}{_REACT_EXAMPLE}"

    def parse(self, response: LlmResponse, tools: Sequence[ToolSpec] = ()) -> ParsedResponse:
        text = response.text
        if not text.strip():
            raise ParseError("Your reply was empty. Answer with Thought, Action, Action Input.")
        labels = list(_REACT_LABEL.finditer(text))
        first = next((m for m in labels if _kind(m) != "thought"), None)
        if first is None or _kind(first) == "actioninput":
            raise ParseError(
                "No `Action:` line found in your reply. Write `Action: tool_name` and "
                "`Action Input: {JSON}` on their own lines, or `Final Answer: ...` when done."
            )
        if _kind(first) == "observation":
            raise ParseError(
                "Your reply contains an `Observation:` you wrote yourself before any Action. "
                "Never write observations: send one Action, then stop and wait."
            )
        thought = self._thought(text, labels, first.start())
        if _kind(first) == "finalanswer":
            answer = text[first.end() :].strip()
            if not answer:
                raise ParseError("Your `Final Answer:` is empty; write the result after it.")
            return ParsedResponse(thought, (Action("task_complete", {"result": answer}),))
        single = {t["name"]: p for t in tools if (p := _single_param(t))}
        action, end = self._action(text, first, response.stop_reason, single)
        return ParsedResponse(thought, (action,), dropped_actions=self._dropped(labels, end))

    @staticmethod
    def _thought(text: str, labels: list[re.Match[str]], before: int) -> str:
        """The `Thought:` text, or the prose before the action when there is no label."""
        for i, label in enumerate(labels):
            if label.start() >= before:
                break
            if _kind(label) == "thought":
                end = labels[i + 1].start() if i + 1 < len(labels) else len(text)
                return text[label.end() : end].strip()
        return text[:before].strip()

    def _action(
        self, text: str, label: re.Match[str], stop_reason: str, single: dict[str, str]
    ) -> tuple[Action, int]:
        following = _REACT_LABEL.search(text, label.end())
        name_end = following.start() if following else len(text)
        lines = text[label.end() : name_end].strip().splitlines()
        tool = _clean_name(lines[0]) if lines else ""
        if not tool:
            raise ParseError("Your `Action:` line has no tool name, e.g. `Action: read_file`.")
        if following is None or _kind(following) != "actioninput":
            parameters = _unlabelled("\n".join(lines[1:]), _REACT_WHERE, "Your `Action:` line "
                                     "is followed by {}", _REACT_PARAMS)  # fmt: skip
            return Action(tool, parameters), name_end
        parameters, end = self._input(text, following.end(), single.get(tool), tool, stop_reason)
        return Action(tool, parameters), end

    @staticmethod
    def _input(
        text: str, pos: int, param: str | None, tool: str, stop_reason: str
    ) -> tuple[Params, int]:
        """Decode the Action Input at `pos`: a JSON object, or plain text for `param`, the
        tool's one obvious parameter."""
        pos = _skip_lead(text, pos)
        following = _REACT_LABEL.search(text, pos)
        if text[pos : pos + 1] in ("{", "["):
            end = _json_end(text, pos)
            if end is None:  # unbalanced: up to the next label, or the reply was cut off
                if following is None:
                    raise _cut_off("its Action Input JSON", stop_reason)
                end = following.start()
            return _decode_object(text[pos:end], _REACT_WHERE), end
        end = following.start() if following else len(text)
        raw = text[pos:end].strip().removesuffix("```").strip()
        if not raw:
            return {}, end
        if tool == "task_complete":
            param = "result"
        if param is None:
            raise ParseError(
                f"`Action Input` for {tool} must be a JSON object with its parameters, such "
                f'as {{"path": "src/app.py"}}; got plain text {_excerpt(raw, 0)}.'
            )
        if len(raw) > 1 and raw[0] == raw[-1] and raw[0] in "\"'`":
            raw = raw[1:-1]
        return {param: raw}, end

    @staticmethod
    def _dropped(labels: list[re.Match[str]], end: int) -> int:
        """Further actions (or a final answer) written before any hallucinated Observation."""
        count = 0
        for label in (m for m in labels if m.start() >= end):
            if _kind(label) == "observation":
                break
            count += _kind(label) in ("action", "finalanswer")
        return count

    def action_text(self, thought: str, actions: Sequence[Action]) -> str:
        calls = (
            f"Action: {a.tool_name}\nAction Input: {json.dumps(a.parameters, ensure_ascii=False)}"
            for a in actions
        )
        return "\n".join((f"Thought: {thought}", *calls))

    def thought_filter(self) -> ThoughtFilter:
        return _ReactThought()

    def observation_message(self, observations: Sequence[Observation]) -> Message:
        images = _images(observations)
        if len(observations) == 1:
            return Message("user", f"Observation: {observations[0].content}", images=images)
        blocks = (f"Observation ({o.action.tool_name}): {o.content}" for o in observations)
        return Message("user", "\n\n".join(blocks), images=images)

    def error_message(self, error: ParseError) -> Message:
        return Message(
            "user",
            f"Observation: Your reply could not be parsed: {error}\n"
            f"Use this format (or `Final Answer: ...` when done):\n{_REACT_EXAMPLE}",
        )


class _ReactThought(ThoughtFilter):
    """Leaves out the labels, and every line from a label other than `Thought:` (an action,
    its input, a final answer) up to the next `Thought:`."""

    def __init__(self) -> None:
        super().__init__()
        self._in_action = False
        self._line_start = True

    def _split(self, final: bool) -> str:
        out: list[str] = []
        text = self._pending
        while text:
            if self._line_start:
                label = _REACT_LABEL.match(text)
                if not final and _undecided(text, label):
                    break
                if label:
                    self._in_action = _kind(label) != "thought"
                    text = text[label.end() :]
                self._line_start = False
                continue
            end = text.find("\n") + 1 or len(text)
            if not self._in_action:
                out.append(text[:end])
            self._line_start = text[end - 1] == "\n"
            text = text[end:]
        self._pending = text
        return "".join(out)


def _undecided(line_start: str, label: re.Match[str] | None) -> bool:
    """Whether more text may change what this line starts with: `**Thought:**` arriving in
    pieces, or `Act` that may become `Action:`."""
    if label:
        return label.end() == len(line_start)
    word = re.sub(r"[ \t>*_#`-]", "", line_start).lower()
    return "\n" not in line_start and any(name.startswith(word) for name in _LABEL_WORDS)


# --- Native tool calling ------------------------------------------------------------------


class NativeFormat(ActionFormat):
    """The provider's own function calling: no text protocol to get wrong."""

    name = "native"
    native_tools = True

    def prompt_section(self, tools: Sequence[ToolSpec]) -> str:
        names = ", ".join(t["name"] for t in tools)
        return (
            f"Available Tools: {names}\n"
            "Use them through function calling (tool calls), not by writing calls as text. "
            "Explain your reasoning briefly before calling. When the task is done, call "
            "task_complete with the result."
        )

    def parse(self, response: LlmResponse, tools: Sequence[ToolSpec] = ()) -> ParsedResponse:
        if not response.tool_calls:
            raise ParseError(
                "Your reply did not call any tool. Call a tool to make progress, or call "
                "task_complete with the result when the task is done."
            )
        actions = tuple(
            Action(
                call.name, self._arguments(call.name, call.arguments), call.id, call.arguments_error
            )  # fmt: skip
            for call in response.tool_calls
        )
        return ParsedResponse(response.text.strip(), actions)

    @staticmethod
    def _arguments(tool: str, arguments: Any) -> dict[str, Any]:
        """Some providers hand arguments over as a JSON string rather than a dict."""
        where = f"The arguments of your {tool} call"
        if isinstance(arguments, str):
            return _decode_object(arguments, where)
        return _require_object(arguments, where)

    def observation_message(self, observations: Sequence[Observation]) -> Message:
        results = tuple(
            ToolResult(o.action.call_id, o.action.tool_name, o.content, o.is_error, o.images)
            for o in observations
        )
        return Message("user", "", tool_results=results)

    def error_message(self, error: ParseError) -> Message:
        return Message("user", str(error))


def check_stop_reason(response: LlmResponse) -> None:
    """Raise ParseError (for the LLM) when a reply stopped before its action could be read
    whole: cut off at the output-token limit, or blocked by the provider's safety filter."""
    if response.stop_reason == "max_tokens":
        raise ParseError(
            "Your reply was cut off at the output-token limit, so no action was run. "
            "Reply again with a shorter response: keep the THOUGHT brief, and write big "
            "files in parts (write_file a first part, then edit_file to extend it)."
        )
    if response.stop_reason == "safety":
        raise ParseError(
            "Your reply was blocked by the provider's safety filter, so no action was run. "
            "Continue the task with a different approach or wording."
        )
