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

Command rules (`--allow-command`, `--deny-command`) are words (`git diff` matches `git diff
--stat`, never `git difftool`; a word may be a glob over that one word, `pytest*`), checked
against every command of a line parsed as /bin/sh will read it (tree-sitter-bash, read as POSIX
sh): a line is denied when any of its commands matches a deny rule, and runs without asking
only when every command matches an allow rule. A line whose commands are not all known before
it runs (command substitution, a here-document, a loop ...) never matches an allow rule, so
it asks; a line the shell may read differently from the parser (bash's own syntax, a syntax
error) is uncertain: with deny rules and no one to ask, it is refused. Deny rules are a
convenience that catches the commands you name, not a wall: `sh -c`, `env`, `xargs` or a
script can run anything, which only the sandbox bounds.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from toy_agent.lint import parser_for, tree_sitter_language
from toy_agent.messages import ToolOutput, visible, wire_text
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
# What the model is told of an action that did not run (its observation).
DECLINED = (
    "The user declined this action; it was not run. Ask yourself why, and try something "
    "else or finish with task_complete."
)
DECLINED_BECAUSE = (
    "The user declined this action; it was not run. The user's reason: {reason}\n"
    "Take it into account, and try something else or finish with task_complete."
)
UNANSWERED = (
    "This action needs the user's approval ({mode}) and no answer could be read (no "
    "one is there to answer: stdin is closed, or this is a batch run), so it was not run. Do "
    "without it, or finish with task_complete and say what you would have done."
)
REFUSED = (
    "Refused: {reason}. It was not run. Do not try to get around this; use another way, or "
    "finish with task_complete."
)
HOOK_REFUSED = "the user's pre_tool hook refused it: {reason}"


@dataclass(frozen=True)
class Decision:
    """What happens to one action: it runs, the user is asked, or it is refused (`reason`
    says why, for the model: the rule that matched, or the mode)."""

    verdict: Verdict
    reason: str = ""
    rule: str = ""  # the deny rule that matched, when one did


@dataclass(frozen=True)
class Refusal:
    """An action that did not run: who refused it, why (for the run's record; "" when the
    user declined without a reason), and the observation the model is given."""

    by: RefusedBy
    reason: str
    observation: str


@dataclass(frozen=True)
class Answer:
    """The user's answer at the confirm prompt: `reason` is what they said after no."""

    approved: bool
    reason: str = ""
    always: bool = False  # "all": yes to every action from now on
    unanswered: bool = False  # no answer could be read (stdin closed): declined


# --- taking a command line apart -------------------------------------------------------------
#
# run_command runs `/bin/sh -c LINE` (toy_agent.shell): dash on Debian and Ubuntu, bash (in
# POSIX mode) on many other systems. The line is parsed with tree-sitter-bash, whose grammar is
# a superset of both; what the two shells read differently (bash's own syntax: `$'...'`,
# `[[ ]]`, `{a,b}`, `&>` ...) and whatever the grammar itself reads differently from the shell
# (checked below: a byte it skipped that the shell would not, a here-document's end, a `#`
# inside a word) make the reading uncertain. What the grammar is known to misread in ways that
# can be mended (a line continuation ...) is mended first, see _parse. tests/test_permissions.py
# holds all of it to what the real /bin/sh runs.

_MAX_DEPTH = 200  # nesting deeper than this is not read (the walk is recursive)
_MAX_PASSES = 8  # mendings (see _parse) before giving up

