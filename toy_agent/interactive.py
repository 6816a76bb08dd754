"""The interactive mode: `toy-agent` on a terminal without a task.

Each line typed is a task, run in the same conversation as the ones before it (the session);
lines starting with `/` are commands. Ctrl-C cancels the task in flight and comes back to the
prompt; Ctrl-D or /exit ends the session. SIGTERM and SIGHUP still end it (the caller maps
the return value to 143 or 129).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from toy_agent.sessions import SessionError, SessionRecorder, session_diff, undo_last_run
from toy_agent.view import format_summary, use_color, visible

if TYPE_CHECKING:
    from toy_agent.agent import ReactAgent, RunResult
    from toy_agent.view import TerminalView

PROMPT = "> "
EXIT_INTERRUPTED = 130
HELP = """\
Type a task and press Enter; each task continues the conversation. Commands:
  /diff   the changes this session made so far
  /undo   revert the file changes of the last task (refused if a file changed since)
  /clear  start a new conversation
  /help   this help
  /exit   end the session (also Ctrl-D); Ctrl-C cancels a running task"""


class Repl:
    """The prompt loop around one agent and one session recorder."""

    def __init__(
        self,
        agent: ReactAgent,
        sessions: SessionRecorder,
        view: TerminalView | None = None,
        *,
        show_diff: bool = False,
        read: Callable[[str], str] = input,
        out: TextIO | None = None,
    ):
        self.agent, self.sessions, self.view = agent, sessions, view
        self.show_diff, self.read, self._out = show_diff, read, out
        self._ctrl_c = False  # set by our SIGINT handler: tells Ctrl-C from SIGTERM/SIGHUP

    def run(self) -> int:
        """Prompt until /exit or Ctrl-D (0), or a stop signal (130)."""
        with contextlib.suppress(ImportError):
            import readline  # noqa: F401  (line editing and history for input())
        self._close_view()
        session = self.sessions.session
        resumed = f" ({len(session.messages)} messages so far)" if session.messages else ""
        self._say(f"session {session.id}{resumed} · /help for commands · Ctrl-D to leave")
        with self._catching_ctrl_c():
            while True:
                try:
                    line = self.read(PROMPT).strip()
                except EOFError:
                    self._say("")
                    return 0
                except KeyboardInterrupt:
                    if not self._was_ctrl_c():
                        return EXIT_INTERRUPTED
                    self._say("")
                    continue
                if line.startswith("/"):
                    if self.command(line) == "exit":
                        return 0
                elif line and not self._task(line):
                    return EXIT_INTERRUPTED

    def command(self, line: str) -> str:
        name = line.split()[0].lower()
        if name in ("/exit", "/quit"):
            return "exit"
        if name == "/help":
            self._say(HELP)
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
        else:
            self._say(f"unknown command {visible(name)}: /help lists them")
        return ""

    def _task(self, text: str) -> bool:
        """Run one task; False when a stop signal (not Ctrl-C) ended it."""
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
        return result.outcome != "cancelled" or self._was_ctrl_c()

    def _summary(self, outcome: RunResult) -> None:
        redact = self.agent.redactor.redact_obj
        result = {**redact(outcome.to_dict()), "sandbox": self.agent.tools.sandbox}
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
