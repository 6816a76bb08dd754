"""The text catalogue (xml and react formats): every nested parameter a valid call needs."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from fakes import ScriptedLlm, xml_action
from hypothesis import given, settings
from hypothesis import strategies as st

from toy_agent import ReactAgent
from toy_agent.catalogue import compact_parameters, cut_words
from toy_agent.mcp_tools import McpServerConfig, McpTools
from toy_agent.parsing import get_format

sys.path.insert(0, str(Path(__file__).parent / "mcp_servers"))

# Shaped exactly as @modelcontextprotocol/server-filesystem and server-memory send them
# (zod-to-json-schema output).
EDIT_FILE = {
    "name": "edit_file",
    "description": "Make line-based edits to a text file. Each edit replaces exact line "
    "sequences with new content. Returns a git-style diff showing the changes made. Only "
    "works within allowed directories.",
    "parameters": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "edits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "oldText": {
                            "type": "string",
                            "description": "Text to search for - must match exactly",
                        },
                        "newText": {"type": "string", "description": "Text to replace with"},
                    },
                    "required": ["oldText", "newText"],
                    "additionalProperties": False,
                },
            },
            "dryRun": {
                "type": "boolean",
                "default": False,
                "description": "Preview changes using git-style diff format",
            },
        },
        "required": ["path", "edits"],
        "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#",
    },
}
CREATE_ENTITIES = {
    "name": "create_entities",
    "description": "Create multiple new entities in the knowledge graph",
    "parameters": {
        "type": "object",
        "properties": {
            "entities": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string", "description": "The name of the entity"},
                        "entityType": {"type": "string", "description": "The type of the entity"},
                        "observations": {
                            "type": "array",
                            "items": {"type": "string"},
                            "description": "An array of observation contents associated with "
                            "the entity",
                        },
                    },
                    "required": ["name", "entityType", "observations"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["entities"],
        "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#",
    },
}


def test_filesystem_edit_file_shows_the_edit_objects_and_the_dry_run_default():
    assert json.loads(compact_parameters(EDIT_FILE)) == {
        "path": "string",
        "edits": "Array<{oldText: string /* Text to search for - must match exactly */, "
        "newText: string /* Text to replace with */}>",
        "dryRun": "boolean = false: Preview changes using git-style diff format",
    }


def test_memory_create_entities_shows_every_field_of_an_entity():
    entities = json.loads(compact_parameters(CREATE_ENTITIES))["entities"]
    assert entities == (
        "Array<{name: string /* The name of the entity */, entityType: string /* The type of "
        "the entity */, observations: string[] /* An array of observation contents associated "
        "with the entity */}>"
    )


def test_pydantic_server_shows_nested_models_optional_fields_enums_and_recursion(tmp_path):
    """A real SDK server (MCPServer, pydantic schemas with $ref/$defs), through the agent: the
    system prompt it sends has the whole shape, no `any = null`."""
    from content_server import build_server  # the mcp SDK: imported by the tests that use it

    llm = ScriptedLlm(xml_action("task_complete", result="done"))
    with McpTools(McpServerConfig("content", server=build_server())) as mcp:
        ReactAgent(llm, tmp_path, mcp_tools=mcp).run("look")
    prompt = llm.requests[0]["system"]

    def params(tool: str) -> dict[str, str]:
        block = prompt.split(f"<tool><name>{tool}</name>", 1)[1].split("</tool>", 1)[0]
        return json.loads(block.split("<parameters>", 1)[1].split("</parameters>", 1)[0])

    assert params("add_person") == {
        "person": "{name: string /* Full name, as on the passport. */, age?: integer(0..) "
        "/* Age in years, if known. */, address: {street: string /* Street and number. */, "
        "city: string, zip_code?: string}, tags?: string[] = []}",
        "priority": '"low" | "high" = "low"',
        "note": "string, optional",
    }
    assert params("categorise") == {
        "root": "Category where Category = {title: string, children?: Category[] = []}"
    }
    assert "any" not in json.dumps(params("add_person"))


def test_react_format_shows_the_same_nested_parameters():
    section = get_format("react").prompt_section([EDIT_FILE])
    assert "oldText: string" in section and "newText: string" in section


def test_required_nullable_stays_nullable_and_optional_nullable_is_optional():
    tool = {
        "name": "t",
        "description": "",
        "parameters": {
            "properties": {
                "must": {"type": ["string", "null"]},
                "may": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
                "pick": {
                    "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
                },
                "mode": {"enum": ["a", "b", None]},
            },
            "required": ["must", "pick"],
        },
    }
    assert json.loads(compact_parameters(tool)) == {
        "must": "string | null",
        "may": "integer, optional",
        "pick": "string | string[]",
        "mode": '"a" | "b", optional',
    }


def test_long_descriptions_are_cut_at_a_word_boundary():
    words = "alpha beta gamma delta epsilon " * 40
    tool = {
        "name": "t",
        "description": "",
        "parameters": {"properties": {"x": {"type": "string", "description": words}}},
    }
    shown = json.loads(compact_parameters(tool))["x"]
    description = shown.split(": ", 1)[1]
    kept, cut_note = description.split(" [… ")
    assert cut_note.endswith(" characters cut]") and len(kept) <= 300
    assert kept.split()[-1] in {"alpha", "beta", "gamma", "delta", "epsilon"}
    assert cut_words("one two three", 9) == "one two [… 6 characters cut]"
    assert cut_words("short", 9) == "short"


def test_a_huge_tool_gets_shorter_nested_descriptions_but_keeps_every_field():
    props = {
        f"field_{i}": {"type": "string", "description": f"Field {i}: " + "words " * 60}
        for i in range(40)
    }
    tool = {
        "name": "t",
        "description": "",
        "parameters": {"properties": {"record": {"type": "object", "properties": props}}},
    }
    record = json.loads(compact_parameters(tool))["record"]
    assert all(f"field_{i}?: string" in record for i in range(40))
    assert len(record) < 40 * 130


def test_mutually_recursive_definitions_are_named_once_and_defined_after_the_type():
    tool = {
        "name": "t",
        "description": "",
        "parameters": {
            "definitions": {
                "A": {"type": "object", "properties": {"b": {"$ref": "#/definitions/B"}}},
                "B": {"type": "object", "properties": {"a": {"$ref": "#/definitions/A"}}},
            },
            "properties": {"start": {"$ref": "#/definitions/A"}, "self": {"$ref": "#"}},
        },
    }
    rendered = json.loads(compact_parameters(tool))
    assert rendered["start"] == "A where A = {b?: {a?: A}}, optional"
    assert rendered["self"].startswith("Parameters where Parameters = {start?: ")


def test_the_built_in_catalogue_is_unchanged():
    section = get_format("xml").prompt_section(
        [
            {
                "name": "read_file",
                "description": "Read path.",
                "parameters": {
                    "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"}},
                    "required": ["path"],
                },
            }
        ]
    )
    assert '<parameters>{"path":"string","start_line":"integer, optional"}</parameters>' in section


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)
_keywords = st.sampled_from(
    [
        "type",
        "properties",
        "items",
        "anyOf",
        "oneOf",
        "allOf",
        "$ref",
        "$defs",
        "enum",
        "required",
        "default",
        "description",
        "const",
        "additionalProperties",
        "prefixItems",
        "format",
        "minimum",
        "maximum",
    ]
)
_schema = st.recursive(
    st.sampled_from(["string", "object", "array", "null", "#", "#/$defs/a", "#/properties/x"])
    | _json,
    lambda inner: (
        st.dictionaries(_keywords | st.text(max_size=4), inner, max_size=5)
        | st.lists(inner, max_size=3)
    ),
    max_leaves=40,
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(_schema, st.text(max_size=20))
def test_any_json_schema_renders_as_valid_json(schema, description):
    rendered = compact_parameters({"name": "t", "description": description, "parameters": schema})
    assert isinstance(json.loads(rendered), dict)


def test_a_schema_nested_thousands_deep_renders():
    deep: dict = {"type": "string"}
    for _ in range(3_000):
        deep = {"type": "object", "properties": {"x": deep}}
    rendered = json.loads(compact_parameters({"name": "t", "parameters": deep}))
    assert "too deeply nested" in rendered["x"]