# Node types whose text is taken apart with certainty and may match an allow rule.
_PLAIN = frozenset({
    "program", "list", "pipeline", "subshell", "compound_statement", "negated_command",
    "redirected_statement", "command", "command_name", "word", "string", "string_content",
    "raw_string", "concatenation", "simple_expansion", "variable_name", "special_variable_name",
    "number", "file_redirect", "file_descriptor", "variable_assignment", "variable_assignments",
    "comment",
})  # fmt: skip
# POSIX constructs read with certainty, whose commands deny rules see, but which run text the
# split cannot fully know before it runs (or decide what runs): never matched by allow rules.
_OPAQUE = {
    "command_substitution": "command substitution", "expansion": "`${...}`",
    "arithmetic_expansion": "arithmetic", "heredoc_redirect": "a here-document",
    "heredoc_start": "", "heredoc_body": "", "heredoc_content": "", "heredoc_end": "",
    "if_statement": "`if`", "elif_clause": "", "else_clause": "", "while_statement": "a loop",
    "for_statement": "a loop", "do_group": "", "case_statement": "`case`", "case_item": "",
    "function_definition": "a function", "test_command": "a test `[ ]`",
    "declaration_command": "`export`, `readonly` or `local`", "unset_command": "`unset`",
    "binary_expression": "", "unary_expression": "", "parenthesized_expression": "",
    "postfix_expression": "", "ternary_expression": "", "test_operator": "",
}  # fmt: skip
# What bash reads one way and dash another (or not at all).
_BASH_ONLY = {
    "ansi_c_string": "`$'...'` quoting", "translated_string": "`$\"...\"` quoting",
    "brace_expression": "brace expansion `{a,b}`", "array": "an array",
    "subscript": "an array", "herestring_redirect": "a here-string `<<<`",
    "process_substitution": "process substitution", "c_style_for_statement": "`for ((...))`",
    "extglob_pattern": "an extended glob", "regex": "`[[ =~ ]]`",
    "|&": "`|&`", "&>": "`&>`", "&>>": "`&>>`", ";&": "`;&`", ";;&": "`;;&`", "<<<": "`<<<`",
    "<(": "process substitution", ">(": "process substitution", "((": "`((...))`",
    "[[": "`[[ ]]`", "$[": "`$[...]`", "function": "`function`", "select": "`select`",
    "declare": "`declare`", "typeset": "`typeset`", "+=": "`+=`",
}  # fmt: skip
_ESCAPE = re.compile(r"\\(.)", re.S)  # `\x` outside quotes: `x`
_QUOTED_ESCAPE = re.compile(r'\\([$`"\\])')  # what a backslash escapes in double quotes
_BYTE_ESCAPE = re.compile(rb"\\.", re.S)
_ESCAPED_BLANK = re.compile(rb"[ \t\n]*\\([ \t])[ \t\n]*")
_ODD_CHARACTER = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]|(?=[^ \t\n])\s")  # \r, \v, NBSP ...


@dataclass(frozen=True)
class Command:
    """One simple command of a line: `words` as written (assignments, redirections, the name,
    the arguments; quotes removed), `program` the words the program runs with."""

    words: tuple[str, ...]
    program: tuple[str, ...]

    def __str__(self) -> str:
        return " ".join(self.words)


@dataclass(frozen=True)
class CommandLine:
    """A shell line as its simple commands, and how far that split can be trusted.

    `certain`: the line was read as /bin/sh reads it, so `commands` lists every command it
    can run (those inside `$(...)`, loops and functions too). `safe`: moreover the commands are
    all that runs and their words are known before it runs (no substitution, here-document,
    loop ...), so allow rules may apply. `why`: what made it unsafe or uncertain."""

    commands: tuple[Command, ...]
    safe: bool
    certain: bool
    why: str = ""


def split_commands(line: str) -> CommandLine:
    """`line`'s simple commands as /bin/sh will read them, and how far that can be trusted."""
    reader = _Reader()
    odd = _ODD_CHARACTER.search(line)
    if odd:
        reader.uncertain(f"the character U+{ord(odd[0]):04X}")
    try:
        source = line.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        source = line.encode("utf-8", "replace")
        reader.uncertain("text that is not UTF-8")
    tree, reader.source = _parse(source, reader)
    reader.visit(tree.root_node, 0)
    reader.check_leaves(tree.root_node)
    why = reader.uncertain_why or reader.unsafe_why
    return CommandLine(tuple(reader.commands), not why, not reader.uncertain_why,
                       ", ".join(dict.fromkeys(why)))  # fmt: skip


