"""The interactive mode: `toy-agent` on a terminal without a task.

Each task typed runs in the same conversation as the ones before it (the session); input
starting with `/` is a command, and a line starting with `!` a shell command run as
run_command would run it (never a task). The prompt is prompt_toolkit's (imported only here,
only on a terminal): line editing, a paste is one task however many lines it has (bracketed
paste), Alt-Enter or a trailing backslash starts a new line, Up recalls earlier tasks (kept
in `$XDG_STATE_HOME/toy-agent/history`, mode 0600: it holds whatever was typed). Ctrl-C
cancels the task in flight and comes back to the prompt (what was typed meanwhile waits
there); at the prompt it clears the line. Ctrl-D or /exit ends the session. SIGTERM and
SIGHUP still end it (the caller maps the return value to 143 or 129).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from toy_agent.config import INSTRUCTIONS_FILE
from toy_agent.sessions import (
    SessionError,
    SessionRecorder,
    format_cost,
    format_sessions,
    format_usage,
    recent_sessions,
    rewind_points,
    rewind_to,
    session_diff,
    state_dir,
    undo_last_run,
)
from toy_agent.view import format_summary, sandbox_summary, use_color, visible

if TYPE_CHECKING:
    from toy_agent.agent import ReactAgent, RunResult
    from toy_agent.llm import LlmClient
    from toy_agent.view import TerminalView

PROMPT = "> "
EXIT_INTERRUPTED = 130
COMMANDS = {  # name (and argument) -> what it does; /help and the unknown-command line say so
    "/diff": "the changes this session made so far",
    "/undo": "revert the file changes of the last task (refused if a file changed since)",
    "/rewind [N]": "list the steps; files and conversation back to how step N left them",
    "/cost": "the tokens and money this session used so far",
    "/model NAME": "switch the model for the next tasks (without NAME: show it)",
    "/init": "the model explores the repository (read-only) and drafts an AGENTS.md for you",
    "/check CMD": "run CMD when the model calls task_complete; the task is done when it passes "
    "(without CMD: show it; /check off: none)",
    "/compact": "replace the older steps by a summary the model writes, to save tokens",
    "/plan TASK": "plan TASK read-only, then carry the plan out in the mode you pick",
    "/sessions": "the recent sessions (toy-agent --resume ID continues one)",
    "/clear": "start a new conversation",
    "/help": "this help",
    "/exit": "end the session (also Ctrl-D)",
}
HELP = (
    "Type a task and press Enter; each task continues the conversation. Alt-Enter (or Esc,\n"
    "Enter) or a line ending in \\ starts a new line; a paste is one task; Up recalls earlier\n"
    "tasks. Ctrl-C cancels a running task, or clears the line. !COMMAND runs a shell command\n"
    "as run_command would (same sandbox and rules), not as a task. Commands:\n"
    + "\n".join(f"  {name:<13} {what}" for name, what in COMMANDS.items())
)
INIT_TASK = f"""\
Explore this repository (you can only read) and draft an {INSTRUCTIONS_FILE} for coding agents \
that will work in it: what the project is, its layout, how to set it up, build, test and lint \
it (the exact commands), its conventions, and what to be careful with. Be concise and concrete; \
keep to what you saw. Finish with task_complete, its result the whole file as Markdown and \
nothing else."""
_COMMAND = re.compile(r"/\w*(\s|$)")  # "/usr/bin/env fails" is a task, not a command
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")
ModelClients = Callable[[str, str], "LlmClient"]  # (model name, current provider) -> client


class Repl:
    """The prompt loop around one agent and one session recorder."""

    def __init__(
        self,
        agent: ReactAgent,
        sessions: SessionRecorder,
        view: TerminalView | None = None,
        *,
        show_diff: bool = False,
        read: Callable[[str], str] | None = None,
        out: TextIO | None = None,
        models: ModelClients | None = None,
    ):
        """`read` prompts for one input (default: prompt_toolkit's prompt on a terminal,
        else input()); `models` makes the client /model switches to (None: no /model)."""
        self.agent, self.sessions, self.view = agent, sessions, view
        self.show_diff, self.read, self._out, self.models = show_diff, read, out, models
        self._ctrl_c = False  # set by our SIGINT handler: tells Ctrl-C from SIGTERM/SIGHUP

    def run(self) -> int:
        """Prompt until /exit or Ctrl-D (0), or a stop signal (130)."""
        # The view first: its live line swaps sys.stdout for a proxy that never flushes the
        # terminal, and the prompt writes to the sys.stdout it finds (unflushed, it showed
        # nothing until a key was pressed).
        self._close_view()
        if self.read is None:
            self.read = _terminal_prompt(self._say) if _on_terminal() else _plain_input()
        session = self.sessions.session
        resumed = f" ({len(session.messages)} messages so far)" if session.messages else ""
        self._say(f"session {session.id}{resumed} · /help for commands · Ctrl-D to leave")
        with self._catching_ctrl_c():
            while True:
                try:
                    line = self.read(PROMPT).strip()  # a paste may hold many lines
                except EOFError:
                    self._say("")
                    return 0
                except KeyboardInterrupt:
                    if not self._was_ctrl_c():
                        return EXIT_INTERRUPTED
                    self._say("")
                    continue
                try:
                    if _COMMAND.match(line):
                        done = self.command(line)
                        if done == "exit":
                            return 0
                        if done == "stopped":
                            return EXIT_INTERRUPTED
                    elif line.startswith("!"):
                        self._shell(line[1:].strip())
                    elif line and not self._task(line):
                        return EXIT_INTERRUPTED
                except KeyboardInterrupt:  # Ctrl-C during a command, or the summary
                    if not self._was_ctrl_c():
                        return EXIT_INTERRUPTED
                    self._close_view()
                    self._say("cancelled")

    def command(self, line: str) -> str:
        name, *rest = line.split(maxsplit=1)
        name, argument = name.lower(), rest[0].strip() if rest else ""
        if name in ("/exit", "/quit"):
            return "exit"
        if name == "/help":
            self._say(HELP)
        elif name == "/cost":
            self._cost()
        elif name == "/model":
            self._model(argument)
        elif name == "/compact":
            self._compact()
        elif name == "/check":
            self._check(argument)
        elif name == "/plan":
            return "" if self._plan(argument) else "stopped"
        elif name == "/sessions":
            found = recent_sessions(self.sessions.store, limit=10)
            self._say(format_sessions(found) if found else "no saved sessions yet")
        elif name == "/clear":
            self.sessions.start_new()
            self._say(f"new conversation (session {self.sessions.session.id})")
        elif name == "/diff":
            diff = session_diff(self.sessions.store, self.sessions.session)
            self._say(visible(diff.rstrip("\n")) if diff else "no changes yet")
        elif name == "/undo":
            try:
                self._say(visible(undo_last_run(self.sessions.store, self.sessions.session)
                                  .describe()))  # fmt: skip
            except SessionError as exc:
                self._say(visible(str(exc)))
        elif name == "/init":
            self._init()
        elif name == "/rewind":
            self._rewind(argument)
        else:
            known = ", ".join(command.split()[0] for command in COMMANDS)
            self._say(f"unknown command {visible(name)}: the commands are {known}")
        return ""

    def _init(self) -> None:
        """/init: a read-only run drafts AGENTS.md; it is written only when you say yes."""
        from dataclasses import replace

        tools = self.agent.tools
        if (tools.repo_path / INSTRUCTIONS_FILE).exists():
            self._say(f"/init: {INSTRUCTIONS_FILE} exists already; edit it yourself")
            return
        saved = self.agent.permissions
        self.agent.permissions = replace(saved, mode="read-only")
        try:
            result = self.agent.run_result(INIT_TASK, history=self.sessions.conversation())
        finally:
            self.agent.permissions = saved
        self._close_view()
        draft = result.result.strip()
        if result.outcome != "completed" or not draft:
            self._say(f"/init: no draft ({result.outcome}); {INSTRUCTIONS_FILE} not written")
            return
        self._say(f"--- the draft of {INSTRUCTIONS_FILE} ---\n{visible(draft)}\n---")
        assert self.read is not None
        try:
            answer = self.read(f"write {INSTRUCTIONS_FILE}? [y/N]: ").strip().lower()
        except EOFError:
            answer = ""
        if answer not in ("y", "yes"):
            self._say(f"{INSTRUCTIONS_FILE} not written")
            return
        outcome = tools.execute("write_file", {"path": INSTRUCTIONS_FILE, "content": draft + "\n"})
        self._say(visible(str(outcome)))

    def _rewind(self, argument: str) -> None:
        """/rewind: the steps so far; the one picked is where files and conversation go back to."""
        points = rewind_points(self.sessions.session)
        if not points:
            self._say("nothing to rewind: no step of this conversation yet")
            return
        if not argument:
            self._say("\n".join(visible(p.describe()) for p in points))
            assert self.read is not None
            try:
                argument = self.read(f"rewind to which step? 1-{len(points)} (Enter: none): ")
            except EOFError:
                argument = ""
            if not argument.strip():
                self._say("not rewound")
                return
        if not argument.strip().isdigit() or not 1 <= int(argument) <= len(points):
            self._say(f"/rewind: give a step number from 1 to {len(points)}")
            return
        try:
            rewound = rewind_to(self.sessions.store, self.sessions.session,
                                points[int(argument) - 1])  # fmt: skip
        except SessionError as exc:
            self._say(visible(str(exc)))
            return
        self._say(visible(rewound.describe()))

    def _shell(self, command: str) -> None:
        """!COMMAND: run by run_command under the session's rules (deny rules, permission
        mode, the question where no sandbox works), never sent to the model as a task; its
        output is added to the next task if the user says so."""
        from toy_agent.parsing import Action
        from toy_agent.permissions import Answer
        from toy_agent.tools import COMMAND_MAX_TIMEOUT, ToolError

        tools = self.agent.tools
        if not command:
            self._say("!COMMAND runs COMMAND in the repository, as run_command would")
            return
        if not tools.allow_commands:
            self._say("!: commands are off in this session (start it with --allow-commands)")
            return
        decision = self.agent.permissions.decide("run_command", {"command": command}, "commands")
        if decision.verdict == "deny":
            self._say(f"! refused: {visible(decision.reason)}")
            return
        if decision.verdict == "ask":
            answer = self.agent.confirm(Action("run_command", {"command": command})) if (
                self.agent.confirm) else Answer(False)  # fmt: skip
            if not (answer.approved if isinstance(answer, Answer) else answer):
                self._say("not run")
                return
        try:  # yours, so the longest limit a command has; Ctrl-C stops it sooner
            output = tools.run_command(command, COMMAND_MAX_TIMEOUT)
        except ToolError as exc:
            output = f"$ {command}\n{exc}"
        self._say(visible(output.rstrip("\n")))
        read = self.read or input
        try:
            keep = read("add this to the conversation for the next task? [y/N] ")
        except EOFError:
            keep = ""
        if keep.strip().lower() in ("y", "yes"):
            shown = self.agent.redactor.redact(output.rstrip("\n"))
            note = f"(The user ran a shell command; what it printed:)\n{shown}"
            session = self.sessions.session
            session.note = f"{session.note}\n\n{note}" if session.note else note
            self._say("added: the next task comes with it")

    def _check(self, command: str) -> None:
        """/check CMD: the next tasks are done when CMD passes (see ReactAgent's check)."""
        if command.lower() == "off":
            self.agent.check = None
        elif command:
            self.agent.check = command
        check = self.agent.check
        self._say(f"check: {visible(check)} (run when the model calls task_complete)"
                  if check else "no check: a task is done when the model says so")  # fmt: skip

    def _cost(self) -> None:
        session = self.sessions.session
        usage, cost, unpriced = session.spending()
        tasks = len(session.runs)
        model = self.agent.llm_client.model or "?"
        self._say(f"this session: {tasks} task{'s' * (tasks != 1)}, {format_usage(usage)} "
                  f"tokens, {format_cost(cost, unpriced)} (model {visible(model)})")  # fmt: skip

    def _model(self, name: str) -> None:
        """/model NAME: the next tasks use NAME; the spend so far still counts for --max-cost."""
        from toy_agent.llm import LlmConfigError
        from toy_agent.pricing import PriceError, meter_for

        client = self.agent.llm_client
        current = client.provider
        if not name:
            self._say(f"model {visible(client.model or '?')} ({current})")
            return
        if current == "replay":
            self._say("/model: a replay plays back its recording; it has no model to switch")
            return
        if self.models is None:
            self._say("/model: this session cannot switch models")
            return
        if not _MODEL_NAME.fullmatch(name):
            self._say(f"/model {visible(name)}: not a model name (letters, digits, . _ : / @ + -)")
            return
        try:
            meter = meter_for(name, self.agent.cost.limit)
        except PriceError:  # its words are the command line's: say it in the session's
            self._say(f"/model {visible(name)}: no price is known for it, and this session "
                      f"has a cost limit to keep: pick a model with a known price; still "
                      f"{current}")  # fmt: skip
            return
        try:
            new = self.models(name, current)
        except LlmConfigError as exc:
            said = re.sub(r"use --llm-provider (\S+)", r"pick a \1 model", str(exc))
            self._say(f"/model {visible(name)}: {visible(said)}; still {current}")
            return
        meter.spent = self.agent.cost.spent
        self.agent.llm_client, self.agent.cost = new, meter
        price = "" if meter.known else " (no price known for it: /cost cannot count it)"
        self._say(f"model {visible(name)} ({new.provider}) for the next tasks{price}")

    def _compact(self) -> None:
        """/compact: the older steps become a summary the model writes."""
        from toy_agent.llm import LlmError
        from toy_agent.pricing import CostLimitReached

        if self.agent.llm_client.provider == "replay":
            self._say("/compact: a replay plays back its recording; it cannot write a summary")
            return
        attempts = len(self.sessions.session.compactions)
        try:
            history = self.sessions.conversation()
            self.agent.cost.check("", history)
            self._say("summarising the older steps…")
            compacted = self.sessions.compact(self.agent.llm_client, self.agent.context_budget,
                                              self.agent.cost)  # fmt: skip
        except KeyboardInterrupt:
            if not self._was_ctrl_c():
                raise
            self._say("cancelled: the conversation is as it was")
            return
        except (LlmError, CostLimitReached, SessionError) as exc:
            self._say(f"/compact: {visible(str(exc))}; the conversation is as it was")
            return
        if compacted is None:
            tried = len(self.sessions.session.compactions) > attempts
            self._say("the summary was no shorter than the steps it would replace: the "
                      "conversation is as it was" if tried else
                      "nothing to compact: the conversation is short already")  # fmt: skip
            return
        self._say(f"compacted {len(history)} messages into {len(compacted.messages)}: about "
                  f"{compacted.tokens_before:,} -> {compacted.tokens_after:,} tokens, "
                  f"{compacted.saved:,} saved")  # fmt: skip
        if self.sessions.error:
            self._say(f"toy-agent: warning: {self.sessions.error}")

    def _task(self, text: str) -> bool:
        """Run one task; False when a stop signal (not Ctrl-C) ended it."""
        from toy_agent.budget import oversized_task

        if too_big := oversized_task(text, self.agent.context_budget):
            self._say(f"not sent: {too_big}")  # a paste of a whole log, say
            return True
        history = self.sessions.conversation()
        try:
            result = self.agent.run_result(self.sessions.task(text), history=history)
        except KeyboardInterrupt:  # outside the loop's own handling (MCP start-up, say)
            self._close_view()
            if not self._was_ctrl_c():
                return False
            self._say("cancelled")
            return True
        self._summary(result)
        if self.sessions.error:
            self._say(f"toy-agent: warning: {self.sessions.error}")
        if result.outcome == "cancelled":
            return self._was_ctrl_c()
        if result.success and self.agent.permissions.mode == "plan":
            return self._carry_out(result.result)
        return True

    def _plan(self, task: str) -> bool:
        """/plan TASK: TASK in plan mode; the session keeps the mode the plan is carried out
        in, or goes back to its own. False when a stop signal ended it."""
        if not task:
            self._say("/plan TASK: plans TASK read-only, then asks how to carry the plan out")
            return True
        previous = self.agent.permissions
        self.agent.permissions = replace(previous, mode="plan")
        try:
            return self._task(task)
        finally:
            if self.agent.permissions.mode == "plan":
                self.agent.permissions = previous

    def _carry_out(self, plan: str) -> bool:
        """The plan is saved and shown; carried out, on approval, in the mode the user picks."""
        from toy_agent.plans import QUESTION, carry_out_task, chosen_mode, save_plan

        path = save_plan(plan, self.sessions.session.id)
        self._say(f"The plan is saved in {visible(str(path))}.")
        read = self.read or input
        try:
            mode = chosen_mode(read(QUESTION))
        except EOFError:
            mode = None
        if mode is None:
            self._say(f"not carried out; the plan stays in {visible(str(path))}")
            return True
        self.agent.permissions = replace(self.agent.permissions, mode=mode)
        self._say(f"carrying out the plan in {mode} mode (the session stays in it)")
        return self._task(carry_out_task(plan, path))

    def _summary(self, outcome: RunResult) -> None:
        redact = self.agent.redactor.redact_obj
        commands = self.agent.tools.allow_commands and not self.agent.permissions.read_only
        sandbox = sandbox_summary(self.agent.tools) if commands else None
        result = {**redact(outcome.to_dict()), "sandbox": sandbox}
        if outcome.outcome == "max_iterations":
            result["error"] = (f"{result['error']}; type continue to go on "
                               f"({self.agent.max_iterations} more steps)")  # fmt: skip
        summary = format_summary(result, redact(outcome.diffs), show_diff=self.show_diff,
                                 color=use_color(self.out))  # fmt: skip
        if self.view is not None:
            self.view.show(summary)
        else:
            self._say(summary)

    @property
    def out(self) -> TextIO:
        """sys.stdout as it is now: the live view swaps it for a proxy while it runs."""
        return self._out or sys.stdout

    def _say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def _close_view(self) -> None:
        if self.view is not None:
            self.view.close()

    def _was_ctrl_c(self) -> bool:
        was, self._ctrl_c = self._ctrl_c, False
        return was

    @contextlib.contextmanager
    def _catching_ctrl_c(self) -> Iterator[None]:
        """Ctrl-C still raises KeyboardInterrupt (the agent cancels on it), and is noted, so a
        KeyboardInterrupt without the note came from SIGTERM or SIGHUP."""

        def on_sigint(signum: int, frame: FrameType | None) -> None:
            self._ctrl_c = True
            raise KeyboardInterrupt

        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)


