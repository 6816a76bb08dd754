"""A Python function's parameters as JSON Schema, read from its type hints and docstring.

What `@tool` (toy_agent.tools) builds a tool's schema with, the way smolagents' `@tool` does:
`str`, `int`, `float`, `bool`, `list[...]`, `tuple[...]`, `dict[str, ...]`, `Literal[...]`
(an enum), `X | None` / `Optional[X]`, unions and `Any`; a default makes a parameter optional
(and is shown unless it is None). The docstring's first paragraph is the description; its
parameters are described in Google style (`Args:` then `name: text`) or reST (`:param name:
text`). A type with no JSON form raises TypeError naming the parameter: it is the caller's
mistake, found when the tool is built, never when the model calls it.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}
_ARGS_HEADERS = ("args", "arguments", "parameters", "params")
_SECTION = re.compile(r"^\s*([A-Za-z][A-Za-z ]*):\s*$")  # "Returns:", "Raises:", "Example:"
_GOOGLE_ARG = re.compile(r"^\s*\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_ARG = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


@dataclass(frozen=True)
class Signature:
    """What a function shows the model: its description, and its parameters as JSON Schema
    (`{"type": "object", "properties", "required"}`) without the `hidden` ones."""

    description: str
    schema: dict[str, Any]


def read_signature(
    function: Callable[..., Any],
    *,
    hidden: frozenset[str] = frozenset(),
    descriptions: Mapping[str, str] | None = None,
) -> Signature:
    """The description and schema of `function`. `descriptions` (parameter -> text) replace
    the docstring's; the parameters in `hidden` are left out (the caller passes them itself)."""
    doc = inspect.getdoc(function) or ""
    summary, described = parse_docstring(doc)
    if descriptions is not None:
        described = dict(descriptions)
    hints = typing.get_type_hints(function)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(function).parameters.items():
        if name in hidden:
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"{_name(function)}: *{name} cannot be a tool parameter; name each one")
        if name not in hints:
            raise TypeError(f"{_name(function)}: parameter {name!r} has no type hint")
        optional = param.default is not inspect.Parameter.empty
        try:
            prop = json_schema(hints[name], drop_null=optional and param.default is None)
        except TypeError as exc:
            raise TypeError(f"{_name(function)}: parameter {name!r}: {exc}") from None
        if name in described:
            prop["description"] = described[name]
        if optional and param.default is not None and _is_json(param.default):
            prop["default"] = param.default
        if not optional:
            required.append(name)
        properties[name] = prop
    schema = {"type": "object", "properties": properties, "required": required}
    return Signature(summary, schema)


def json_schema(hint: Any, *, drop_null: bool = False) -> dict[str, Any]:
    """The JSON Schema of one type hint. With `drop_null`, `X | None` is just X: the value
    may be left out, which is how the model says None."""
    if hint is Any or hint is object:
        return {}
    if hint in _SIMPLE:
        return {"type": _SIMPLE[hint]}
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        kinds = {_SIMPLE.get(type(value)) for value in args}
        if None in kinds:
            raise TypeError(f"Literal values must be str, int, float, bool or None: {hint}")
        schema: dict[str, Any] = {"type": kinds.pop()} if len(kinds) == 1 else {}
        return {**schema, "enum": list(args)}
    if origin is typing.Union or origin is types.UnionType:
        options = [a for a in args if not (drop_null and a is type(None))]
        if len(options) == 1:
            return json_schema(options[0])
        schemas = [json_schema(option) for option in options]
        if all(set(s) == {"type"} for s in schemas):  # str | int | None: one list of types
            return {"type": [s["type"] for s in schemas]}
        return {"anyOf": schemas}
    if hint in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset):
        if origin is tuple and args and args[-1] is not Ellipsis:
            items = [json_schema(a) for a in args]
            return {"type": "array", "prefixItems": items, "minItems": len(items),
                    "maxItems": len(items)}  # fmt: skip
        return {"type": "array", "items": json_schema(args[0])} if args else {"type": "array"}
    if hint is dict or origin is dict:
        if args and args[0] is not str:
            raise TypeError(f"a JSON object's keys are strings: {hint}")
        values = json_schema(args[1]) if args else {}
        return {"type": "object", **({"additionalProperties": values} if values else {})}
    raise TypeError(f"{getattr(hint, '__name__', hint)} has no JSON Schema form (use str, int, "
                    "float, bool, list, dict, Literal or a union of them)")  # fmt: skip


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """(the first paragraph on one line, parameter -> description) from a Google-style
    (`Args:`) or reST (`:param name:`) docstring. Continuation lines join their parameter."""
    lines = inspect.cleandoc(doc).splitlines() if doc else []
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.match(line) or _REST_ARG.match(line):
            break
        summary.append(line.strip())
    described: dict[str, str] = {}
    current, in_args, indent = "", False, 0
    for line in lines:
        rest = _REST_ARG.match(line)
        section = _SECTION.match(line)
        if rest:
            current, in_args = rest[1], False
            described[current] = rest[2].strip()
        elif section and not line.startswith(" " * (indent + 1)):
            in_args = section[1].strip().lower() in _ARGS_HEADERS
            current, indent = "", len(line) - len(line.lstrip())
        elif in_args and (match := _GOOGLE_ARG.match(line)) and _depth(line) <= indent + 4:
            current = match[1]
            described[current] = match[2].strip()
        elif current and line.strip() and (in_args or line.startswith(" ")):
            described[current] = f"{described[current]} {line.strip()}".strip()
        elif current and not line.strip():
            current = current if in_args else ""
    return " ".join(summary), described


def _depth(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _name(function: Callable[..., Any]) -> str:
    return getattr(function, "__qualname__", None) or repr(function)
