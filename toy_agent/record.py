"""The run record: trajectories, session files and a batch's results.jsonl, read and written
in one place.

Each file is read into frozen dataclasses and checked once, here: a bad value is one line
naming the file and the field (`trajectory t.json: steps[3].observations[0].is_error:
expected a boolean`), and what reads the record (replay, --continue and --resume, --replay's
task, the report, a batch's resume) trusts the types it gets. Older files still read: every
field added since the first trajectory is optional, `null` reads as absent, and a
trajectory needs no "format" to be replayed.

Observations carry what the agent's own rules did to them as data (`messages.Note`: a cut,
the repeat guard's warning, the sandbox's note, a refusal, a decline, a hook's note, a failed
check), beside the command's result (`CommandResult`). Trajectories recorded before notes
existed simply have none: the report shows their observations plain.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, cast

from toy_agent.messages import (
    NOTE_KINDS,
    CommandResult,
    Image,
    LlmResponse,
    Message,
    Note,
    NoteKind,
    SignedTurn,
    ToolCall,
    Usage,
)
from toy_agent.parsing import Action, Observation, get_format

TRAJECTORY_FORMAT = "toy_agent.trajectory/1"
SESSION_FORMAT = "toy_agent.session/1"
RESULTS_FILE = "results.jsonl"


class RecordError(ValueError):
    """A record file that is not what it says: `kind` (trajectory, session, results),
    `source` (its path), `where` (the field, `steps[3].response`) and the `problem`."""

    def __init__(self, kind: str, source: str, where: str, problem: str):
        self.kind, self.source, self.where, self.problem = kind, source, where, problem
        named = f"{kind} {source}".strip()
        super().__init__(f"{named}: {where}: {problem}" if where else f"{named}: {problem}")


# ------------------------------------------------------------------------------- writing
def observation_dict(observation: Observation, *, content: bool = True) -> dict[str, Any]:
    """An observation as the trajectory, stream-json and a session's step record keep it:
    its text (without `content`: not, for a session, whose messages hold it), whether it is
    an error, and when there are any, the command's result, what an edit introduced, the
    images (as references: never their base64) and the notes."""
    data: dict[str, Any] = {"tool_name": observation.action.tool_name}
    if content:
        data["content"] = observation.content
    data["is_error"] = observation.is_error
    if observation.command is not None:
        data["command"] = observation.command.to_dict()
    if observation.edit_check is not None:
        data["edit_check"] = observation.edit_check.to_dict()
    if observation.images:
        data["images"] = [image.reference() for image in observation.images]
    if observation.notes:
        data["notes"] = [note.to_dict() for note in observation.notes]
    return data


# ------------------------------------------------------------------------------ the types
@dataclass(frozen=True)
class EditCheckRecord:
    """What an edit introduced, as recorded (`lint.EditCheck`'s findings, described)."""

    path: str
    refused: bool = False
    syntax_errors: tuple[str, ...] = ()
    lint: tuple[str, ...] = ()


@dataclass(frozen=True)
class ObservationRecord:
    """One observation as a record keeps it (a session's step record: no `content`)."""

    tool_name: str
    content: str = ""
    is_error: bool = False
    command: CommandResult | None = None
    edit_check: EditCheckRecord | None = None
    images: tuple[Image, ...] = ()  # references only
    notes: tuple[Note, ...] = ()

    def observation(self, action: Action) -> Observation:
        """The observation again, for a conversation rebuilt from the record."""
        return Observation(action, self.content, self.is_error, self.images, self.command,
                           notes=self.notes)  # fmt: skip


@dataclass(frozen=True)
class StepRecord:
    """One step of a trajectory (events.Step as it was written)."""

    iteration: int
    response: LlmResponse
    thought: str = ""
    actions: tuple[Action, ...] = ()
    observations: tuple[ObservationRecord, ...] = ()
    parse_error: str = ""
    llm_seconds: float | None = None
    tool_seconds: float | None = None

    def observed(self) -> list[Observation]:
        """The observations with the actions they answered (in order; an observation past
        the actions, which a record should not have, gets an action of its tool's name)."""
        return [
            o.observation(self.actions[i] if i < len(self.actions) else Action(o.tool_name))
            for i, o in enumerate(self.observations)
        ]


@dataclass(frozen=True)
class CheckRecord:
    """The check's last run (--check, a batch task's check)."""

    command: str = ""
    passed: bool = False
    exit_code: int | None = None
    output_tail: str = ""
    attempts: int = 1
    sandbox_note: str = ""


@dataclass(frozen=True)
class Outcome:
    """How a run ended, as the trajectory's "result" and a results.jsonl line say it (the
    fields the readers use; the rest stays in the file)."""

    outcome: str = ""
    success: bool = False
    error: str = ""
    answer: str = ""  # task_complete's ("result")
    iterations: int | None = None
    usage: Usage | None = None
    cost_usd: float | None = None
    elapsed_seconds: float | None = None
    files_changed: tuple[str, ...] = ()
    check: CheckRecord | None = None


@dataclass(frozen=True)
class Trajectory:
    """A run as `--trajectory FILE` wrote it."""

    source: str
    task: str
    steps: tuple[StepRecord, ...]
    settings: dict[str, Any] = field(default_factory=dict)
    system_prompt: str = ""
    started_at: str = ""
    result: Outcome | None = None  # None: the run was stopped before it finished
    diffs: dict[str, str] | None = None  # None: recorded before trajectories kept the diff
    format: str = ""

    @property
    def max_iterations(self) -> int | None:
        value = self.settings.get("max_iterations")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def setting(self, name: str) -> str:
        """A setting as text ("" when absent)."""
        value = self.settings.get(name)
        return "" if value is None else str(value)

    def messages(self) -> list[Message]:
        """The conversation the trajectory records: the task, then each step's reply and the
        observations (or parse error) the model was sent back, in the run's action format."""
        fmt = get_format(self.setting("tool_format") or "xml")
        messages = [Message("user", self.task)]
        for step in self.steps:
            messages.append(step.response.message())
            if step.parse_error:
                error = f"Error: {step.parse_error}"
                calls = [Action(c.name, c.arguments, c.id) for c in step.response.tool_calls]
                if calls:
                    unanswered = [Observation(a, error, True) for a in calls]
                    messages.append(fmt.observation_message(unanswered))
                else:
                    messages.append(Message("user", step.parse_error))
                continue
            observations = step.observed()[: len(step.actions)]
            if observations:
                messages.append(fmt.observation_message(observations))
        return messages


@dataclass(frozen=True)
class TaskResult(Outcome):
    """One line of a batch's results.jsonl: a task's outcome and what the batch found."""

    id: str = ""
    attempt: int | None = None  # the attempt its result is from
    attempts: int = 0  # how many attempts are recorded (0: none)
    verdict: str = ""  # already passing, broke keep, resolved, not resolved ("": no baseline)
    data: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SessionStep:
    """One step of a session's run: how long the conversation was after it, its tools, how
    many /compact had run, and its observations without their text (the messages hold it)."""

    iteration: int
    messages: int
    tools: tuple[str, ...] = ()
    compactions: int = 0
    observations: tuple[ObservationRecord, ...] | None = None  # None: saved before they were


@dataclass(frozen=True)
class SessionRun:
    task: str
    outcome: str = ""
    started_at: str = ""
    iterations: int | None = None
    error: str = ""
    usage: Usage | None = None
    cost_usd: float | None = None
    files_changed: tuple[str, ...] = ()
    undone: bool = False
    rewound: bool = False
    steps: tuple[SessionStep, ...] = ()
    # Where its task is in the session's messages: None when a /compact summarised it, or
    # (`has_start` false) in a session saved before runs kept it.
    start: int | None = None
    has_start: bool = False


@dataclass(frozen=True)
class Compaction:
    compacted_at: str = ""
    applied: bool = True
    runs: int = 0  # the runs it summarised
    messages_before: int = 0
    messages_after: int = 0
    tokens_before: int = 0
    tokens_after: int = 0
    summary: str | None = None  # None: saved before compactions kept it


@dataclass(frozen=True)
class SessionRecord:
    """A saved session as the report reads it (sessions.Session is the live, mutable one)."""

    source: str
    id: str
    repo: str
    messages: tuple[Message, ...]
    runs: tuple[SessionRun, ...] = ()
    compactions: tuple[Compaction, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""
    updated_at: str = ""
    usage: Usage | None = None
    cost_usd: float | None = None

    def run_messages(self, summary_header: str) -> tuple[list[list[Message] | None], str]:
        """The messages each run added after its task (None: a /compact replaced them, or
        the run was rewound), and the latest /compact's summary.

        A run knows where its task is (`start`, kept up to date by /compact). After a
        /compact the first message is the first task with the summary, and the steps kept
        after it belong to the last run it summarised. A session saved before runs kept their
        start is read the old way: a run begins at the first later user message that ends
        with its task, and the summary is what follows `summary_header` in the first one."""
        messages = self.messages
        summary = next((c.summary for c in reversed(self.compactions)
                        if c.applied and c.summary is not None), None)  # fmt: skip
        head = messages[0].content if messages and messages[0].role == "user" else ""
        legacy_head = f"\n\n{summary_header}\n" in head
        if summary is None and legacy_head:
            summary = head.partition(f"\n\n{summary_header}\n")[2]
        compacted = bool(summary) or legacy_head or any(c.applied for c in self.compactions)
        cursor = 1 if compacted else 0
        starts: list[int | None] = []
        for run in self.runs:
            found: int | None
            if run.rewound:
                found = None
            elif run.has_start:
                found = run.start if run.start is not None and run.start < len(messages) else None
            else:
                found = next((i for i in range(cursor, len(messages)) if run.task
                              and messages[i].role == "user"
                              and messages[i].content.endswith(run.task)), None)  # fmt: skip
            starts.append(found)
            cursor = found + 1 if found is not None else cursor
        chunks: list[list[Message] | None] = []
        for index, start in enumerate(starts):
            later = [s for s in starts[index + 1 :] if s is not None]
            end = later[0] if later else len(messages)
            chunks.append(None if start is None else list(messages[start + 1 : end]))
        if compacted:
            kept_until = next((s for s in starts if s is not None), len(messages))
            owner = max((i for i, s in enumerate(starts)
                         if s is None and not self.runs[i].rewound), default=-1)  # fmt: skip
            if owner >= 0 and kept_until > 1:
                chunks[owner] = list(messages[1:kept_until])
        return chunks, summary or ""


# ------------------------------------------------------------------------------- reading
def read_json(path: str | Path) -> Any:
    """A record file's JSON. Raises FileNotFoundError, and RecordError ("record") for a file
    that cannot be read or is not JSON."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise RecordError("file", str(path), "", f"cannot be read: {reason}") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        problem = f"not valid JSON ({str(exc).splitlines()[0][:120]})"
        raise RecordError("file", str(path), "", problem) from None


def read_trajectory(path: str | Path) -> Trajectory:
    """The trajectory in `path`. Raises FileNotFoundError or RecordError."""
    return trajectory_from_dict(read_json(path), str(path))


def trajectory_from_dict(data: Any, source: str = "") -> Trajectory:
    """A trajectory's JSON, checked. Raises RecordError naming the field."""
    r = _Reader("trajectory", source)
    top = r.object(data, "")
    steps = r.required(top, "steps", "", list)
    return Trajectory(
        source=source,
        task=r.get(top, "task", "", str, ""),
        steps=tuple(_step(r, s, f"steps[{n}]", n + 1) for n, s in enumerate(steps)),
        settings=r.get(top, "settings", "", dict, {}),
        system_prompt=r.get(top, "system_prompt", "", str, ""),
        started_at=r.get(top, "started_at", "", str, ""),
        result=_outcome(r, top["result"], "result") if top.get("result") is not None else None,
        diffs=_diffs(r, top),
        format=r.get(top, "format", "", str, ""),
    )


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSON Lines file: split at "\n" only. JSON keeps U+2028, U+2029 and NEL
    raw inside a string (we write with ensure_ascii=False, as many tools do), and
    str.splitlines() would cut a record in two at them."""
    return text.split("\n")


def task_results(path: str | Path) -> list[TaskResult]:
    """A batch's results.jsonl, the last line of an id winning (in the order of those lines).
    Raises FileNotFoundError or RecordError (a line that is not JSON, or not a result)."""
    path = Path(path)
    try:
        lines = jsonl_lines(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise RecordError("results", str(path), "", f"cannot be read: {reason}") from None
    found: dict[str, TaskResult] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            raise RecordError("results", str(path), f"line {number}", "not valid JSON") from None
        result = task_result_from_dict(data, str(path), f"line {number}")
        found.pop(result.id, None)
        found[result.id] = result
    return list(found.values())


# What the batch reads of a result it keeps (every version wrote them): a line without one,
# edited by hand, is not a result to keep.
_RESUMED_KEYS = ("id", "outcome", "success", "check", "iterations", "usage", "cost_usd",
                 "elapsed_seconds", "patch", "trajectory", "error")  # fmt: skip


def results_lines(text: str) -> tuple[dict[str, dict[str, Any]], int]:
    """The results a results.jsonl holds by id (the last line of an id wins), as the batch
    appends to them, and how many lines could not be read (one cut short by a crash, one
    edited by hand that is no result: its task runs again)."""
    records: dict[str, dict[str, Any]] = {}
    bad = 0
    for line in jsonl_lines(text):
        try:
            data = json.loads(line)
            task_result_from_dict(data)  # what the report checks, the resume checks too
            if not all(key in data for key in _RESUMED_KEYS):
                raise RecordError("results", "", "", "not a whole result")
        except (ValueError, RecursionError):  # RecordError too
            bad += line.strip() != ""
            continue
        records.pop(data["id"], None)
        records[data["id"]] = data
    return records, bad


def task_result_from_dict(data: Any, source: str = "", where: str = "") -> TaskResult:
    r = _Reader("results", source)
    top = r.object(data, where)
    outcome = _outcome(r, top, where)
    attempts = r.get(top, "attempts", where, list, [])
    return TaskResult(
        **{f: getattr(outcome, f) for f in Outcome.__dataclass_fields__},
        id=r.required(top, "id", where, str),
        attempt=r.get(top, "attempt", where, int, None),
        attempts=len(attempts),
        verdict=_verdict(r, top, where),
        data=top,
    )


def _verdict(r: _Reader, top: dict[str, Any], where: str) -> str:
    """What a batch task's check says about the fix ("" for a result from before baselines
    were taken)."""
    if r.get(top, "already_passing", where, bool, False):
        return "already passing"
    if r.get(top, "keep_broken", where, list, []):
        return "broke keep"
    if r.get(top, "baseline", where, dict, None) is not None:
        return "resolved" if r.get(top, "resolved", where, bool, False) else "not resolved"
    return ""


def session_from_dict(data: Any, source: str = "", session_id: str = "") -> SessionRecord:
    """A session file's JSON, checked. Raises RecordError naming the field."""
    r = _Reader("session", source)
    top = r.object(data, "")
    if top.get("format") != SESSION_FORMAT:
        r.fail("format", f'expected "{SESSION_FORMAT}"')
    repo = r.required(top, "repo", "", str)
    messages = []
    for n, item in enumerate(r.required(top, "messages", "", list)):
        where = f"messages[{n}]"
        message = r.object(item, where)
        r.required(message, "role", where, str)
        r.get(message, "content", where, str, "")
        try:
            messages.append(Message.from_dict(message))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            r.fail(where, f"not a message ({exc})")
    runs = tuple(_session_run(r, run, f"runs[{n}]")
                 for n, run in enumerate(r.get(top, "runs", "", list, [])))  # fmt: skip
    compactions = tuple(_compaction(r, c, f"compactions[{n}]")
                        for n, c in enumerate(r.get(top, "compactions", "", list, [])))  # fmt: skip
    if top.get("checkpoint") is not None:
        _snapshot(r, top["checkpoint"], "checkpoint")
    return SessionRecord(
        source=source,
        id=r.get(top, "id", "", str, session_id),
        repo=repo,
        messages=tuple(messages),
        runs=runs,
        compactions=compactions,
        settings=r.get(top, "settings", "", dict, {}),
        created_at=r.get(top, "created_at", "", str, ""),
        updated_at=r.get(top, "updated_at", "", str, ""),
        usage=_usage(r, top, "usage", ""),
        cost_usd=r.get(top, "cost_usd", "", float, None),
    )


def without_note(task: str) -> str:
    """The task as the user gave it, from a session saved before runs kept the note the
    model got with it (after an undo) apart from the task: "(Note: ... .)\\n\\nTASK"."""
    if task.startswith("(Note: ") and ".)\n\n" in task:
        return task.partition(".)\n\n")[2]
    return task


# ------------------------------------------------------------------------- the field reader
_EXPECTED = {str: "a string", bool: "a boolean", int: "an integer", float: "a number",
             dict: "an object", list: "a list"}  # fmt: skip
_MISSING: Any = object()


@dataclass(frozen=True)
class _Reader:
    kind: str
    source: str

    def fail(self, where: str, problem: str) -> NoReturn:
        raise RecordError(self.kind, self.source, where, problem)

    def object(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            self.fail(where, "expected an object")
        return value

    def get(self, data: dict[str, Any], key: str, where: str, kind: type, default: Any) -> Any:
        """data[key] when it is of `kind` (a JSON null or no key: `default`); else fails."""
        value = data.get(key)
        if value is None:
            return default
        if type(value) is kind and kind is not float:  # the common case, first (bool is no int)
            return value
        if not _is(value, kind):
            self.fail(_at(where, key), f"expected {_EXPECTED[kind]}")
        return float(value) if kind is float else value

    def required(self, data: dict[str, Any], key: str, where: str, kind: type) -> Any:
        if data.get(key) is None:
            self.fail(_at(where, key), "missing")
        return self.get(data, key, where, kind, None)


def _at(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _is(value: Any, kind: type) -> bool:
    if kind is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))  # fmt: skip
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _step(r: _Reader, data: Any, where: str, number: int) -> StepRecord:
    step = r.object(data, where)
    actions = []
    for n, item in enumerate(r.get(step, "actions", where, list, [])):
        at = f"{where}.actions[{n}]"
        action = r.object(item, at)
        actions.append(Action(r.required(action, "tool_name", at, str),
                              r.get(action, "parameters", at, dict, {}),
                              r.get(action, "call_id", at, str, ""),
                              r.get(action, "arguments_error", at, str, "")))  # fmt: skip
    observations = tuple(
        _observation(r, o, f"{where}.observations[{n}]", with_content=True)
        for n, o in enumerate(r.get(step, "observations", where, list, []))
    )
    return StepRecord(
        iteration=r.get(step, "iteration", where, int, number),
        response=_response(r, r.required(step, "response", where, dict), f"{where}.response"),
        thought=r.get(step, "thought", where, str, ""),
        actions=tuple(actions),
        observations=observations,
        parse_error=r.get(step, "parse_error", where, str, ""),
        llm_seconds=r.get(step, "llm_seconds", where, float, None),
        tool_seconds=r.get(step, "tool_seconds", where, float, None),
    )


def _response(r: _Reader, data: dict[str, Any], where: str) -> LlmResponse:
    calls = []
    for n, item in enumerate(r.get(data, "tool_calls", where, list, [])):
        at = f"{where}.tool_calls[{n}]"
        call = r.object(item, at)
        calls.append(ToolCall(r.required(call, "name", at, str),
                              r.get(call, "arguments", at, dict, {}),
                              r.get(call, "id", at, str, ""),
                              r.get(call, "arguments_error", at, str, "")))  # fmt: skip
    return LlmResponse(
        text=r.get(data, "text", where, str, ""),
        tool_calls=tuple(calls),
        usage=_usage(r, data, "usage", where) or Usage(),
        stop_reason=r.get(data, "stop_reason", where, str, "end"),
        model=r.get(data, "model", where, str, ""),
        thinking=r.get(data, "thinking", where, str, ""),
        turn=SignedTurn.from_dict(data.get("turn")),
    )


def _usage(r: _Reader, data: dict[str, Any], key: str, where: str) -> Usage | None:
    usage = r.get(data, key, where, dict, None)
    if usage is None:
        return None
    at = _at(where, key)
    for name in Usage.__dataclass_fields__:
        r.get(usage, name, at, int, 0)
    return Usage.from_dict(usage)


def _observation(r: _Reader, data: Any, where: str, *, with_content: bool) -> ObservationRecord:
    obs = r.object(data, where)
    images = []
    for n, item in enumerate(r.get(obs, "images", where, list, [])):
        at = f"{where}.images[{n}]"
        image = r.object(item, at)
        r.get(image, "mime_type", at, str, "")
        r.get(image, "bytes", at, int, 0)
        r.get(image, "sha256", at, str, "")
        images.append(Image.from_reference(image))
    notes = []
    for n, item in enumerate(r.get(obs, "notes", where, list, [])):
        at = f"{where}.notes[{n}]"
        note = r.object(item, at)
        kind = r.required(note, "kind", at, str)
        if kind not in NOTE_KINDS:
            r.fail(f"{at}.kind", f"expected one of {', '.join(NOTE_KINDS)}")
        notes.append(Note(cast(NoteKind, kind), r.get(note, "text", at, str, "")))
    command = r.get(obs, "command", where, dict, None)
    edit = r.get(obs, "edit_check", where, dict, None)
    return ObservationRecord(
        tool_name=r.get(obs, "tool_name", where, str, "?"),
        content=r.get(obs, "content", where, str, "") if with_content else "",
        is_error=r.get(obs, "is_error", where, bool, False),
        command=_command(r, command, f"{where}.command") if command is not None else None,
        edit_check=_edit_check(r, edit, f"{where}.edit_check") if edit is not None else None,
        images=tuple(images),
        notes=tuple(notes),
    )


def _command(r: _Reader, data: dict[str, Any], where: str) -> CommandResult:
    return CommandResult(
        command=r.get(data, "command", where, str, ""),
        exit_code=r.get(data, "exit_code", where, int, None),
        seconds=r.get(data, "seconds", where, float, 0.0),
        timed_out=r.get(data, "timed_out", where, bool, False),
        sandbox_note=r.get(data, "sandbox_note", where, str, None),
        output_tail=r.get(data, "output_tail", where, str, ""),
    )


def _edit_check(r: _Reader, data: dict[str, Any], where: str) -> EditCheckRecord:
    return EditCheckRecord(
        path=r.get(data, "path", where, str, ""),
        refused=r.get(data, "refused", where, bool, False),
        syntax_errors=_strings(r, data, "syntax_errors", where),
        lint=_strings(r, data, "lint", where),
    )


def _strings(r: _Reader, data: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    items = r.get(data, key, where, list, [])
    for n, item in enumerate(items):
        if not isinstance(item, str):
            r.fail(f"{_at(where, key)}[{n}]", "expected a string")
    return tuple(items)


def _outcome(r: _Reader, data: Any, where: str) -> Outcome:
    result = r.object(data, where)
    files = []
    for n, item in enumerate(r.get(result, "files_changed", where, list, [])):
        at = f"{_at(where, 'files_changed')}[{n}]"
        files.append(r.get(r.object(item, at), "path", at, str, ""))
    check = r.get(result, "check", where, dict, None)
    return Outcome(
        outcome=r.get(result, "outcome", where, str, ""),
        success=r.get(result, "success", where, bool, False),
        error=r.get(result, "error", where, str, ""),
        answer=r.get(result, "result", where, str, ""),
        iterations=r.get(result, "iterations", where, int, None),
        usage=_usage(r, result, "usage", where),
        cost_usd=r.get(result, "cost_usd", where, float, None),
        elapsed_seconds=r.get(result, "elapsed_seconds", where, float, None),
        files_changed=tuple(files),
        check=_check(r, check, _at(where, "check")) if check is not None else None,
    )


def _check(r: _Reader, data: dict[str, Any], where: str) -> CheckRecord:
    return CheckRecord(
        command=r.get(data, "command", where, str, ""),
        passed=r.get(data, "passed", where, bool, False),
        exit_code=r.get(data, "exit_code", where, int, None),
        output_tail=r.get(data, "output_tail", where, str, ""),
        attempts=r.get(data, "attempts", where, int, 1),
        sandbox_note=r.get(data, "sandbox_note", where, str, ""),
    )


def _diffs(r: _Reader, top: dict[str, Any]) -> dict[str, str] | None:
    diffs = r.get(top, "diffs", "", dict, None)
    if diffs is not None:
        for path, diff in diffs.items():
            if not isinstance(diff, str):
                r.fail(f"diffs.{path}", "expected a string")
    return diffs


def _session_run(r: _Reader, data: Any, where: str) -> SessionRun:
    run = r.object(data, where)
    steps = []
    for n, item in enumerate(r.get(run, "steps", where, list, [])):
        at = f"{where}.steps[{n}]"
        step = r.object(item, at)
        observations = r.get(step, "observations", at, list, None)
        steps.append(SessionStep(
            iteration=r.required(step, "iteration", at, int),
            messages=r.get(step, "messages", at, int, 0),
            tools=tuple(_strings(r, step, "tools", at)),
            compactions=r.get(step, "compactions", at, int, 0),
            observations=None if observations is None else tuple(
                _observation(r, o, f"{at}.observations[{k}]", with_content=False)
                for k, o in enumerate(observations)),
        ))  # fmt: skip
    files = []
    for n, item in enumerate(r.get(run, "files_changed", where, list, [])):
        at = f"{_at(where, 'files_changed')}[{n}]"
        files.append(r.get(r.object(item, at), "path", at, str, ""))
    for n, item in enumerate(r.get(run, "snapshots", where, list, [])):  # what undo reads
        _snapshot(r, item, f"{_at(where, 'snapshots')}[{n}]", step=True)
    _strings(r, run, "changed", where)
    has_start = "start" in run
    task = r.get(run, "task", where, str, "")
    return SessionRun(
        task=task if has_start else without_note(task),
        outcome=r.get(run, "outcome", where, str, ""),
        started_at=r.get(run, "started_at", where, str, ""),
        iterations=r.get(run, "iterations", where, int, None),
        error=r.get(run, "error", where, str, ""),
        usage=_usage(r, run, "usage", where),
        cost_usd=r.get(run, "cost_usd", where, float, None),
        files_changed=tuple(files),
        undone=r.get(run, "undone", where, bool, False),
        rewound=r.get(run, "rewound", where, bool, False),
        steps=tuple(steps),
        start=r.get(run, "start", where, int, None),
        has_start=has_start,
    )


def _snapshot(r: _Reader, data: Any, where: str, *, step: bool = False) -> None:
    """A snapshot of the work tree (checkpoints.Snapshot), with the step it was taken before
    (`step`: null when the run ended)."""
    snap = r.object(data, where)
    r.required(snap, "tree", where, str)
    r.get(snap, "skipped", where, dict, {})
    r.get(snap, "extra", where, str, None)
    if step and "before_step" not in snap:
        r.fail(_at(where, "before_step"), "missing")
    r.get(snap, "before_step", where, int, None)


def undo_from_dict(data: Any, source: str = "") -> dict[str, list[dict[str, Any]]]:
    """A session's undo data (sessions/undo/ID.json), checked: run index -> the files that
    run changed, each with its path, its hash after the run (null: the run deleted it) and
    its bytes from before. Raises RecordError naming the field."""
    r = _Reader("undo data", source)
    runs = r.get(r.object(data, ""), "runs", "", dict, {})
    for index, changes in runs.items():
        if not index.isdigit() or not isinstance(changes, list):
            r.fail(f"runs.{index}", "expected a run number and a list")
        for n, item in enumerate(changes):
            at = f"runs.{index}[{n}]"
            change = r.object(item, at)
            r.required(change, "path", at, str)
            for key in ("after_sha256", "before_sha256"):
                if key not in change:
                    r.fail(_at(at, key), "missing")
                r.get(change, key, at, str, None)
            for key in ("before", "before_base64", "unrestorable"):
                r.get(change, key, at, str, None)
            _strings(r, change, "new_dirs", at)
    return runs


def _compaction(r: _Reader, data: Any, where: str) -> Compaction:
    c = r.object(data, where)
    return Compaction(
        compacted_at=r.get(c, "compacted_at", where, str, ""),
        applied=r.get(c, "applied", where, bool, True),
        runs=r.get(c, "runs", where, int, 0),
        messages_before=r.get(c, "messages_before", where, int, 0),
        messages_after=r.get(c, "messages_after", where, int, 0),
        tokens_before=r.get(c, "tokens_before", where, int, 0),
        tokens_after=r.get(c, "tokens_after", where, int, 0),
        summary=r.get(c, "summary", where, str, None),
    )


def remap_after_compaction(runs: Sequence[dict[str, Any]], before: int, after: int) -> None:
    """Keep each run's `start` true after a /compact replaced all but the latest `after - 1`
    of `before` messages by one (the first task with the summary): a task still there moves
    up; a task summarised away has no start any more."""
    cut = before - (after - 1)
    for run in runs:
        start = run.get("start")
        if isinstance(start, int) and not isinstance(start, bool):
            run["start"] = start - cut + 1 if start >= cut else None
