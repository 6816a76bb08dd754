"""Cutting text the model reads: one helper, one wording of the note that says what was cut.

Every cap on what the model sees (an observation over the context budget, read_file's window
and long lines, a command's output, search matches and lines, a listing, an old message elided
from the context, an MCP description, a batch check's output, the report's texts) cuts here,
so the model always learns the same way what it did not see and how to see more:
`[… 1,234 characters cut: <how to see more>]`. Changing that wording is one line: `_NOTE`.

Because every cut goes through `note`, the cuts made while a tool call's observation is built
are also known as data: inside `recording()`, each note made is collected (what was cut, and
how to see more), and the agent attaches them to the observation (`Note("cut", ...)`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Literal

MARK = "[…"  # every note starts so; the redactor takes text right before it as cut short
_NOTE = MARK + " {what} cut{how}]"  # the one wording of every cut note
NOTE_RE = re.compile(re.escape(MARK) + r" (?P<what>[^\]\n]*?) cut(?:: (?P<how>[^\]\n]*))?\]")

# How to see more, per tool: the note's second half when a cap cuts a tool's observation.
HOW_TO_SEE_MORE = {
    "read_file": "read a smaller range with read_file's start_line and end_line",
    "run_command": "run the command again piped through | head, | tail or | grep",
    "search_in_files": "narrow the search with path, file_pattern or a more specific pattern",
    "list_files": "list a folder further down with list_files(path=...)",
}
_ANY_TOOL = "ask the tool for less at a time"
BUDGET = "to fit the context budget"  # why the global caps cut: cap_text, the elision stubs

Keep = Literal["head", "tail", "both"]
_PLURALS = {"match": "matches", "entry": "entries"}
# A terminal escape (CSI, OSC, or ESC + one character): a cut inside one would leave half a
# sequence that changes how the rest is shown. Longer ones are left to be cut anywhere.
_ESCAPE = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]{0,200}(?:\x07|\x1b\\)|[@-_])")
_ESCAPE_REACH = 256  # how far back a cut looks for the ESC that starts a sequence


def how_to_see_more(tool: str) -> str:
    """The how-to for `tool`'s observations (an MCP tool's or a user's: ask for less)."""
    return HOW_TO_SEE_MORE.get(tool, _ANY_TOOL)


def amount(n: int, unit: str) -> str:
    """'1 line', '1,234 lines', '2 matches': a count in a note."""
    return f"{n:,} {unit if n == 1 else _PLURALS.get(unit, unit + 's')}"


def note(what: str, how: str = "") -> str:
    """The note for a cut of `what` ("1,234 characters", "at least 600 lines"), with `how` to
    see it. Sites that count what they left out themselves (bytes of output, matches) call
    this; the others call `cut`."""
    made = _RECORDED.get()
    if made is not None:
        made.append((what, how))
    return _NOTE.format(what=what, how=f": {how}" if how else "")


_RECORDED: ContextVar[list[tuple[str, str]] | None] = ContextVar("cuts_recorded", default=None)


@contextmanager
def recording() -> Iterator[list[tuple[str, str]]]:
    """The cuts noted in this thread while the block runs, in order: (what, how) each, as
    their notes say them ("1,234 characters", "read a smaller range ...")."""
    made: list[tuple[str, str]] = []
    token = _RECORDED.set(made)
    try:
        yield made
    finally:
        _RECORDED.reset(token)


@dataclass(frozen=True)
class Cut:
    """`text` cut to a limit: what is kept before and after the gap, and the gap's size."""

    head: str
    tail: str
    chars: int  # characters left out: len(head) + chars + len(tail) == len(text)
    lines: int  # whole lines left out, when cut by lines (else 0)
    by: Literal["characters", "lines"]

    def joined(self, how: str = "", sep: str = "\n", *, extra: str = "") -> str:
        """The kept text with the note where the gap is (nothing added when nothing was cut).
        `extra` follows the count inside the note: " (12 lines)"."""
        if not self.chars:
            return self.head + self.tail
        count = self.lines if self.by == "lines" else self.chars
        marker = note(amount(count, self.by[:-1]) + extra, how)
        before = self.head + sep if self.head and not self.head.endswith(sep) else self.head
        return before + marker + (sep + self.tail if self.tail else "")