def _parse(source: bytes, reader: _Reader) -> tuple[Any, bytes]:
    """The tree of `source`, once what the grammar misreads is written the way it reads it
    right, which changes nothing for the shell; the line is read again after each mending,
    until none is needed:

    - it skips a backslash-newline as a blank, where the shell joins what is either side
      (`dif\\<newline>ftool` is `difftool`): removed, as the shell removes it (not in single
      quotes, comments and here-documents, where the shell keeps it);
    - it reads a newline then an escaped character as the start of a word
      (`pytest<newline>\\touch x` as one command): a blank after the newline;
    - after a quote it skips an escaped blank (`'a'\\ b`, one word): quoted instead."""
    parser = parser_for(tree_sitter_language("tree_sitter_bash"))
    for _ in range(_MAX_PASSES):
        tree = parser.parse(source)
        edits = _mendings(tree, source)
        if not edits:
            return tree, source
        mended = bytearray(source)
        for start, length, text in sorted(edits, reverse=True):
            mended[start : start + length] = text
        source = bytes(mended)
    reader.uncertain("a line the parser cannot read")
    return tree, source


def _mendings(tree: Any, source: bytes) -> list[tuple[int, int, bytes]]:
    """(where, how many bytes, what instead): the first kind of mending `_parse` needs."""
    joins = [m.start() for m in re.finditer(rb"\\\n", source) if _continues(tree, source, m)]
    if joins:
        return [(start, 2, b"") for start in joins]
    if b"<<" in source:  # a blank or a quote would change a here-document
        return []
    leaves = list(_leaves(tree.root_node))
    edits = [(leaf.start_byte + 1, 0, b" ") for leaf in leaves
             if leaf.type == "word" and leaf.text.startswith(b"\n")]  # fmt: skip
    if edits:
        return edits
    position = 0
    for leaf in leaves:
        gap = _ESCAPED_BLANK.fullmatch(source[position : leaf.start_byte])
        if gap:
            edits.append((position + gap.start(1) - 1, 2, b"'" + gap[1] + b"'"))
        position = max(position, leaf.end_byte)
    return edits


def _leaves(root: Any) -> Iterator[Any]:
    """The tree's leaves (words, operators, keywords, comments) in the order of the text."""
    cursor = root.walk()
    while True:
        if cursor.node.child_count == 0:
            yield cursor.node
        if cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return


def _continues(tree: Any, source: bytes, match: re.Match[bytes]) -> bool:
    """Whether the backslash-newline at `match` is a line continuation for the shell."""
    start = escapes = match.start()
    while escapes > 0 and source[escapes - 1] == 0x5C:  # a backslash
        escapes -= 1
    if (start - escapes) % 2:  # `\\` then a newline: an escaped backslash, then a real newline
        return False
    node = tree.root_node.descendant_for_byte_range(start, start + 1)
    while node is not None:
        if node.type in ("raw_string", "comment", "ansi_c_string", "heredoc_body"):
            return False
        node = node.parent
    return True


