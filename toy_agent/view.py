"""What a person sees in the terminal: the first line, the live progress view, the --confirm
prompt and the end-of-run summary.

On a terminal, `TerminalView` keeps one live line at the bottom (a spinner, what runs, for how
long) and prints everything else above it, fitted to the width with `…` wherever a line is cut:
the steps, the streamed thought, log records (through `log_handler()`), the summary. It draws
with rich, imported only when a view is made: `--help`, pipes and --quiet never load it.
Text from the model, the tools or the repository goes through `visible()` before it is shown.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import sys
import time
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from toy_agent.diffs import line_counts, unified_diff
from toy_agent.events import (
    ChangeTracker,
    CheckFinished,
    Event,
    HookAnswered,
    LlmResponded,
    LlmRetrying,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    TextDelta,
    ToolFinished,
    ToolProgress,
    ToolRefused,
    ToolStarted,
    json_text,
)
from toy_agent.files import FileState
from toy_agent.lint import EditCheck
from toy_agent.messages import CommandResult, FailedAttempt, visible
from toy_agent.parsing import Action, ActionFormat, NativeFormat, get_format
from toy_agent.permissions import Answer, OfferedTools, Permissions, parse_answer
from toy_agent.tools import CodeRepositoryTools, ToolError

try:
    import termios
except ImportError:  # Windows: no terminal modes to set
    termios = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.control import Control
    from rich.text import Text

SPINNER_FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
THOUGHT_LINES = 6  # a thought longer than this, wrapped, shows its first lines and a count
COMMAND_TAIL_LINES = 5  # of a failed command's output, under its line (20 with --stream)
KEY_ARGUMENTS = ("path", "pattern", "command", "query", "url", "name")
LOG_LEVEL_STYLES = {logging.WARNING: "yellow", logging.ERROR: "red", logging.CRITICAL: "bold red"}


class VisibleFormatter(logging.Formatter):
    """Log records for a terminal: file names, commands and errors in them come from the
    repository or the model, so their control characters are shown as escapes too. `lead`,
    our own, is written as it is (a batch's "clear the progress line")."""

    def __init__(self, fmt: str, *, lead: str = ""):
        super().__init__(fmt)
        self.lead = lead

    def format(self, record: logging.LogRecord) -> str:
        return self.lead + visible(super().format(record))


def erase_line() -> Control:
    """Back to the start of the terminal's line, and the line erased: what clears a progress
    line before a line is printed in its place."""
    from rich.control import Control, ControlType

    return Control(ControlType.CARRIAGE_RETURN, (ControlType.ERASE_IN_LINE, 2))


def use_color(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ and os.environ.get("TERM") != "dumb"


def _action_format(name: Any) -> ActionFormat:
    """The run's action format, which says what of a reply is the thought (one it does not
    know, from a newer recording: all text is)."""
    try:
        return get_format(str(name or "xml"))
    except ValueError:
        return NativeFormat()


def _is_blank(line: str) -> bool:
    """Nothing to show: an empty line, or a ``` fence around the protocol."""
    return not line.strip() or line.strip().startswith("```")


# --- the live view --------------------------------------------------------------------------


class TerminalView:
    """An event subscriber for a terminal: a line per thought and per tool call, printed
    above a live line that says what runs and for how long.

    It also asks --confirm's question (`ask`) and prints log records (`log_handler()`) so
    that neither lands on the live line.
    """

    def __init__(
        self,
        stream: TextIO = sys.stdout,
        *,
        color: bool | None = None,
        width: int | None = None,
        tail_lines: int = COMMAND_TAIL_LINES,
    ):
        from rich.console import Console
        from rich.live import Live

        color = use_color(stream) if color is None else color
        self.console = Console(
            file=stream, width=width, color_system="standard" if color else None,
            markup=False, emoji=False, highlight=False,
        )  # fmt: skip
        self._status: tuple[str, float] | None = None  # what runs, since when
        self._tool: Action | None = None  # the tool call running (its progress joins it)
        self._format: ActionFormat = get_format("xml")
        self._thought = self._format.thought_filter()
        self._step = ""  # "step 2/10", for the live line
        self._streamed = False
        self._partial = ""  # the streamed thought's unfinished line, shown in the live region
        self._stream_lines = 0
        self._stream_gap = False
        self._refused: tuple[Action, str, str] | None = None
        self._changes: ChangeTracker | None = None  # the run's: what files were before an edit
        self._before: tuple[Action, str, FileState] | None = None  # an edit, its file before
        self.tail_lines = tail_lines  # of a failed command's output (more with --stream)
        self._live = Live(
            console=self.console, get_renderable=self._live_line, refresh_per_second=10,
            transient=True,
        )  # fmt: skip
        self._echo = _TypeAhead()

    def __call__(self, event: Event) -> None:
        match event:
            case RunStarted(settings=settings, changes=changes):
                self._format = _action_format(settings.get("tool_format"))
                self._changes = changes
            case StepStarted(iteration=i, max_iterations=n):
                self._new_reply()
                self._step = f"step {i}/{n}"
                self._set_status(f"{self._step} thinking")
            case LlmRetrying(attempt=attempt):
                self._show_retry(attempt)
            case TextDelta(text=text):
                self._streamed = True
                self._stream(self._thought.feed(text))
            case LlmResponded(response=response, seconds=seconds):
                if response.thinking.strip():
                    self._show_thinking(response.thinking)
                self._show_thought(response.text, seconds)
            case ToolStarted(action=action):
                self._tool = action
                self._before = self._file_before(action)
                self._set_status(f"running {describe_action(action)}")
            case ToolProgress() if self._status is not None:
                since = self._status[1]  # the time runs on from the tool's start
                label = f"running {describe_action(self._tool)}" if self._tool else ""
                self._status = (f"{label} · {visible(event.text)}", since)
                self._live.refresh()
            case ToolRefused(action=action, by=by, reason=reason):
                self._refused = (action, by, reason)
            case HookAnswered(event=hook_event, blocked=False, text=text):
                self._show_note(f"your {hook_event} hook noted: {_first_line(visible(text))}")
            case ToolFinished(observation=obs, seconds=seconds):
                self._status = None
                if self._refused is not None and self._refused[0] is obs.action:
                    self._show_refused(*self._refused)
                elif obs.command is not None:
                    self._show_command(obs.action, obs.command, seconds)
                else:
                    stat = "" if obs.is_error else self._edit_stat(obs.action)
                    self._show_tool(obs.action, obs.content, obs.is_error, seconds, stat)
                if obs.edit_check is not None:
                    self._show_note(f"{obs.edit_check.path}: " + _introduced(obs.edit_check))
                self._refused, self._before = None, None
            case CheckFinished(result=result, attempt=attempt, limit=limit):
                self._show_check(result, attempt, limit)
            case StepFinished(step=step) if step.parse_error:
                self._show_note("reply not understood, the model was told: "
                                f"{_first_line(visible(step.parse_error))}")  # fmt: skip
            case RunFinished():
                self.close()

    def start(self, banner: str, notes: Sequence[str] = ()) -> None:
        """The first line, at once (and a line for each note: the settings a resumed session
        restored, a provider chosen for a model no provider claims), then the live line until
        the run's first step."""
        self._print_line(self._fitted(banner))
        for note in notes:
            self._show_note(visible(note))
        self._set_status("starting")

    def ask(self, preview: str, question: str) -> str:
        """--confirm's question, with the preview above it. The live line is paused until the
        answer, so the question and the keys typed stay in view; the wait is not tool time."""
        from rich.text import Text

        status, self._status = self._status, None
        self._live.stop()
        self._echo.restore()  # the answer is typed and seen
        try:
            self.console.print()
            self.console.print(_diff_text(preview))
            return self.console.input(Text(question, style="bold"))
        finally:
            if status is not None:
                self._set_status(status[0])

    def show(self, text: str) -> None:
        """Print a block (the summary) after the run, wrapped to the width; ANSI colours kept."""
        from rich.text import Text

        self.close()
        self.console.print(Text.from_ansi(text), overflow="fold")

    def log_handler(self) -> logging.Handler:
        """A logging handler that prints each record above the live line."""
        return _LogAboveLiveLine(self.console)

    def close(self) -> None:
        """Erase the live line and stop its thread; the view may start again later."""
        self._status, self._partial = None, ""
        self._live.stop()
        self._echo.restore()

    # -- lines above the live line --------------------------------------------------------

    def _new_reply(self) -> None:
        self._thought = self._format.thought_filter()
        self._streamed, self._stream_lines, self._stream_gap = False, 0, False

    def _show_retry(self, attempt: FailedAttempt) -> None:
        """The failed attempt's streamed text stays on screen, marked void, and the retry's
        text starts on a line of its own: the two are never run together."""
        from rich.text import Text

        if self._streamed:
            if self._partial:
                self._stream_line(self._partial)
                self._partial = ""
            head = Text("  ↻ retrying, the text above is void: ", style="yellow")
            self._print_line(self._fitted(_first_line(visible(attempt.error)), head=head))
        self._new_reply()
        self._set_status(f"{self._step} retrying")

    def _show_thought(self, text: str, seconds: float) -> None:
        from rich.text import Text

        if self._streamed:  # the thought is on screen already
            self._stream(self._thought.flush())
            if self._partial:
                self._stream_line(self._partial)
                self._partial = ""
            return
        thought = self._format.thought(visible(text.replace("\r\n", "\n")))
        lines = [" ".join(line.split()) for line in thought.splitlines() if not _is_blank(line)]
        head = Text(f"  thought ({seconds:.1f}s)" + (":" if lines else ""), style="dim")
        body = Text("\n".join(lines), style="dim")
        indent = 4
        wrapped = list(body.wrap(self.console, max(self.console.width - indent, 10)))
        if len(wrapped) > THOUGHT_LINES:  # folded: the start, and how much more there is
            more = len(wrapped) - (THOUGHT_LINES - 1)
            rest = Text(f"… {more} more lines (--stream shows it all)", style="dim italic")
            wrapped = [*wrapped[: THOUGHT_LINES - 1], rest]
        if len(wrapped) == 1 and head.cell_len + 1 + wrapped[0].cell_len <= self.console.width:
            self._print_line(Text.assemble(head, " ", wrapped[0]))
            return
        self._print_line(head)
        for line in wrapped:
            self._print_line(Text.assemble(" " * indent, line))

    def _show_thinking(self, thinking: str) -> None:
        """The model's thinking (as the provider shows it: a summary), dim, folded to its first
        THINKING_LINES lines when long: the trajectory and the report keep all of it."""
        lines = [line.rstrip() for line in visible(thinking.replace("\r\n", "\n")).split("\n")]
        lines = [line for line in lines if line.strip()]
        shown = lines[:THINKING_LINES]
        if len(lines) > THINKING_LINES:
            shown.append(f"… {len(lines) - THINKING_LINES} more lines (the trajectory keeps them)")
        for number, line in enumerate(shown):
            self.console.print(_streamed(("thinking: " if number == 0 else "") + line))

    def _show_tool(
        self, action: Action, content: str, is_error: bool, seconds: float, stat: str = ""
    ) -> None:
        from rich.text import Text

        mark = Text("  ✗ ", style="red") if is_error else Text("  ✓ ", style="green")
        took = Text(f"{stat} {seconds:.2f}s", style="dim")
        if stat:
            added, removed = stat.split()
            took = Text.assemble(" ", (added, "green"), " ", (removed, "red"),
                                 (f" {seconds:.2f}s", "dim"))  # fmt: skip
        error = f" {_first_line(visible(content))}" if is_error else ""
        self._print_line(self._fitted(describe_action(action), head=mark, tail=took, after=error))

    def _file_before(self, action: Action) -> tuple[Action, str, FileState] | None:
        """An edit's file as it is before the edit, for its `+N -M` (None: not an edit)."""
        changes = self._changes
        path = action.parameters.get("path")
        if changes is None or not isinstance(path, str):
            return None
        if changes.tools.changes(action.tool_name) != "files":
            return None
        try:
            rel = changes.tools.relative(path)
        except ToolError:
            return None
        return action, rel, changes.now(rel)

    def _edit_stat(self, action: Action) -> str:
        """The lines the edit added and removed, as "+N -M" ("" for no edit, or a file too big
        to compare)."""
        if self._before is None or self._changes is None or self._before[0] is not action:
            return ""
        _, rel, was = self._before
        now = self._changes.now(rel)
        if was.too_big or now.too_big or (was.text() is None and now.text() is None):
            return ""
        added, removed = line_counts(unified_diff(rel, was.text(), now.text()))
        return f"+{added} -{removed}"

    def _show_command(self, action: Action, command: CommandResult, seconds: float) -> None:
        """`✗ run_command pytest -q · exit 1`, then the last lines of its output."""
        from rich.text import Text

        ok = command.ok
        mark = Text("  ✓ ", style="green") if ok else Text("  ✗ ", style="red")
        status = Text(f" · {command.status}", style="green" if ok else "red")
        status.append(f" {seconds:.2f}s", style="dim")
        self._print_line(self._fitted(describe_action(action), head=mark, tail=status))
        if not ok:
            self._show_tail(command.output_tail)
        if command.sandbox_note:
            self._show_note(f"sandbox: {command.sandbox_note}")

    def _show_check(self, result: CommandResult, attempt: int, limit: int) -> None:
        """`✗ check pytest -q · exit 1 (attempt 1 of 3)`, then the end of its output."""
        from rich.text import Text

        ok = result.ok
        mark = Text("  ✓ ", style="green") if ok else Text("  ✗ ", style="red")
        status = Text(f" · {'passed' if ok else result.status}", style="green" if ok else "red")
        status.append(f" (attempt {attempt} of {limit})", style="dim")
        self._print_line(self._fitted(f"check {visible(result.command)}", head=mark,
                                      tail=status))  # fmt: skip
        if not ok:
            self._show_tail(result.output_tail)

    def _show_tail(self, tail: str) -> None:
        from rich.text import Text

        for line in visible(tail).splitlines()[-self.tail_lines :]:
            self._print_line(self._fitted(line, head=Text("    │ ", style="dim")))

    def _show_refused(self, action: Action, by: str, reason: str) -> None:
        from rich.text import Text

        mark = Text("  ⊘ ", style="yellow")
        who = {
            "user": "declined by you",
            "rule": "refused",
            "mode": "not run",
            "hook": "refused by your hook",
        }[by]
        after = f" {who}" + (f": {visible(reason)}" if reason else "")
        self._print_line(self._fitted(describe_action(action), head=mark, after=after))

    def _show_note(self, text: str) -> None:
        """A calm line about the run itself (a reply the model must send again)."""
        from rich.text import Text

        self._print_line(self._fitted(text, head=Text("  · ", style="dim")))

    def _print_line(self, line: Text) -> None:
        self.console.print(line, no_wrap=True, overflow="ellipsis")  # print's own say, not line's

    def _stream(self, text: str) -> None:
        """Streamed thought text: whole lines go above the live line, the rest waits in it."""
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._stream_line(line.removesuffix("\r"))

    def _stream_line(self, line: str) -> None:
        if _is_blank(line):  # kept only between lines of text, never leading or trailing
            self._stream_gap = self._stream_lines > 0
            return
        if self._stream_gap:
            self.console.print()
        self.console.print(_streamed(visible(line.rstrip())))
        self._stream_lines += 1
        self._stream_gap = False

    # -- the live line --------------------------------------------------------------------

    def _set_status(self, label: str) -> None:
        self._status = (label, time.monotonic())
        if not self._live.is_started:
            self._echo.off()
            self._live.start()
        self._live.refresh()

    def _live_line(self) -> RenderableType:
        """Called by rich on every refresh (10 a second), from its own thread."""
        from rich.console import Group
        from rich.text import Text

        status, partial = self._status, self._partial
        lines: list[RenderableType] = []
        if partial and not _is_blank(partial):
            lines.append(_streamed(visible(partial)))
        if status is not None:
            label, since = status
            elapsed = time.monotonic() - since
            frame = SPINNER_FRAMES[int(elapsed * 10) % len(SPINNER_FRAMES)]
            lines.append(self._fitted(label, head=Text(f"{frame} "), tail=Text(f" {elapsed:.1f}s")))
        return Group(*lines)

    def _fitted(
        self, text: str, *, head: Text | None = None, tail: Text | None = None, after: str = ""
    ) -> Text:
        """head + text + tail + after, as one line of the terminal. `text` gives way (cut
        with `…`) to the head, the tail and the start of `after`; `after` is cut at the width."""
        from rich.cells import cell_len
        from rich.text import Text

        line = Text()
        if head:
            line.append_text(head)
        kept = line.cell_len + (tail.cell_len if tail else 0) + min(cell_len(after), 20)
        line.append(_cut(text, self.console.width - kept))
        if tail:
            line.append_text(tail)
        line.append(after)
        line.no_wrap, line.overflow = True, "ellipsis"  # for the live region
        return line


class _TypeAhead:
    """While the live line runs, what is typed on the terminal is not echoed (it would land
    on the spinner's line), yet kept: the terminal holds it for whoever reads next (the
    session's next prompt). `restore` puts the terminal's echo back as it was."""

    def __init__(self) -> None:
        self._saved: list[Any] | None = None

    def off(self) -> None:
        if self._saved is not None or termios is None or not _stdin_is_a_terminal():
            return
        try:
            fd = sys.stdin.fileno()
            saved = termios.tcgetattr(fd)
            quiet = list(saved)
            quiet[3] &= ~(termios.ECHO | termios.ECHONL)
            termios.tcsetattr(fd, termios.TCSANOW, quiet)  # not TCSAFLUSH: keep what is typed
        except (termios.error, OSError, ValueError):
            return
        self._saved = saved

    def restore(self) -> None:
        saved, self._saved = self._saved, None
        if saved is None or termios is None:
            return
        with contextlib.suppress(termios.error, OSError, ValueError):
            termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, saved)


def _stdin_is_a_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (OSError, ValueError):  # closed
        return False


class _LogAboveLiveLine(logging.Handler):
    """Log records through the view's console: rich prints them above the live line and draws
    the live line again below, so a record never lands on the spinner's line."""

    def __init__(self, console: Console):
        super().__init__()
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        from rich.text import Text

        try:
            style = LOG_LEVEL_STYLES.get(record.levelno, "")
            self.console.print(Text(self.format(record), style=style), overflow="fold")
        except Exception:
            self.handleError(record)


def _cut(text: str, cells: int) -> str:
    """`text` in at most `cells` terminal cells, `…` marking the cut."""
    from rich.cells import cell_len, set_cell_size

    if cell_len(text) <= cells:
        return text
    return set_cell_size(text, cells - 1) + "…" if cells > 0 else ""


THINKING_LINES = 6  # the live view's fold of a long thinking


def _streamed(line: str) -> RenderableType:
    """A line of the streamed thought: dim, indented, wrapped with its indent."""
    from rich.padding import Padding
    from rich.text import Text

    return Padding(Text(line, style="dim"), (0, 0, 0, 2), expand=False)


def _diff_text(preview: str) -> Text:
    """--confirm's preview with the diff's lines coloured, wrapped to the width (a command's
    lines as they are: one may start with `-` or `+`)."""
    from rich.text import Text

    text = Text(overflow="fold")
    if preview.startswith("$ "):
        return Text(preview, overflow="fold")
    for line in preview.splitlines(keepends=True):
        if line.startswith(("+++", "---", "$ ")):
            style = "bold"
        else:
            style = {"+": "green", "-": "red", "@": "cyan"}.get(line[:1], "")
        text.append(line, style=style)
    return text


# --- what runs, before it runs --------------------------------------------------------------


def run_banner(
    provider: str,
    model: str | None,
    repo: Path,
    tools: CodeRepositoryTools,
    *,
    replay: str | None = None,
    mcp: bool = False,
    instructions: str = "",
    permissions: Permissions | None = None,
) -> str:
    """The first line on a terminal, printed before the provider's SDK loads (seconds, for
    some): `toy-agent · claude claude-sonnet-5-5 · ~/src/app · AGENTS.md · 7 tools · sandbox
    bwrap`. All of it is known from the flags; MCP servers are connected later, so only named.
    `instructions` names the project's instructions file, when the prompt has one; a
    permission mode other than auto is named too."""
    from toy_agent.providers import PROVIDERS
    from toy_agent.routes import RouteTable

    permissions = permissions or Permissions()
    if provider == "replay":
        model = Path(replay).name if replay else ""
    elif not model and provider in PROVIDERS:
        model = PROVIDERS[provider].default_model
    count = len(RouteTable.build(OfferedTools.of(tools, permissions)).specs)
    commands = tools.allow_commands and not permissions.read_only
    where = _commands_part(tools) if commands else "no commands"
    unsandboxed = commands and tools.sandbox == "off"  # said first: a narrow terminal cuts
    parts = [
        "toy-agent",
        *([where] if unsandboxed else []),
        f"{provider} {model}".strip(),
        _short_path(repo),
        *([instructions] if instructions else []),
        f"{count} tools" + (" + MCP" if mcp else ""),
        *([] if unsandboxed else [where]),
        *([permissions.mode] if permissions.mode != "auto" else []),
    ]
    return visible(" · ".join(parts))


def _commands_part(tools: CodeRepositoryTools) -> str:
    if tools.sandbox != "off":
        return f"sandbox {tools.sandbox}"
    return "commands: NOT sandboxed" + (", each asks" if tools.sandbox_missing else "")


def sandbox_summary(tools: CodeRepositoryTools) -> str:
    """The summary's `sandbox:` value; with commands outside any sandbox, it says so and why:
    `off · commands: NOT sandboxed (--sandbox off)`."""
    if tools.sandbox != "off" or not tools.allow_commands:
        return tools.sandbox
    why = "no working bubblewrap, so each asks first" if tools.sandbox_missing else "--sandbox off"
    return f"off · commands: NOT sandboxed ({why})"


def _short_path(path: Path) -> str:
    """The path with ~ for the home folder; a long one keeps its last two parts."""
    try:
        home = Path.home()
        text = "~" if path == home else f"~/{path.relative_to(home)}"
    except (ValueError, RuntimeError):  # not under home, or no home at all
        text = str(path)
    return text if len(text) <= 40 else f"…/{path.parent.name}/{path.name}"


# --- tool calls, --confirm and the summary --------------------------------------------------


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
    pieces: list[tuple[str, str]] = []  # (text, rich style)

    def line(*parts: str | tuple[str, str]) -> None:
        pieces.extend((p, "") if isinstance(p, str) else p for p in (*parts, "\n"))

    not_run = result.get("refused_actions") or []
    status = (
        ("✓ completed", "green")
        if result["success"]
        else (f"✗ not completed ({result['outcome']})", "red")
    )
    refused = (  # refused is not done: said where the verdict is
        (f", but {_actions(len(not_run))} not run (refused or declined)", "yellow")
        if result["success"] and not_run
        else ""
    )
    usage = result.get("usage") or {}
    line()
    line(status, refused, f" — iterations used: {result['iterations']}, "
         f"conversation length: {result['conversation_length']} messages, "
         f"time: {result.get('elapsed_seconds', 0):.1f}s")  # fmt: skip
    cost = f", cost ${result['cost_usd']:.4f}" if result.get("cost_usd") is not None else ""
    line(f"tokens: {usage.get('input_tokens', 0):,} in, {usage.get('output_tokens', 0):,} out, "
         f"{usage.get('cached_tokens', 0):,} cached{cost}")  # fmt: skip
    if result.get("session"):
        line(f"session: {result['session']}")
    if result.get("sandbox"):
        line(f"sandbox: {result['sandbox']}")
    if result.get("tool_errors") or result.get("declined"):
        why = [f"{result['declined']} declined by you"] if result.get("declined") else []
        why += [f"{result['refused']} refused"] if result.get("refused") else []
        declined = f" ({', '.join(why)})" if why else ""
        line((f"tool errors: {result.get('tool_errors', 0)}{declined}", "yellow"))
    if not_run:
        line((f"not run ({len(not_run)}):", "yellow"))
        for r in not_run[:20]:
            line(f"  {visible(r['tool'])}: {_not_run_reason(r)}")
        if len(not_run) > 20:
            line(f"  … and {len(not_run) - 20} more")
    if result.get("files_changed"):
        line("files changed:")
        for c in result["files_changed"]:
            line(f"  {visible(c['path'])}  ", (f"+{c['added']}", "green"), " ",
                 (f"-{c['removed']}", "red"))  # fmt: skip
    if show_diff and diffs:
        line()
        for d in diffs.values():
            line(visible(d.rstrip("\n")))
    if result.get("error"):
        line(f"error: {visible(result['error'])}")
    line("result:")
    line(visible(result.get("result") or "(none)"))
    pieces.pop()  # the last line's end
    return styled(pieces, color)


def styled(pieces: Sequence[tuple[str, str]], color: bool) -> str:
    """Text in pieces with their rich styles ("green", "bold red", "" for none): with
    `color`, written by rich for a terminal (ANSI codes), else plain, without loading rich."""
    if not color:
        return "".join(text for text, _ in pieces)
    from rich.console import Console
    from rich.text import Text

    console = Console(
        file=io.StringIO(), color_system="standard", force_terminal=True, soft_wrap=True,
        markup=False, emoji=False, highlight=False,
    )  # fmt: skip
    console.print(Text.assemble(*pieces), end="")
    return typing.cast(io.StringIO, console.file).getvalue()


def _introduced(check: EditCheck) -> str:
    """`introduced 1 syntax error (line 3)`: what the model was told about its edit."""
    lines = ", ".join(f"line {f.line}" for f in check.errors[:3] if f.line)
    parts = [f"{len(check.errors)} syntax error{'s' * (len(check.errors) != 1)}"
             + (f" ({lines})" if lines else "")] if check.errors else []  # fmt: skip
    parts += [f"{len(check.lint)} new linter finding{'s' * (len(check.lint) != 1)}"
              ] if check.lint else []  # fmt: skip
    verb = "would introduce" if check.refused else "introduced"
    return f"{verb} {' and '.join(parts)}" + (", not applied (--lint strict)" if check.refused
                                               else "")  # fmt: skip


def _actions(n: int) -> str:
    return f"{n} action{'s' * (n != 1)}"


def _not_run_reason(refusal: dict[str, Any]) -> str:
    who = {"user": "declined by you", "rule": "refused by a rule", "mode": "not allowed"}
    reason = refusal.get("reason") or ""
    return who.get(refusal.get("by", ""), "not run") + (f" ({visible(reason)})" if reason else "")


def preview_action(action: Action, tools: CodeRepositoryTools) -> str:
    """What --confirm shows before a change: the tool's own dry run (a diff for file edits,
    the command to run), so the preview is exactly what the call would do."""
    return tools.preview(action.tool_name, action.parameters)


def command_preview(preview: str) -> str:
    """A command's preview (`$ LINE`, already `visible`) as the confirm prompt shows it: all
    of it, so nothing hides above the question: each run of blank lines as one note, a long run
    of blanks inside a line as its length, invisible format characters (a zero-width space, a
    word joiner) as escapes, and under it how many lines the command has."""
    text = _INVISIBLE.sub(lambda m: f"\\u{ord(m[0]):04x}", preview)
    lines = text.removesuffix("\n").split("\n")  # a last newline ends a line, starts none
    shown: list[str] = []
    blank = 0
    for line in [*lines, "end"]:
        if not line.strip():
            blank += 1
            continue
        if blank:
            shown += [""] * blank if blank < 3 else [f"[{blank} blank lines]"]
            blank = 0
        shown.append(_BLANKS.sub(lambda m: f" [{len(m[0])} blanks] ", line))
    shown.pop()
    count = len(lines)
    if count > 1:
        shown.append(f"[the command has {count} lines]")
    return "\n".join(shown)


_INVISIBLE = re.compile("[\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u2060-\u2064\ufeff]")
_BLANKS = re.compile(r"[ \t]{20,}")


def make_confirm(
    tools: CodeRepositoryTools, ask: Callable[[str, str], str]
) -> Callable[[Action], Answer]:
    """The confirm hook of --confirm and the permission modes that ask: y (yes), a (yes to
    everything from now on), n (no), and after n the reason the model is given:
    `n, use edit_file instead` (see permissions.parse_answer).

    `ask(preview, question)` shows what the action would do, asks, and returns the answer
    (EOFError: no answer, which declines): `TerminalView.ask` on a terminal."""
    approve_all = False

    def confirm(action: Action) -> Answer:
        nonlocal approve_all
        if approve_all:
            return Answer(True)
        preview = visible(preview_action(action, tools))
        if tools.changes(action.tool_name) == "commands":
            preview = command_preview(preview)
        question = f"Allow {describe_action(action)}? [y]es/[n]o[, why]/[a]ll: "
        try:
            answer = parse_answer(ask(preview, question))
        except EOFError:
            return Answer(False, unanswered=True)
        approve_all = answer.always
        return answer

    return confirm


def to_json(result: dict[str, Any]) -> str:
    return json_text(result, indent=None)


def _first_line(text: str) -> str:
    """The first line, with `…` when there is more."""
    lines = text.strip().splitlines()
    return lines[0] + (" …" if len(lines) > 1 else "") if lines else ""
