"""Hooks: the user's own shell commands, run at five points of a run (docs/hooks.md).

A hook is `EVENT[:MATCHER]=COMMAND`, given with `--hook` or as `hook = [...]` in the user's
config file; nothing in the repository can name one (its config files, `.env` and
instructions are never read for hooks: a repository can be hostile). The events:

- `pre_tool`: before a tool runs; exit 2 refuses the call, its stderr is the model's reason.
- `post_tool`: after a tool ran; exit 2 sends its stderr to the model (the call ran).
- `prompt`: a task the user submits, before the run; exit 2 refuses the task.
- `run_start`: a run starts (after `prompt`); exit 2 is ignored (refuse in `prompt`).
- `run_stop`: a run ended, however it ended; for notifications, exit codes are ignored.

A hook reads the event as one JSON object on stdin; exit 0's stdout is a note for the model
(not for `run_stop`); any other exit code, a timeout or a command that cannot start is a
warning in the log and changes nothing. A matcher (for `pre_tool` and `post_tool` only) is a
glob over the tool's name, `|` between alternatives: `write_file|edit_file`, `mcp__*`.

Hooks run outside the sandbox, in the repository, with the environment commands get
(`child_environment`: the allow-listed variables and those the user named with
--command-env), as their own session, killed whole at their timeout.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toy_agent import cuts
from toy_agent.events import HookAnswered
from toy_agent.variables import child_environment

logger = logging.getLogger(__name__)

HOOK_EVENTS = ("pre_tool", "post_tool", "prompt", "run_start", "run_stop")
TOOL_EVENTS = frozenset({"pre_tool", "post_tool"})
BLOCKING_EVENTS = frozenset({"pre_tool", "post_tool", "prompt"})  # where exit 2 refuses
NOTE_EVENTS = frozenset({"pre_tool", "post_tool", "prompt", "run_start"})  # stdout is a note
BLOCK_EXIT_CODE = 2
DEFAULT_HOOK_TIMEOUT = 60.0
MAX_HOOK_TEXT = 10_000  # characters of a hook's stdout or stderr the model is shown
HOOK_OBJECTS = "The user's post_tool hook reports a problem with this result: {reason}"


class HookError(ValueError):
    """A --hook that does not parse: one line naming what to fix."""


@dataclass(frozen=True)
class Hook:
    """One hook: `command` (a /bin/sh line) runs at `event` for tools `matcher` matches."""

    event: str
    command: str
    matcher: str = ""  # globs joined by |; empty: every tool

    def __str__(self) -> str:
        return f"{self.event}{f':{self.matcher}' if self.matcher else ''}={self.command}"

    def matches(self, tool: str | None) -> bool:
        if not self.matcher or tool is None:
            return True
        return any(fnmatch.fnmatchcase(tool, glob.strip()) for glob in self.matcher.split("|"))


def parse_hook(text: str) -> Hook:
    """`EVENT[:MATCHER]=COMMAND`, as --hook and the config file's `hook` give it."""
    head, equals, command = text.partition("=")
    event, _, matcher = head.partition(":")
    event, matcher, command = event.strip(), matcher.strip(), command.strip()
    if not equals or not command:
        raise HookError(f"--hook {text!r}: expected EVENT[:MATCHER]=COMMAND, e.g. "
                        "'pre_tool:run_command=~/bin/check-command'")  # fmt: skip
    if event not in HOOK_EVENTS:
        raise HookError(f"--hook {text!r}: unknown event {event!r}: one of "
                        f"{', '.join(HOOK_EVENTS)}")  # fmt: skip
    if matcher and event not in TOOL_EVENTS:
        raise HookError(f"--hook {text!r}: a matcher (:{matcher}) is for pre_tool and "
                        "post_tool only")  # fmt: skip
    return Hook(event, command, matcher)


@dataclass(frozen=True)
class HookReply:
    """What one hook said: blocked (exit 2) with `text` from its stderr, or a note (exit 0)
    with `text` from its stdout."""

    hook: Hook
    blocked: bool
    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"event": self.hook.event, "command": self.hook.command,
                "blocked": self.blocked, "text": self.text}  # fmt: skip


@dataclass(frozen=True)
class HookOutcome:
    """The replies of the hooks an event ran that blocked or noted something (the silent
    ones are not kept). A block stops the event's later hooks."""

    replies: tuple[HookReply, ...] = ()

    @property
    def blocked(self) -> HookReply | None:
        return next((reply for reply in self.replies if reply.blocked), None)

    def notes(self) -> str:
        """The notes for the model, one paragraph per hook that wrote one."""
        return "\n\n".join(
            f"Note from the user's {r.hook.event} hook: {r.text}"
            for r in self.replies
            if not r.blocked
        )