class _Reader:
    """Walks the tree: the commands, and why the line is not safe or not certain."""

    def __init__(self) -> None:
        self.source = b""
        self.commands: list[Command] = []
        self.unsafe_why: list[str] = []
        self.uncertain_why: list[str] = []
        self.bodies: list[tuple[int, int]] = []  # where here-documents' texts are

    def uncertain(self, what: str) -> None:
        self.uncertain_why.append(what)

    def text(self, node: Any) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")

    def visit(self, node: Any, depth: int) -> None:
        kind = node.type
        if depth > _MAX_DEPTH:
            self.uncertain("nesting too deep")
            return
        if node.is_error or node.is_missing:
            self.uncertain("a syntax error")
        elif not node.is_named:
            pass  # a keyword or an operator: check_leaves looks at those
        elif kind in _BASH_ONLY:
            self.uncertain(_BASH_ONLY[kind])
        elif kind in _OPAQUE:
            self.unsafe_why += [_OPAQUE[kind]] if _OPAQUE[kind] else []
        elif kind not in _PLAIN:
            self.uncertain(f"`{kind}`")
        if kind == "command":
            self.command(node, ())
        elif kind == "redirected_statement":
            body, *redirects = node.named_children
            inner = body.named_children[-1] if body.type == "negated_command" else body
            if inner.type == "command":  # `! pytest > out -q` runs `pytest -q`
                self.command(inner, tuple(redirects))
                for child in (*redirects, *inner.children):
                    self.visit(child, depth + 1)
                return
            if any(self.redirect_targets(child)[1:] for child in redirects):
                self.uncertain("words after the redirection of a compound command")
        elif kind in ("variable_assignment", "variable_assignments") and (
            node.parent is None or node.parent.type not in ("command", "declaration_command")
        ):
            assignments = [node] if kind == "variable_assignment" else node.named_children
            self.commands.append(Command(tuple(self.value(a) for a in assignments), ()))
        elif kind in ("declaration_command", "unset_command", "test_command"):
            words = tuple(self.leaf_words(node))
            self.commands.append(Command(words, words))
            if kind == "test_command" and words[:1] != ("[",):
                self.uncertain("`[[ ]]`")
        elif kind == "heredoc_redirect":
            self.check_heredoc(node)
        elif kind == "file_redirect" and re.fullmatch(r"\d*[<>]&", self.redirect_words(node)[0]):
            if not re.fullmatch(r"\d+|-", "".join(self.redirect_words(node)[1:2])):
                self.uncertain("`>&` to something not a file descriptor")  # bash: to a file
        elif kind == "heredoc_body":
            self.bodies.append((node.start_byte, node.end_byte))
        elif kind == "compound_statement" and self.text(node)[:2] == "((":
            self.uncertain("`((...))`")
        elif (
            kind == "command_substitution"
            and self.text(node)[:1] == "`"
            and "\\" in self.text(node)
        ):
            self.uncertain("a backslash inside backticks")
        self.visit_children(node, depth + 1)

    def visit_children(self, node: Any, depth: int) -> None:
        for child in node.children:
            self.visit(child, depth)

    def command(self, node: Any, redirects: tuple[Any, ...]) -> None:
        """One simple command: its words, in order; redirections count as words."""
        words: list[str] = []
        program: list[str] = []
        last: list[Any] = []  # the nodes of the last word of `program`, if it was the last
        end = -1
        for child, part_end in self.parts(node, redirects):
            joined, end = child.start_byte == end, part_end
            if child.type == "variable_assignment" or child.type.endswith("_redirect"):
                if joined and child.type == "variable_assignment":
                    self.uncertain("words the parser split where the shell does not")
                words += (
                    [self.value(child)]
                    if child.type == "variable_assignment"
                    else self.redirect_words(child)
                )
                last = []
                continue
            if child.type == "subshell":  # `a ( b )`: the grammar takes it, sh refuses the line
                self.uncertain("a syntax error")
            parts = child.named_children[:1] if child.type == "command_name" else [child]
            if joined and last:  # `'p'\y` is one word, `py`, which the grammar reads as two
                parts = last + parts
                words.pop(), program.pop()
            elif joined:
                self.uncertain("words the parser split where the shell does not")
            last = parts
            if not program and not all(map(self.plain_name, parts)):  # known only as it runs
                self.uncertain("a command name that is not plain text")
            if (
                not program
                and [p.type for p in parts] == ["word"]
                and self.text(child) in _RESERVED
            ):
                self.uncertain(f"`{self.text(child)}` where a command should be")
            if _BRACES.search("".join(map(self.unquoted, parts))):
                self.uncertain(_BASH_ONLY["brace_expression"])
            value = "".join(map(self.value, parts))
            words.append(value)
            program.append(value)
        self.commands.append(Command(tuple(words), tuple(program)))

    def parts(self, node: Any, redirects: tuple[Any, ...]) -> list[tuple[Any, int]]:
        """A command's assignments, words and redirections in order, each with where it ends.
        The grammar puts the words after a redirection's target inside the redirection
        (`pytest > out -q` runs `pytest -q`): they come out as words of their own."""
        parts = []
        for child in (*node.named_children, *redirects):
            if child.type == "comment":
                continue
            if not child.type.endswith("_redirect"):
                parts.append((child, child.end_byte))
                continue
            target, *extra = self.redirect_targets(child) or [child]
            parts.append((child, target.end_byte))
            parts += [(word, word.end_byte) for word in extra]
        return parts

    def redirect_targets(self, node: Any) -> list[Any]:
        """A redirection's target (a here-document's delimiter), then any words after it."""
        return [c for c in node.named_children if c.type in _WORDS]

    def plain_name(self, node: Any) -> bool:
        """Whether a command's name is known before it runs: quoted or unquoted text
        without a glob, a variable or a substitution."""
        if node.type == "word":
            return not any(c in self.text(node) for c in "*?[")
        if node.type == "raw_string":
            return True
        if node.type == "string":
            return all(child.type == "string_content" for child in node.named_children)
        return node.type == "concatenation" and all(map(self.plain_name, node.named_children))

    def unquoted(self, node: Any) -> str:
        """A word's unquoted text, each quoted or escaped character as `_`."""
        if node.type == "word":
            return _ESCAPE.sub("_", self.text(node))
        if node.type == "concatenation":
            return "".join(map(self.unquoted, node.children))
        return "_"

    def value(self, node: Any) -> str:
        """A word with its quotes removed (what the shell passes on, before expansions)."""
        text = self.text(node)
        match node.type:
            case "word":
                return _ESCAPE.sub(r"\1", text)
            case "raw_string":
                return text[1:-1]
            case "string":
                return _QUOTED_ESCAPE.sub(r"\1", text[1:-1])
            case "concatenation":
                return "".join(self.value(child) for child in node.children)
            case "variable_assignment":
                name, *rest = node.children
                return self.text(name) + "".join(self.value(child) for child in rest)
            case _:
                return text

    def redirect_words(self, node: Any) -> list[str]:
        """`2>&1` as `2>&`, `1`; `> out` as `>`, `out`; `<<EOF` as `<<`, `EOF`."""
        operator = [c for c in node.children if c.type == "file_descriptor" or not c.is_named]
        return [
            "".join(map(self.text, operator)),
            *map(self.value, self.redirect_targets(node)[:1]),
        ]

    def leaf_words(self, node: Any) -> list[str]:
        """The words of a test or declaration, for deny rules and messages."""
        if node.type in ("word", "string", "raw_string", "concatenation", "number",
                         "simple_expansion", "expansion", "command_substitution",
                         "variable_assignment") or not node.children:  # fmt: skip
            return [self.value(node)]
        return [word for child in node.children for word in self.leaf_words(child)]

    def check_heredoc(self, node: Any) -> None:
        """The grammar and the shell agree where a here-document ends only in the plain
        cases: a plain or wholly quoted delimiter, its end line exactly the delimiter (tabs
        before it with `<<-`), no earlier line of it so, and no backslash-newline in it (the
        shell removes those where the delimiter is unquoted)."""
        parts = {child.type: child for child in node.children}
        start, end = parts.get("heredoc_start"), parts.get("heredoc_end")
        delimiter = _DELIMITER.fullmatch(self.text(start)) if start is not None else None
        if delimiter is None or end is None:
            self.uncertain("a here-document with an unusual delimiter")
            return
        word = next(group for group in delimiter.groups() if group is not None)
        tabs = "<<-" in parts
        line_end = self.source.find(b"\n", end.end_byte)
        body_start = parts["heredoc_body"].start_byte if "heredoc_body" in parts else None
        if body_start is None:
            body_start = self.source.rfind(b"\n", 0, end.start_byte) + 1
        lines = self.source[body_start : line_end if line_end >= 0 else len(self.source)]
        *body, last = lines.decode("utf-8", "surrogateescape").split("\n")
        if tabs:
            body, last = [b.lstrip("\t") for b in body], last.lstrip("\t")
        if last != word or word in body or self.source[body_start - 1 : body_start] != b"\n":
            self.uncertain("a here-document whose end /bin/sh may read elsewhere")
        if "\\\n" in "\n".join(body) + "\n":
            self.uncertain("a backslash-newline inside a here-document")
        if delimiter[1] and "`" in "\n".join(body):  # unquoted: run, and the grammar misses it
            self.uncertain("backticks inside a here-document")

    def check_leaves(self, root: Any) -> None:
        """Every byte the grammar skipped must be a blank to the shell too (not `\\ `, `\\r`
        ...), and no operator or keyword may be bash's own."""
        position = 0
        for node in _leaves(root):
            gap = self.source[position : node.start_byte]
            in_body = any(start < node.start_byte <= end for start, end in self.bodies)
            if gap.strip(b" \t\n") and not in_body:  # a here-document's text is its own
                shown = visible(gap.strip().decode("utf-8", "replace"))
                self.uncertain(f"`{shown}` read as a blank")
            if node.type in _BASH_ONLY and not node.is_named:
                self.uncertain(_BASH_ONLY[node.type])
            text = self.source[node.start_byte : node.end_byte]
            if node.type == "word" and re.search(rb"\s", _BYTE_ESCAPE.sub(b"", text)):
                self.uncertain("a blank the parser read as part of a word")
            before = self.source[node.start_byte - 1 : node.start_byte]
            after = self.source[node.end_byte : node.end_byte + 1]
            if node.type == "{" and after not in (b" ", b"\t", b"\n"):
                self.uncertain("`{` without a blank after it")
            if node.type == ";;" and node.parent.type != "case_item":
                self.uncertain("`;;` outside `case`")
            if node.type == "number" and b"#" in node.text:
                self.uncertain(f"`{node.text.decode('utf-8', 'replace')}` read as a number")
            if node.type == "comment" and before and before not in b" \t\n;&|()":
                self.uncertain("a `#` inside a word read as a comment")
            if node.type == "$" and self.source[node.end_byte : node.end_byte + 1] == b'"':
                self.uncertain(_BASH_ONLY["translated_string"])
            position = max(position, node.end_byte)
        if self.source[position:].strip(b" \t\n"):
            self.uncertain("text the parser skipped")


