"""Every edit checked: after a tool changes a file, what the change introduced.

The changed file is parsed with tree-sitter (the grammars ship compiled inside their PyPI
wheels: nothing is downloaded, and nothing is imported until a file of that language is
edited), and the syntax errors that were not there before the edit are told to the model in
the edit's own observation, each with its line and the function or class around it. The
user's own linter (`--lint-cmd`) runs the same way, in the sandbox, and only its new findings
are told. Errors that were there before are never repeated, and the wording never calls the
edit a failure: the edit was applied.
"""

from __future__ import annotations

import fnmatch
import functools
import hashlib
import importlib
import logging
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any, Literal

from toy_agent.files import ToolError
from toy_agent.messages import ToolOutput

if TYPE_CHECKING:
    from toy_agent.tools import CodeRepositoryTools

logger = logging.getLogger(__name__)

LintMode = Literal["off", "on", "strict"]
LINT_MODES: tuple[LintMode, ...] = ("off", "on", "strict")
LINT_COMMAND_TIMEOUT = 60
MAX_SHOWN = 5  # findings told per edit; the rest counted
MAX_PARSE_BYTES = 2 << 20  # a bigger file is not parsed (its edit is not checked)

# suffix -> (grammar module, its language function): one wheel per language from PyPI.
GRAMMARS: dict[str, tuple[str, str]] = {
    ".py": ("tree_sitter_python", "language"), ".pyi": ("tree_sitter_python", "language"),
    ".js": ("tree_sitter_javascript", "language"), ".mjs": ("tree_sitter_javascript", "language"),
    ".cjs": ("tree_sitter_javascript", "language"), ".jsx": ("tree_sitter_javascript", "language"),
    ".ts": ("tree_sitter_typescript", "language_typescript"),
    ".mts": ("tree_sitter_typescript", "language_typescript"),
    ".cts": ("tree_sitter_typescript", "language_typescript"),
    ".tsx": ("tree_sitter_typescript", "language_tsx"),
    ".go": ("tree_sitter_go", "language"), ".rs": ("tree_sitter_rust", "language"),
    ".java": ("tree_sitter_java", "language"), ".c": ("tree_sitter_c", "language"),
    ".h": ("tree_sitter_cpp", "language"), ".cc": ("tree_sitter_cpp", "language"),
    ".cpp": ("tree_sitter_cpp", "language"), ".cxx": ("tree_sitter_cpp", "language"),
    ".hpp": ("tree_sitter_cpp", "language"), ".hh": ("tree_sitter_cpp", "language"),
    ".rb": ("tree_sitter_ruby", "language"), ".json": ("tree_sitter_json", "language"),
    ".yaml": ("tree_sitter_yaml", "language"), ".yml": ("tree_sitter_yaml", "language"),
    ".toml": ("tree_sitter_toml", "language"),
}  # fmt: skip
# Nodes that name a scope: what "the function or class around it" means per grammar.
_SCOPES = re.compile(r"(function|method|class|impl|struct|trait|interface|module|enum|"
                     r"constructor|namespace)(_definition|_declaration|_item|_specifier)?$"
                     r"|^(method|class|module|singleton_method)$")  # fmt: skip
_DEF_WORDS = {"def", "class", "function", "fn", "func", "struct", "interface", "impl", "module"}


@dataclass(frozen=True)
class Finding:
    """One problem in a file: `key` identifies it whatever its line (so an error an edit left
    alone, but moved, is not taken for a new one)."""

    line: int
    text: str  # "missing ')'", or a linter's line
    where: str = ""  # "function add", "class A"
    key: str = ""

    def describe(self) -> str:
        where = f" (in {self.where})" if self.where else ""
        return f"line {self.line}{where}: {self.text}" if self.line else self.text


