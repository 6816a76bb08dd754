"""stream-json's lines against the event types and docs/output.schema.json, field by field.

Every event type of `events.Event` either words a line (or two) in its `stream_lines`, which
JsonLinesWriter writes, or is declared here as not written; each line's fields are exactly
what the schema's entry for its type names (no field undocumented, no documented field never
written), and each field of the event (and of what it carries: the action, the observation,
the reply) is written under its name, under a name declared here, or declared as not
written. A new event type, a new field or a new note kind fails here until its
`stream_lines` and the schema say it.
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any, get_args

import jsonschema
import pytest
from fakes import ScriptedLlm

from toy_agent import events
from toy_agent.agent import ReactAgent
from toy_agent.events import (
    CheckFinished,
    HookAnswered,
    JsonLinesWriter,
    LlmFailed,
    LlmRequested,
    LlmResponded,
    LlmRetrying,
    RunFinished,
    RunStarted,
    Step,
    StepFinished,
    StepStarted,
    TextDelta,
    ToolFinished,
    ToolProgress,
    ToolRefused,
    ToolStarted,
)
from toy_agent.lint import EditCheck, Finding
from toy_agent.messages import (
    NOTE_KINDS,
    CommandResult,
    FailedAttempt,
    Image,
    LlmResponse,
    Message,
    Note,
    ToolCall,
    Usage,
)
from toy_agent.parsing import Action, Observation

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "docs" / "output.schema.json").read_text())

ACTION = Action("run_command", {"command": "pytest"}, "call-1")
COMMAND = CommandResult("pytest", 1, 0.5, sandbox_note="read-only /usr", output_tail="1 failed")
OBSERVATION = Observation(
    ACTION, "exit 1", True, (Image.from_base64("aGk=", "image/png"),), COMMAND,
    EditCheck("a.py", (Finding(3, "missing ')'"),)), (Note("sandbox", "read-only /usr"),),
)  # fmt: skip
RESPONSE = LlmResponse(
    "<THOUGHT>t</THOUGHT>", (ToolCall("run_command", {"command": "pytest"}, "call-1"),),
    Usage(10, 2), "tool_use", "m-1", 1.5, (FailedAttempt("overloaded", "<THO"),), "hmm",
)  # fmt: skip


def samples(tmp_path: Path) -> dict[type, Any]:
    """One event of each type, with every optional part present."""
    agent = ReactAgent(ScriptedLlm(), tmp_path)
    step = Step(2, RESPONSE, "t", (ACTION,), (OBSERVATION,), "", 1.5, 0.5)
    return {
        RunStarted: RunStarted("task", "system prompt", agent.settings()),
        StepStarted: StepStarted(1, 10),
        LlmRequested: LlmRequested(1, [Message("user", "task")]),
        TextDelta: TextDelta("<THO"),
        LlmRetrying: LlmRetrying(1, FailedAttempt("overloaded")),
        LlmFailed: LlmFailed(1, "overloaded", (FailedAttempt("overloaded"),)),
        LlmResponded: LlmResponded(1, RESPONSE, 1.5),
        ToolStarted: ToolStarted(1, ACTION),
        ToolProgress: ToolProgress(1, "slow", 1.0, 2.0, "half"),
        ToolRefused: ToolRefused(1, ACTION, "rule", "deny pytest"),
        HookAnswered: HookAnswered(1, "pre_tool", "./check.sh", True, "no", "run_command"),
        ToolFinished: ToolFinished(1, OBSERVATION, 0.5),
        CheckFinished: CheckFinished(1, COMMAND, 1, 3),
        StepFinished: StepFinished(step),
        RunFinished: RunFinished({"outcome": "completed"}),
    }


# Not stream-json lines: the request (its messages are the conversation, in the log at
# DEBUG), the streamed text (llm_response has it whole), a retry (llm_response lists the
# failed attempts), a call that failed for good (run_finished's error), and run_finished,
# which the caller writes with the run's result (checked by test_outputs).
NOT_WRITTEN_EVENTS = {LlmRequested, TextDelta, LlmRetrying, LlmFailed, RunFinished}

# (type, field): the name its line gives it, or None: not written (and why).
RENAMED: dict[tuple[type, str], str | None] = {
    (RunStarted, "system_prompt"): None,  # the trajectory keeps it; too long for a line
    (RunStarted, "changes"): None,  # the run's change tracker, for subscribers
    (RunStarted, "settings"): "",  # flattened: its keys are the line's (checked below)
    (ToolStarted, "action"): "",
    (ToolRefused, "action"): "tool",  # its name; tool_started had its parameters
    (ToolFinished, "observation"): "",
    (Observation, "action"): "tool",
    (Action, "tool_name"): "tool",
    (Action, "parameters"): "parameters",
    (Action, "call_id"): None,  # native calls' ids: llm_response's tool_calls have them
    (Action, "arguments_error"): None,  # the observation says it
    (LlmResponded, "response"): "",
    (LlmResponse, "thinking"): None,  # its own line, "thinking"
    (LlmResponse, "turn"): None,  # opaque signed parts, sent back to the provider only
    (LlmResponse, "seconds"): None,  # LlmResponded's seconds
    (ToolProgress, "tool_name"): "tool",
    (CheckFinished, "result"): "",
    (StepFinished, "step"): "",
    (Step, "response"): None,  # llm_response
    (Step, "observations"): None,  # tool_finished
    (Step, "actions"): "tools",
}
# Line fields that are no event field: what the writer adds.
ADDED = {"type", "schema_version", "session", "passed", "killed", "task"}


def schema_entries() -> dict[str, dict[str, Any]]:
    """Each stream-json line type's schema entry, its allOf references merged in."""
    entries = {}
    for entry in SCHEMA["$defs"]["event"]["oneOf"]:
        properties, required = dict(entry["properties"]), set(entry.get("required", ()))
        for part in entry.get("allOf", ()):
            target = SCHEMA["$defs"][part["$ref"].rsplit("/", 1)[1]]
            properties.update(target["properties"])
            required |= set(target.get("required", ()))
        entries[properties["type"]["const"]] = {"properties": properties, "required": required}
    return entries


