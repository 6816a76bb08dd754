"""Repository tools: every path is confined to the repository root.

Each tool method returns the observation text for the LLM or raises ToolError with a message the
LLM can act on. Which files count (tree.py, ignore.py), how text is found in them (search.py)
and how a command runs (shell.py) live apart; this module confines paths, checks parameters and
words the observations.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import difflib
import inspect
import itertools
import json
import logging
import os
import re
import stat
import threading
import time
import typing
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal, TypeVar, overload

from toy_agent import cuts
from toy_agent.diffs import unified_diff
from toy_agent.files import (
    BINARY_SNIFF_BYTES,
    EDIT_MAX_BYTES,
    ENDING,
    ENDING_NAMES,
    SCAN_MAX_BYTES,
    UNDECODABLE,
    Encoding,
    LinkIndex,
    Rewrite,
    Scan,
    Text,
    ToolError,
    ToolRefusal,
    encode_text,
    existing_format,
    file_state,
    invalid_text,
    open_dir,
    open_regular,
    pieces,
    reading,
    rewrite,
    special_kind,
    special_message,
    text_encoding,
    undecoded,
)
from toy_agent.files import (
    STALE_TEMP_SECONDS as STALE_TEMP_SECONDS,  # the tests' and callers' old home of it
)
from toy_agent.messages import (
    CommandResult,
    ToolOutput,
    ToolSpec,
    output_tail,
    path_from_shown,
    shown_path,
)
from toy_agent.redaction import Redactor, is_secret_variable
from toy_agent.sandbox import (
    GitGuard,
    bwrap_problem,
    resolve_sandbox,
    sandbox_note,
    sandbox_policy,
)
from toy_agent.search import (
    SEARCH_BACKENDS,
    SearchError,
    format_matches,
    search,
)
from toy_agent.shell import check_shell, run_shell
from toy_agent.signatures import read_signature
from toy_agent.tree import Listing, Tree
from toy_agent.variables import named_variables, withheld_note, withheld_variables

logger = logging.getLogger(__name__)

LIST_LIMIT = 400
READ_MAX_LINES = 400
READ_MAX_CHARS = 40_000
READ_MAX_LINE_CHARS = 4_000
_LONG_LINE = (
    f"read_file shows a line's first {READ_MAX_LINE_CHARS:,} characters; run_command, when "
    "enabled, can show the rest"
)
COMMAND_MAX_TIMEOUT = 600
CHECK_TAIL_CHARS = 2_000
_CHECK_HOW = "only the end of the check's output is kept; run the check itself to see it all"


# What a tool may change: nothing; files (its `path` parameter names the file: asked under
# mode ask, tracked for the run's diff and undo); anything, through commands (asked under
# modes ask and edits, checked against the command rules, offered only with commands on).
Changes = Literal["nothing", "files", "commands"]
_Method = TypeVar("_Method", bound=Callable[..., str])
PATH = "Path relative to the repository root."


def _builtin(
    description: str, *, changes: Changes = "nothing", via: str = "", **parameters: str
) -> Callable[[_Method], _Method]:
    """Marks a CodeRepositoryTools method as a built-in tool: what the model is told it does,
    what each parameter is, and what it changes. BUILTIN_TOOLS is made from these marks.
    `via`: the method (same parameters) the agent calls instead, when it returns more than
    the text a Python caller wants (run_command's CommandResult)."""

    def mark(method: _Method) -> _Method:
        setattr(method, "__tool__", (description, changes, parameters, via))  # noqa: B010
        return method

    return mark


class CodeRepositoryTools:
    """The local tools the agent may call, all confined to `repo_path`."""

    def __init__(
        self,
        repo_path: str | Path = ".",
        *,
        allow_commands: bool = False,
        search_backend: str = "auto",
        redactor: Redactor | None = None,
        sandbox: str = "off",
        sandbox_network: bool = False,
        sandbox_read: Iterable[str | Path] = (),
        command_env: Iterable[str] = (),
        extra_tools: Iterable[Tool | Callable[..., Any]] = (),
        environment: Any = None,
    ):
        # A batch task's environment (toy_agent.batch.environments): its commands and checks run
        # in it (a root filesystem or a container) instead of on the host.
        self.environment = environment
        self.extra_tools = _extra_tools(extra_tools)  # first: a bad tool is told before all else
        self._extra_by_name = {tool.name: tool for tool in self.extra_tools}
        if search_backend not in ("auto", *SEARCH_BACKENDS):
            raise ValueError(f"search_backend must be auto, rg, grep or python: {search_backend}")
        self.repo_path = Path(repo_path).resolve()
        self.allow_commands = allow_commands
        self.search_backend = search_backend
        self.redactor = redactor or Redactor()  # applied before long lines are cut
        # run_command's sandbox: "auto" resolves to "bwrap" or "off" here (SandboxUnavailable
        # when "bwrap" is asked for and does not work); see toy_agent.sandbox.
        self.sandbox = resolve_sandbox(sandbox, warn=allow_commands)
        # Why `auto` found no working sandbox: commands then ask (see Permissions.for_tools).
        self.sandbox_missing = (
            bwrap_problem() if (sandbox, self.sandbox) == ("auto", "off") else None
        )
        self.sandbox_network = sandbox_network
        # What a sandboxed command sees, decided now, before any tool could change the
        # repository, with git's paths, which it mounts read-only (a `.git` file a command
        # writes later names no mount; a repository it makes is removed: see GitGuard).
        # Unsandboxed, git's paths are decided when first needed (see decide_git).
        self._git_guard: GitGuard | None = None
        self._git_guard_lock = threading.Lock()
        self.sandbox_policy = (
            sandbox_policy(self.repo_path, network=sandbox_network, read=sandbox_read,
                           git=self.decide_git())
            if self.sandbox == "bwrap" else None
        )  # fmt: skip
        self._sandbox_named = False  # the model is told about the sandbox once
        # What commands get beyond the allow-listed variables: what the user named, resolved
        # now (--command-env NAME, NAME=VALUE; see toy_agent.variables).
        self.command_env = named_variables(command_env)
        for name, value in self.command_env.items():
            if is_secret_variable(name, value):
                self.redactor.add_secret(value)
        self._withheld_named: set[str] = set()  # the variables the model was told about
        self.tree = Tree(self.repo_path)  # what list_files and search see, kept between calls
        self.links = LinkIndex(self.repo_path)  # whether a file's hard links are all inside

    @property
    def git_guard(self) -> GitGuard:
        return self.decide_git()

    def decide_git(self) -> GitGuard:
        """Where git, run later by the user, would run code or read config in the repository
        (GitGuard), decided from the repository as it is at the first call. That comes before
        anything could change it: with the sandbox's policy when it is on; else at the first
        command, check, linter run or write through these tools (run_guarded, _writable), or
        when a ReactAgent run starts (before its MCP servers, hooks and tools), whichever is
        first. So nothing these make is taken for the user's, and tools that only read never
        walk the work tree for it (a .venv in it costs 100 ms and more)."""
        with self._git_guard_lock:
            if self._git_guard is None:
                self._git_guard = GitGuard(self.repo_path)
            return self._git_guard

    # ----------------------------------------------------------------------------- dispatch
    def specs(self) -> list[dict[str, Any]]:
        """The Toolbox face (see toy_agent.routes): the local tools, without task_complete.
        A sandboxed run_command says so, so the model expects its limits."""
        specs = [*get_available_tools(self.allow_commands)[:-1],
                 *(tool.spec for tool in self.extra_tools)]  # fmt: skip
        if self.sandbox == "bwrap":
            where = "with network" if self.sandbox_network else "no network"
            for spec in specs:
                if spec["name"] in _BUILTINS_BY_NAME and self.changes(spec["name"]) == "commands":
                    spec["description"] += (f" Sandboxed: {where}, writes only in the "
                                            "repository and /tmp.")  # fmt: skip
        return specs

    def call(self, name: str, parameters: dict[str, Any]) -> str | ToolOutput:
        return self.execute(name, parameters)

    def relative(self, path: str) -> str:
        """The repository-relative form of a path the model gave ("./a.py" -> "a.py"): the one
        normaliser, so a file has one name in the change tracker, the preview and the tools.
        Raises ToolError for a path outside the repository."""
        return self._rel(self._resolve(path))

    def snapshot(self, path: str) -> str | None:
        """A file's text as it is now, or None when it is not a readable regular file (used to
        diff a run's changes; never follows a link out of the repository)."""
        try:
            rel = self.relative(path)
        except ToolError:
            return None
        return file_state(self.repo_path, rel, self.links).text()

    def tool(self, name: str) -> Tool | None:
        """The local tool called `name` (run_command too when commands are off), or None."""
        return _BUILTINS_BY_NAME.get(name) or self._extra_by_name.get(name)

    def changes(self, name: str) -> Changes:
        """What the tool called `name` may change ("nothing" for a name that is not local)."""
        tool = self.tool(name)
        return tool.changes if tool is not None else "nothing"

    def preview(self, name: str, parameters: dict[str, Any]) -> str:
        """What the confirm prompt shows before the call runs (see Tool.preview)."""
        tool = self.tool(name)
        return tool.preview(self, parameters) if tool else f"{name}: unknown tool"

    def execute(self, name: str, parameters: dict[str, Any] | None) -> str | ToolOutput:
        """Run local tool `name`; bad parameters and failures raise ToolError."""
        tool = self.tool(name)
        if tool is None:
            names = ", ".join(spec["name"] for spec in self.specs())
            raise ToolError(f"Unknown tool '{name}'. Local tools: {names}.")
        if tool.changes == "commands" and name in _BUILTINS_BY_NAME and not self.allow_commands:
            raise ToolError(_COMMANDS_DISABLED)
        return tool.run(self, parameters)

    # ----------------------------------------------------------------------------- tools
    # Each tool is a method marked with what the model is told about it (short on purpose:
    # it is sent with every request, and each description names its parameters, so the
    # prompt's compact parameter list needs no descriptions of its own; see
    # toy_agent.catalogue). A method with a keyword-only `dry_run` previews itself with it.
    @_builtin(
        "List files under path, recursively, without ignored or hidden ones; big trees are "
        "summarised per folder.",
        path=PATH,
    )
    def list_files(self, path: str = ".") -> str:
        """List files and folders under `path`, summarised when too many to read."""
        top = self._resolve(path)
        if not top.exists():
            raise self._not_found(path, top)
        if not top.is_dir():
            raise ToolError(f"{self._shown(top)} is a file; use read_file or get_file_info on it.")
        explicit = self.tree.is_ignored(top)
        listing = self.tree.listing(top)
        paths, special, n_dirs = listing.paths, listing.special, len(listing.folders)
        unread = self._unreadable_note(top)
        logger.info("listed %s: %d files, %d dirs", self._rel(top), len(paths) - n_dirs, n_dirs)
        where = "Repository root" if top == self.repo_path else self._shown(top)
        header = f"{where}: {len(paths) - n_dirs} files, {n_dirs} directories"
        if explicit:
            header += " (this folder is normally ignored; listed because it was asked for)"
        if not paths:
            return f"{header}. Nothing to list (empty, or everything in it is ignored)."
        if len(paths) <= LIST_LIMIT:
            return "\n".join(
                [header + ":", *(_entry_line(path, special) for path in paths), *unread]
            )
        return "\n".join([header + ".", *_summarise(listing, self._rel(top)), *unread])

    @_builtin(
        f"Read the text file at path with line numbers, at most {READ_MAX_LINES} lines a call; "
        "start_line/end_line pick a range.",
        path=PATH,
        start_line="First line to show, counting from 1 (default 1).",
        end_line="Last line to show, inclusive (default: as many as fit).",
    )
    def read_file(
        self, path: str, start_line: int | None = None, end_line: int | None = None
    ) -> str:
        """Show numbered lines, capped per call, with a note saying where to continue."""
        start = 1 if start_line is None else start_line
        if start < 1:
            raise ToolError("start_line must be 1 or more (lines are numbered from 1).")
        if end_line is not None and end_line < start:
            raise ToolError(f"end_line ({end_line}) is before start_line ({start}).")
        target = self._existing_file(path)
        rel = self._shown(target)
        with self._open_regular(target) as f:
            window = _read_window(f, rel, start, end_line)
        total, next_line, encoding = window.total, window.next_line, window.encoding
        shown = [(n, self._cut_line(text, length, window.cut and n == total))
                 for n, text, length in window.lines]  # fmt: skip
        logger.info("read %s: %d of %d lines from line %d", rel, len(shown), total, start)
        if total == 0:
            return f"{rel} is empty (0 lines)."
        of = f"at least {total}" if window.cut else str(total)
        if start > total:
            where = "the part read_file reads" if window.cut else "the end"
            raise ToolError(f"start_line {start} is past {where} of {rel} ({of} lines).")
        last = shown[-1][0]
        out = [f"{rel} (lines {start}-{last} of {of}):", *_number(shown)]
        if next_line is not None:
            left = (total if end_line is None else min(end_line, total)) - last
            more = "at least " if window.cut and end_line is None else ""
            how = (f"to read on, call read_file with start_line={next_line} (a call shows at "
                   f"most {READ_MAX_LINES} lines / {READ_MAX_CHARS:,} characters)")  # fmt: skip
            out.append(cuts.note(more + cuts.amount(left, "line"), how))
        elif end_line is not None and end_line > total and not window.cut:
            out.append(f"[end_line {end_line} is past the end: {rel} has {total} lines.]")
        if window.cut:
            out.append(
                f"[Note: {rel} is {target.stat().st_size:,} bytes; read_file reads only its "
                f"first {SCAN_MAX_BYTES >> 20} MB.]"
            )
        if encoding.bom:
            out.append(
                f"[Note: {rel} is {encoding.name} text with a byte-order mark, shown decoded; "
                "edit_file and write_file keep its encoding.]"
            )
        if window.lossy:
            out.append(f"[Note: some bytes are not valid {encoding.name}; shown as \ufffd.]")
        return "\n".join(out)

    @_builtin(
        "Create or overwrite the file at path with content.",
        changes="files",
        path=PATH,
        content="The complete new content of the file.",
    )
    def write_file(self, path: str, content: str, *, dry_run: bool = False) -> str:
        """Create or replace a whole file, atomically. A replaced file keeps its encoding (byte-
        order mark, UTF-16/32) and, when `content` uses "\n", line endings it uses throughout.
        `dry_run`: nothing is written; the diff it would make is returned."""
        target = self._writable(path)
        rel = self._shown(target)
        if dry_run:
            return _diff(self._rel(target), self.snapshot(path) or "", content)
        with self._rewrite(target) as file:
            encoding, ending = existing_format(file)
            text = content.removeprefix("\ufeff") if encoding.bom else content
            if ending is not None and "\n" in text and "\r" not in text:
                converted, text = ending, text.replace("\n", ending)
            else:
                converted = None
            data = encode_text(text, encoding, "content")
            old_size = None if file.seen is None else file.seen.st_size
            file.replace(data)
        lines = len(ENDING.findall(content)) + (content[-1:] not in ("", "\n", "\r"))
        logger.info("wrote %s: %d bytes, %d lines", rel, len(data), lines)
        done = f"Wrote {rel}: {len(data):,} bytes, {lines} lines"
        if old_size is None:
            return f"{done} (created)."
        kept = [f"its {encoding.name} encoding with byte-order mark"] if encoding.bom else []
        kept += [f"its {ENDING_NAMES[converted]} line endings"] if converted else []
        note = f"; kept {' and '.join(kept)}" if kept else ""
        return f"{done} (overwrote the previous {old_size:,} bytes{note})."

    @_builtin(
        "In the file at path, replace old_str (exact, occurring once) with new_str.",
        changes="files",
        path=PATH,
        old_str="The exact text to replace; must occur exactly once in the file.",
        new_str="The text to put in its place.",
    )
    def edit_file(self, path: str, old_str: str, new_str: str, *, dry_run: bool = False) -> str:
        """Replace the one occurrence of old_str; anything else leaves the file untouched.
        Matching sees every line ending as "\n"; the file keeps its own endings and encoding.
        `dry_run`: nothing is written; the diff it would make is returned (what --confirm
        shows, so the preview is this very edit)."""
        if not old_str:
            raise ToolError("old_str is empty; to write a whole file use write_file.")
        old, new = _unify_endings(old_str), _unify_endings(new_str)
        if old == new:
            raise ToolError(_IDENTICAL if old_str == new_str else _ENDINGS_ONLY)
        target = self._writable(path)
        rel = self._shown(target)
        self._existing_file(path)
        with self._rewrite(target) as file, reading(rel), file.open() as f:
            st = os.fstat(f.fileno())
            self._check_links(st, rel)
            if st.st_size > EDIT_MAX_BYTES:
                raise ToolError(
                    f"{rel} is {st.st_size:,} bytes; edit_file edits files up to "
                    f"{EDIT_MAX_BYTES >> 20} MB. write_file can replace it whole."
                )
            doc = Text.parse(f.read(), rel)
            pos = _locate(doc.text, old, rel)
            new_text = doc.text[:pos] + new + doc.text[pos + len(old) :]
            data = doc.encode(new_text, _edited_endings(doc, pos, old, new))
            if dry_run:
                return _diff(self._rel(target), doc.text, new_text)
            file.replace(data)
        first = new_text.count("\n", 0, pos) + 1
        last = first + new.count("\n")
        logger.info("edited %s at line %d (%d bytes)", rel, first, len(data))
        return f"Edited {rel} (line {first}). It now reads:\n" + _snippet(new_text, first, last)

    @_builtin(
        "Search files under path for a case-insensitive regex pattern; file_pattern is a glob "
        "such as '*.py'.",
        pattern="Regular expression (Python/PCRE syntax); invalid ones are searched literally.",
        path=PATH,
        file_pattern="Only search files whose name matches this glob, e.g. '*.py' or '*.{js,ts}'.",
    )
    def search_in_files(
        self, pattern: str, path: str = ".", file_pattern: str | None = None
    ) -> str:
        """Case-insensitive regex search over the same files list_files shows."""
        if not pattern:
            raise ToolError("pattern is empty.")
        if "\n" in pattern or "\r" in pattern:
            raise ToolError("pattern must fit on one line: the search matches line by line.")
        literal, note = False, ""
        try:
            re.compile(pattern)
        except re.error as exc:
            literal = True
            note = f" (not a valid regex: {exc}; searched for the literal text instead)"
        top = self._resolve(path)
        if not top.exists():
            raise self._not_found(path, top)
        started = time.perf_counter()
        try:
            found = search(
                self.repo_path,
                top,
                pattern,
                literal=literal,
                file_pattern=file_pattern,
                backend=self.search_backend,
                tree=self.tree,
            )
        except SearchError as exc:
            raise ToolError(str(exc)) from exc
        logger.info(
            "searched %r in %s: %d files, %d matching lines, %s backend, %.3fs",
            *(pattern, self._rel(top), found.n_files, found.n_matches, found.backend),
            time.perf_counter() - started,
        )
        shown = format_matches(repr(pattern) + note, self._shown(top), found, self.redactor.redact)
        return "\n".join([shown, *self._unreadable_note(top)])

    def _unreadable_note(self, top: Path) -> list[str]:
        """A line naming the folders under `top` the walk could not read (no permission), so
        an empty listing or a search with no match is not taken for the truth."""
        rel_top = "" if top == self.repo_path else self._rel(top)
        unreadable = self.tree.unreadable
        if rel_top in unreadable:
            raise ToolError(f"{self._shown(top)} cannot be read: permission denied.")
        locked = sorted(
            rel for rel in unreadable
            if (not rel_top or rel.startswith(f"{rel_top}/")) and (self.repo_path / rel).is_dir()
        )  # fmt: skip
        if not locked:
            return []
        more = f" and {len(locked) - 20} more" if len(locked) > 20 else ""
        names = ", ".join(shown_path(f"{rel}/") for rel in locked[:20])
        return [f"[Cannot be read (permission denied), so not listed or searched: {names}{more}.]"]

    @_builtin("Size, lines, type, language and permissions of the file at path.", path=PATH)
    def get_file_info(self, path: str) -> str:
        """Metadata to decide how to read a file: size, lines, kind, language, mtime, mode."""
        target = self._resolve(path)
        if not target.exists():
            raise self._not_found(path, target)
        st = target.lstat()
        mtime = datetime.fromtimestamp(st.st_mtime, tz=timezone.utc).isoformat(timespec="seconds")
        info = [f"path: {self._shown(target)}"]
        if target.is_dir():
            fd = open_dir(self.repo_path, target.relative_to(self.repo_path).parts)
            try:
                with os.scandir(fd) as scan:
                    children = list(scan)
            finally:
                os.close(fd)
            n_dirs = sum(e.is_dir(follow_symlinks=False) for e in children)
            info += [
                "type: directory",
                f"entries: {len(children)} ({len(children) - n_dirs} files, {n_dirs} "
                "directories, hidden and ignored ones included)",
            ]
        elif special_kind(st.st_mode):
            info.append(f"type: {special_kind(st.st_mode)} (a special file: never read or written)")
        elif self.links.inside(st) < st.st_nlink:
            info.append(
                f"type: file with {st.st_nlink} hard links, some outside the repository "
                "(its content is not examined)"
            )
            info.append(f"size: {st.st_size:,} bytes")
        else:
            with self._open_regular(target) as f:
                info += _file_kind(f, target.name)
            info.append(f"size: {st.st_size:,} bytes")
        info += [
            f"modified: {mtime}",
            f"permissions: {stat.filemode(st.st_mode)} ({stat.S_IMODE(st.st_mode):04o})",
        ]
        return "\n".join(info)

    @_builtin(
        "Run a shell command in the repository root: exit code and output. No stdin; killed "
        "after timeout seconds.",
        changes="commands",
        via="command_output",
        command="The shell command line.",
        timeout=f"Seconds before the command is killed (1-{COMMAND_MAX_TIMEOUT}).",
    )
    def run_command(self, command: str, timeout: int = 60, *, dry_run: bool = False) -> str:
        """Run a shell command in the repo root, sandboxed when self.sandbox says so; every
        process it started dies with it. `dry_run`: the command line, not run. A command that
        times out raises ToolError; the tool the model calls returns it as data instead (see
        command_output)."""
        output = self.command_output(command, timeout, dry_run=dry_run)
        if output.command is not None and output.command.timed_out:
            raise ToolError(output.text)
        return output.text

    def command_output(
        self, command: str, timeout: int = 60, *, dry_run: bool = False
    ) -> ToolOutput:
        """run_command's observation with how the command ended as data (CommandResult):
        what the agent calls, so the exit code reaches the trajectory, the JSON outputs and
        the view without being read back out of the text."""
        if not self.allow_commands:
            raise ToolError(_COMMANDS_DISABLED)
        if not command.strip():
            raise ToolError("command is empty.")
        if not 1 <= timeout <= COMMAND_MAX_TIMEOUT:
            raise ToolError(f"timeout must be between 1 and {COMMAND_MAX_TIMEOUT} seconds.")
        if dry_run:
            return ToolOutput(f"$ {command}")
        started = time.perf_counter()
        code, output, timed_out, removed = self.run_guarded(
            command, timeout, named=self.command_env, **self._placement()
        )
        elapsed = time.perf_counter() - started
        logger.info("command %r: exit %s after %.1fs", command, code, elapsed)
        policy = self.sandbox_policy
        result = CommandResult(
            command, None if timed_out else code, elapsed, timed_out,
            sandbox_note(policy, output, code, for_user=True) if policy is not None else None,
            output_tail(self.redactor.redact(output)),
        )  # fmt: skip
        if notes := self._command_notes(output, None if timed_out else code):
            output = "\n".join([output.rstrip(), *notes])
        if removed:
            output = f"{output.rstrip()}\n{_planted_git_note(removed)}"
        if timed_out:
            return ToolOutput(
                f"Command timed out after {timeout}s and was killed with its child processes. "
                "It cannot read input (stdin is closed); pass a larger timeout (max "
                f"{COMMAND_MAX_TIMEOUT}) if it just needs longer.\nOutput so far:\n{output}",
                command=result,
            )
        status = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
        text = f"$ {command}\n[{status}, {elapsed:.1f}s]\n{output or '(no output)'}"
        return ToolOutput(text, command=result)

    def run_check(self, command: str, timeout: float) -> CommandResult:
        """The user's check (`--check`, a task's `check`): run like run_command (sandboxed
        when the sandbox is on, no secrets, no stdin), whether or not the model may run
        commands, killed after `timeout` seconds. Its output tail is redacted."""
        started = time.perf_counter()
        # the project's tests run: what they plant is removed, the user is warned in the log
        code, output, timed_out, _ = self.run_guarded(
            command, timeout, named=self.command_env, **self._placement(check_shell())
        )
        policy = self.sandbox_policy
        note = sandbox_note(policy, output, code, for_user=True) if policy and code != 0 else None
        tail = cuts.cut(self.redactor.redact(output), CHECK_TAIL_CHARS, _CHECK_HOW, keep="tail")
        if timed_out:
            tail += f"\n[the check timed out after {timeout:g}s and was killed]"
        return CommandResult(command, None if timed_out else code,
                             time.perf_counter() - started, timed_out,
                             self.redactor.redact(note) if note else None, tail)  # fmt: skip

    def run_guarded(
        self, command: str, timeout: float, **options: Any
    ) -> tuple[int, str, bool, list[str]]:
        """Run `command` in the repository as every command of a run runs (the model's, the
        check, the user's linter): sandboxed when the sandbox is on, inside git's guard. The
        repositories that appeared while no command ran are the user's, kept (taken before it,
        sandboxed); the ones it made are removed after it (see GitGuard). run_shell's answer
        (`options` are its own), and the repository-relative names of what was removed."""
        guard = self.decide_git()  # before the command could change the repository
        if self.sandbox_policy is not None:
            guard.accept()  # a repository you made since the last command stays
        code, output, timed_out = run_shell(
            command, self.repo_path, timeout, policy=self.sandbox_policy, **options
        )
        return code, output, timed_out, self.remove_planted_git()

    def _placement(self, shell: str = "/bin/sh") -> dict[str, Any]:
        """run_shell's shell, and the environment's wrapper when there is one."""
        if self.environment is None:
            return {"shell": shell}
        return {"shell": self.environment.shell, "wrap": self.environment.wrap}

    def remove_planted_git(self, *, run_ended: bool = False) -> list[str]:
        """Remove the repositories (`.git`, git folders) and git paths that a command made in
        the work tree: git, run later by the user, would run their hooks and settings. What
        went, repository-relative; the user is warned in the log. Called after each command,
        and when a run ends (`run_ended`) for what an unsandboxed command left running may
        have made since (see GitGuard.sweep)."""
        if run_ended and self.sandbox_policy is not None:
            return []  # nothing of a sandboxed command outlives it: what is new is yours
        return self.git_guard.sweep()

    def _command_notes(self, output: str, code: int | None) -> list[str]:
        """What the model is told, once each, when a command seems to have failed on the
        sandbox or for a variable it was not given."""
        notes = []
        policy = None if self._sandbox_named else self.sandbox_policy
        if policy is not None and (note := sandbox_note(policy, output, code)):
            notes.append(note)
            self._sandbox_named = True
        told = self.command_env.keys() | self._withheld_named
        if missed := withheld_variables(output, code, told)[:5]:
            self._withheld_named.update(missed)
            notes.append(withheld_note(missed))
        return notes

    # ----------------------------------------------------------------------------- paths
    def _resolve(self, path: str) -> Path:
        """The real path for `path`, refused unless it stays inside the repository."""
        if "\0" in path:
            raise ToolError("path contains a NUL character.")
        if why := invalid_text("path", path):
            raise ToolError(why)
        raw = Path(path.strip() or ".")
        if "\\" in path and not os.path.lexists(self.repo_path / raw):
            raw = self._named_by_escapes(path.strip()) or raw
        candidate = raw if raw.is_absolute() else self.repo_path / raw
        try:
            resolved = candidate.resolve()
        except (OSError, RuntimeError) as exc:  # symlink loops
            raise ToolError(f"Cannot resolve {path}: {exc}") from exc
        if resolved.is_relative_to(self.repo_path):
            return resolved
        if not Path(os.path.normpath(candidate)).is_relative_to(self.repo_path):
            raise ToolRefusal(
                f"{path} is outside the repository ({self.repo_path}); "
                "use a path relative to the repository root."
            )
        raise ToolRefusal(f"{path} leads outside the repository through a symlink; refused.")

    def _named_by_escapes(self, path: str) -> Path | None:
        """The existing file `path` names when read as a tool showed it, escapes and all (see
        shown_path): how the model names a file whose name has a newline or a byte that is
        not UTF-8. Only when `path` as written names nothing."""
        named = path_from_shown(path)
        if named == path or "\0" in named or not os.path.lexists(self.repo_path / named):
            return None
        return Path(named)

    def _rel(self, resolved: Path) -> str:
        return resolved.relative_to(self.repo_path).as_posix() or "."

    def _shown(self, resolved: Path) -> str:
        """_rel as the model is shown it (see shown_path)."""
        return shown_path(self._rel(resolved))

    def _existing_file(self, path: str) -> Path:
        target = self._resolve(path)
        rel = self._shown(target)
        try:
            mode = target.stat().st_mode
        except FileNotFoundError:
            raise self._not_found(path, target) from None
        except OSError as exc:  # e.g. a folder on the way that may not be searched
            raise ToolError(f"Cannot read {rel}: {exc.strerror or exc}.") from exc
        if stat.S_ISDIR(mode):
            raise ToolError(f"{rel} is a directory; use list_files(path='{rel}') to see inside.")
        if not stat.S_ISREG(mode):
            raise ToolError(special_message(rel, mode))
        return target

    # ----------------------------------------------------------------------------- file I/O
    # How files are opened, read and written safely lives in toy_agent.files.

    def _cut_line(self, text: str, length: int | None = None, unfinished: bool = False) -> str:
        """Redact, then cut: a cut must never leave the visible head of a secret behind. `text`
        may be only the first _LINE_KEEP characters of a line `length` characters long, or
        longer still when `unfinished` (the read stopped in it, see Scan)."""
        whole = not unfinished and (length is None or length == len(text))
        text = self.redactor.redact(text)
        if whole and len(text) <= READ_MAX_LINE_CHARS:
            return text
        head = cuts.split(text, READ_MAX_LINE_CHARS).head
        left = (len(text) if whole or length is None else length) - len(head)
        what = ("over " if unfinished else "") + cuts.amount(left, "character")
        return f"{head} {cuts.note(what, _LONG_LINE)}"

    @contextlib.contextmanager
    def _open_regular(self, target: Path) -> Iterator[typing.BinaryIO]:
        """The regular file at `target` (a resolved path inside the repository), for reading,
        refused when hard-linked from outside; see toy_agent.files.open_regular."""
        with open_regular(self.repo_path, target.relative_to(self.repo_path).parts,
                          self._check_links) as f:  # fmt: skip
            yield f

    def _check_links(self, st: os.stat_result, rel: str) -> None:
        self.links.check(st, rel)

    def _rewrite(self, target: Path) -> contextlib.AbstractContextManager[Rewrite]:
        """A locked read-modify-write of `target`: see toy_agent.files.rewrite."""
        return rewrite(self.repo_path, target.relative_to(self.repo_path).parts)

    def _writable(self, path: str) -> Path:
        if os.path.basename(path.strip()) in ("", ".", ".."):
            raise ToolError(
                f"{path!r} names a folder, not a file (it is empty or ends in '/', '.' or '..'). "
                "Give the path of a file, e.g. 'newdir/notes.txt' (missing folders are created)."
            )
        target = self._resolve(path)
        if ".git" in target.relative_to(self.repo_path).parts:
            raise ToolRefusal("Refusing to write inside .git/; git's own files are off limits.")
        if self.git_guard.protects(target):
            raise ToolRefusal(
                f"Refusing to write {self._shown(target)}: the user's git runs or reads it "
                "(a hook, an included config file or a program their git config names)."
            )
        if self.git_guard.would_make_git_dir(target):
            raise ToolError(
                f"Refusing to write {self._shown(target)}: a folder on its way would then hold "
                "HEAD, objects and refs, which git takes for a repository."
            )
        if target.is_dir():
            raise ToolError(f"{self._shown(target)} is a directory; give a file path.")
        return target

    def _not_found(self, path: str, target: Path) -> ToolError:
        """A not-found error naming the closest existing paths, since LLMs often guess paths."""
        wanted = self._rel(target)
        walked = itertools.islice(self.tree.walk(self.repo_path), 20_000)
        known = [rel for rel, kind in walked if kind == "file"]
        same_name = [rel for rel in known if rel.rsplit("/", 1)[-1] == target.name]
        close = same_name[:5] or difflib.get_close_matches(wanted, known, n=3, cutoff=0.6)
        hint = f" Did you mean: {', '.join(map(shown_path, close))}?" if close else ""
        return ToolError(f"No such file or directory: {path}.{hint} Use list_files to look around.")


def _planted_git_note(removed: list[str]) -> str:
    names = ", ".join(shown_path(name) for name in removed)
    return (
        f"[Note: removed {names}: a command may not make git repositories or git's files in "
        "the work tree (the user's git would run their hooks and settings later). Make a "
        "repository you need for a test under /tmp.]"
    )


# --------------------------------------------------------------------------------- files
_LINE_KEEP = 16 * READ_MAX_LINE_CHARS  # of a longer line, only this much is kept (and redacted)
_IDENTICAL = "old_str and new_str are identical; nothing would change."
_ENDINGS_ONLY = (
    "old_str and new_str differ only in line endings. edit_file matches every line ending as "
    "\\n and keeps each line's own ending, so nothing would change."
)


def _lines(f: typing.BinaryIO, encoding: Encoding, scan: Scan) -> Iterator[tuple[str, int]]:
    """Each line as (its first _LINE_KEEP characters, its length): memory stays bounded
    however long a line is, and time too (see Scan)."""
    head: list[str] = []
    length = 0
    for piece, ending in pieces(f, encoding, scan):
        if length < _LINE_KEEP:
            head.append(piece[: _LINE_KEEP - length])
        length += len(piece)
        if ending:
            yield "".join(head), length
            head, length = [], 0
    if length:
        yield "".join(head), length


@dataclass(frozen=True)
class _Window:
    lines: list[tuple[int, str, int]]  # number, text (see _lines), length
    total: int  # lines in the file, or in the part read when `cut`
    next_line: int | None  # the first line left out because of the caps
    encoding: Encoding
    lossy: bool  # some bytes shown did not decode; they are shown as \ufffd
    cut: bool = False  # the file goes on past SCAN_MAX_BYTES, which were all that was read


def _read_window(f: typing.BinaryIO, rel: str, start: int, end: int | None) -> _Window:
    """Lines start..end within the caps, and the file's line count. Streams: big files and
    huge lines are fine, and no more than SCAN_MAX_BYTES are read."""
    encoding = text_encoding(f.read(BINARY_SNIFF_BYTES))
    if encoding is None:
        size = os.fstat(f.fileno()).st_size
        raise ToolError(
            f"{rel} is a binary file ({size:,} bytes); read_file shows text only. "
            "get_file_info gives its metadata."
        )
    shown: list[tuple[int, str, int]] = []
    chars, total, next_line = 0, 0, None
    scan = Scan()
    lines = _lines(f, encoding, scan)
    for total, (text, length) in enumerate(lines, 1):
        if total < start:
            continue
        if end is not None and total > end:
            break
        if len(shown) >= READ_MAX_LINES or (shown and chars + length > READ_MAX_CHARS):
            next_line = total
            break
        shown.append((total, text, length))
        chars += min(length, READ_MAX_LINE_CHARS)
    total += sum(1 for _ in lines)  # the lines after a break
    lossy = any(undecoded(text, encoding) for _, text, _ in shown)
    if lossy and encoding.codec == "utf-8":
        shown = [(n, UNDECODABLE.sub("\ufffd", text), size) for n, text, size in shown]
    return _Window(shown, total, next_line, encoding, lossy, scan.cut)


def _unify_endings(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _edited_endings(doc: Text, pos: int, old: str, new: str) -> list[str]:
    """The line endings once `old` at `pos` is `new`: a line kept or changed in place keeps
    its own ending, an inserted line gets the file's dominant one."""
    first = doc.text.count("\n", 0, pos)
    old_lines, new_lines = old.split("\n"), new.split("\n")
    olds = doc.endings[first : first + len(old_lines)]  # the last line's ending is after `old`
    news = [doc.dominant()] * len(new_lines)
    matcher = difflib.SequenceMatcher(None, old_lines, new_lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("equal", "replace"):  # a replaced block pairs its lines in order
            for i, j in zip(range(i1, min(i2, len(olds))), range(j1, j2), strict=False):
                news[j] = olds[i]
    tail = len(olds) == len(old_lines)  # else the edit ends the file: its last line has none
    news = news if tail else news[:-1]
    return doc.endings[:first] + news + doc.endings[first + len(old_lines) :]


def _number(lines: list[tuple[int, str]]) -> list[str]:
    width = max(4, len(str(lines[-1][0])))
    return [f"{n:>{width}} | {text}" for n, text in lines]


def _snippet(text: str, first: int, last: int, context: int = 3, cap: int = 40) -> str:
    lines = text.split("\n")
    lo, hi = max(1, first - context), min(len(lines), last + context)
    numbered = _number([(n, lines[n - 1]) for n in range(lo, hi + 1)])
    if len(numbered) > cap:
        gap = len(numbered) - cap
        gap_note = cuts.note(cuts.amount(gap, "line"), "read_file shows them")
        numbered = [*numbered[: cap // 2], gap_note, *numbered[-cap // 2 :]]
    return "\n".join(numbered)


def _find_all(text: str, needle: str) -> list[int]:
    positions, pos = [], text.find(needle)
    while pos != -1:
        positions.append(pos)
        pos = text.find(needle, pos + 1)
    return positions


def _locate(text: str, old: str, rel: str) -> int:
    """Where the one occurrence of `old` starts; ToolError for none or several."""
    positions = _find_all(text, old)
    if not positions:
        raise ToolError(_no_match_message(rel, text, old))
    if len(positions) > 1:
        lines = ", ".join(str(text.count("\n", 0, p) + 1) for p in positions[:20])
        raise ToolError(
            f"old_str occurs {len(positions)} times in {rel} (starting at lines {lines}); "
            "it must match exactly once. Add surrounding lines to old_str to make it unique."
        )
    return positions[0]


def _no_match_message(rel: str, text: str, old_str: str) -> str:
    """Point at a match that differs only in whitespace, the usual reason an edit misses."""
    lines = text.split("\n")
    wanted = [" ".join(line.split()) for line in old_str.strip("\n").split("\n")]
    squashed = [" ".join(line.split()) for line in lines]
    for i in range(len(lines) - len(wanted) + 1):
        if any(wanted) and squashed[i : i + len(wanted)] == wanted:
            near = _number([(n + 1, lines[n]) for n in range(i, i + len(wanted))][:20])
            return (
                f"old_str was not found exactly in {rel}, but lines {i + 1}-{i + len(wanted)} "
                "match it if whitespace is ignored (indentation, tabs or trailing spaces "
                "differ):\n" + "\n".join(near) + "\nCopy those lines exactly into old_str."
            )
    return (
        f"old_str was not found in {rel}. Use read_file to see the current text and copy "
        "old_str from it exactly, including indentation."
    )


_LANGUAGES = {
    ".py": "Python", ".pyi": "Python", ".js": "JavaScript", ".mjs": "JavaScript",
    ".cjs": "JavaScript", ".jsx": "JavaScript (JSX)", ".ts": "TypeScript",
    ".tsx": "TypeScript (TSX)", ".java": "Java", ".kt": "Kotlin", ".go": "Go", ".rs": "Rust",
    ".c": "C", ".h": "C/C++ header", ".cc": "C++", ".cpp": "C++", ".hpp": "C++", ".cs": "C#",
    ".rb": "Ruby", ".php": "PHP", ".swift": "Swift", ".scala": "Scala", ".sh": "Shell",
    ".bash": "Shell", ".zsh": "Shell", ".ps1": "PowerShell", ".sql": "SQL", ".html": "HTML",
    ".css": "CSS", ".scss": "SCSS", ".json": "JSON", ".yaml": "YAML", ".yml": "YAML",
    ".toml": "TOML", ".ini": "INI", ".cfg": "INI", ".xml": "XML", ".md": "Markdown",
    ".rst": "reStructuredText", ".txt": "plain text", ".csv": "CSV", ".lua": "Lua", ".r": "R",
    ".dart": "Dart", ".ex": "Elixir", ".exs": "Elixir", ".hs": "Haskell", ".vue": "Vue",
    ".tf": "Terraform", ".proto": "Protocol Buffers",
    "Dockerfile": "Dockerfile", "Makefile": "Makefile", "CMakeLists.txt": "CMake",
}  # fmt: skip


def _file_kind(f: typing.BinaryIO, name: str) -> list[str]:
    """type/language/lines (and line endings other than LF) for an open file, read in chunks
    so huge files cost no memory."""
    suffix = os.path.splitext(name)[1].lower()
    language = _LANGUAGES.get(name) or _LANGUAGES.get(suffix, "unknown")
    encoding = text_encoding(f.read(BINARY_SNIFF_BYTES))
    if encoding is None:
        return ["type: file (binary)"]
    endings: Counter[str] = Counter()
    lossy, ending, scan = False, "\n", Scan()  # an empty file has no line left open
    for piece, ending in pieces(f, encoding, scan):
        endings.update((ending,) if ending else ())
        lossy = lossy or undecoded(piece, encoding)
    lines = endings.total() + (ending == "")  # a last line without an ending counts too
    kind = f"{encoding.name} with a byte-order mark" if encoding.bom else encoding.name
    if lossy:
        kind = f"not valid {encoding.name} (read_file shows bad bytes as \ufffd)"
    counted = (
        f"at least {lines:,} (in the first {SCAN_MAX_BYTES >> 20} MB)" if scan.cut else f"{lines:,}"
    )
    info = [f"type: file (text, {kind})", f"language: {language}", f"lines: {counted}"]
    if set(endings) - {"\n"}:
        counts = ", ".join(f"{n:,} {ENDING_NAMES[e]}" for e, n in endings.most_common())
        info.append(f"line endings: {counts}")
    return info


def _entry_line(path: str, special: dict[str, str]) -> str:
    """ "src/" for a folder, "src/a.py" for a file, "pipe  (fifo)" for a special file."""
    return f"{shown_path(path)}  ({special[path]})" if path in special else shown_path(path)


def _summarise(listing: Listing, top: str) -> list[str]:
    """Too many entries: show the deepest levels that fit, folders below with file counts.

    The work is per run of entries (see Tree.listing), not per entry: a big repository has
    hundreds of thousands. The paths are sorted, and what is inside a folder "x/" lies between
    "x/" and "x0" ("0" follows "/"), so a folder's count is a few bisections."""
    paths, folders = listing.paths, listing.folders
    per_depth: Counter[int] = Counter()
    for start, stop, depth in listing.runs:
        per_depth[depth] += stop - start
    depth, fitting = 1, per_depth[1]
    while fitting + per_depth[depth + 1] <= LIST_LIMIT:  # ends: over LIST_LIMIT entries
        depth += 1
        fitting += per_depth[depth]
    shown = [(start, stop, d) for start, stop, d in listing.runs if d <= depth]

    def files_inside(folder: str) -> int:
        start = bisect.bisect_right(paths, folder)
        end = bisect.bisect_left(paths, folder[:-1] + "0", start)
        inner = bisect.bisect_left(folders, end) - bisect.bisect_left(folders, start)
        return end - start - inner

    lines: list[str] = []
    for start, stop, d in shown:
        for path in paths[start : min(stop, start + LIST_LIMIT - len(lines))]:
            if path[-1] == "/" and d == depth:  # the last level shown: what is below, counted
                lines.append(f"{shown_path(path)}  ({files_inside(path)} files inside)")
            else:
                lines.append(_entry_line(path, listing.special))
        if len(lines) == LIST_LIMIT:
            break
    example = next((paths[start][:-1] for start, _, _ in shown if paths[start][-1] == "/"), top)
    level = f"this level alone has {fitting:,}; " if fitting > LIST_LIMIT else ""
    lines.append(cuts.note(cuts.amount(len(paths) - len(lines), "entry"),
                      f"{len(paths):,} in all, too many to list; {level}showing {depth} level(s) "
                      f"with file counts per folder; list a folder to see inside, e.g. "
                      f"list_files(path='{shown_path(example)}')"))  # fmt: skip
    return lines


# --------------------------------------------------------------------------------- tools
_COMMANDS_DISABLED = (
    "run_command is disabled: shell commands are off unless the user starts the agent with "
    "--allow-commands. Use the file tools instead."
)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]{0,63}")  # what every provider accepts


@dataclass(frozen=True)
class Tool:
    """One tool, whole: what the model is shown (name, description, parameters as JSON
    Schema), what it may change (which decides whether the user is asked, whether a read-only
    run offers it and whether the run's diff tracks it), how it previews a call for the
    confirm prompt, and the function that runs it. The catalogue, the permissions, the
    change tracker, the confirm preview and the route table all read these.

    Build one from a typed, documented function with `Tool.from_function` or `@tool`.
    `context` names the function's parameters the agent fills in and the model never sees:
    "tools" (the run's CodeRepositoryTools: confined file access), "repo" (the repository
    root, a Path) and "dry_run" (True for the confirm preview: the tool says what it would
    do, and does nothing).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    changes: Changes = "nothing"
    context: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ValueError(f"tool name {self.name!r} must be 1-64 letters, digits, _ or -, "
                             "not starting with a digit or -")  # fmt: skip
        if self.changes not in ("nothing", "files", "commands"):
            raise ValueError(f"tool {self.name}: changes must be nothing, files or commands")

    @classmethod
    def from_function(
        cls,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        changes_files: bool = False,
    ) -> Tool:
        """The tool a function makes: its name, its docstring's first paragraph as the
        description, and its parameters' schema from its type hints and the docstring's
        `Args:` (or `:param x:`) lines. Parameters annotated `Path` or `CodeRepositoryTools`
        and a keyword-only `dry_run` are context (see Tool). Raises ValueError or TypeError
        for what cannot be a tool, naming it."""
        name = name or str(getattr(function, "__name__", ""))
        context = _context_parameters(function)
        signature = read_signature(function, hidden=frozenset(context))
        description = description or signature.description
        if not description:
            raise ValueError(f"tool {name}: give the function a docstring (its first line "
                             "tells the model what the tool does) or a description")  # fmt: skip
        changes: Changes = "files" if changes_files else "nothing"
        return cls(name, description, signature.schema, function, changes, context)

    @property
    def spec(self) -> ToolSpec:
        """What the model is offered (a fresh dict: callers may change it)."""
        parameters = copy.deepcopy(self.parameters)
        return {"name": self.name, "description": self.description, "parameters": parameters}

    @property
    def asks(self) -> bool:
        """Whether a permission mode may ask the user before it runs (mode ask asks for all)."""
        return self.changes != "nothing"

    def run(
        self, tools: CodeRepositoryTools, parameters: dict[str, Any] | None, dry_run: bool = False
    ) -> str | ToolOutput:
        """Check the model's parameters against the schema, fill in the context, call. The
        model's mistakes and the tool's failures raise ToolError; for a built-in, any other
        exception is a bug and raises as it is."""
        kwargs = _bind_parameters(self.name, self.parameters, parameters)
        logger.debug("tool %s %s", self.name, _preview(kwargs))
        given = {"tools": tools, "repo": tools.repo_path, "dry_run": dry_run}
        context = {param: given[kind] for param, kind in self.context.items()}
        try:
            result = self.function(**context, **kwargs)
        except ToolError as exc:
            logger.debug("tool %s failed: %s", self.name, str(exc).partition("\n")[0])
            raise
        except OSError as exc:
            logger.debug("tool %s raised", self.name, exc_info=True)
            filename = exc.filename if isinstance(exc.filename, str) else ""
            where = f" ({os.path.relpath(filename, tools.repo_path)})" if filename else ""
            raise ToolError(f"{self.name} failed: {exc.strerror or exc}{where}") from exc
        except Exception as exc:
            if self.name in _BUILTINS_BY_NAME:
                raise
            logger.debug("tool %s raised", self.name, exc_info=True)
            raise ToolError(f"{self.name} failed: {type(exc).__name__}: {exc}") from exc
        output = _output(result)
        logger.debug("tool %s succeeded (%d chars)", self.name, len(str(output)))
        return output

    def preview(self, tools: CodeRepositoryTools, parameters: dict[str, Any]) -> str:
        """What the confirm prompt shows: the tool's own dry run when it has one (the same
        code as the call, so they cannot disagree), else the call's parameters."""
        if "dry_run" not in self.context.values():
            return f"{self.name} {json.dumps(parameters, ensure_ascii=False, default=str)}"
        try:
            output = self.run(tools, parameters, dry_run=True)
            return output.text if isinstance(output, ToolOutput) else str(output)
        except ToolError as exc:
            return f"{self.name}: {exc} (the tool will refuse it)"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The function itself: a decorated function still works as one."""
        return self.function(*args, **kwargs)


@overload
def tool(function: Callable[..., Any], /) -> Tool: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, changes_files: bool = False
) -> Callable[[Callable[..., Any]], Tool]: ...
def tool(
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    changes_files: bool = False,
) -> Tool | Callable[[Callable[..., Any]], Tool]:
    """`@tool` or `@tool(changes_files=True, ...)`: the function as a Tool (see
    Tool.from_function), to hand to `ReactAgent(..., tools=[...])`."""

    def make(f: Callable[..., Any]) -> Tool:
        return Tool.from_function(f, name=name, description=description,
                                  changes_files=changes_files)  # fmt: skip

    return make if function is None else make(function)


def _context_parameters(function: Callable[..., Any]) -> dict[str, str]:
    """The parameters the agent fills in (see Tool): by type, and `dry_run` by name."""
    try:
        hints = typing.get_type_hints(function)
    except Exception as exc:  # a hint naming what the function's module does not define
        raise TypeError(f"{getattr(function, '__qualname__', function)}: its type hints "
                        f"cannot be read: {exc}") from None  # fmt: skip
    context = {}
    for pname, param in inspect.signature(function).parameters.items():
        hint = hints.get(pname)
        if hint is CodeRepositoryTools:
            context[pname] = "tools"
        elif hint is Path:
            context[pname] = "repo"
        elif pname == "dry_run" and param.kind is param.KEYWORD_ONLY:
            context[pname] = "dry_run"
    return context


def _output(result: Any) -> str | ToolOutput:
    """A tool's return value as an observation: text and ToolOutput as they are, None as
    "(no output)", JSON values as JSON, anything else as str()."""
    if isinstance(result, str | ToolOutput):
        return result
    if result is None:
        return "(no output)"
    if isinstance(result, dict | list | tuple | int | float | bool):
        try:
            return json.dumps(result, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            pass
    return str(result)


def _builtin_tools() -> tuple[Tool, ...]:
    """The built-in tools, in the order CodeRepositoryTools defines them (see _builtin)."""
    tools = []
    for name, method in vars(CodeRepositoryTools).items():
        if not hasattr(method, "__tool__"):
            continue
        description, changes, described, via = method.__tool__
        hidden = {"self": "tools", **_context_parameters(method)}
        signature = read_signature(method, hidden=frozenset(hidden), descriptions=described)
        function = getattr(CodeRepositoryTools, via) if via else method
        tools.append(Tool(name, description, signature.schema, function, changes, hidden))
    return tuple(tools)


BUILTIN_TOOLS = _builtin_tools()
_BUILTINS_BY_NAME = {tool.name: tool for tool in BUILTIN_TOOLS}


def get_available_tools(allow_commands: bool = False) -> list[dict[str, Any]]:
    """The local tools as {"name", "description", "parameters": JSON Schema}, task_complete last."""
    offered = [t for t in BUILTIN_TOOLS if allow_commands or t.changes != "commands"]
    return [*(t.spec for t in offered), {**TASK_COMPLETE_SPEC}]


TASK_COMPLETE_SPEC: dict[str, Any] = {
    "name": "task_complete",
    "description": "Finish with result: what was done and the answer (also when the task "
    "cannot be done).",
    "parameters": {
        "type": "object",
        "properties": {"result": {"type": "string", "description": "The final answer."}},
        "required": ["result"],
    },
}
# Names no other toolbox may take, whether or not run_command is on for this run.
RESERVED_TOOL_NAMES = frozenset((*_BUILTINS_BY_NAME, "task_complete"))


def _extra_tools(given: Iterable[Tool | Callable[..., Any]]) -> tuple[Tool, ...]:
    """The user's tools as Tools: a function becomes one (Tool.from_function). A name that
    is a built-in's, task_complete or taken twice is refused here, before any run."""
    if isinstance(given, Tool) or not isinstance(given, Iterable):
        given = [given]
    tools: list[Tool] = []
    for item in given:
        if isinstance(item, CodeRepositoryTools):
            raise TypeError("extra_tools takes functions and Tools; a CodeRepositoryTools is "
                            "passed to ReactAgent as tools=")  # fmt: skip
        one = item if isinstance(item, Tool) else Tool.from_function(item)
        if one.name in RESERVED_TOOL_NAMES:
            raise ValueError(f"a tool cannot be called {one.name}: that is a built-in tool's "
                             "name; pass name= to give it another")  # fmt: skip
        if any(other.name == one.name for other in tools):
            raise ValueError(f"two tools are called {one.name}; tool names must be unique")
        tools.append(one)
    return tuple(tools)


def _bind_parameters(name: str, schema: dict[str, Any], given: Any) -> dict[str, Any]:
    """Check the LLM's parameters against the tool's schema; JSON null means the default."""
    given = {} if given is None else given
    if not isinstance(given, dict):
        raise ToolError(f"Parameters for {name} must be a JSON object, got {_json_type(given)}.")
    expected: dict[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", []))
    accepted = ", ".join(p + ("" if p in required else " (optional)") for p in expected)
    unknown = sorted(set(given) - set(expected))
    if unknown:
        raise ToolError(
            f"Unknown parameter(s) for {name}: {', '.join(unknown)}. Accepted: {accepted}."
        )
    kwargs = {}
    for pname, prop in expected.items():
        value = given.get(pname)
        if value is None:
            if pname in required:
                raise ToolError(
                    f"Missing required parameter '{pname}' for {name}. Parameters: {accepted}."
                )
            continue
        kwargs[pname] = _coerce(name, pname, value, prop)
    return kwargs


def _coerce(tool: str, pname: str, value: Any, prop: dict[str, Any]) -> Any:
    """`value` as the parameter's schema types it: a number given as text becomes a number
    and the reverse, as models often write them; anything else that does not fit raises."""
    kinds = prop.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    wrong = None
    for kind in kinds:
        try:
            value = _as_json_type(tool, pname, value, kind, prop)
            break
        except ToolError as exc:
            wrong = wrong or exc
    else:
        if wrong is not None:
            raise wrong
    if "enum" in prop and value not in prop["enum"]:
        choices = ", ".join(json.dumps(v) for v in prop["enum"])
        raise ToolError(f"Parameter '{pname}' of {tool} must be one of {choices}, got "
                        f"{_short(value)}.")  # fmt: skip
    return value


def _as_json_type(tool: str, pname: str, value: Any, kind: str, prop: dict[str, Any]) -> Any:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "integer":
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            with contextlib.suppress(ValueError):  # past Python's 4,300-digit limit
                return int(value)
        raise ToolError(f"Parameter '{pname}' of {tool} must be an integer, got {_short(value)}.")
    if kind == "number":
        if number:
            return value
        with contextlib.suppress(ValueError):
            if isinstance(value, str) and value.strip():
                return float(value)
        raise ToolError(f"Parameter '{pname}' of {tool} must be a number, got {_short(value)}.")
    if kind == "boolean":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise ToolError(f"Parameter '{pname}' of {tool} must be true or false, got "
                        f"{_short(value)}.")  # fmt: skip
    if kind == "array" and isinstance(value, list):
        items = prop.get("items")
        if isinstance(items, dict) and items:
            return [_coerce(tool, f"{pname}[{i}]", v, items) for i, v in enumerate(value)]
        return value
    if kind == "object" and isinstance(value, dict):
        values = prop.get("additionalProperties")
        if isinstance(values, dict) and values:
            return {k: _coerce(tool, f"{pname}.{k}", v, values) for k, v in value.items()}
        return value
    if kind == "string":
        if isinstance(value, str):
            return value
        if number:
            return str(value)
        raise ToolError(f"Parameter '{pname}' of {tool} must be a string, got "
                        f"{_json_type(value)} {_short(value)}.")  # fmt: skip
    if kind == "null" and value is None:
        return value
    article = "an" if kind[:1] in "aeiou" else "a"
    raise ToolError(f"Parameter '{pname}' of {tool} must be {article} {kind}, got "
                    f"{_json_type(value)} {_short(value)}.")  # fmt: skip


def _diff(rel: str, before: str, after: str) -> str:
    """The unified diff a change makes, line endings as the model sees them ("\n")."""
    return unified_diff(rel, _unify_endings(before), _unify_endings(after)) or (
        f"{shown_path(rel)}: no change"
    )


def _json_type(value: Any) -> str:
    kinds = {dict: "an object", list: "an array", bool: "a boolean", str: "a string"}
    return kinds.get(type(value), "a number" if isinstance(value, (int, float)) else "a value")


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def _preview(kwargs: dict[str, Any]) -> str:
    """Parameters for the log, with long values (file contents) cut to their size."""
    return ", ".join(
        f"{k}={_short(v)}" + (f" ({len(v):,} chars)" if isinstance(v, str) and len(v) > 80 else "")
        for k, v in kwargs.items()
    )