@dataclass(frozen=True)
class EditCheck:
    """What one edit introduced: the new syntax errors and linter findings."""

    path: str
    errors: tuple[Finding, ...] = ()
    lint: tuple[Finding, ...] = ()
    refused: bool = False  # --lint strict put the file back
    kept_because: str = ""  # why --lint strict could not put the file back (the edit stands)

    def note(self) -> str:
        """The observation's last paragraph; '' when the edit introduced nothing."""
        if not self.errors and not self.lint:
            return ""
        parts = []
        if self.errors:
            parts.append(_count(len(self.errors), "syntax error") + ": " + _listed(self.errors))
        if self.lint:
            parts.append(_count(len(self.lint), "new linter finding") + ": " + _listed(self.lint))
        what = "; and ".join(parts)
        if self.kept_because:
            return (f"The edit was applied, and --lint strict could not undo it: {self.path} "
                    f"{self.kept_because}, so its old content was not kept; it introduced "
                    f"{what}\nFix the error with another edit.")  # fmt: skip
        if self.refused:
            return (f"The edit was not applied (--lint strict): {self.path} is as it was, "
                    f"because the change would have introduced {what}\nSend the change again "
                    "without that error.")  # fmt: skip
        return f"The edit was applied; it introduced {what}"

    def observed(self, content: str | ToolOutput) -> tuple[str | ToolOutput, bool]:
        """The tool's observation with what this edit introduced (the edit's own text first),
        and whether it is an error: a refused edit (--lint strict) is the note alone, and
        one strict could not undo is an error with the edit's own text."""
        note = self.note()
        if not note:
            return content, False
        if self.refused:
            return note, True
        broken = bool(self.kept_because)  # strict could not keep its promise: an error
        if isinstance(content, ToolOutput):
            return replace(content, text=f"{content.text}\n\n{note}"), broken
        return f"{content}\n\n{note}", broken

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "refused": self.refused,
                "syntax_errors": [f.describe() for f in self.errors],
                "lint": [f.describe() for f in self.lint]}  # fmt: skip


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' * (n != 1)}"


def _listed(findings: Sequence[Finding]) -> str:
    shown = [f.describe() for f in findings[:MAX_SHOWN]]
    more = [f"… and {len(findings) - MAX_SHOWN} more"] if len(findings) > MAX_SHOWN else []
    if len(shown) == 1 and not more:
        return shown[0]
    return "".join(f"\n  {line}" for line in [*shown, *more])


# ------------------------------------------------------------------------------- the parse
def language_of(path: str) -> tuple[str, str] | None:
    """The grammar for `path` (by its suffix), or None: a file no grammar is shipped for."""
    return GRAMMARS.get(PurePosixPath(path).suffix.lower())


@functools.cache
def tree_sitter_language(module: str, function: str = "language") -> Any:
    """A grammar shipped in a wheel (`tree_sitter_python`, ...), loaded on first use:
    tree_sitter and the grammar are imported only then, so --help and runs that parse
    nothing never load them. Shared by the edit checks and the command rules."""
    import tree_sitter

    return tree_sitter.Language(getattr(importlib.import_module(module), function)())


def parser_for(language: Any) -> Any:
    """A new parser: a tree-sitter parser is not safe to share between threads (a batch
    runs tasks in threads), and making one costs microseconds."""
    import tree_sitter

    return tree_sitter.Parser(language)


def _parser(grammar: tuple[str, str]) -> Any:
    return parser_for(tree_sitter_language(*grammar))


def syntax_errors(path: str, data: bytes) -> list[Finding] | None:
    """The syntax errors in a file's bytes; None when no grammar knows the file or the
    grammar is not installed (the edit is then not checked)."""
    grammar = language_of(path)
    if grammar is None or len(data) > MAX_PARSE_BYTES:
        return None
    try:
        parser = _parser(grammar)
    except ImportError:
        logger.debug("no tree-sitter grammar %s installed: edits to %s are not checked",
                     grammar[0], path)  # fmt: skip
        return None
    root = parser.parse(data).root_node
    if not root.has_error:
        return []
    if root.is_error:  # the whole file is one error: where it starts is all there is to say
        return [_finding(root, f"cannot parse {_token(_first_line(root))}")]
    found: list[Finding] = []
    _collect(root, found)
    return found


def _collect(node: Any, found: list[Finding]) -> None:
    """The outermost error and missing nodes (an error inside an error is the same one)."""
    for child in node.children:
        if child.is_missing:
            kind = child.type  # a node kind (identifier) as it is, a token ")" quoted
            found.append(
                _finding(child, f"missing {kind if kind.isidentifier() else _token(kind)}")
            )
        elif child.is_error:
            found.append(_finding(child, f"cannot parse {_token(_first_line(child))}"))
        elif child.has_error:
            _collect(child, found)


