"""What a run emits, and the subscribers every run can use: the log, the trajectory file,
stream-json and the change tracker. The terminal view lives in `view.py`. Each event type words
its own stream-json lines (`stream_lines`), so a new output event is its dataclass here and its
entry in docs/output.schema.json.

Subscribers are plain callables `(event) -> None`, called synchronously from the loop, so a
subscriber sees the world as it is at that moment (the change tracker relies on that).
"""

from __future__ import annotations

import json
import logging
import os
import re
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from toy_agent import cuts
from toy_agent.diffs import line_counts, unified_diff
from toy_agent.files import FileState, atomic_write, file_state
from toy_agent.messages import CommandResult, FailedAttempt, LlmResponse, Message
from toy_agent.parsing import Action, Observation
from toy_agent.record import TRAJECTORY_FORMAT as TRAJECTORY_FORMAT
from toy_agent.record import observation_dict
from toy_agent.tools import CodeRepositoryTools, ToolError

logger = logging.getLogger("toy_agent.agent")

# The version of --output json's object and of stream-json's lines (docs/cli.md): raised when a
# field changes meaning or goes away, not when one is added.
OUTPUT_SCHEMA_VERSION = 1
MAX_OUTPUT_DIFF_CHARS = 100_000  # --output json's "diff": bounded, the rest named


@dataclass(frozen=True)
class RunStarted:
    """The run begins: before the first step, with what the model is told."""

    task: str
    system_prompt: str
    settings: dict[str, Any]
    # The run's change tracker, for a subscriber that keeps what it read (sessions' undo).
    changes: ChangeTracker | None = field(default=None, compare=False, repr=False)

    def stream_lines(self) -> list[dict[str, Any]]:
        # The writer adds schema_version and the session, which it holds.
        return [{"type": "run_started", "task": self.task, **self.settings}]


@dataclass(frozen=True)
class StepEvent:
    """What happens in step `iteration` (counting from 1): StepStarted and the events after
    it, up to StepFinished (whose Step holds the iteration). A subclass's fields follow it."""

    iteration: int


@dataclass(frozen=True)
class StepStarted(StepEvent):
    """A step begins; `max_iterations` is the run's limit."""

    max_iterations: int

    def stream_lines(self) -> list[dict[str, Any]]:
        return [{"type": "step_started", "iteration": self.iteration,
                 "max_iterations": self.max_iterations}]  # fmt: skip


@dataclass(frozen=True)
class LlmRequested(StepEvent):
    """The step's LLM call is about to be sent."""

    messages: Sequence[Message]  # exactly what is sent, after the context budget

    def stream_lines(self) -> list[dict[str, Any]]:
        return []  # the conversation: in the log at DEBUG


@dataclass(frozen=True)
class TextDelta:
    """A piece of the reply as it streams in (with streaming on); untrusted text."""

    text: str

    def stream_lines(self) -> list[dict[str, Any]]:
        return []  # llm_response has the whole text


@dataclass(frozen=True)
class LlmRetrying(StepEvent):
    """A streamed call failed and is sent again: the text streamed so far is void."""

    attempt: FailedAttempt

    def stream_lines(self) -> list[dict[str, Any]]:
        return []  # llm_response lists the failed attempts


@dataclass(frozen=True)
class LlmFailed(StepEvent):
    """The call of this step failed for good (retries exhausted or not retryable): the run
    ends. `attempts` are its attempts, each with its error and the text it had streamed."""

    error: str
    attempts: tuple[FailedAttempt, ...]

    def stream_lines(self) -> list[dict[str, Any]]:
        return []  # run_finished has the error


