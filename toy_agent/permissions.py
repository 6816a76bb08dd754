"""What a run may do without asking: the permission mode and the command rules.

Decided once, from the user's own settings (flags, TOY_AGENT_ variables, the config file; never
from the repository, see toy_agent.config), and applied by the agent before each action:

- `read-only`: only tools that change nothing are offered (no write_file, edit_file or
  run_command; an MCP tool only when its server annotates it readOnlyHint), and the system
  prompt says the run is read-only.
- `plan`: read-only, and the model ends with a plan the user approves before it is carried
  out (toy_agent.plans).
- `ask`: every file change and command waits for the user's yes (what --confirm does).
- `edits`: file changes run; commands ask.
- `auto`: everything runs, within what the sandbox allows (the default). Where no sandbox
  works and the user did not turn it off (`--sandbox off`), commands ask, as in `edits`.

Command rules (`--allow-command`, `--deny-command`) are checked against every command of a
compound line (`a && b; c | d`, subshells, newlines): a line is denied when any of its
commands matches a deny rule, and runs without asking only when every command matches an
allow rule. A line this module cannot take apart safely (command substitution, process
substitution, a here-document, an unclosed quote) never matches an allow rule, so it asks.
Deny rules are a convenience that catches the commands you name, not a wall: `sh -c`, `env`,
`xargs` or a script can run anything, which only the sandbox bounds.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, replace
from typing import Any, Literal

from toy_agent.messages import ToolOutput
from toy_agent.tools import BUILTIN_TOOLS, Changes, CodeRepositoryTools

PERMISSION_MODES = ("read-only", "plan", "ask", "edits", "auto")
DEFAULT_MODE = "auto"
READ_ONLY_PROMPT = (
    "This run is read-only: the user asked you to look, explain or plan, not to change "
    "anything. You can list, read and search files; you cannot write or edit files or run "
    "commands. Finish with task_complete and your answer."
)

# plan: read-only until the user approves the plan (toy_agent.plans)
PLAN_PROMPT = (
    "This run plans; it does not act. Explore the repository read-only (list, read and "
    "search files) until you know what to change, then finish with task_complete whose "
    "result is the plan, in Markdown: the goal in a sentence, the files to change and how, "
    "step by step, and how to check the result. Change nothing now: the user reads the plan, "
    "and if they approve it you carry it out next."
)
Verdict = Literal["run", "ask", "deny"]
RefusedBy = Literal["user", "rule", "mode", "hook"]


@dataclass(frozen=True)
class Decision:
    """What happens to one action: it runs, the user is asked, or it is refused (`reason`
    says why, for the model: the rule that matched, or the mode)."""

    verdict: Verdict
    reason: str = ""
    rule: str = ""  # the deny rule that matched, when one did


@dataclass(frozen=True)
class Answer:
    """The user's answer at the confirm prompt: `reason` is what they said after no."""

    approved: bool
    reason: str = ""
    always: bool = False  # "all": yes to every action from now on
    unanswered: bool = False  # no answer could be read (stdin closed): declined


# --- taking a command line apart -------------------------------------------------------------

_SEPARATORS = frozenset(";&|()\n")
_KEYWORDS = frozenset(
    {"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until",
     "time", "in", "esac"}
)  # fmt: skip
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")


@dataclass(frozen=True)
class CommandLine:
    """A shell line as its simple commands (each a tuple of words, quotes removed), and
    whether that split can be trusted: `safe` is False when the line runs text the split
    cannot see before it runs (`$(...)`, backticks, `<(...)`, `${...}`, here-documents) or
    does not parse (an unclosed quote). Commands inside a substitution are listed too, so
    deny rules see them."""

    commands: tuple[tuple[str, ...], ...]
    safe: bool


def split_commands(line: str) -> CommandLine:
    commands: list[tuple[str, ...]] = []
    safe = _scan(line, commands)
    return CommandLine(tuple(c for c in commands if c), safe)