def history_path() -> Path:
    return state_dir().parent / "history"


def _on_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _plain_input() -> Callable[[str], str]:
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing for input())
    return input


def _terminal_prompt(warn: Callable[[str], None]) -> Callable[[str], str]:
    """prompt_toolkit's prompt: Enter submits (a line ending in \\ continues instead),
    Alt-Enter or Esc Enter starts a new line, a bracketed paste is inserted whole, Ctrl-C clears
    the line, Ctrl-D on an empty line is EOFError; history in history_path()."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory, History, InMemoryHistory
    from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent
    from prompt_toolkit.output import create_output

    bindings = KeyBindings()

    @bindings.add("enter")
    @bindings.add("c-j")  # what Enter sends when typed ahead, while a task ran
    def _submit(event: KeyPressEvent) -> None:
        buffer = event.current_buffer
        if buffer.document.is_cursor_at_the_end and buffer.text.endswith("\\"):
            buffer.delete_before_cursor(1)
            buffer.newline(copy_margin=False)
        else:
            buffer.validate_and_handle()

    @bindings.add("escape", "enter")
    def _new_line(event: KeyPressEvent) -> None:
        event.current_buffer.newline(copy_margin=False)

    @bindings.add("c-c")
    @bindings.add("<sigint>")
    def _clear(event: KeyPressEvent) -> None:
        event.current_buffer.reset()

    history: History
    try:
        history = FileHistory(str(_private_file(history_path())))
    except OSError as exc:
        warn(f"toy-agent: warning: no history across sessions: {exc.strerror or exc}")
        history = InMemoryHistory()
    output = create_output()
    if hasattr(output, "enable_cpr"):  # no cursor-position query: a terminal that does not
        output.enable_cpr = False  # answer it costs a wait and a warning, and we need no menus
    session: PromptSession[str] = PromptSession(
        history=history, key_bindings=bindings, multiline=True, output=output,
        prompt_continuation=lambda width, line, wrap: "." * (width - 1) + " ",
    )  # fmt: skip
    return session.prompt


def _private_file(path: Path) -> Path:
    """`path`, created if need be, readable by the user only (it holds what was typed)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)
    return path