@dataclass(frozen=True)
class LlmResponded(StepEvent):
    """The step's LLM call answered, after `seconds` (its retries included)."""

    response: LlmResponse
    seconds: float

    def stream_lines(self) -> list[dict[str, Any]]:
        """A thinking line first when the provider shows the model's reasoning."""
        lines = []
        if self.response.thinking:
            lines.append({"type": "thinking", "iteration": self.iteration,
                          "text": self.response.thinking})  # fmt: skip
        reply = {k: v for k, v in self.response.to_dict().items()
                 if k not in ("thinking", "turn")}  # fmt: skip
        line = {"type": "llm_response", "iteration": self.iteration, **reply}
        if self.response.attempts:  # the failed attempts before it
            line["attempts"] = [asdict(a) for a in self.response.attempts]
        return [*lines, {**line, "seconds": round(self.seconds, 3)}]


@dataclass(frozen=True)
class ToolStarted(StepEvent):
    """An action of the reply starts running (after any confirmation)."""

    action: Action

    def stream_lines(self) -> list[dict[str, Any]]:
        return [{"type": "tool_started", "iteration": self.iteration,
                 "tool": self.action.tool_name, "parameters": self.action.parameters}]  # fmt: skip


@dataclass(frozen=True)
class ToolProgress(StepEvent):
    """A progress report for the tool call in flight (an MCP server's `notifications/
    progress`); `message` is the server's text, untrusted."""

    tool_name: str
    progress: float
    total: float | None = None
    message: str = ""

    @property
    def text(self) -> str:
        """`3/5 reading files`, the way the live view shows it."""
        count = f"{self.progress:g}" + (f"/{self.total:g}" if self.total is not None else "")
        return f"{count} {self.message}".strip()

    def stream_lines(self) -> list[dict[str, Any]]:
        return [{"type": "tool_progress", "iteration": self.iteration, "tool": self.tool_name,
                 "progress": self.progress, "total": self.total,
                 "message": self.message}]  # fmt: skip


@dataclass(frozen=True)
class ToolRefused(StepEvent):
    """An action that did not run: the user declined it (`reason`: what they said), a deny
    rule matched, or the permission mode does not allow it. ToolFinished follows with the
    observation the model gets."""

    action: Action
    by: str  # "user", "rule", "mode" or "hook"
    reason: str

    def stream_lines(self) -> list[dict[str, Any]]:
        return [{"type": "tool_refused", "iteration": self.iteration,
                 "tool": self.action.tool_name, "by": self.by, "reason": self.reason}]  # fmt: skip


@dataclass(frozen=True)
class HookAnswered(StepEvent):
    """A user's hook (docs/hooks.md) refused something (`blocked`, with its reason in
    `text`) or wrote a note for the model (`text`). `iteration` is 0 for the hooks that run
    before the first step (prompt, run_start)."""

    event: str
    command: str
    blocked: bool
    text: str
    tool: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "event": self.event, "command": self.command,
                "tool": self.tool, "blocked": self.blocked, "text": self.text}  # fmt: skip

    def stream_lines(self) -> list[dict[str, Any]]:
        return [{"type": "hook", **self.to_dict()}]


@dataclass(frozen=True)
class ToolFinished(StepEvent):
    """An action ended (or was refused): what the model is told, and how long it ran."""

    observation: Observation
    seconds: float

    def stream_lines(self) -> list[dict[str, Any]]:
        recorded = observation_dict(self.observation)  # as the trajectory has it, notes and all
        return [{"type": "tool_finished", "iteration": self.iteration,
                 "tool": recorded.pop("tool_name"), **recorded,
                 "seconds": round(self.seconds, 3)}]  # fmt: skip


@dataclass(frozen=True)
class CheckFinished(StepEvent):
    """The run's check ran, because the model called task_complete: attempt `attempt` of at
    most `limit`. A failed one is sent to the model and the run goes on."""

    result: CommandResult
    attempt: int
    limit: int

    def to_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "attempt": self.attempt, "limit": self.limit,
                "passed": self.result.ok, **self.result.to_dict()}  # fmt: skip

    def stream_lines(self) -> list[dict[str, Any]]:
        return [{"type": "check_finished", **self.to_dict()}]