_RESERVED = frozenset({"!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi",
                       "for", "if", "in", "then", "until", "while", "function", "select", "[[",
                       "]]"})  # fmt: skip
_WORDS = frozenset({
    "word", "string", "raw_string", "concatenation", "number", "simple_expansion", "expansion",
    "command_substitution", "arithmetic_expansion", "ansi_c_string", "translated_string",
    "brace_expression", "heredoc_start", "process_substitution",
})  # fmt: skip
_BRACES = re.compile(r"\{[^{}]*(,|\.\.)[^{}]*\}")  # what bash expands and dash does not
_DELIMITER = re.compile(r"([\w.-]+)|'([^']*)'|\"([^\"$`\\]*)\"|\\([\w.-]+)")


# --- rules -----------------------------------------------------------------------------------


def rule_matches(rule: str, words: Sequence[str]) -> bool:
    """A rule is words: it matches a command whose first words are those words, whatever
    arguments follow (`git diff` matches `git diff --stat`, not `git difftool`). A word with
    `*`, `?` or `[` is a glob over one word (`pytest*` matches `pytest-3 -q`; `*` never spans
    a space, so `git diff*` does match `git difftool`: the user wrote it); a last word `*`
    alone adds nothing (`git diff *` is `git diff`)."""
    pattern = rule.split()
    if not pattern:
        return False  # an empty rule matches nothing (the CLI refuses one)
    if pattern[-1] == "*":
        pattern.pop()
    if len(words) < len(pattern):
        return False
    return all(
        fnmatch.fnmatchcase(word, part) if any(c in part for c in "*?[") else word == part
        for part, word in zip(pattern, words[: len(pattern)], strict=True)
    )


