"""What a person sees in the terminal: the live progress view, the --confirm prompt and the
end-of-run summary. The live view is an event subscriber; it draws nothing on a non-TTY.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TextIO

from toy_agent.events import (
    Event,
    LlmResponded,
    RunFinished,
    StepStarted,
    TextDelta,
    ToolFinished,
    ToolStarted,
    json_text,
)
from toy_agent.parsing import Action
from toy_agent.tools import CodeRepositoryTools, ToolError

SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TAG = re.compile(r"</?[A-Za-z_]+>")
KEY_ARGUMENTS = ("path", "pattern", "command", "query", "url", "name")
# C0 controls but tab and newline, DEL, C1 controls, bidi overrides, and lone surrogates
# (undecodable bytes of a file name): what could move the cursor, hide text or crash print.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def visible(text: str) -> str:
    """Text from the model, a tool or a file, safe to print: control characters become escapes
    (`\\x1b`), so an ESC sequence can neither hide a command nor write to the clipboard."""
    return _CONTROLS.sub(_escape, text)


class VisibleFormatter(logging.Formatter):
    """Log records for a terminal: file names, commands and errors in them come from the
    repository or the model, so their control characters are shown as escapes too."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record))


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the original byte
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


class Style:
    def __init__(self, enabled: bool):
        self.enabled = enabled

    def __call__(self, text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if self.enabled else text


class TerminalView:
    """One line per step, and a spinner with elapsed time while the LLM thinks."""

    def __init__(
        self, stream: TextIO = sys.stdout, *, color: bool | None = None, width: int | None = None
    ):
        self.stream = stream
        self.style = Style(use_color(stream) if color is None else color)
        self.width = width or _terminal_width()
        self._spinner: threading.Thread | None = None
        self._thinking = threading.Event()
        self._lock = threading.Lock()
        self._streamed = False

    def __call__(self, event: Event) -> None:
        match event:
            case StepStarted(iteration=i, max_iterations=n):
                self._start_spinner(f"step {i}/{n} thinking")
            case TextDelta(text=text):
                self._stop_spinner()
                self._streamed = True
                self._write(self.style(visible(text), "2"))
            case LlmResponded(response=response, seconds=seconds):
                self._stop_spinner()
                if self._streamed:
                    self._write("\n")
                    self._streamed = False
                thought = _first_line(TAG.sub(" ", visible(response.text)))
                thought = thought.removeprefix("Thought:")
                self._line(self.style(f"  thought ({seconds:.1f}s): ", "2") + thought)
            case ToolStarted(action=action):
                self._start_spinner(f"running {action.tool_name}")
            case ToolFinished(observation=obs, seconds=seconds):
                self._stop_spinner()
                mark = self.style("✗", "31") if obs.is_error else self.style("✓", "32")
                detail = _first_line(visible(obs.content)) if obs.is_error else ""
                self._line(
                    f"  {mark} {describe_action(obs.action)} "
                    f"{self.style(f'{seconds:.2f}s', '2')} {detail}"
                )
            case RunFinished():
                self._stop_spinner()

    def _line(self, text: str) -> None:
        self._write(_shorten(text, self.width + 20) + "\n")  # allow for colour codes

    def _write(self, text: str) -> None:
        with self._lock:
            self.stream.write(text)
            self.stream.flush()

    def _start_spinner(self, label: str) -> None:
        self._stop_spinner()
        self._thinking.set()
        started = time.monotonic()

        def spin() -> None:
            frames = itertools.cycle(SPINNER_FRAMES)
            while self._thinking.is_set():
                elapsed = time.monotonic() - started
                self._write(f"\r{next(frames)} {label} {elapsed:4.1f}s\033[K")
                time.sleep(0.1)
            self._write("\r\033[K")

        self._spinner = threading.Thread(target=spin, name="toy-agent-spinner", daemon=True)
        self._spinner.start()

    def _stop_spinner(self) -> None:
        if self._spinner is not None:
            self._thinking.clear()
            self._spinner.join()
            self._spinner = None


def describe_action(action: Action) -> str:
    params = action.parameters
    key = next((k for k in KEY_ARGUMENTS if k in params), None)
    if key is None and params:
        key = next(iter(params))
    arg = f" {_first_line(str(params[key]))}" if key else ""
    return visible(f"{action.tool_name}{arg}")


def format_summary(
    result: dict[str, Any], diffs: dict[str, str], *, show_diff: bool, color: bool = False
) -> str:
    style = Style(color)
    status = (
        style("✓ completed", "32")
        if result["success"]
        else style(f"✗ not completed ({result['outcome']})", "31")
    )
    usage = result.get("usage") or {}
    lines = [
        "",
        f"{status} — iterations used: {result['iterations']}, "
        f"conversation length: {result['conversation_length']} messages, "
        f"time: {result.get('elapsed_seconds', 0):.1f}s",
        f"tokens: {usage.get('input_tokens', 0):,} in, {usage.get('output_tokens', 0):,} out, "
        f"{usage.get('cached_tokens', 0):,} cached",
    ]
    if result.get("sandbox"):
        lines.append(f"sandbox: {result['sandbox']}")
    if result.get("tool_errors") or result.get("declined"):
        declined = f" ({result['declined']} declined by you)" if result.get("declined") else ""
        lines.append(style(f"tool errors: {result.get('tool_errors', 0)}{declined}", "33"))
    if result.get("files_changed"):
        lines.append("files changed:")
        lines += [
            f"  {visible(c['path'])}  {style('+' + str(c['added']), '32')} "
            f"{style('-' + str(c['removed']), '31')}"
            for c in result["files_changed"]
        ]
    if show_diff and diffs:
        lines += ["", *(visible(d.rstrip("\n")) for d in diffs.values())]
    if result.get("error"):
        lines.append(f"error: {visible(result['error'])}")
    lines += ["result:", visible(result.get("result") or "(none)")]
    return "\n".join(lines)


def preview_action(action: Action, tools: CodeRepositoryTools) -> str:
    """What --confirm shows before a change: a diff for file edits, the command to run."""
    params = action.parameters
    if action.tool_name == "run_command":
        return f"$ {params.get('command', '')}"
    try:
        path = tools.relative(str(params.get("path", "")))
    except ToolError as exc:
        return f"{action.tool_name}: {exc} (the tool will refuse it)"
    before = tools.snapshot(path) or ""
    if action.tool_name == "write_file":
        after = str(params.get("content", ""))
    else:
        after = before.replace(str(params.get("old_str", "")), str(params.get("new_str", "")), 1)
    diff = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return "".join(diff) or f"{action.tool_name} {path}: no change"


def make_confirm(
    tools: CodeRepositoryTools, ask: Callable[[str], str], out: TextIO
) -> Callable[[Action], bool]:
    """A --confirm hook: y (yes), n (no), a (yes to everything from now on)."""
    approve_all = False

    def confirm(action: Action) -> bool:
        nonlocal approve_all
        if approve_all:
            return True
        out.write(f"\n{visible(preview_action(action, tools))}\n")
        out.flush()
        try:
            answer = ask(f"Allow {describe_action(action)}? [y]es/[n]o/[a]ll: ").strip().lower()
        except EOFError:
            return False
        approve_all = answer in ("a", "all")
        return approve_all or answer in ("y", "yes")

    return confirm


def to_json(result: dict[str, Any]) -> str:
    return json_text(result, indent=None)


def _first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else ""


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _terminal_width() -> int:
    try:
        columns = os.get_terminal_size().columns
    except OSError:
        columns = 0
    return columns or 100  # a fresh pseudo-terminal reports 0 columns