@dataclass(frozen=True)
class Step:
    """One THINK -> ACT -> OBSERVE cycle, as recorded in the trajectory."""

    iteration: int
    response: LlmResponse
    thought: str = ""
    actions: tuple[Action, ...] = ()
    observations: tuple[Observation, ...] = ()
    parse_error: str = ""
    llm_seconds: float = 0.0
    tool_seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        # The attempts that failed before the response (retried), when there were any.
        attempts = [asdict(a) for a in self.response.attempts]
        return {
            "iteration": self.iteration,
            **({"attempts": attempts} if attempts else {}),
            "response": self.response.to_dict(),
            "thought": self.thought,
            "actions": [asdict(a) for a in self.actions],
            "observations": [observation_dict(o) for o in self.observations],
            "parse_error": self.parse_error,
            "llm_seconds": round(self.llm_seconds, 3),
            "tool_seconds": round(self.tool_seconds, 3),
        }


@dataclass(frozen=True)
class StepFinished:
    """A step ended; `step` is its record in the trajectory (unparsable replies too)."""

    step: Step

    def stream_lines(self) -> list[dict[str, Any]]:
        step = self.step
        return [{"type": "step_finished", "iteration": step.iteration, "thought": step.thought,
                 "tools": [a.tool_name for a in step.actions],
                 "parse_error": step.parse_error or None,
                 "llm_seconds": round(step.llm_seconds, 3),
                 "tool_seconds": round(step.tool_seconds, 3)}]  # fmt: skip


@dataclass(frozen=True)
class RunFinished:
    """The run ended: its result object (as `--output json` has it) and the diffs."""

    result: dict[str, Any]
    diffs: dict[str, str] = field(default_factory=dict)  # path -> unified diff, as in RunResult

    def stream_lines(self) -> list[dict[str, Any]]:
        return []  # the caller writes run_finished, with what it adds to the result


Event = (
    RunStarted
    | StepStarted
    | LlmRequested
    | TextDelta
    | LlmRetrying
    | LlmFailed
    | LlmResponded
    | ToolStarted
    | ToolProgress
    | ToolRefused
    | HookAnswered
    | ToolFinished
    | CheckFinished
    | StepFinished
    | RunFinished
)
Subscriber = Callable[[Event], None]


def log_event(event: Event) -> None:
    """The run as the system spec's section 7 wants it in the log."""
    match event:
        case RunStarted(task=task, system_prompt=prompt, settings=settings):
            logger.info("Task: %s", task)
            logger.debug("Settings: %s", json.dumps(settings))
            logger.debug("System prompt:\n%s", prompt)
        case StepStarted(iteration=i, max_iterations=n):
            logger.info("Iteration %d/%d", i, n)
        case LlmRequested(messages=messages):
            logger.debug(
                "Conversation sent (%d messages):\n%s",
                len(messages),
                json.dumps([m.to_dict() for m in messages], indent=1),
            )
        case LlmResponded(response=response, seconds=seconds):
            logger.debug(
                "LLM response (%.1fs, %s):\n%s", seconds, response.stop_reason, response.text
            )
        case ToolStarted(action=action):
            logger.info("Tool call: %s %s", action.tool_name, json.dumps(action.parameters)[:500])
        case ToolFinished(observation=obs, seconds=seconds):
            if obs.is_error:  # the reason, as the model sees it (its first line)
                reason = obs.content.removeprefix("Error: ").strip().split("\n", 1)[0][:300]
                logger.info("Tool %s failed in %.2fs: %s", obs.action.tool_name, seconds, reason)
            else:
                name, size = obs.action.tool_name, len(obs.content)
                logger.info("Tool %s succeeded in %.2fs (%d chars)", name, seconds, size)
            logger.debug("Observation:\n%s", obs.content)
        case CheckFinished(result=result, attempt=attempt, limit=limit):
            logger.info("Check %r: %s (attempt %d of %d)", result.command,
                        "passed" if result.ok else result.status, attempt, limit)  # fmt: skip
        case ToolRefused(action=action, by=by, reason=reason):
            logger.info("Tool %s refused by the %s: %s", action.tool_name, by, reason or "no")
        case HookAnswered(event=hook_event, command=command, blocked=blocked, text=text):
            said = "refused" if blocked else "noted"
            logger.info("Hook %s `%s` %s: %s", hook_event, command, said, text[:300])
        case StepFinished(step=step) if step.parse_error:
            # The model is told and tries again: part of the run, not a problem of the user's.
            logger.info("Could not parse the LLM response: %s", step.parse_error)
        case RunFinished(result=result):
            # How it ended is the caller's to report, once (the CLI: the summary, and a
            # provider failure's error line, which the log does not repeat either).
            provider = result["outcome"] == "provider_error"
            error = f" ({result['error']})" if result.get("error") and not provider else ""
            logger.info(
                "Run finished: %s after %d iterations, conversation length %d%s",
                result["outcome"],
                result["iterations"],
                result["conversation_length"],
                error,
            )


