"""What a run emits, and the subscribers every run can use: the log, the trajectory file
and the change tracker. The terminal view lives in `view.py`.

Subscribers are plain callables `(event) -> None`, called synchronously from the loop, so a
subscriber sees the world as it is at that moment (the change tracker relies on that).
"""

from __future__ import annotations

import difflib
import json
import logging
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
            logger.debug("LLM response (%.1fs, %s):\n%s", seconds, response.stop_reason,
                         response.text)
        case ToolStarted(action=action):
            logger.info("Tool call: %s %s", action.tool_name, json.dumps(action.parameters)[:500])
        case ToolFinished(observation=obs, seconds=seconds):
            level = logging.WARNING if obs.is_error else logging.INFO
            logger.log(level, "Tool %s %s in %.2fs (%d chars)", obs.action.tool_name,
                       "failed" if obs.is_error else "succeeded", seconds, len(obs.content))
            logger.debug("Observation:\n%s", obs.content)
        case StepFinished(step=step) if step.parse_error:
            logger.warning("Could not parse the LLM response: %s", step.parse_error)
        case RunFinished(result=result):
            log = logger.info if result["success"] else logger.warning
            log("Run finished: %s after %d iterations, conversation length %d",
                result["outcome"], result["iterations"], result["conversation_length"])


@dataclass
class TrajectoryRecorder:
    """Collects the run and writes it as JSON when it finishes (also after Ctrl-C).

    `redact` scrubs the whole document before it touches the disk.
    """

    path: Path
    redact: Callable[[Any], Any] = lambda obj: obj
    _data: dict[str, Any] = field(default_factory=dict)

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
            case RunFinished(result=result):
                self._data["result"] = result
                self.write()

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.redact(self._data), indent=2, ensure_ascii=False)
        self.path.write_text(text + "\n", encoding="utf-8")


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