def _scan(line: str, out: list[tuple[str, ...]]) -> bool:
    """Append the simple commands of `line` to `out`; False when the split is not safe."""
    safe = True
    words: list[str] = []
    word: list[str] = []
    in_word = False
    i, n = 0, len(line)

    def end_word() -> None:
        nonlocal in_word
        if in_word:
            words.append("".join(word))
            word.clear()
            in_word = False

    def end_command() -> None:
        end_word()
        out.append(tuple(words))
        words.clear()

    while i < n:
        c = line[i]
        if c == "\\":
            if line[i + 1 : i + 2] == "\n":  # a line continuation
                i += 2
                continue
            word.append(line[i + 1 : i + 2])
            in_word, i = True, i + 2
        elif c == "'":
            end = line.find("'", i + 1)
            if end < 0:
                return False
            word.append(line[i + 1 : end])
            in_word, i = True, end + 1
        elif c == '"':
            i, ok = _double_quoted(line, i + 1, word, out)
            safe = safe and ok
            in_word = True
        elif c == "`":
            end = _closing_backtick(line, i + 1)
            _scan(line[i + 1 : end], out)
            safe, in_word, i = False, True, end + 1
        elif c == "$" and line[i + 1 : i + 2] in ("(", "{"):
            end = _closing(line, i + 1)
            _scan(line[i + 2 : end], out)
            safe, in_word, i = False, True, end + 1
        elif c in "<>" or line[i : i + 2] == "&>":
            end_word()
            if line[i + 1 : i + 2] == "(":  # process substitution
                end = _closing(line, i + 1)
                _scan(line[i + 2 : end], out)
                safe, i = False, end + 1
                continue
            if line[i : i + 2] == "<<":  # a here-document: its body is not commands
                safe = False
            j = i + 1
            while j < n and line[j] in "<>&|" and not (j > i + 1 and line[j] in "&|"):
                j += 1
            words.append(line[i:j])
            i = j
        elif c in _SEPARATORS:
            end_command()
            i += 1
        elif c in " \t\r":
            end_word()
            i += 1
        else:
            word.append(c)
            in_word, i = True, i + 1
    end_command()
    return safe


def _double_quoted(
    line: str, i: int, word: list[str], out: list[tuple[str, ...]]
) -> tuple[int, bool]:
    """Read a "..." string from just after its quote; returns (the index after it, safe)."""
    safe = True
    while i < len(line):
        c = line[i]
        if c == '"':
            return i + 1, safe
        if c == "\\" and line[i + 1 : i + 2] in ('"', "\\", "$", "`", "\n"):
            word.append(line[i + 1])
            i += 2
        elif c == "`":
            end = _closing_backtick(line, i + 1)
            _scan(line[i + 1 : end], out)
            safe, i = False, end + 1
        elif c == "$" and line[i + 1 : i + 2] in ("(", "{"):
            end = _closing(line, i + 1)
            _scan(line[i + 2 : end], out)
            safe, i = False, end + 1
        else:
            word.append(c)
            i += 1
    return i, False  # unclosed


def _closing(line: str, start: int) -> int:
    """The index of the bracket closing the one at `start` (or the end of the line)."""
    opening = line[start]
    closing = ")" if opening == "(" else "}"
    depth, i, quote = 0, start, ""
    while i < len(line):
        c = line[i]
        if quote:
            if c == quote:
                quote = ""
            elif c == "\\" and quote == '"':
                i += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return len(line)


def _closing_backtick(line: str, start: int) -> int:
    i = start
    while i < len(line) and line[i] != "`":
        i += 2 if line[i] == "\\" else 1
    return min(i, len(line))


# --- rules -----------------------------------------------------------------------------------


def rule_matches(rule: str, command: str) -> bool:
    """A rule with `*`, `?` or `[` is a glob over the whole command (`pytest*`, `git diff*`);
    any other rule matches the command itself or its start up to a space (`npm test` matches
    `npm test -- -k x`, not `npm tests`)."""
    rule = " ".join(rule.split())
    if any(c in rule for c in "*?["):
        return fnmatch.fnmatchcase(command, rule)
    return command == rule or command.startswith(rule + " ")


def _deny_forms(words: tuple[str, ...]) -> list[str]:
    """The command as deny rules see it: also without leading keywords (`do`, `!`) and
    VAR=value assignments, and with the program named without its folder."""
    forms = [" ".join(words)]
    rest = list(words)
    while rest and (rest[0] in _KEYWORDS or _ASSIGNMENT.match(rest[0])):
        rest.pop(0)
    if rest:
        forms.append(" ".join(rest))
        if "/" in rest[0]:
            forms.append(" ".join([rest[0].rsplit("/", 1)[1], *rest[1:]]))
    return forms