@dataclass
class JsonLinesWriter:
    """`--output stream-json`: one JSON object per line as the run goes, flushed per line so
    `| jq` follows it live. Every line has a "type": run_started, step_started, thinking (the
    model's reasoning when the provider shows it, before its llm_response), llm_response,
    tool_started, tool_refused, tool_progress, hook, tool_finished, step_finished (every step, an
    unparsable reply too); the caller writes the last, run_finished, with the result. The
    schema: docs/cli.md and docs/output.schema.json.

    Each event type words its own lines (`stream_lines`, none for the events not written);
    the writer adds what it holds to run_started (`session`, the run's session id, and the
    schema version), redacts and writes."""

    stream: Any
    redact: Callable[[Any], Any] = lambda obj: obj
    session: str | None = None

    def __call__(self, event: Event) -> None:
        for line in event.stream_lines():
            if isinstance(event, RunStarted):
                line = {"type": line.pop("type"), "schema_version": OUTPUT_SCHEMA_VERSION,
                        "session": self.session, **line}  # fmt: skip
            self.write(line)

    def write(self, obj: dict[str, Any]) -> None:
        self.stream.write(json_text(self.redact(obj), indent=None) + "\n")
        self.stream.flush()


@dataclass
class TrajectoryRecorder:
    """Writes the run as JSON after every step and when it finishes (also after Ctrl-C), each
    time whole and atomically (a temp file renamed over the last one), so a crash or a kill
    leaves a valid file with every finished step.

    `redact` scrubs the whole document before it touches the disk. A write that fails does
    not stop the run: `error` says why, for the caller to report at the end.
    """

    path: Path
    redact: Callable[[Any], Any] = lambda obj: obj
    _data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def __call__(self, event: Event) -> None:
        match event:
            case RunStarted(task=task, system_prompt=prompt, settings=settings):
                self._data = {
                    "format": TRAJECTORY_FORMAT,
                    "task": task,
                    "settings": settings,
                    "system_prompt": prompt,
                    "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                    "steps": [],
                }
            case HookAnswered():  # beside the steps: a prompt hook answers before any
                self._data.setdefault("hooks", []).append(event.to_dict())
            case StepFinished(step=step):
                self._data["steps"].append(step.to_dict())
                self.write()
            case CheckFinished():
                self._data.setdefault("checks", []).append(event.to_dict())
            case LlmFailed(iteration=i, error=error, attempts=attempts):
                # No step: the call never answered. What it tried is kept beside the steps.
                attempts_data = [asdict(a) for a in attempts]
                self._data["failed_call"] = {"iteration": i, "error": error,
                                             "attempts": attempts_data}  # fmt: skip
            case RunFinished(result=result, diffs=diffs):
                self._data["result"] = result
                self._data["diffs"] = diffs  # what `toy-agent report` shows as the run's diff
                self.write()

    def write(self) -> None:
        data = (json_text(self.redact(self._data)) + "\n").encode("utf-8")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            _replace_file(self.path, data)
        except OSError as exc:
            self.error = f"cannot write the trajectory {self.path}: {exc.strerror or exc}"
            logger.debug("trajectory write failed", exc_info=True)
        else:
            self.error = None