def _deny_forms(program: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The command as deny rules see it: the program's words (no `VAR=value`, no
    redirection), also without a leading `time`, and with the program named without its
    folder (`/usr/bin/curl` is `curl`)."""
    forms = [program]
    rest = program[1:] if program[:1] == ("time",) else program
    if rest and "/" in rest[0]:
        rest = (rest[0].rsplit("/", 1)[1], *rest[1:])
    if rest != program and rest:
        forms.append(rest)
    return forms


@dataclass(frozen=True)
class CommandRules:
    """--allow-command and --deny-command patterns. Deny wins over allow."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, list[str]]:
        return {"allow": list(self.allow), "deny": list(self.deny)}

    def check(self, line: str) -> tuple[Literal["allow", "deny", "unsure", "none"], str, str]:
        """("deny", rule, the command it matched); ("unsure", "", why) when there are deny
        rules but the line cannot be read with certainty; ("allow", "", "") when every command
        of the line matches an allow rule; else ("none", "", "")."""
        if not self.allow and not self.deny:
            return "none", "", ""
        parsed = split_commands(line)
        for command in parsed.commands:
            for form in _deny_forms(command.program):
                for rule in self.deny:
                    if rule_matches(rule, form):
                        return "deny", rule, str(command)
        if self.deny and not parsed.certain:
            return "unsure", "", parsed.why
        allowed = (any(rule_matches(rule, c.words) for rule in self.allow) for c in parsed.commands)
        if parsed.safe and parsed.commands and self.allow and all(allowed):
            return "allow", "", ""
        return "none", "", ""