def split(
    text: str,
    limit: int,
    *,
    keep: Keep = "head",
    by: Literal["characters", "lines"] = "characters",
    at_word: bool = False,
) -> Cut:
    """`text` within `limit` characters (or lines): its head, its tail, or both (half each).
    A cut never falls inside a surrogate pair or a terminal escape; by lines it falls at a
    line's end; `at_word` moves a head's cut back to a space in its second half."""
    if by == "lines":
        return _split_lines(text, limit, keep)
    if len(text) <= limit:
        return Cut(text, "", 0, 0, by)
    head_n = {"head": limit, "tail": 0, "both": limit // 2}[keep]
    tail_n = {"head": 0, "tail": limit, "both": limit // 2}[keep]
    end = head_n
    if at_word and end:
        space = text.rfind(" ", 0, end + 1)
        end = space if space > end // 2 else end
    end = _back(text, end)
    start = _forward(text, len(text) - tail_n) if tail_n else len(text)
    head, tail = text[:end], text[start:]
    return Cut(head, tail, len(text) - len(head) - len(tail), 0, by)


def cut(
    text: str,
    limit: int,
    how: str = "",
    *,
    keep: Keep = "head",
    by: Literal["characters", "lines"] = "characters",
    sep: str = "\n",
    at_word: bool = False,
) -> str:
    """`text` cut to `limit` with the note where the gap is; `text` itself when it fits."""
    return split(text, limit, keep=keep, by=by, at_word=at_word).joined(how, sep)


def utf8_head(data: bytes) -> int:
    """Where a head of UTF-8 bytes ends whole: before a character its end cut in two."""
    end = len(data)
    for back in range(1, min(4, end) + 1):
        byte = data[end - back]
        if byte < 0x80:
            return end
        if byte >= 0xC0:  # a lead byte: is its character complete?
            size = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return end if back >= size else end - back
    return end


def utf8_tail(data: bytes) -> int:
    """Where a tail of UTF-8 bytes starts whole: after the continuation bytes of a character
    its start cut in two."""
    start = 0
    while start < min(3, len(data)) and 0x80 <= data[start] < 0xC0:
        start += 1
    return start


def _split_lines(text: str, limit: int, keep: Keep) -> Cut:
    lines = text.splitlines(keepends=True)
    if len(lines) <= limit:
        return Cut(text, "", 0, 0, "lines")
    head_n = {"head": limit, "tail": 0, "both": limit // 2}[keep]
    tail_n = {"head": 0, "tail": limit, "both": limit - limit // 2}[keep]
    head = "".join(lines[:head_n])
    tail = "".join(lines[len(lines) - tail_n :]) if tail_n else ""
    return Cut(head, tail, len(text) - len(head) - len(tail), len(lines) - head_n - tail_n, "lines")


def _back(text: str, i: int) -> int:
    """`i`, or the nearest earlier position that does not split a pair or an escape."""
    if 0 < i < len(text) and _pair_at(text, i):
        i -= 1
    escape = _escape_around(text, i)
    return escape[0] if escape else i


def _forward(text: str, i: int) -> int:
    """`i`, or the nearest later position that does not split a pair or an escape."""
    if 0 < i < len(text) and _pair_at(text, i):
        i += 1
    escape = _escape_around(text, i)
    return escape[1] if escape else i


def _pair_at(text: str, i: int) -> bool:
    """Position `i` falls between the two halves of a surrogate pair."""
    return "\ud800" <= text[i - 1] <= "\udbff" and "\udc00" <= text[i] <= "\udfff"


def _escape_around(text: str, i: int) -> tuple[int, int] | None:
    """(start, end) of the terminal escape that position `i` falls strictly inside, if any."""
    esc = text.rfind("\x1b", max(0, i - _ESCAPE_REACH), i)
    if esc < 0:
        return None
    match = _ESCAPE.match(text, esc)
    return (esc, match.end()) if match and match.end() > i else None