def _finding(node: Any, text: str) -> Finding:
    where = _scope(node)
    return Finding(node.start_point[0] + 1, text, where, f"{text}|{where}")


def _scope(node: Any) -> str:
    """`function add`, `method A.add`, `class A`: the named scopes around `node`, innermost
    first kind; for an error that swallowed a definition's head, the name it starts with."""
    names: list[str] = []
    kind = ""
    if node.is_error:
        words = [c for c in node.children[:3]]
        for word, name in zip(words, words[1:], strict=False):
            if word.type in _DEF_WORDS and name.type in ("identifier", "type_identifier",
                                                         "constant", "name"):  # fmt: skip
                kind, names = _kind(word.type), [_text(name)]
                break
    parent = node.parent
    while parent is not None:
        if _SCOPES.search(parent.type):
            name_node = parent.child_by_field_name("name") or parent.child_by_field_name("type")
            if name_node is not None:
                names.insert(0, _text(name_node))
                kind = kind or _kind(parent.type)
        parent = parent.parent
    if not names:
        return ""
    if kind == "function" and len(names) > 1:
        kind = "method"
    return f"{kind} {'.'.join(names[-2:])}"


def _kind(node_type: str) -> str:
    for word in ("method", "class", "struct", "trait", "interface", "impl", "module", "enum",
                 "constructor", "namespace"):  # fmt: skip
        if word in node_type:
            return word
    return "function"


def _text(node: Any) -> str:
    return bytes(node.text or b"").decode("utf-8", "replace")[:60]


def _first_line(node: Any) -> str:
    text = _text(node).strip().split("\n", 1)[0].strip()
    return text[:40] + ("…" if len(text) > 40 else "")


def _token(text: str) -> str:
    return f'"{text}"' if text else "(empty)"


# ------------------------------------------------------------------------------ the linter
@dataclass(frozen=True)
class LintCommand:
    """`--lint-cmd [GLOB=]CMD`: CMD (with `{file}` for the changed file) for files matching
    GLOB (every file when none is given)."""

    command: str
    pattern: str = "*"

    @classmethod
    def parse(cls, text: str) -> LintCommand:
        glob, sep, command = text.partition("=")
        if sep and glob.strip() and " " not in glob.strip() and "{" not in glob:
            return cls(command.strip(), glob.strip())
        return cls(text.strip())

    def matches(self, rel: str) -> bool:
        name = PurePosixPath(rel).name
        return fnmatch.fnmatch(rel, self.pattern) or fnmatch.fnmatch(name, self.pattern)

    def line(self, rel: str) -> str:
        import shlex

        return self.command.replace("{file}", shlex.quote(rel))


_NUMBERS = re.compile(r"\d+")


def lint_findings(output: str) -> list[Finding]:
    """A linter's output as findings, one per non-empty line; the key ignores numbers, so a
    finding whose line moved is the same finding."""
    lines = [line.rstrip() for line in output.splitlines() if line.strip()]
    return [Finding(0, line[:300], "", _NUMBERS.sub("#", line)) for line in lines[:200]]