def written(event: Any) -> list[dict[str, Any]]:
    out = io.StringIO()
    JsonLinesWriter(out, session="s-1")(event)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_every_event_type_has_a_sample_here(tmp_path: Path) -> None:
    assert set(samples(tmp_path)) == set(get_args(events.Event))


def test_each_line_has_exactly_the_fields_its_schema_entry_names(tmp_path: Path) -> None:
    entries = schema_entries()
    validator = jsonschema.Draft202012Validator(SCHEMA)
    seen = set()
    for kind, event in samples(tmp_path).items():
        lines = written(event)
        assert bool(lines) != (kind in NOT_WRITTEN_EVENTS), kind
        for line in lines:
            entry = entries[line["type"]]
            assert set(line) == set(entry["properties"]), (line["type"], set(line) ^ set(
                entry["properties"]))  # fmt: skip
            assert entry["required"] <= set(line), line["type"]
            validator.validate(line)
            seen.add(line["type"])
    assert seen == set(entries)  # no schema entry that no event writes


def test_each_field_of_an_event_is_written_or_declared_not_written(tmp_path: Path) -> None:
    for kind, event in samples(tmp_path).items():
        if kind in NOT_WRITTEN_EVENTS:
            continue
        keys = {k for line in written(event) for k in line}
        _fields_written(event, keys)
        assert keys - ADDED <= _names(event), (kind, keys - ADDED - _names(event))


def _fields_written(obj: Any, keys: set[str]) -> None:
    for f in dataclasses.fields(obj):
        name = RENAMED.get((type(obj), f.name), f.name)
        value = getattr(obj, f.name)
        if name is None:
            continue
        if name == "":  # flattened into the line
            if dataclasses.is_dataclass(value):
                _fields_written(value, keys)
            else:
                assert set(value) <= keys, (type(obj), f.name)
            continue
        assert name in keys, f"{type(obj).__name__}.{f.name} is not in its stream-json line"


def _names(obj: Any) -> set[str]:
    """Every name an event (with what it flattens) gives its line's fields."""
    names = set()
    for f in dataclasses.fields(obj):
        name = RENAMED.get((type(obj), f.name), f.name)
        value = getattr(obj, f.name)
        if name == "":
            names |= _names(value) if dataclasses.is_dataclass(value) else set(value)
        elif name is not None:
            names.add(name)
    return names


def test_the_schema_names_every_note_kind() -> None:
    entry = schema_entries()["tool_finished"]["properties"]["notes"]
    assert tuple(entry["items"]["properties"]["kind"]["enum"]) == NOTE_KINDS


@pytest.mark.parametrize("kind", NOTE_KINDS)
def test_a_note_of_each_kind_round_trips_through_the_trajectory_and_stream_json(
    kind: str, tmp_path: Path
) -> None:
    from toy_agent.record import trajectory_from_dict

    note = Note(kind, f"a {kind} note")  # type: ignore[arg-type]
    observation = dataclasses.replace(OBSERVATION, notes=(note,))
    step = Step(1, RESPONSE, "t", (ACTION,), (observation,))
    read = trajectory_from_dict({"steps": [step.to_dict()]}, "t.json")
    assert read.steps[0].observations[0].notes == (note,)
    assert read.steps[0].observations[0].command == COMMAND
    (line,) = written(ToolFinished(1, observation, 0.1))
    assert line["notes"] == [{"kind": kind, "text": f"a {kind} note"}]