_UNSURE = (
    "the line cannot be checked against the user's deny rules: /bin/sh may read it differently "
    "from the checker ({why}); write it in plain POSIX sh"
)


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
            if verdict == "unsure" and not self._commands_ask:  # no one is asked: refused
                return Decision("deny", _UNSURE.format(why=command), " ".join(self.rules.deny))
            if verdict == "allow" or not self._commands_ask:
                return Decision("run")
            return Decision("ask")
        if changes == "files" and self.mode == "ask":
            return Decision("ask")
        return Decision("run")

    def gate(
        self,
        tool_name: str,
        parameters: dict[str, Any],
        changes: Changes | None,
        *,
        pre_tool: Callable[[], str | None],
        confirm: Callable[[], bool | Answer] | None,
        redact: Callable[[str], str],
    ) -> Refusal | None:
        """None when the action may run; else why not. These permissions decide; the user's
        pre_tool hooks (`pre_tool()`: the reason when one refused) may refuse what they let
        through; when they ask, `confirm()`'s answer does (None: no one is there to ask). The
        user's reason is redacted with `redact`."""
        decision = self.decide(tool_name, parameters, changes)
        if decision.verdict == "deny":
            by: RefusedBy = "rule" if decision.rule else "mode"
            return Refusal(by, decision.reason, REFUSED.format(reason=decision.reason))
        blocked = pre_tool()
        if blocked is not None:
            reason = HOOK_REFUSED.format(reason=blocked)
            return Refusal("hook", blocked, REFUSED.format(reason=reason))
        if decision.verdict == "run":
            return None
        unanswered = Refusal("mode", f"{self.label} needs an answer",
                             UNANSWERED.format(mode=self.label))  # fmt: skip
        if confirm is None:
            return unanswered
        answer = confirm()
        if not isinstance(answer, Answer):
            answer = Answer(bool(answer))
        if answer.approved:
            return None
        if answer.unanswered:
            return unanswered
        reason = " ".join(redact(wire_text(answer.reason)).split())
        if not reason:
            return Refusal("user", "", DECLINED)
        return Refusal("user", reason, DECLINED_BECAUSE.format(reason=reason))

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