# ------------------------------------------------------------------------------ the checker
@dataclass
class EditChecker:
    """Checks the files a run's tools change. `before(rel)` reads a file before a change;
    `after(rel, before)` says what the change introduced (and under strict puts the file back
    when it introduced a syntax error). Costs two reads and two parses per edit (a parse is
    remembered by content, so the file as it was is usually parsed already), and with a
    `--lint-cmd` two linter runs (the same)."""

    tools: CodeRepositoryTools
    mode: LintMode = "on"
    commands: tuple[LintCommand, ...] = ()
    _seen: dict[str, list[Finding] | None] = field(default_factory=dict)
    _linted: dict[tuple[str, str, str], list[Finding]] = field(default_factory=dict)
    # files whose bytes `before` found but could not keep, and why: these are never put back
    _unkept: dict[str, str] = field(default_factory=dict)

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def target(self, tool_name: str, parameters: dict[str, Any]) -> str | None:
        """The file a file-changing tool is about to change (its `path`, as the change
        tracker names it), when edits are checked and its kind can be; else None."""
        if not self.enabled or self.tools.changes(tool_name) != "files":
            return None
        path = parameters.get("path")
        if not isinstance(path, str):
            return None
        try:
            rel = self.tools.relative(path)
        except ToolError:
            return None
        return rel if self.wants(rel) else None

    def wants(self, rel: str) -> bool:
        return self.enabled and (
            language_of(rel) is not None or any(c.matches(rel) for c in self.commands)
        )

    def before(self, rel: str) -> bytes | None:
        """The file's bytes before a change (None: missing or not kept); the user's
        linter runs on it now, unless its findings on these bytes are remembered."""
        from toy_agent.files import DIFF_MAX_BYTES, file_state

        state = file_state(self.tools.repo_path, rel, self.tools.links)
        data = None if state.linked_outside else state.data
        self._unkept.pop(rel, None)
        if data is None and state.digest is not None:  # it exists, but what it holds is lost
            self._unkept[rel] = (
                "was hard-linked from outside the repository" if state.linked_outside
                else f"is over {DIFF_MAX_BYTES >> 20} MB" if state.too_big
                else f"could not be read ({state.digest.strip('<>')})"
            )  # fmt: skip
        for command in (c for c in self.commands if c.matches(rel)):
            self._lint(command, rel, data)
        return data

    def after(self, rel: str, old: bytes | None) -> EditCheck:
        new = self._read(rel)
        if new is None or new == old:
            return EditCheck(rel)
        errors = _new(self._errors(rel, old), self._errors(rel, new))
        lint: list[Finding] = []
        for command in (c for c in self.commands if c.matches(rel)):
            lint += _new(self._lint(command, rel, old), self._lint(command, rel, new))
        if not errors or self.mode != "strict":
            return EditCheck(rel, tuple(errors), tuple(lint))
        unkept = self._unkept.get(rel, "")
        if unkept:  # putting back None would delete a file we could not read back: leave it
            return EditCheck(rel, tuple(errors), tuple(lint), kept_because=unkept)
        self._restore(rel, old)
        return EditCheck(rel, tuple(errors), tuple(lint), refused=True)

    def _read(self, rel: str) -> bytes | None:
        from toy_agent.files import file_state

        state = file_state(self.tools.repo_path, rel, self.tools.links)
        return None if state.linked_outside else state.data

    def _errors(self, rel: str, data: bytes | None) -> list[Finding]:
        if data is None:
            return []
        digest = hashlib.sha256(data).hexdigest()
        if digest not in self._seen:
            self._seen[digest] = syntax_errors(rel, data)
            if len(self._seen) > 64:
                self._seen.pop(next(iter(self._seen)))
        return self._seen[digest] or []

    def _lint(self, command: LintCommand, rel: str, data: bytes | None) -> list[Finding]:
        """The linter's findings on the file as it is now, which holds `data`."""
        if data is None:
            return []
        key = (command.command, rel, hashlib.sha256(data).hexdigest())
        if key not in self._linted:
            self._linted[key] = self._run_linter(command, rel)
        return self._linted[key]

    def _run_linter(self, command: LintCommand, rel: str) -> list[Finding]:
        # the linter runs the repository's code (its eslint config, its pytest plugins): as
        # any command, sandboxed when commands are, and what it plants for git is removed
        code, output, timed_out, _ = self.tools.run_guarded(command.line(rel), LINT_COMMAND_TIMEOUT)
        if timed_out:
            return [Finding(0, f"the linter `{command.command}` timed out", "", "timeout")]
        return lint_findings(self.tools.redactor.redact(output)) if code != 0 else []

    def _restore(self, rel: str, data: bytes | None) -> None:
        from toy_agent.files import write_at

        if data is None:  # the file did not exist (`after` never restores one it could not keep)
            (self.tools.repo_path / rel).unlink(missing_ok=True)
        else:
            write_at(self.tools.repo_path, rel, data)


def _new(before: Iterable[Finding], after: Iterable[Finding]) -> list[Finding]:
    """The findings of `after` that `before` did not have (as many times as it had them)."""
    left = Counter(f.key for f in before)
    new = []
    for finding in after:
        if left[finding.key] > 0:
            left[finding.key] -= 1
        else:
            new.append(finding)
    return new


def edit_checker(
    tools: CodeRepositoryTools, mode: LintMode = "on", commands: Iterable[str] = ()
) -> EditChecker:
    return EditChecker(tools, mode, tuple(LintCommand.parse(c) for c in commands))