@dataclass(frozen=True)
class CommandRules:
    """--allow-command and --deny-command patterns. Deny wins over allow."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, list[str]]:
        return {"allow": list(self.allow), "deny": list(self.deny)}

    def check(self, line: str) -> tuple[Literal["allow", "deny", "none"], str, str]:
        """("deny", rule, the command it matched), ("allow", "", "") when every command of the
        line matches an allow rule, else ("none", "", "")."""
        parsed = split_commands(line)
        for words in parsed.commands:
            for form in _deny_forms(words):
                for rule in self.deny:
                    if rule_matches(rule, form):
                        return "deny", rule, " ".join(words)
        if parsed.safe and parsed.commands and self.allow:
            texts = [" ".join(words) for words in parsed.commands]
            if all(any(rule_matches(rule, t) for rule in self.allow) for t in texts):
                return "allow", "", ""
        return "none", "", ""


@dataclass(frozen=True)
class Permissions:
    """The run's permission mode and command rules: what is offered, what runs, what asks."""

    mode: str = DEFAULT_MODE
    rules: CommandRules = CommandRules()
    # False: commands would run outside any sandbox and the user did not choose that
    # (`--sandbox auto` without a working bubblewrap): in auto mode they ask, as in edits.
    sandboxed: bool = True

    def __post_init__(self) -> None:
        if self.mode not in PERMISSION_MODES:
            raise ValueError(f"unknown permission mode {self.mode!r}: one of {PERMISSION_MODES}")

    @property
    def read_only(self) -> bool:
        """read-only, and plan (read-only until the plan is approved: toy_agent.plans)."""
        return self.mode in ("read-only", "plan")

    def for_tools(self, tools: CodeRepositoryTools) -> Permissions:
        """These permissions for commands run by `tools`: not sandboxed when their sandbox
        `auto` found no working bubblewrap (tools.sandbox_missing)."""
        if tools.allow_commands and tools.sandbox_missing:
            return replace(self, sandboxed=False)
        return self

    @property
    def label(self) -> str:
        """The mode as the model and the user are told why something asks: `edits mode`,
        `auto mode with no sandbox for commands`."""
        return f"{self.mode} mode" + ("" if self.sandboxed else " with no sandbox for commands")

    @property
    def _commands_ask(self) -> bool:
        """Whether a command no allow rule matches asks (rather than runs)."""
        return self.mode != "auto" or not self.sandboxed

    def offers(self, spec: dict[str, Any], changes: Changes | None = None) -> bool:
        """Whether a tool is offered at all. Read-only offers no changing local tool, and an
        MCP tool only when its server says it changes nothing (`read_only` in its spec, from
        the readOnlyHint annotation): an unannotated tool may change anything. `changes`:
        what the local tool may change (Tool.changes; by default a built-in's, by name)."""
        if not self.read_only:
            return True
        if "server" in spec:
            return spec.get("read_only") is True
        return (changes or _builtin_changes(spec["name"])) == "nothing"

    def decide(
        self, tool_name: str, parameters: dict[str, Any], changes: Changes | None = None
    ) -> Decision:
        """`changes`: what the tool may change (Tool.changes; by default a built-in's, by
        name, and "nothing" for any other name, e.g. an MCP tool's)."""
        changes = changes or _builtin_changes(tool_name)
        if self.read_only and changes != "nothing":
            return Decision("deny", f"this run is read-only (--permission-mode {self.mode}): "
                            f"{tool_name} is not available")  # fmt: skip
        if changes == "commands":
            verdict, rule, command = self.rules.check(str(parameters.get("command", "")))
            if verdict == "deny":
                return Decision(
                    "deny", f"the command `{command}` matches the user's deny rule `{rule}`", rule
                )
            if verdict == "allow" or not self._commands_ask:
                return Decision("run")
            return Decision("ask")
        if changes == "files" and self.mode == "ask":
            return Decision("ask")
        return Decision("run")

    def may_ask(self, commands: bool) -> bool:
        """Whether the run may stop to ask the user (`commands`: run_command is offered)."""
        return self.mode == "ask" or (commands and self._commands_ask and not self.read_only)


def parse_answer(text: str) -> Answer:
    """The confirm prompt's answer: y/yes, a/all (yes, to everything from now on), or no,
    with what follows `n` or `no` (`n, use edit_file instead`) as the reason. Anything else
    declines too, the whole text being the reason; an empty line declines without one."""
    text = text.strip()
    match = re.match(r"(?i)(y|yes|a|all|n|no)\b[\s,;:.\-]*(.*)", text, re.S)
    if match is None:
        return Answer(False, text)
    word, rest = match[1].lower(), match[2].strip()
    if word in ("y", "yes", "a", "all"):
        return Answer(True, always=word in ("a", "all"))
    return Answer(False, rest)


@dataclass(frozen=True)
class OfferedTools:
    """A toolbox (see toy_agent.routes.Toolbox) with only the tools the permissions offer:
    what is not offered is not in the route table, so a call to it is an unknown tool."""

    toolbox: Any
    permissions: Permissions

    @classmethod
    def of(cls, toolbox: Any, permissions: Permissions) -> Any:
        return cls(toolbox, permissions) if permissions.read_only else toolbox

    def specs(self) -> list[dict[str, Any]]:
        local = self.toolbox if isinstance(self.toolbox, CodeRepositoryTools) else None
        return [
            spec for spec in self.toolbox.specs()
            if self.permissions.offers(spec, local.changes(spec["name"]) if local else None)
        ]  # fmt: skip

    def call(self, name: str, parameters: dict[str, Any]) -> str | ToolOutput:
        return self.toolbox.call(name, parameters)


def _builtin_changes(name: str) -> Changes:
    return next((tool.changes for tool in BUILTIN_TOOLS if tool.name == name), "nothing")
