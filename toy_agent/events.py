"""What a run emits, and the subscribers every run can use: the log, the trajectory file
and the change tracker. The terminal view lives in `view.py`.

Subscribers are plain callables `(event) -> None`, called synchronously from the loop, so a
subscriber sees the world as it is at that moment (the change tracker relies on that).
"""

from __future__ import annotations

import contextlib
import difflib
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

from toy_agent.messages import LlmResponse, Message
from toy_agent.parsing import Action, Observation
from toy_agent.tools import CodeRepositoryTools, ToolError

logger = logging.getLogger("toy_agent.agent")

TRAJECTORY_FORMAT = "toy_agent.trajectory/1"
FILE_CHANGING_TOOLS = frozenset({"write_file", "edit_file"})


def _image_references(observation: Observation) -> dict[str, Any]:
    """The images an observation sent, as references (mime type, bytes, sha256): a record
    never holds their base64."""
    if not observation.images:
        return {}
    return {"images": [image.reference() for image in observation.images]}


@dataclass(frozen=True)
class RunStarted:
    task: str
    system_prompt: str
    settings: dict[str, Any]


@dataclass(frozen=True)
class StepStarted:
    iteration: int
    max_iterations: int


@dataclass(frozen=True)
class LlmRequested:
    iteration: int
    messages: Sequence[Message]  # exactly what is sent, after the context budget


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class LlmResponded:
    iteration: int
    response: LlmResponse
    seconds: float


@dataclass(frozen=True)
class ToolStarted:
    iteration: int
    action: Action


@dataclass(frozen=True)
class ToolFinished:
    iteration: int
    observation: Observation
    seconds: float


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
        return {
            "iteration": self.iteration,
            "response": self.response.to_dict(),
            "thought": self.thought,
            "actions": [asdict(a) for a in self.actions],
            "observations": [
                {"tool_name": o.action.tool_name, "content": o.content, "is_error": o.is_error}
                | _image_references(o)
                for o in self.observations
            ],
            "parse_error": self.parse_error,
            "llm_seconds": round(self.llm_seconds, 3),
            "tool_seconds": round(self.tool_seconds, 3),
        }


@dataclass(frozen=True)
class StepFinished:
    step: Step


@dataclass(frozen=True)
class RunFinished:
    result: dict[str, Any]


Event = (
    RunStarted
    | StepStarted
    | LlmRequested
    | TextDelta
    | LlmResponded
    | ToolStarted
    | ToolFinished
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
        case StepFinished(step=step) if step.parse_error:
            logger.warning("Could not parse the LLM response: %s", step.parse_error)
        case RunFinished(result=result):
            log = logger.info if result["success"] else logger.warning
            error = f" ({result['error']})" if result.get("error") else ""
            log(
                "Run finished: %s after %d iterations, conversation length %d%s",
                result["outcome"],
                result["iterations"],
                result["conversation_length"],
                error,
            )


@dataclass
class JsonLinesWriter:
    """`--output stream-json`: one JSON object per line as the run goes, flushed per line so
    `| jq` follows it live. Every line has a "type": run_started, step_started, llm_response,
    tool_started, tool_finished; the caller writes the last, run_finished, with the result."""

    stream: Any
    redact: Callable[[Any], Any] = lambda obj: obj

    def __call__(self, event: Event) -> None:
        match event:
            case RunStarted(task=task, settings=settings):
                self.write({"type": "run_started", "task": task, **settings})
            case StepStarted(iteration=i, max_iterations=n):
                self.write({"type": "step_started", "iteration": i, "max_iterations": n})
            case LlmResponded(iteration=i, response=response, seconds=seconds):
                line = {"type": "llm_response", "iteration": i, **response.to_dict()}
                self.write({**line, "seconds": round(seconds, 3)})
            case ToolStarted(iteration=i, action=action):
                self.write({"type": "tool_started", "iteration": i, "tool": action.tool_name,
                            "parameters": action.parameters})  # fmt: skip
            case ToolFinished(iteration=i, observation=obs, seconds=seconds):
                self.write({"type": "tool_finished", "iteration": i,
                            "tool": obs.action.tool_name, "content": obs.content,
                            "is_error": obs.is_error, "seconds": round(seconds, 3)}
                           | _image_references(obs))  # fmt: skip

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
            case StepFinished(step=step):
                self._data["steps"].append(step.to_dict())
                self.write()
            case RunFinished(result=result):
                self._data["result"] = result
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
    tmp = path.with_name(f".{path.name[:100]}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@dataclass
class ChangeTracker:
    """Remembers each file as it was before the run first changed it, to report a diff.

    It sees `write_file`/`edit_file` calls, and names files by `tools.relative`, so `./a.py`
    and `a.py` are one file; changes made by `run_command` are not tracked.
    """

    tools: CodeRepositoryTools
    originals: dict[str, str | None] = field(default_factory=dict)

    def __call__(self, event: Event) -> None:
        if isinstance(event, ToolStarted) and event.action.tool_name in FILE_CHANGING_TOOLS:
            path = event.action.parameters.get("path")
            if not isinstance(path, str):
                return
            try:
                rel = self.tools.relative(path)
            except ToolError:  # the tool will refuse it too
                return
            if rel not in self.originals:
                self.originals[rel] = self.tools.snapshot(rel)

    def diffs(self) -> dict[str, str]:
        """Unified diff per changed file (files whose content did not change are left out)."""
        out: dict[str, str] = {}
        for path, before in self.originals.items():
            after = self.tools.snapshot(path)
            if after == before:
                continue
            diff = difflib.unified_diff(
                _diff_lines(before),
                _diff_lines(after),
                fromfile=f"a/{path}" if before is not None else "/dev/null",
                tofile=f"b/{path}" if after is not None else "/dev/null",
            )
            out[path] = "".join(diff)
        return out

    def diff_stat(self) -> list[dict[str, Any]]:
        stats = []
        for path, diff in self.diffs().items():
            lines = diff.splitlines()[2:]
            added = sum(1 for line in lines if line.startswith("+"))
            removed = sum(1 for line in lines if line.startswith("-"))
            stats.append({"path": path, "added": added, "removed": removed})
        return stats


def _diff_lines(text: str | None) -> list[str]:
    """Lines for difflib, marking a last line without a newline the way git does."""
    lines = (text or "").splitlines(keepends=True)
    if lines and not lines[-1].endswith(("\n", "\r")):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines
