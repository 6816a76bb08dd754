"""Which paths git ignores: .gitignore files read with caps and compiled to one bounded regex each.

The regexes are built so that matching stays polynomial whatever a hostile pattern says (see
ignore_regex), and the walk (tree.py) puts to them only the names some pattern could match.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass

from toy_agent.files import open_regular_fd

logger = logging.getLogger(__name__)

IGNORE_FILE_MAX_BYTES = 1 << 20  # a hostile .gitignore is read only this far
IGNORE_FILE_MAX_LINES = 10_000
# A longer .gitignore line, or one with more stars, is skipped: no real pattern is, and it
# compiles to a big regex (each star is an atomic group, see ignore_regex).
IGNORE_PATTERN_MAX_CHARS = 1024
IGNORE_PATTERN_MAX_STARS = 32
# What one ignore file may compile to, in characters of regex: re.compile takes 1-3.5 us a
# character, so about a second at worst, what 10,000 short plain lines take. Within the caps
# above a file could otherwise reach 11 M characters (10,000 lines of 32 stars: 25 s a file).
IGNORE_FILE_MAX_REGEX = 400_000
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

_Specs = tuple[tuple[str, "_Rules"], ...]  # (folder, its ignore file)


def ignored_names(
    block: str, hidden: set[str], dirs: list[str], prefix: str, specs: _Specs
) -> set[str]:
    """The names among the files in `block` (see _kept) but not in `hidden`, and among `dirs`,
    entries of the folder at `prefix`, that the ignore files `specs` ignore: git's rule, the
    deepest ignore file with a matching pattern decides, and in it the last matching pattern.
    Only the names some ignoring pattern could match are put to the regexes."""
    ends: tuple[str, ...] = ()
    starts: tuple[str, ...] = ()
    for _, rules in specs:
        if rules.any_name:
            candidates = {*filter(None, block.split("\0")), *dirs}
            break
        ends += rules.ends
        starts += rules.starts
    else:
        candidates = _names_with(block, ends, starts)
        candidates.update(n for n in dirs if n.endswith(ends) or n.startswith(starts))
    candidates -= hidden
    if not candidates:
        return set()
    folders = set(dirs)
    return {n for n in candidates if gitignored(prefix + n, n in folders, specs)}


def _names_with(block: str, ends: tuple[str, ...], starts: tuple[str, ...]) -> set[str]:
    """The names in `block` ("\0name\0name\0") that end with one of `ends` or start with one
    of `starts` (none of which holds a NUL), found by searching the block for them."""
    found = set()
    for end in ends:
        at = block.find(end + "\0")
        while at >= 0:
            stop = at + len(end)
            found.add(block[block.rfind("\0", 0, at + 1) + 1 : stop])
            at = block.find(end + "\0", stop)
    for start in starts:
        at = block.find("\0" + start)
        while at >= 0:
            stop = block.index("\0", at + 1)
            found.add(block[at + 1 : stop])
            at = block.find("\0" + start, stop)
    return found


def _read_ignore_file(file: str, seen: bool) -> tuple[os.stat_result, tuple[str, ...]] | None:
    """The stat of an ignore file and its lines as git reads them (see _ignore_lines), capped;
    None when there is none. A regular file only, never read through a symlink (git does the
    same), so a FIFO or a device named .gitignore cannot block or flood the walk: unless a
    scan has `seen` it to be a regular file, it is checked before it is opened, and in any
    case after."""
    try:
        if not (seen or stat.S_ISREG(os.lstat(file).st_mode)):
            return None
    except OSError:
        return None
    opened = open_regular_fd(file, follow=False)  # None if swapped since it was seen or checked
    if opened is None:
        return None
    fd, size = opened
    try:
        st = os.fstat(fd)
        data = os.read(fd, min(size, IGNORE_FILE_MAX_BYTES) + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > IGNORE_FILE_MAX_BYTES:
        logger.warning("%s is over %d bytes; only its start is used", file, IGNORE_FILE_MAX_BYTES)
        data = data[:IGNORE_FILE_MAX_BYTES].rpartition(b"\n")[0]
    lines = _ignore_lines(data)
    if len(lines) > IGNORE_FILE_MAX_LINES:
        logger.warning("%s has over %d lines; the rest are not used", file, IGNORE_FILE_MAX_LINES)
    return st, tuple(lines[:IGNORE_FILE_MAX_LINES])


def _ignore_lines(data: bytes) -> list[str]:
    """An ignore file's patterns as git reads them: a UTF-8 byte-order mark skipped, lines
    split at "\n" only, a "\r" before it dropped, and unescaped trailing spaces (not tabs)
    removed. Bytes that are not UTF-8 decode as file names do (os.fsdecode)."""
    text = data.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "surrogateescape")
    return [_trim_trailing_spaces(line.removesuffix("\r")) for line in text.split("\n")]


def _trim_trailing_spaces(line: str) -> str:
    """git's trim_trailing_spaces: drop the spaces at the end unless escaped ("a\\ " keeps one)."""
    end = len(line.rstrip(" "))
    if end == len(line):
        return line
    backslashes = len(line[:end]) - len(line[:end].rstrip("\\"))
    return line[: end + 1] if backslashes % 2 else line[:end]


@dataclass(frozen=True)
class _Rules:
    """One ignore file: its patterns as one regex, and what an entry's name must look like for
    any of its ignoring (not "!") patterns to match it: end with one of `ends` (a whole name
    counts as an end) or start with one of `starts`; `any_name` when some pattern says nothing
    of the name (`*`, `foo/**`). A pattern matches a path only if its last segment matches the
    last name, so the walk puts only such names to the regex (git narrows its matching the
    same way, by a pattern's literal prefix and suffix)."""

    regex: re.Pattern[str]
    ends: tuple[str, ...]
    starts: tuple[str, ...]
    any_name: bool
    used: int  # the lines used: fewer than given when the rest were past IGNORE_FILE_MAX_REGEX


@functools.lru_cache(maxsize=64)
def ignore_rules(lines: tuple[str, ...]) -> _Rules | None:
    """One ignore file as _Rules. The regex is matched at the start of the path below the
    file's folder (with "/" appended to folders). Its alternatives are the file's patterns,
    last first, so the one that matches is git's deciding pattern; its group is named "y<k>"
    when the pattern ignores, "n<k>" when it re-includes ("!"). Cached: the same file recurs in
    every walk and often in many folders. None when no line is a pattern. The file is used
    only up to the line that would take the regex past IGNORE_FILE_MAX_REGEX (as a file too
    long is read only so far), so that no file takes long to compile."""
    translated: list[tuple[int, str, bool]] = []
    size, used = 0, len(lines)
    for k, line in enumerate(lines):
        if len(line) > IGNORE_PATTERN_MAX_CHARS or line.count("*") > IGNORE_PATTERN_MAX_STARS:
            logger.warning("ignoring a .gitignore line too long or with too many *: %.80r", line)
            continue
        regex_include = ignore_regex(line, f"p{k}")
        if regex_include is None:
            continue
        regex, include = regex_include
        alternative = f"(?P<{'y' if include else 'n'}{k}>{regex})"
        size += len(alternative) + 1  # and its "|"
        if size > IGNORE_FILE_MAX_REGEX:
            used = k
            break
        translated.append((k, alternative, include))
    alternatives = []
    ends: list[str] = []
    starts: list[str] = []
    any_name = False
    for k, alternative, include in reversed(translated):  # the last first: it decides
        alternatives.append(alternative)
        if include:
            hint = _name_hint(lines[k])
            if hint is None:
                any_name = True
            else:
                ends += hint[0]
                starts += hint[1]
    if not alternatives:
        return None
    return _Rules(  # a name holds no NUL: an end or start with one can match nothing
        re.compile("|".join(alternatives)),
        tuple(dict.fromkeys(end for end in ends if "\0" not in end)),
        tuple(dict.fromkeys(start for start in starts if "\0" not in start)),
        any_name,
        used,
    )


_GLOB_CHARS = "*?[]\\"


def _name_hint(line: str) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """What a name must end or start with for the ignoring pattern `line` to match it, from the
    pattern's last segment: (ends, starts). A segment without wildcards is its own end; "*.log"
    ends with ".log", "*.py[cod]" with ".pyc", ".pyo" or ".pyd"; ".coverage.*" starts with
    ".coverage.". None when it tells nothing (`*`, `x/**`, escapes)."""
    segment = line.rstrip("/").rpartition("/")[2]
    if not segment or "\\" in segment:
        return None
    ends = [segment]
    if segment.endswith("]") and (opening := segment.rfind("[")) >= 0:
        members = segment[opening + 1 : -1]
        if members.isalnum():  # a plain set: no range, no negation, no [:class:]
            ends = [segment[:opening] + member for member in members]
    tails = tuple(_literal_tail(end) for end in ends)
    if all(tails):
        return tails, ()
    head = segment[: min(i for i, char in enumerate(segment) if char in _GLOB_CHARS)]
    return ((), (head,)) if head else None


def _literal_tail(glob: str) -> str:
    """The end of `glob` after its last wildcard character."""
    cut = max(glob.rfind(char) for char in _GLOB_CHARS)
    return glob[cut + 1 :]


def ignore_regex(line: str, tag: str = "") -> tuple[str, bool] | None:
    """One ignore-file line (as _ignore_lines gives it) as (regex, include); None for blank
    lines, comments and lines that can never match (an unclosed [...], a trailing backslash).
    The regex is matched at the start of one path below the ignore file's folder, with "/"
    appended to folders, and matches it when git's pattern matches that path itself: what is
    below an ignored folder is never walked, and a "!" line that matches a folder brings back
    the folder only, not the files in it (the tests hold walk against git itself).

    The regex is built so that Python's backtracking stays polynomial whatever the line: a
    plain translation of `*a*a*a*a*a*a*b` needs exponential time on a long name of a's. A
    glob's pieces between stars have fixed lengths, so placing each piece at its first fit
    never rules out a match that a later fit allows; the same holds for runs of whole path
    segments between `**`. Each such first fit is made atomic (never retried), which leaves one
    retried choice: where the last run starts.
    """
    if not line or line.startswith("#"):
        return None
    include = not line.startswith("!")
    segments = (line if include else line[1:]).split("/")
    is_dir = not segments[-1]  # "x/" matches folders only
    if is_dir:
        segments.pop()
    if segments and not segments[0]:
        del segments[0]  # "/x": only at the ignore file's own level
    elif len(segments) == 1:
        segments.insert(0, "**")  # "x" and "x/": at any depth
    if not segments:
        return None
    segments = [s for i, s in enumerate(segments) if s != "**" or segments[i - 1 : i] != ["**"]]
    if segments in (["**"], ["**", "*"]):
        return (r"(?s:.*)/\Z" if is_dir else ""), include  # every folder, or everything

    atomic = _atomic_maker(tag)
    lead = ""  # a condition on the whole path, checked once
    runs: list[str] = [""]  # regex pieces; a new run starts at each "**/"
    for i, segment in enumerate(segments):
        if segment == "**":
            if i == len(segments) - 1:  # "x/**": what is inside x; "x/**/": folders inside x
                runs[-1] += "/(?s:.)"
                lead = r"(?=(?s:.*)/\Z)" if is_dir else ""
                continue
            runs[-1] += "/" if i else ""
            runs.append("")
            continue
        glob = _segment_regex(segment, atomic)
        if glob is None:
            return None
        runs[-1] += ("/" if i and segments[i - 1] != "**" else "") + glob
    if segments[-1] != "**":
        runs[-1] += r"/\Z" if is_dir else r"/?\Z"  # a folder; a file or a folder
    first, middle, last = runs[0], runs[1:-1], (runs[-1] if len(runs) > 1 else None)
    regex = lead + first + "".join(atomic(r"(?:[^/]*/)*?" + run) for run in middle)
    if last is not None:
        regex += r"(?s:.*/)??" + last  # the one retried choice: here, then after each "/"
    return regex, include


def _atomic_maker(tag: str) -> Callable[[str], str]:
    """Wraps a regex so that its first match is kept and never retried. Python 3.10 has no
    (?>...), but a lookahead is atomic and the backreference then takes what it matched. The
    groups are named after `tag`, unique among the patterns joined in one regex."""
    names = itertools.count()

    def atomic(regex: str) -> str:
        name = f"{tag}a{next(names)}"
        return f"(?=(?P<{name}>{regex}))(?P={name})"

    return atomic


def _segment_regex(glob: str, atomic: Callable[[str], str]) -> str | None:
    """A glob for one path segment (no "/"), read as git's wildmatch does; None when it can
    never match."""
    if glob == "*":
        return "[^/]+"
    pieces, i, after_star = [""], 0, False  # the parts between stars
    while i < len(glob):
        char, i = glob[i], i + 1
        if char == "*":
            if not after_star:
                pieces.append("")
            after_star = True
            continue
        after_star = False
        if char == "\\":
            if i == len(glob):
                return None  # a trailing backslash
            char, i = glob[i], i + 1
            pieces[-1] += re.escape(char)
        elif char == "?":
            pieces[-1] += "[^/]"
        elif char == "[":
            bracket = _bracket_regex(glob, i)
            if bracket is None:
                return None
            pieces[-1] += bracket[0]
            i = bracket[1]
        else:
            pieces[-1] += re.escape(char)
    if len(pieces) == 1:
        return pieces[0]
    first, *middle, last = pieces
    return first + "".join(atomic("[^/]*?" + piece) for piece in middle) + "[^/]*" + last


_POSIX_CLASSES = {  # git's own ctype: ASCII only
    "alnum": "a-zA-Z0-9", "alpha": "a-zA-Z", "blank": " \\t", "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "!-/:-@\\[-`{-~",
    "space": " \\t\\n\\r", "upper": "A-Z", "xdigit": "0-9A-Fa-f",
}  # fmt: skip


def _bracket_regex(glob: str, start: int) -> tuple[str, int] | None:
    """The [...] class whose "[" is just before `start`, read as git's wildmatch does: "!" or
    "^" first negates, a "]" first is a member, a backslash escapes the next character, a-z is
    a range (z-a only its z), [:alpha:] and the like are classes, and "/" never matches.
    Returns (regex, index past the "]"), or None when the class is not closed or names an
    unknown [:class:], which git reads as never matching."""
    i = start
    negated = glob[i : i + 1] in ("!", "^")
    i += negated
    members: list[str] = []
    previous = ""  # the last single character read, the start of a range after it
    first = True
    while True:
        if i >= len(glob):
            return None
        char = glob[i]
        if char == "]" and not first:
            break
        first = False
        if char == "\\":
            i += 1
            if i >= len(glob):
                return None
            char = glob[i]
            members.append(re.escape(char))
        elif char == "-" and previous and i + 1 < len(glob) and glob[i + 1] != "]":
            i += 1
            high = glob[i]
            if high == "\\":
                i += 1
                if i >= len(glob):
                    return None
                high = glob[i]
            if previous <= high:
                members.append(f"{re.escape(previous)}-{re.escape(high)}")
            i += 1
            previous = ""
            continue
        elif char == "[" and glob[i + 1 : i + 2] == ":":
            close = glob.find("]", i + 2)
            if close == -1:
                return None
            if glob[close - 1] == ":" and close - 1 > i + 1:
                named = _POSIX_CLASSES.get(glob[i + 2 : close - 1])
                if named is None:
                    return None
                members.append(named)
                i = close + 1
                previous = ""
                continue
            members.append(re.escape(char))  # no ":]": a plain "["
        else:
            members.append(re.escape(char))
        previous = char
        i += 1
    body = "".join(members)
    if negated:
        return f"[^/{body}]", i + 1
    return (f"(?!/)[{body}]" if body else "(?!)"), i + 1


def gitignored(rel: str, is_dir: bool, specs: _Specs) -> bool:
    """Git's rule: the deepest ignore file with a matching pattern decides, and in it the last
    matching pattern. (Walks prune ignored folders, so only the path itself is matched here.)"""
    path = rel + "/" if is_dir else rel
    for base, rules in reversed(specs):
        found = rules.regex.match(path, len(base) + 1 if base else 0)
        if found:
            return (found.lastgroup or "y").startswith("y")
    return False