@dataclass(frozen=True)
class Hooks:
    """The run's hooks and how to run them. `session` says the session id to report (it may
    change: /clear starts a new session)."""

    hooks: tuple[Hook, ...] = ()
    timeout: float = DEFAULT_HOOK_TIMEOUT
    session: Callable[[], str | None] | None = None
    # what commands get beyond the allow-list (--command-env); the agent sets its tools' own
    named: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, texts: Iterable[str], timeout: float = DEFAULT_HOOK_TIMEOUT) -> Hooks:
        return cls(tuple(parse_hook(text) for text in texts), timeout)

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def describe(self) -> list[str]:
        """One line a hook, for --list-tools and the settings."""
        return [str(hook) for hook in self.hooks]

    def run(self, event: str, repo: Path, tool: str | None = None, **fields: Any) -> HookOutcome:
        """Run `event`'s hooks (those whose matcher takes `tool`) in order, each given
        {"event", "session_id", "repo", "tool"?, **fields} on stdin."""
        chosen = [h for h in self.hooks if h.event == event and h.matches(tool)]
        if not chosen:
            return HookOutcome()
        session = self.session() if self.session else None
        payload = {"event": event, "session_id": session, "repo": str(repo),
                   **({"tool": tool} if tool is not None else {}), **fields}  # fmt: skip
        data = json.dumps(payload, default=str).encode("utf-8")
        replies: list[HookReply] = []
        for hook in chosen:
            reply = self._run_one(hook, data, repo)
            if reply is None:
                continue
            replies.append(reply)
            if reply.blocked:
                break
        return HookOutcome(tuple(replies))

    def _run_one(self, hook: Hook, data: bytes, repo: Path) -> HookReply | None:
        try:
            proc = subprocess.Popen(
                ["/bin/sh", "-c", hook.command], cwd=repo,
                env=child_environment(named=self.named),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            logger.warning("hook %s could not start: %s", hook, exc.strerror or exc)
            return None
        try:
            out, err = proc.communicate(data, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            _kill(proc)
            logger.warning("hook %s timed out after %gs: ignored", hook, self.timeout)
            return None
        except BaseException:  # Ctrl-C: the hook goes with the run
            _kill(proc)
            raise
        finally:
            _kill_group(proc.pid)  # what it left running in the background
        stdout, stderr = _text(out), _text(err)
        if proc.returncode == BLOCK_EXIT_CODE and hook.event in BLOCKING_EVENTS:
            reason = stderr or stdout or f"the hook `{hook.command}` exited 2 without a reason"
            return HookReply(hook, True, reason)
        if proc.returncode != 0:
            first = (stderr or stdout).split("\n", 1)[0][:300]
            logger.warning("hook %s exited %d: %s", hook, proc.returncode, first or "(no output)")
            return None
        if stdout and hook.event in NOTE_EVENTS:
            return HookReply(hook, False, stdout)
        return None


@dataclass
class RunHooks:
    """The user's hooks during one run of the agent: what they refuse, the notes they leave
    for the next observation, and a HookAnswered event (through `emit`) for each reply,
    redacted. `mode` is the run's permission mode, as the hooks are told it; a tool not
    `offered` runs no hook (its call is answered by the route table)."""

    hooks: Hooks
    repo: Path
    mode: str
    offered: Container[str]
    redact: Callable[[str], str]
    emit: Callable[[HookAnswered], None]
    _notes: list[str] = field(default_factory=list)

    def start(self, task: str) -> HookOutcome:
        """The prompt hooks, then (unless one refused the task) the run_start hooks. Their
        replies are told (`tell`) once the run's start is."""
        prompt = self.hooks.run("prompt", self.repo, permission_mode=self.mode, prompt=task)
        if prompt.blocked:
            return prompt
        start = self.hooks.run("run_start", self.repo, permission_mode=self.mode, task=task)
        return HookOutcome(prompt.replies + start.replies)

    def tell(self, outcome: HookOutcome, iteration: int, tool: str | None = None) -> None:
        for reply in outcome.replies:
            self.emit(HookAnswered(iteration, reply.hook.event, reply.hook.command,
                                   reply.blocked, self.redact(reply.text), tool))  # fmt: skip

    def before(self, tool: str, parameters: dict[str, Any], iteration: int) -> str | None:
        """The pre_tool hooks: the reason when one refused the call; the notes wait for its
        observation."""
        if tool not in self.offered:
            return None
        outcome = self.hooks.run("pre_tool", self.repo, tool, permission_mode=self.mode,
                                 parameters=parameters)  # fmt: skip
        self.tell(outcome, iteration, tool)
        if outcome.blocked:
            return " ".join(self.redact(outcome.blocked.text).split())
        if notes := outcome.notes():
            self._notes.append(notes)
        return None

    def after(
        self, tool: str, parameters: dict[str, Any], result: str, is_error: bool, iteration: int
    ) -> None:
        """The post_tool hooks, told the result the model will see; what they report waits
        for its observation (the call ran: exit 2 refuses nothing)."""
        outcome = self.hooks.run("post_tool", self.repo, tool, permission_mode=self.mode,
                                 parameters=parameters, result=result,
                                 is_error=is_error)  # fmt: skip
        self.tell(outcome, iteration, tool)
        if outcome.blocked:
            self._notes.append(HOOK_OBJECTS.format(reason=outcome.blocked.text))
        if notes := outcome.notes():
            self._notes.append(notes)

    def notes(self) -> list[str]:
        """The notes the hooks left since the last observation, redacted: for this one."""
        notes, self._notes = self._notes, []
        return [self.redact(note) for note in notes]

    def stop(self, task: str, result: Mapping[str, Any]) -> None:
        """The run_stop hooks, told how the run ended (the run's result dict)."""
        self.hooks.run("run_stop", self.repo, permission_mode=self.mode, task=task, **result)


def _text(data: bytes) -> str:
    text = data.decode("utf-8", "replace").strip()
    return cuts.cut(text, MAX_HOOK_TEXT, keep="both")


def _kill(proc: subprocess.Popen[bytes]) -> None:
    _kill_group(proc.pid)
    with contextlib.suppress(OSError):
        proc.kill()
    proc.wait()


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
