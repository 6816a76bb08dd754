"""A tool's parameters as the text formats (xml, react) show them: compact JSON whose values are
TypeScript-like type strings, a quarter of the size of the JSON Schema and as clear to a model.

    {"path":"string","edits":"Array<{oldText: string /* Text to search for */, newText: string}>",
     "dryRun":"boolean = false: Preview changes"}

A top-level value reads `TYPE[, optional][ = DEFAULT][: DESCRIPTION]`; inside a type, objects
are `{name: T, other?: T = default /* description */}`, arrays `T[]` or `Array<...>`, unions
`A | B`, enums and constants JSON literals (`"fast" | "slow"`). A nullable type that may be left
out is shown as optional; one that is required stays `T | null`. `$ref`s are followed; a type
that contains itself is named once and defined after the type (`Node where Node = {...}`).
Everything in a schema is untrusted: any JSON value renders, and nothing raises.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from toy_agent import cuts
from toy_agent.messages import ToolSpec

DESCRIPTION_MAX_CHARS = 300  # one property's description; cut at a word boundary
TIGHT_DESCRIPTION_MAX_CHARS = 80  # nested descriptions, when a tool's parameters run long
TIGHT_ABOVE_CHARS = 3_000  # rendered parameters longer than this get the tight budget
DEFAULT_MAX_CHARS = 80  # a default value shown longer than this is cut
ENUM_MAX_VALUES = 40  # further values are counted, not listed
MAX_DEPTH = 24  # schemas nested deeper are summarised (a schema may nest thousands deep)
MAX_TYPES = 5_000  # per tool: beyond, types are summarised (shared `$ref`s multiply)


def compact_parameters(tool: ToolSpec) -> str:
    """A tool's parameters as compact JSON, name -> type string. It is sent with every request,
    so it pays to be short: a top-level parameter that the tool's description names (as a
    word) keeps no description of its own (the built-in tools explain theirs in one sentence)."""
    schema = tool.get("parameters")
    described = str(tool.get("description") or "")
    compact = _render(schema, described, DESCRIPTION_MAX_CHARS)
    if len(compact) > TIGHT_ABOVE_CHARS:
        compact = _render(schema, described, TIGHT_DESCRIPTION_MAX_CHARS)
    return compact


def cut_words(text: str, limit: int) -> str:
    """`text` on one line, cut at the last word boundary within `limit` characters."""
    return cuts.cut(" ".join(text.split()), limit, sep=" ", at_word=True)


def _render(schema: Any, described: str, budget: int) -> str:
    root = schema if isinstance(schema, dict) else {}
    renderer = _Renderer(root, budget)
    obj = renderer.object_schema(root)
    compact = {}
    for name, prop, required in renderer.properties(obj):
        named = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", described)
        own_budget = 0 if named else budget
        compact[name] = renderer.parameter(prop, required, own_budget)
    return json.dumps(compact, separators=(",", ":"), ensure_ascii=False)


@dataclass
class _Renderer:
    root: dict[str, Any]
    budget: int  # characters per description
    named: set[str] = field(default_factory=set)  # refs shown by name: they contain themselves
    _expanding: list[str] = field(default_factory=list)
    _used: list[str] = field(default_factory=list)  # named refs the current parameter used
    _recursive: set[str] = field(default_factory=set)
    _steps: int = 0  # types rendered; shared `$ref`s can make a small schema render huge

    def parameter(self, prop: Any, required: bool, budget: int) -> str:
        """`TYPE[ where N = {...}][, optional][ = DEFAULT][: DESCRIPTION]`."""
        for _ in range(8):  # each pass names one more self-containing type; few ever need two
            self._used, self._recursive = [], set()
            kind = self.type_of(prop, 0, nullable_ok=not required)
            if not self._recursive - self.named:
                break
            self.named |= self._recursive
        kind += self._where()
        return kind + self._notes(prop, required, ", optional", " = ", ": ", budget)

    def _where(self) -> str:
        """Definitions of the named types the parameter used, each once."""
        defined: list[str] = []
        clauses = []
        while pending := [ref for ref in self._used if ref not in defined]:
            ref = pending[0]
            defined.append(ref)
            target = self.resolve(ref)
            self._expanding.append(ref)
            clauses.append(f"{_ref_name(ref)} = {self.type_of(target, 1)}")
            self._expanding.pop()
        return " where " + "; ".join(clauses) if clauses else ""

    def _notes(self, prop: Any, required: bool, optional: str, eq: str, colon: str,
               budget: int) -> str:  # fmt: skip
        prop = self.deref(prop)
        text = ""
        has_default = "default" in prop and not (prop["default"] is None and not required)
        if not required and not has_default:
            text += optional
        if has_default:
            text += eq + _literal(prop["default"], DEFAULT_MAX_CHARS)
        description = prop.get("description")
        if budget and isinstance(description, str) and description.strip():
            text += colon + cut_words(description, budget)
        return text

    # -- types ------------------------------------------------------------------------------

    def type_of(self, schema: Any, depth: int, nullable_ok: bool = False) -> str:
        """The TypeScript-like type of `schema`. With `nullable_ok` (the value may be left
        out), a `null` alternative is dropped: the caller shows the value as optional."""
        if schema is True or schema == {}:
            return "any"
        if schema is False:
            return "never"
        if not isinstance(schema, dict):
            return "any"
        self._steps += 1
        if depth > MAX_DEPTH or self._steps > MAX_TYPES:
            return "object /* too deeply nested to show */"
        ref = schema.get("$ref")
        if isinstance(ref, str):
            return self._ref_type(ref, depth, nullable_ok)
        alternatives = self._alternatives(schema)
        if alternatives is not None:
            return self._union(alternatives, depth, nullable_ok)
        if "const" in schema:
            return _literal(schema["const"], DEFAULT_MAX_CHARS)
        enum = schema.get("enum")
        if isinstance(enum, list) and enum:
            return self._enum(enum, nullable_ok)
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in kind if isinstance(k, str)]
            types = [self._typed({**schema, "type": k}, depth) for k in kinds]
            return self._join(types, nullable_ok) if types else "any"
        if isinstance(schema.get("allOf"), list):
            return self._typed(self._merged(schema), depth)
        return self._typed(schema, depth)

    def _typed(self, schema: dict[str, Any], depth: int) -> str:
        kind = schema.get("type")
        if not isinstance(kind, str):
            if isinstance(schema.get("properties"), dict):
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            else:
                return "any"
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        if kind in ("string", "integer", "number", "boolean", "null"):
            return kind + _constraints(schema)
        return _identifier(kind)

    def _object(self, schema: dict[str, Any], depth: int) -> str:
        fields = []
        for name, prop, required in self.properties(schema):
            key = name if name.isidentifier() else json.dumps(name, ensure_ascii=False)
            kind = self.type_of(prop, depth + 1, nullable_ok=not required)
            notes = self._notes(prop, required, "", " = ", "", 0)
            mark = "" if required else "?"
            description = self.deref(prop).get("description")
            comment = ""
            if self.budget and isinstance(description, str) and description.strip():
                comment = " /* " + cut_words(description, self.budget).replace("*/", "* /") + " */"
            fields.append(f"{key}{mark}: {kind}{notes}{comment}")
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            fields.append(f"[key: string]: {self.type_of(extra, depth + 1)}")
        if not fields:
            return "object"
        return "{" + ", ".join(fields) + "}"

    def _array(self, schema: dict[str, Any], depth: int) -> str:
        tuple_items = schema.get("prefixItems")
        if not isinstance(tuple_items, list):
            tuple_items = schema.get("items") if isinstance(schema.get("items"), list) else None
        if tuple_items is not None:
            return "[" + ", ".join(self.type_of(s, depth + 1) for s in tuple_items) + "]"
        items = schema.get("items")
        if items is None or items is True or items == {}:
            return "any[]" + _constraints(schema)
        item = self.type_of(items, depth + 1)
        if item.replace("_", "").isalnum() or (item.endswith("[]") and "|" not in item):
            return f"{item}[]{_constraints(schema)}"
        return f"Array<{item}>{_constraints(schema)}"

    def _alternatives(self, schema: dict[str, Any]) -> list[Any] | None:
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                skip = (key, "description", "default", "title")  # said once, not per option
                siblings = {k: v for k, v in schema.items() if k not in skip}
                return [{**siblings, **o} if isinstance(o, dict) else o for o in options]
        return None

    def _union(self, options: list[Any], depth: int, nullable_ok: bool) -> str:
        return self._join([self.type_of(o, depth + 1) for o in options], nullable_ok)

    def _enum(self, values: list[Any], nullable_ok: bool) -> str:
        shown = [_literal(v, DEFAULT_MAX_CHARS) for v in values[:ENUM_MAX_VALUES]]
        text = self._join(shown, nullable_ok)
        if len(values) > ENUM_MAX_VALUES:
            text += f" | … ({len(values) - ENUM_MAX_VALUES} more)"
        return text

    @staticmethod
    def _join(types: list[str], nullable_ok: bool) -> str:
        unique = list(dict.fromkeys(types))
        if nullable_ok and len(unique) > 1:
            unique = [t for t in unique if t != "null"]
        if len(unique) == 1:
            return unique[0]
        return " | ".join(unique)

    def _ref_type(self, ref: str, depth: int, nullable_ok: bool) -> str:
        if ref in self._expanding or ref in self.named:
            if ref in self._expanding:
                self._recursive.add(ref)
            if ref not in self._used:
                self._used.append(ref)
            return _ref_name(ref)
        target = self.resolve(ref)
        if target is None:
            return "any"
        self._expanding.append(ref)
        try:
            return self.type_of(target, depth + 1, nullable_ok)
        finally:
            self._expanding.pop()

    # -- schema access ----------------------------------------------------------------------

    def resolve(self, ref: str) -> Any:
        """The schema a local `$ref` (`#`, `#/$defs/Name`, any JSON pointer) points to."""
        if ref == "#":
            return self.root
        if not ref.startswith("#/"):
            return None  # remote references are not fetched
        node: Any = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                return None
        return node

    def deref(self, schema: Any) -> dict[str, Any]:
        """`schema` itself, or what its `$ref` points to (a few hops), as a dict."""
        for _ in range(8):
            if not isinstance(schema, dict):
                return {}
            ref = schema.get("$ref")
            if not isinstance(ref, str) or "description" in schema or "default" in schema:
                return schema
            schema = self.resolve(ref)
        return schema if isinstance(schema, dict) else {}

    def object_schema(self, schema: Any) -> dict[str, Any]:
        """The object whose properties are the parameters (through `$ref` and `allOf`)."""
        schema = self.deref(schema)
        return self._merged(schema) if isinstance(schema.get("allOf"), list) else schema

    def _merged(self, schema: dict[str, Any]) -> dict[str, Any]:
        """`allOf` folded into one schema: the parts' properties and required names joined."""
        merged = {k: v for k, v in schema.items() if k != "allOf"}
        properties = dict(_mapping(merged.get("properties")))
        required = list(_names(merged.get("required")))
        for part in schema["allOf"][:16]:
            part = self.deref(part)
            properties.update(_mapping(part.get("properties")))
            required += _names(part.get("required"))
            for key, value in part.items():
                merged.setdefault(key, value)
        merged.pop("allOf", None)
        merged["properties"], merged["required"] = properties, required
        if not properties and "type" not in merged:
            merged.pop("properties")
        return merged

    def properties(self, schema: dict[str, Any]) -> Iterator[tuple[str, Any, bool]]:
        required = set(_names(schema.get("required")))
        for name, prop in _mapping(schema.get("properties")).items():
            yield str(name), prop, name in required


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _names(value: Any) -> list[str]:
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def _ref_name(ref: str) -> str:
    tail = ref.rsplit("/", 1)[-1] if ref != "#" else "Parameters"
    return _identifier(tail.replace("~1", "/").replace("~0", "~")) or "Parameters"


def _identifier(text: str) -> str:
    """A type name from a schema, reduced to characters that cannot break the notation."""
    return "".join(c for c in text if c.isalnum() or c in "_-.")[:64] or "any"


def _literal(value: Any, limit: int) -> str:
    """A JSON value as the model would write it, cut when long."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return "…"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _constraints(schema: dict[str, Any]) -> str:
    """Format and range, which a valid call must respect: `string(uri)`, `integer(1..600)`."""
    notes = []
    fmt = schema.get("format")
    if isinstance(fmt, str) and fmt:
        notes.append(_identifier(fmt))
    low = next((schema[k] for k in ("minimum", "minItems", "minLength") if k in schema), None)
    high = next((schema[k] for k in ("maximum", "maxItems", "maxLength") if k in schema), None)
    if _number(low) or _number(high):
        notes.append(f"{_bound(low)}..{_bound(high)}")
    return f"({', '.join(notes)})" if notes else ""


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _bound(value: Any) -> str:
    return _literal(value, 24) if _number(value) else ""