def run_diff(diffs: dict[str, str], limit: int = MAX_OUTPUT_DIFF_CHARS) -> tuple[str, bool]:
    """The run's unified diff, every changed file's in turn, and whether it was cut: at most
    `limit` characters, cut at a line's end with a last line saying how much is left out."""
    text = "".join(diff if diff.endswith("\n") else diff + "\n" for diff in diffs.values())
    if len(text) <= limit:
        return text, False
    head = cuts.split(text, limit).head
    head = head[: head.rfind("\n") + 1]  # whole lines
    left = cuts.amount(len(text) - len(head), "character")
    return f"{head}{cuts.note(left, 'git diff in the repository shows all of it')}\n", True


def json_text(obj: Any, indent: int | None = 2) -> str:
    """JSON that always encodes: lone surrogates (undecodable bytes of a file name) become
    \\udcXX escapes, which JSON readers turn back into the same string."""
    text = json.dumps(obj, indent=indent, ensure_ascii=False)
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _replace_file(path: Path, data: bytes) -> None:
    """Write `data` to `path`: atomically (temp + rename) for a regular file or a new one;
    straight into anything else (a FIFO, /dev/stdout), which must never be replaced."""
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        special = False
    if special:
        with open(path, "wb") as f:
            f.write(data)
        return
    atomic_write(path, data)


@dataclass
class ChangeTracker:
    """Remembers each file as it was before the run first changed it, read once (see
    toy_agent.files.FileState), for both the run's diff and undo (toy_agent.sessions keeps
    `before` and `new_dirs` as the run's undo data).

    It sees the calls of tools that change files (`write_file`, `edit_file`, a user's tool
    made with changes_files=True), each naming its file in its `path` parameter, and names
    files by `tools.relative`, so `./a.py` and `a.py` are one file; changes made by
    `run_command` are not tracked.
    """

    tools: CodeRepositoryTools
    before: dict[str, FileState] = field(default_factory=dict)
    new_dirs: dict[str, list[str]] = field(default_factory=dict)  # folders missing before

    def __call__(self, event: Event) -> None:
        if isinstance(event, ToolStarted) and self.tools.changes(event.action.tool_name) == "files":
            path = event.action.parameters.get("path")
            if not isinstance(path, str):
                return
            try:
                rel = self.tools.relative(path)
            except ToolError:  # the tool will refuse it too
                return
            if rel not in self.before:
                self.before[rel] = self.now(rel)
                parents = list(Path(rel).parents)[:-1]  # "a/b/c.py" -> a/b, a
                root = self.tools.repo_path
                self.new_dirs[rel] = [str(p) for p in reversed(parents) if not (root / p).exists()]

    def now(self, rel: str, *, keep: bool = True) -> FileState:
        """The file as it is now (with `keep` false, only its digest)."""
        return file_state(self.tools.repo_path, rel, self.tools.links, keep=keep)

    def diffs(self) -> dict[str, str]:
        """Unified diff per changed file (files whose content did not change are left out)."""
        out: dict[str, str] = {}
        for path, state in self.before.items():
            diff = unified_diff(path, state.text(), self.now(path).text(), git=True)
            if diff:
                out[path] = diff
        return out

    def diff_stat(self) -> list[dict[str, Any]]:
        stats = []
        for path, diff in self.diffs().items():
            added, removed = line_counts(diff)
            stats.append({"path": path, "added": added, "removed": removed})
        return stats
